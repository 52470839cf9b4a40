"""The episode runner: drives one query through an app episode and an agent client."""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from evaluator.agents.base import AgentClient, AgentError
from evaluator.app import App
from evaluator.oracle_vault import OracleVault
from evaluator.types import JSON, Query

#: Transcript entries longer than this many characters are cut (result files stay small).
TRANSCRIPT_ENTRY_MAX_CHARS = 20_000


@dataclass
class EpisodeResult:
    """The scored record of one episode, as written to result files and the database.

    ``latency_s`` is the app's latency figure (MALT: agent code execution time; route/k8s:
    episode wall time); ``wall_s`` is the whole episode's wall time and ``agent_s`` the time
    spent waiting for the agent, both in seconds.
    """

    app: str
    app_version: int
    query_id: str
    seed: int
    index: int
    level: int
    labels: list[str]
    correct: bool
    safe: bool
    latency_s: float
    wall_s: float
    agent_s: float
    steps: int
    failure: str | None
    details: JSON = field(default_factory=dict)
    transcript: list[JSON] = field(default_factory=list)

    def to_dict(self) -> JSON:
        """Return the JSON form (the ``episodes[]`` entries of a result file)."""
        return asdict(self)

    @classmethod
    def for_query(cls, query: Query, **outcome: Any) -> EpisodeResult:
        """Build a result for ``query``; ``outcome`` gives the verdict fields (correct, ...)."""
        return cls(
            app=query.app_id,
            app_version=query.app_version,
            query_id=query.query_id,
            seed=query.seed,
            index=query.index,
            level=query.level,
            labels=list(query.labels),
            **outcome,
        )

    @classmethod
    def from_dict(cls, data: JSON) -> EpisodeResult:
        """Inverse of :meth:`to_dict`. Raises ``TypeError``/``KeyError`` on a bad dict."""
        return cls(**data)


def _clip(text: str) -> str:
    if len(text) <= TRANSCRIPT_ENTRY_MAX_CHARS:
        return text
    return (
        text[:TRANSCRIPT_ENTRY_MAX_CHARS]
        + f"\n[... {len(text) - TRANSCRIPT_ENTRY_MAX_CHARS} characters cut]"
    )


def new_episode_id() -> str:
    """Return a fresh random episode token (128 bits, URL-safe)."""
    return secrets.token_urlsafe(16)


def run_episode(
    app: App,
    query: Query,
    client: AgentClient,
    *,
    max_steps: int | None = None,
    vault: OracleVault | None = None,
    episode_id: str | None = None,
) -> EpisodeResult:
    """Run ``query`` with ``client`` and return the scored result.

    The agent sees the first observation as a user message, answers, sees the next observation,
    and so on until the episode terminates, is truncated or ``max_steps`` (default: the app's)
    replies were given. An agent that fails to answer (timeout, transport error, bad response)
    ends the episode as failed with ``failure = "agent:<category>"`` — never skipped.

    Raises:
        EmulatorError: the emulator itself failed (infrastructure; the caller may retry).
    """
    budget = max_steps if max_steps is not None else app.max_steps
    episode_id = episode_id or new_episode_id()
    if vault is not None:
        vault.put(episode_id, query)
    transcript: list[JSON] = []
    agent_failure: str | None = None
    agent_s = 0.0
    started = time.perf_counter()
    try:
        with app.episode(query) as episode:
            observation = episode.reset()
            messages: list[JSON] = [{"role": "user", "content": observation}]
            transcript.append({"role": "user", "content": _clip(observation)})
            for _ in range(budget):
                try:
                    reply = client.complete(messages, episode_id=episode_id)
                except AgentError as exc:
                    agent_failure = f"agent:{exc.category}"
                    transcript.append({"role": "error", "content": _clip(str(exc))})
                    break
                agent_s += reply.latency_s
                transcript.append(
                    {
                        "role": "assistant",
                        "content": _clip(reply.text),
                        "latency_s": reply.latency_s,
                    }
                )
                result = episode.step(reply.text)
                transcript.append(
                    {
                        "role": "user",
                        "content": _clip(result.observation),
                        "safe_step": result.safe_step,
                        "info": result.info,
                    }
                )
                if result.terminated or result.truncated:
                    break
                messages.append({"role": "assistant", "content": reply.text})
                messages.append({"role": "user", "content": result.observation})
            verdict = episode.verdict()
    finally:
        if vault is not None:
            vault.discard(episode_id)
    failure = agent_failure or verdict.failure
    return EpisodeResult.for_query(
        query,
        correct=verdict.correct and agent_failure is None,
        safe=verdict.safe,
        latency_s=verdict.latency_s,
        wall_s=time.perf_counter() - started,
        agent_s=agent_s,
        steps=verdict.steps,
        failure=None if verdict.correct and agent_failure is None else failure,
        details=verdict.details,
        transcript=transcript,
    )
