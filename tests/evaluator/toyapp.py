"""Throwaway benchmark apps for the agent tests (no emulator, no dependency on MALT/route/k8s).

``ToyApp`` is multi-turn with JSON replies: the secret word is hidden until the agent sends
``{"action": "look"}``; ``{"action": "say", "word": w}`` ends the episode (correct when ``w`` is
the ground truth). ``ToyCodeApp`` is single-shot with a fenced Python reply, like MALT: the
reply must be exactly one ```python block defining ``answer()`` returning the asked number.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from evaluator.app import App, Episode
from evaluator.types import JSON, Query, StepResult, Verdict

WORDS = ("falcon", "heron", "osprey", "plover", "swift", "tern", "wren")
_SEEN_RE = re.compile(r"The secret word is (\w+)\.")


def _queries(app: App, count: int, seed: int, level: int | None, make: Any) -> list[Query]:
    """``count`` level-1 queries; ``make(rng)`` returns (labels, prompt, ground truth)."""
    if count < 0 or (level is not None and level not in app.levels):
        raise ValueError("bad count or level")
    rng = random.Random(seed)
    queries = []
    for index in range(count):
        labels, prompt, truth = make(rng)
        queries.append(Query(app.app_id, app.version, seed, index, 1, labels, prompt, truth))
    return queries


class ToyEpisode(Episode):
    def __init__(self, query: Query, max_steps: int) -> None:
        self.query = query
        self.max_steps = max_steps
        self.steps = 0
        self.said: str | None = None
        self.started = False

    def reset(self) -> str:
        self.started = True
        return self.query.prompt

    def step(self, agent_text: str) -> StepResult:
        self.steps += 1
        try:
            command = json.loads(agent_text)
            action = command["action"]
        except (ValueError, KeyError, TypeError):
            return StepResult(f"Unparseable reply: {agent_text[:80]!r}", terminated=False)
        if action == "look":
            word = self.query.ground_truth["word"]
            return StepResult(f"The secret word is {word}.", terminated=False)
        if action == "say":
            self.said = str(command.get("word"))
            return StepResult("Answer recorded.", terminated=True)
        return StepResult(f"Unknown action {action!r}.", terminated=False)

    def verdict(self) -> Verdict:
        correct = self.said == self.query.ground_truth["word"]
        return Verdict(
            correct=correct,
            safe=self.said is None or correct,
            latency_s=0.0,
            steps=self.steps,
            failure=None if correct else "wrong_answer",
        )

    def close(self) -> None:
        self.started = False


class ToyApp(App):
    app_id = "toy"
    levels = (1,)
    max_steps = 4
    reply_format = "json"
    prompt_marker = "secret word"

    def generate(self, count: int, seed: int, level: int | None = None) -> list[Query]:
        prompt = (
            'Find the secret word. Reply with JSON {"action": "look"} to see it, '
            'then {"action": "say", "word": <the word>}.'
        )

        def make(rng: random.Random) -> tuple[tuple[str, ...], str, JSON]:
            return ("look",), prompt, {"word": rng.choice(WORDS)}

        return _queries(self, count, seed, level, make)

    def episode(self, query: Query, **options: Any) -> Episode:
        return ToyEpisode(query, self.max_steps)

    def oracle_reply(self, ground_truth: JSON, history: list[JSON]) -> str:
        return json.dumps({"action": "say", "word": ground_truth["word"]})

    def null_reply(self, history: list[JSON]) -> str:
        return json.dumps({"action": "look"})

    def heuristic_reply(self, history: list[JSON]) -> str:
        seen = _SEEN_RE.search(str(history[-1].get("content", ""))) if history else None
        if seen:
            return json.dumps({"action": "say", "word": seen.group(1)})
        return json.dumps({"action": "look"})

    def few_shot_examples(self) -> list[tuple[str, str]]:
        return [
            ("Find the secret word of this example.", '{"action": "look"}'),
            ("The secret word is owl.", '{"action": "say", "word": "owl"}'),
        ]


_CODE_RE = re.compile(r"\A```python\ndef answer\(\):\n    return (\d+)\n```\Z")


class ToyCodeEpisode(ToyEpisode):
    def step(self, agent_text: str) -> StepResult:
        self.steps += 1
        match = _CODE_RE.match(agent_text)
        self.said = match.group(1) if match else None
        return StepResult("Code received." if match else "No code block.", terminated=True)

    def verdict(self) -> Verdict:
        correct = self.said == str(self.query.ground_truth["number"])
        return Verdict(correct, True, 0.0, self.steps, None if correct else "wrong_answer")


class ToyCodeApp(App):
    app_id = "toycode"
    levels = (1,)
    max_steps = 1
    reply_format = "python"
    prompt_marker = "function answer()"

    def generate(self, count: int, seed: int, level: int | None = None) -> list[Query]:
        def make(rng: random.Random) -> tuple[tuple[str, ...], str, JSON]:
            number = rng.randrange(2, 1000)
            prompt = f"Write a Python function answer() that returns the number {number}."
            return ("code",), prompt, {"number": number}

        return _queries(self, count, seed, level, make)

    def episode(self, query: Query, **options: Any) -> Episode:
        return ToyCodeEpisode(query, 1)

    def oracle_reply(self, ground_truth: JSON, history: list[JSON]) -> str:
        return f"```python\ndef answer():\n    return {ground_truth['number']}\n```"
