"""The two abstractions every benchmark application implements: ``App`` and ``Episode``.

An ``App`` generates seeded queries with hidden ground truth; an ``Episode`` runs one query
against an emulator in the Gymnasium shape ``reset() -> observation``, ``step(text) ->
StepResult``, then ``verdict()``, and ``close()`` which always restores or tears down the
emulator. Agent mistakes (unparseable output, failed or refused commands) become
observations, never exceptions; only infrastructure failures raise (``EmulatorError``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Any, ClassVar

from evaluator.types import JSON, Query, StepResult, Verdict


class EvaluatorError(Exception):
    """Base class of the engine's errors."""


class UnknownAppError(EvaluatorError):
    """No app is registered under the requested id."""


class EmulatorError(EvaluatorError):
    """The emulator could not be set up, driven or torn down (infrastructure, not the agent)."""


class DependencyMissingError(EmulatorError):
    """A tool the app needs (mininet, kubectl, bwrap, cluster binaries) is not installed."""


class ResetNeededError(EvaluatorError):
    """``step`` or ``verdict`` was called before ``reset``."""


class Episode(ABC):
    """One agent attempt at one query. Use as a context manager so ``close`` always runs."""

    query: Query

    @abstractmethod
    def reset(self) -> str:
        """Build or restore the emulator state and return the first observation (the prompt)."""

    @abstractmethod
    def step(self, agent_text: str) -> StepResult:
        """Apply one agent reply (raw text) and return what happened."""

    @abstractmethod
    def verdict(self) -> Verdict:
        """Score the episode so far. May be called once the episode ended or the agent failed."""

    @abstractmethod
    def close(self) -> None:
        """Tear down or restore the emulator. Idempotent; never raises for agent reasons."""

    def __enter__(self) -> Episode:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class App(ABC):
    """A benchmark application (not a Django app).

    Class attributes:
        app_id: registry id, also the Celery queue name.
        version: bump when generation or scoring changes meaning.
        levels: the complexity levels this app generates.
        max_steps: default step budget of an episode (1 for single-shot apps).
        needs_root: True when episodes need root / network namespaces.
    """

    app_id: ClassVar[str]
    version: ClassVar[int] = 1
    levels: ClassVar[tuple[int, ...]] = (1, 2, 3)
    max_steps: ClassVar[int] = 1
    needs_root: ClassVar[bool] = False

    @abstractmethod
    def generate(self, count: int, seed: int, level: int | None = None) -> list[Query]:
        """Return ``count`` queries for ``seed`` (all levels mixed, or only ``level``).

        The same arguments always return the same queries. Raises ``ValueError`` on a level
        this app does not have or a negative count.
        """

    @abstractmethod
    def episode(self, query: Query, **options: Any) -> Episode:
        """Return a fresh, not yet reset episode for ``query``."""

    @abstractmethod
    def oracle_reply(self, ground_truth: JSON, history: list[JSON]) -> str:
        """Reply of the oracle reference agent, scripted from the hidden ground truth.

        ``history`` is the chat so far (``[{"role", "content"}, ...]``, last one the newest
        observation). Used by reference agents and the conformance check only.
        """

    def null_reply(self, history: list[JSON]) -> str:
        """Reply of the null reference agent: a well-formed reply that changes nothing."""
        return ""

    def describe(self) -> JSON:
        """Short JSON description for result files and the site."""
        return {"app_id": self.app_id, "version": self.version, "levels": list(self.levels)}
