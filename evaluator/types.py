"""Core value types of the evaluation engine.

The engine is plain Python (no Django): these types are shared by the apps in ``apps/``,
the episode runner, the agent clients, the CLI and the Django services. Every type here is
JSON-round-trippable through ``to_dict``/``from_dict`` so that queries and results can cross
process boundaries (Celery, the sandbox, the result file).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

JSON = dict[str, Any]


def stable_query_id(app_id: str, app_version: int, seed: int, index: int) -> str:
    """Return the stable id of a generated query.

    The id is the first 16 hex digits of SHA-256 over ``"app/vN/seed/index"``: the same
    (app, version, seed, index) always names the same query (DESIGN.md §2).
    """
    key = f"{app_id}/v{app_version}/{seed}/{index}".encode()
    return f"{app_id}-{hashlib.sha256(key).hexdigest()[:16]}"


@dataclass(frozen=True)
class Query:
    """One generated benchmark query.

    Attributes:
        app_id: registered app id (``malt``, ``route``, ``k8s``).
        app_version: generator/scorer version; a released version never changes meaning.
        seed: the generation seed of the batch this query belongs to.
        index: position of the query in its batch (0-based).
        level: complexity level 1-3 (paper Tables 4-6).
        labels: operation or fault labels, e.g. ``("remove", "count")`` or ``("RI", "CP")``.
        prompt: the task text shown to the agent.
        ground_truth: hidden JSON-serialisable data the scorer (and only the oracle) uses.
    """

    app_id: str
    app_version: int
    seed: int
    index: int
    level: int
    labels: tuple[str, ...]
    prompt: str
    ground_truth: JSON = field(default_factory=dict, compare=False, repr=False)

    @property
    def query_id(self) -> str:
        """Stable id, see :func:`stable_query_id`."""
        return stable_query_id(self.app_id, self.app_version, self.seed, self.index)

    @property
    def label(self) -> str:
        """Labels joined with ``+`` (``"remove+count"``, ``"DR+DI"``)."""
        return "+".join(self.labels)

    def to_dict(self) -> JSON:
        """Return a JSON-serialisable dict (ground truth included)."""
        data = asdict(self)
        data["labels"] = list(self.labels)
        data["query_id"] = self.query_id
        return data

    @classmethod
    def from_dict(cls, data: JSON) -> Query:
        """Rebuild a query from :meth:`to_dict` output. Raises ``KeyError`` on missing fields."""
        return cls(
            app_id=data["app_id"],
            app_version=int(data["app_version"]),
            seed=int(data["seed"]),
            index=int(data["index"]),
            level=int(data["level"]),
            labels=tuple(data["labels"]),
            prompt=data["prompt"],
            ground_truth=data.get("ground_truth", {}),
        )

    def fingerprint(self) -> str:
        """SHA-256 over prompt and ground truth: equal for equal generations (determinism tests)."""
        blob = json.dumps([self.prompt, self.ground_truth], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class StepResult:
    """What :meth:`Episode.step` returns (Gymnasium-shaped).

    Attributes:
        observation: text shown to the agent next (command output, errors, pingall result).
        terminated: the episode reached its end (answer given, goal reached, agent stopped).
        truncated: a step or time limit ended the episode.
        safe_step: False when this step caused collateral damage (paper §3, safety).
        info: extra JSON data recorded in the transcript (never shown to the agent).
    """

    observation: str
    terminated: bool
    truncated: bool = False
    safe_step: bool = True
    info: JSON = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """The score of one episode.

    Attributes:
        correct: the final answer/state matches the ground truth.
        safe: no step broke a safety constraint.
        latency_s: the app's latency figure in seconds (MALT: agent code execution time;
            route/k8s: episode wall time). The runner adds the episode wall time separately.
        steps: number of agent steps taken.
        failure: short machine-readable failure category, ``None`` when correct
            (``"no_reply"``, ``"timeout"``, ``"wrong_answer"``, ``"sandbox:memory"``...).
        details: JSON data explaining the verdict (diffs, violated constraints, matrices).
    """

    correct: bool
    safe: bool
    latency_s: float
    steps: int
    failure: str | None = None
    details: JSON = field(default_factory=dict)

    def to_dict(self) -> JSON:
        """Return a JSON-serialisable dict."""
        return asdict(self)
