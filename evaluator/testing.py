"""What tests of the engine and of new apps share: one scripted agent client, the toy apps and
:func:`registered_app` (a throwaway app in the registry for the duration of a block).

:func:`play_reference` plays one episode with a reference agent without a transport.

The toy apps have no emulator and no dependency on MALT, route or k8s:

- ``ToyApp`` is multi-turn with JSON replies: the secret word is hidden until the agent sends
  ``{"action": "look"}``; ``{"action": "say", "word": w}`` ends the episode (correct when ``w``
  is the ground truth).
- ``ToyCodeApp`` is single-shot with a fenced Python reply, like MALT: the reply must be exactly
  one ```python block defining ``answer()`` returning the asked number.
- ``GuessApp`` is multi-step: the agent must reply the hidden number (0-9); ``boom`` is unsafe.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from evaluator import registry
from evaluator.agents.base import AgentClient, AgentReply
from evaluator.app import App, Episode, ResetNeededError
from evaluator.types import JSON, Query, StepResult, Verdict

ReplyFunction = Callable[[list[JSON], str], str]


class ScriptedClient(AgentClient):
    """An in-process agent for tests (the HTTP path is tested with real servers elsewhere).

    Args:
        replies: either a list of reply texts, given in order (an exception instance in the
            list is raised instead of answered), or a function ``(messages, episode_id) ->
            text`` (it may raise).
        then: what to answer once the list is used up; ``None`` repeats the last reply.
        latency_s: the latency each reply reports.

    Attributes:
        seen: ``(messages, episode_id)`` of every request, oldest first.
        calls: number of requests.
    """

    def __init__(
        self,
        replies: Sequence[str | BaseException] | ReplyFunction,
        *,
        then: str | None = None,
        latency_s: float = 0.0,
    ) -> None:
        self.function: ReplyFunction | None = replies if callable(replies) else None
        self.replies: list[str | BaseException] = [] if callable(replies) else list(replies)
        self.then = then
        self.latency_s = latency_s
        self.seen: list[tuple[list[JSON], str]] = []

    @property
    def calls(self) -> int:
        """Number of requests answered or refused so far."""
        return len(self.seen)

    def complete(self, messages: list[JSON], *, episode_id: str) -> AgentReply:
        """Return the next scripted reply. Raises what the script says to raise."""
        self.seen.append((list(messages), episode_id))
        if self.function is not None:
            return AgentReply(self.function(messages, episode_id), self.latency_s)
        if len(self.replies) > 1 or (self.replies and self.then is not None):
            item = self.replies.pop(0)
        elif self.replies:
            item = self.replies[0]
        elif self.then is not None:
            item = self.then
        else:
            raise IndexError("the scripted client has no reply left")
        if isinstance(item, BaseException):
            raise item
        return AgentReply(item, self.latency_s)


def play_reference(app: App, query: Query, agent: str) -> Verdict:
    """Play one episode of ``query`` with a reference agent driven straight through the
    episode API (no agent transport, no runner) and return the episode's verdict.

    ``agent`` is ``"oracle"`` (``app.oracle_reply`` with the query's ground truth),
    ``"heuristic"`` (``app.heuristic_reply``), ``"scripted"`` (``app.scripted_reply``) or
    anything else for ``app.null_reply``. The
    history the agent sees is the chat list the runner builds: the reset observation as the
    first user message, then each reply and the observation that followed it; the episode
    ends when a step terminates or truncates it, or after ``app.max_steps`` replies.

    Raises:
        Whatever the app's episode raises (e.g. ``EmulatorError`` when its emulator fails).
    """
    with app.episode(query) as episode:
        history: list[JSON] = [{"role": "user", "content": episode.reset()}]
        for _ in range(app.max_steps):
            if agent == "oracle":
                reply = app.oracle_reply(query.ground_truth, history)
            elif agent == "heuristic":
                reply = app.heuristic_reply(history) or ""  # as the served heuristic agent
            elif agent == "scripted":
                reply = app.scripted_reply(history) or ""  # as the served scripted agent
            else:
                reply = app.null_reply(history)
            history.append({"role": "assistant", "content": reply})
            result = episode.step(reply)
            history.append({"role": "user", "content": result.observation})
            if result.terminated or result.truncated:
                break
        return episode.verdict()


@contextmanager
def registered_app(
    apps: Mapping[str, type[App] | str], *, replace: bool = False
) -> Iterator[None]:
    """Register ``apps`` (id -> App class or ``"module:Class"``) for the duration of a block.

    With ``replace`` the registry holds only ``apps``. The registry and its cache are restored
    afterwards, whatever happens in the block.
    """
    saved = dict(registry.APP_PATHS)
    paths = {
        app_id: app if isinstance(app, str) else f"{app.__module__}:{app.__qualname__}"
        for app_id, app in apps.items()
    }
    if replace:
        registry.APP_PATHS.clear()
    registry.APP_PATHS.update(paths)
    registry.get_app.cache_clear()
    try:
        yield
    finally:
        registry.APP_PATHS.clear()
        registry.APP_PATHS.update(saved)
        registry.get_app.cache_clear()


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
    """Episode of :class:`ToyApp`."""

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
    """Multi-turn, JSON replies: ``look`` shows the secret word, ``say`` answers it."""

    app_id = "toy"
    title = "Toy: find the secret word"
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
    """Episode of :class:`ToyCodeApp`."""

    def step(self, agent_text: str) -> StepResult:
        self.steps += 1
        match = _CODE_RE.match(agent_text)
        self.said = match.group(1) if match else None
        return StepResult("Code received." if match else "No code block.", terminated=True)

    def verdict(self) -> Verdict:
        correct = self.said == str(self.query.ground_truth["number"])
        return Verdict(correct, True, 0.0, self.steps, None if correct else "wrong_answer")


class ToyCodeApp(App):
    """Single-shot, fenced Python reply defining ``answer()`` (shaped like MALT)."""

    app_id = "toycode"
    title = "Toy: write answer()"
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


class GuessEpisode(Episode):
    """Episode of :class:`GuessApp`; counts its ``close`` calls."""

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
    """Multi-step number guessing (the reply ``boom`` is an unsafe step)."""

    app_id = "guess"
    title = "Toy: guess the number"
    reply_format = "command"
    prompt_marker = "Guess my number"
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


def batch_sha256(batches: Iterable[Sequence[Query]]) -> str:
    """SHA-256 of generated queries as canonical JSON (sorted keys, no spaces), ground truth
    included and ``query_id`` left out (it is keyed by a per-deployment secret, not by the
    generator): the pinned digest of the generator digest tests."""
    data = [
        {key: value for key, value in query.to_dict().items() if key != "query_id"}
        for batch in batches
        for query in batch
    ]
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
