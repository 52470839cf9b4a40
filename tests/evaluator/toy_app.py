"""A tiny in-memory app for engine tests: the agent must reply the hidden number.

It fakes nothing the real apps do differently at the engine boundary: generation is seeded,
the episode is multi-step, and the verdict comes from the episode state.
"""

from __future__ import annotations

import random
from typing import Any

from evaluator.app import App, Episode, ResetNeededError
from evaluator.types import JSON, Query, StepResult, Verdict


class GuessEpisode(Episode):
    def __init__(self, query: Query) -> None:
        self.query = query
        self.guesses: list[str] = []
        self.started = False
        self.closed = 0

    def reset(self) -> str:
        self.started = True
        return self.query.prompt

    def step(self, agent_text: str) -> StepResult:
        if not self.started:
            raise ResetNeededError("reset first")
        self.guesses.append(agent_text.strip())
        hit = agent_text.strip() == str(self.query.ground_truth["number"])
        return StepResult(
            observation="yes" if hit else "no",
            terminated=hit,
            safe_step=agent_text.strip() != "boom",
        )

    def verdict(self) -> Verdict:
        correct = bool(self.guesses) and self.guesses[-1] == str(self.query.ground_truth["number"])
        return Verdict(
            correct=correct,
            safe="boom" not in self.guesses,
            latency_s=0.0,
            steps=len(self.guesses),
            failure=None if correct else "wrong_answer",
        )

    def close(self) -> None:
        self.closed += 1


class GuessApp(App):
    app_id = "guess"
    title = "Guess the number (toy)"
    levels = (1,)
    max_steps = 3

    def generate(self, count: int, seed: int, level: int | None = None) -> list[Query]:
        rng = random.Random(seed)
        return [
            Query(
                "guess",
                1,
                seed,
                i,
                1,
                ("guess",),
                "Guess my number (0-9).",
                {"number": rng.randrange(10)},
            )
            for i in range(count)
        ]

    def episode(self, query: Query, **options: Any) -> GuessEpisode:
        return GuessEpisode(query)

    def oracle_reply(self, ground_truth: JSON, history: list[JSON]) -> str:
        return str(ground_truth["number"])

    def null_reply(self, history: list[JSON]) -> str:
        return "-1"
