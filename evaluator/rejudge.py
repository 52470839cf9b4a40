"""Rejudging: replay an episode's stored replies in a fresh emulator and compare verdicts.

A verdict is reproducible when the same query and the same agent replies give the same verdict
. The replay client answers with the stored replies in order; when the stored
episode ended because the agent failed (timeout, bad response, ...), the replay raises the same
agent failure after the last stored reply. Names unique to the stored live episode
(``Episode.instance_names``, such as route's node prefix) are replaced in the replies by the
fresh episode's. Timing (``latency_s``, ``wall_s``, ``agent_s``) is
measured afresh and never compared; the compared fields are :data:`VERDICT_FIELDS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evaluator.agents.base import AgentClient, AgentError, AgentReply
from evaluator.app import App
from evaluator.runner import run_episode_guarded
from evaluator.types import JSON, EpisodeResult, Query

#: The fields of a verdict that a replay must reproduce exactly.
VERDICT_FIELDS = ("correct", "safe", "failure", "steps", "changed_state", "blast_radius")


class NotReplayableError(ValueError):
    """The stored episode lacks what a replay needs (no replay record, or it never ran)."""


class ReplayClient(AgentClient):
    """Answers with stored reply texts, then fails as the stored agent did.

    Args:
        replies: the agent's replies, oldest first.
        agent_failure: ``"agent:<category>"`` when the stored episode ended with an agent
            failure after the last reply, else ``None``.
        agent_error: that failure's message.
        stored_names: ``instance_names`` of the stored episode.
    """

    def __init__(
        self,
        replies: list[str],
        agent_failure: str | None = None,
        agent_error: str | None = None,
        stored_names: Mapping[str, str] | None = None,
    ) -> None:
        self.replies = list(replies)
        self.agent_failure = agent_failure
        self.agent_error = agent_error or "replayed agent failure"
        self.stored_names = dict(stored_names or {})
        self.renames: list[tuple[str, str]] = []

    def episode_started(self, instance_names: dict[str, str]) -> None:
        """Map every stored name onto the fresh episode's name of the same key."""
        self.renames = [
            (old, instance_names[key])
            for key, old in self.stored_names.items()
            if old and key in instance_names and instance_names[key] != old
        ]

    def complete(self, messages: list[JSON], *, episode_id: str) -> AgentReply:
        """The next stored reply. Raises :class:`AgentError` once they are used up."""
        if self.replies:
            text = self.replies.pop(0)
            for old, new in self.renames:
                text = text.replace(old, new)
            return AgentReply(text, 0.0)
        if self.agent_failure and self.agent_failure.startswith("agent:"):
            raise AgentError(self.agent_failure.removeprefix("agent:"), self.agent_error)
        raise AgentError("replay_exhausted", "the replay asked for more replies than were stored")


@dataclass(frozen=True)
class Rejudgement:
    """The outcome of replaying one episode.

    Attributes:
        query_id: the replayed query's public id.
        differences: ``{field: (stored, replayed)}`` for every field of
            :data:`VERDICT_FIELDS` that differs; empty when the verdict was reproduced.
        replayed: the replay's own result (an infrastructure failure when the emulator failed).
    """

    query_id: str
    differences: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    replayed: EpisodeResult | None = None

    @property
    def reproduced(self) -> bool:
        """True when every verdict field matched and the replay itself ran."""
        return not self.differences and self.replayed is not None and self.replayed.scored


def rejudge(app: App, query: Query, stored: Mapping[str, Any]) -> Rejudgement:
    """Replay ``stored`` (an ``EpisodeResult.to_dict()``-shaped mapping with ``replay``) of
    ``query`` on ``app`` and compare the verdict fields.

    Raises:
        NotReplayableError: the stored episode has no replay record (never ran, or replies
            over ``evaluator.runner.REPLAY_MAX_CHARS``).
    """
    replay = stored.get("replay")
    if not isinstance(replay, Mapping) or not isinstance(replay.get("replies"), list):
        raise NotReplayableError(f"episode {query.query_id} has no replay record")
    client = ReplayClient(
        [str(text) for text in replay["replies"]],
        replay.get("agent_failure"),
        replay.get("agent_error"),
        replay.get("instance_names") or {},
    )
    result = run_episode_guarded(app, query, client, max_steps=int(replay["max_steps"]))
    if not result.scored:
        return Rejudgement(query.query_id, {"infrastructure": (None, result.failure)}, result)
    differences = {
        name: (stored.get(name), getattr(result, name))
        for name in VERDICT_FIELDS
        if stored.get(name) != getattr(result, name)
    }
    return Rejudgement(query.query_id, differences, result)
