"""A registered-app stand-in whose judge does what hostile agent output makes real judges do.

Each reply is judged by ``judge(text)``: the default echoes; tests pass judges that raise
(``RecursionError``, ``ValueError``), overrun a :class:`~evaluator.deadline.Deadline`, or return
huge / non-finite details and info. Everything else follows the engine's contract.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evaluator.agents.base import AgentClient, AgentReply
from evaluator.app import App, Episode
from evaluator.types import JSON, Query, StepResult, Verdict


class HostileEpisode(Episode):
    def __init__(self, app: HostileApp, query: Query) -> None:
        self.app = app
        self.query = query
        self.steps = 0

    def reset(self) -> str:
        return self.query.prompt

    def step(self, agent_text: str) -> StepResult:
        self.steps += 1
        observation = self.app.judge(agent_text)
        done = self.steps >= self.app.steps_until_done
        return StepResult(observation, terminated=done, info=self.app.info)

    def verdict(self) -> Verdict:
        if self.app.verdict_error is not None:
            raise self.app.verdict_error
        return Verdict(False, True, 0.0, self.steps, "wrong_answer", self.app.details)

    def close(self) -> None:
        self.app.closed += 1


class HostileApp(App):
    app_id = "hostile"
    levels = (1,)
    max_steps = 1

    def __init__(
        self,
        judge: Callable[[str], str] | None = None,
        *,
        details: JSON | None = None,
        info: JSON | None = None,
        steps_until_done: int = 1,
        verdict_error: Exception | None = None,
    ) -> None:
        self.judge = judge or (lambda text: f"echo: {text[:20]}")
        self.details = details or {}
        self.info = info or {}
        self.steps_until_done = steps_until_done
        self.verdict_error = verdict_error
        self.closed = 0

    def generate(self, count: int, seed: int, level: int | None = None) -> list[Query]:
        return [
            Query(self.app_id, 1, seed, i, 1, ("x",), "Say anything.", {"n": i})
            for i in range(count)
        ]

    def episode(self, query: Query, **options: Any) -> HostileEpisode:
        return HostileEpisode(self, query)

    def oracle_reply(self, ground_truth: JSON, history: list[JSON]) -> str:
        return "anything"


class ScriptedClient(AgentClient):
    """Replies from a list, in order (the last one repeats)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)

    def complete(self, messages: list[JSON], *, episode_id: str) -> AgentReply:
        text = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return AgentReply(text, 0.0)
