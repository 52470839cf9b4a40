"""Core value types of the evaluation engine.

The engine is plain Python (no Django): these types are shared by the apps in ``apps/``,
the episode runner, the agent clients, the CLI and the Django services. Every type here is
JSON-round-trippable through ``to_dict``/``from_dict`` so that queries and results can cross
process boundaries (Celery, the sandbox, the result file).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import asdict, dataclass, field
from typing import Any

JSON = dict[str, Any]

#: Environment variable holding the server secret that keys public query ids (any string of
#: at least :data:`QUERY_ID_KEY_MIN_CHARS` characters; keep it out of the repository).
QUERY_ID_KEY_ENV = "NETARENA_QUERY_ID_KEY"
QUERY_ID_KEY_MIN_CHARS = 16
#: Bits of a generation seed drawn by :func:`new_seed` (a 31-bit seed was brute-forced
#: from one public id in minutes; 128 bits put that out of reach even with the id scheme known).
SEED_BITS = 128
#: The reserved seed of the apps' few-shot examples (``App.few_shot_examples``): negative, so
#: outside [0, 2**SEED_BITS) where every assessment seed lies, and no worked example is ever
#: an assessed query.
FEW_SHOT_SEED = -1
#: Key used when :data:`QUERY_ID_KEY_ENV` is unset: random per process, so ids still reveal
#: nothing, but they are then stable only within one process (set the variable on servers).
_PROCESS_QUERY_ID_KEY = secrets.token_bytes(32)


def new_seed() -> int:
    """Return a fresh random generation seed of :data:`SEED_BITS` bits (``secrets``)."""
    return secrets.randbits(SEED_BITS)


def query_id_key() -> bytes:
    """Return the key of public query ids: :data:`QUERY_ID_KEY_ENV`, else a per-process key.

    Raises:
        ValueError: the variable is set but shorter than :data:`QUERY_ID_KEY_MIN_CHARS`.
    """
    configured = os.environ.get(QUERY_ID_KEY_ENV)
    if configured is None or configured == "":
        return _PROCESS_QUERY_ID_KEY
    if len(configured) < QUERY_ID_KEY_MIN_CHARS:
        raise ValueError(
            f"{QUERY_ID_KEY_ENV} must have at least {QUERY_ID_KEY_MIN_CHARS} characters"
        )
    return configured.encode()


def stable_query_id(
    app_id: str, app_version: int, seed: int, index: int, *, key: bytes | None = None
) -> str:
    """Return the public id of a generated query: ``"<app_id>-<32 hex digits>"``.

    The digits are the first 128 bits of HMAC-SHA256 (RFC 2104) keyed with ``key`` (default:
    :func:`query_id_key`) over ``"app/vN/seed/index"``: under one key the same (app, version,
    seed, index) always names the same query (docs/architecture.md §2), and without the key an id
    reveals nothing about the seed, so the hidden ground truth cannot be regenerated from it.
    """
    message = f"{app_id}/v{app_version}/{seed}/{index}".encode()
    digest = hmac.new(key if key is not None else query_id_key(), message, hashlib.sha256)
    return f"{app_id}-{digest.hexdigest()[:32]}"


@dataclass(frozen=True)
class Query:
    """One generated benchmark query.

    Attributes:
        app_id: registered app id (``malt``, ``route``, ``k8s``).
        app_version: generator/scorer version; a released version never changes meaning.
        seed: the generation seed of the batch this query belongs to (any non-negative int;
            the site draws :data:`SEED_BITS`-bit seeds with :func:`new_seed`).
        index: position of the query in its batch (0-based).
        level: complexity level 1-3 (paper Tables 4-6).
        labels: operation or fault labels, e.g. ``("remove", "count")`` or ``("RI", "CP")``.
        prompt: the task text shown to the agent.
        ground_truth: hidden JSON-serialisable data the scorer (and only the oracle) uses.
        query_id: public id, see :func:`stable_query_id`; computed when not given, carried
            through :meth:`to_dict`/:meth:`from_dict` so that it survives process boundaries.
        pack: the variant pack the query was drawn from (``"public"``: the app's own
            generator; any other name: a held-out pack, see :mod:`evaluator.variants`). Never
            shown to the agent; published with the round's seed.
    """

    app_id: str
    app_version: int
    seed: int
    index: int
    level: int
    labels: tuple[str, ...]
    prompt: str
    ground_truth: JSON = field(default_factory=dict, compare=False, repr=False)
    query_id: str = field(default="", compare=False)
    pack: str = "public"

    def __post_init__(self) -> None:
        if not self.query_id:
            query_id = stable_query_id(self.app_id, self.app_version, self.seed, self.index)
            object.__setattr__(self, "query_id", query_id)

    @property
    def label(self) -> str:
        """Labels joined with ``+`` (``"remove+count"``, ``"DR+DI"``)."""
        return "+".join(self.labels)

    def to_dict(self) -> JSON:
        """Return a JSON-serialisable dict (ground truth included)."""
        data = asdict(self)
        data["labels"] = list(self.labels)
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
            query_id=str(data.get("query_id") or ""),
            pack=str(data.get("pack") or "public"),
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
        changed_state: whether the agent changed the state it was given (MALT: returned a
            topology that differs from the input; route/k8s: ran a step that changed a node or
            the cluster). ``None`` when the app could not tell (the episode broke off). The
            share of ``True`` is the *action rate*: it separates an agent that was
            safe by doing nothing from one that was safe while acting.
        blast_radius: graded safety: how much the agent broke, in the app's
            unit (route: host pairs reachable after fault injection that a step made
            unreachable, at the worst step; k8s: intended connections broken or forbidden
            ones opened, at the worst step; MALT: elements of the topology the query leaves
            untouched that the returned graph removed, altered or added). 0 when nothing was
            broken, ``None`` when the app could not tell.
    """

    correct: bool
    safe: bool
    latency_s: float
    steps: int
    failure: str | None = None
    details: JSON = field(default_factory=dict)
    changed_state: bool | None = None
    blast_radius: int | None = None

    def to_dict(self) -> JSON:
        """Return a JSON-serialisable dict."""
        return asdict(self)


@dataclass(frozen=True)
class InfrastructureFailure:
    """Why the evaluator could not run an episode: an emulator or platform fault.

    Never the agent's fault: an episode carrying one is left out of the agent's statistics
    (and, on the site, stored as an error rather than a score).

    Attributes:
        error: ``"<ExceptionType>: <message>"`` of the last attempt, at most
            :data:`INFRASTRUCTURE_ERROR_MAX_CHARS` characters.
        attempts: how many times the episode was tried before giving up (>= 1).
    """

    error: str
    attempts: int = 1

    def to_dict(self) -> JSON:
        """Return a JSON-serialisable dict."""
        return asdict(self)


#: Longest error text kept in :attr:`InfrastructureFailure.error`.
INFRASTRUCTURE_ERROR_MAX_CHARS = 2000
#: The ``failure`` category of an episode the evaluator could not run (result files keep it so
#: that readers without the ``infrastructure`` field still see why the episode has no score).
INFRASTRUCTURE_CATEGORY = "infrastructure"


@dataclass
class EpisodeResult:
    """The scored record of one episode, as written to result files and the database.

    Attributes:
        app_id, app_version, query_id, seed, index, level, labels: copied from the query
            (``labels`` is the list; :attr:`label` the ``+``-joined string).
        correct, safe: the verdict (False/False for an infrastructure failure).
        latency_s: the app's latency figure in seconds (MALT: agent code execution time;
            route/k8s: episode wall time).
        wall_s: the whole episode's wall time in seconds.
        agent_s: seconds spent waiting for the agent.
        steps: agent replies used.
        failure: ``None`` when correct, else a category (``"agent:timeout"``,
            ``"wrong_answer"``, ``"sandbox:memory"``, ... or :data:`INFRASTRUCTURE_CATEGORY`).
        details: JSON data explaining the verdict.
        transcript: the conversation, ``{"role", "content", ...}`` entries in order.
        infrastructure: set when the evaluator could not run the episode (not the agent's
            fault; excluded from statistics); ``None`` for every scored episode.
        changed_state: :attr:`Verdict.changed_state` (``None`` when unknown).
        blast_radius: :attr:`Verdict.blast_radius` (``None`` when unknown).
        input_tokens, output_tokens: tokens the endpoint reported over the episode's calls
            (summed over the replies that reported them; ``None`` when none did).
        served_model: the last model name the endpoint reported (``None`` when none did).
        replay: what rejudging needs besides the query: ``{"replies":
            [full reply texts in order], "agent_failure": "agent:<category>" or None,
            "agent_error": message or None, "max_steps": int, "instance_names":
            Episode.instance_names()}``; ``None`` when the replies
            were too long to keep (``evaluator.runner.REPLAY_MAX_CHARS``) or the episode
            never ran (infrastructure failure).
        trial: which repetition of the query this episode is (0-based; ``evaluate --trials``).
        pack: :attr:`Query.pack`, the variant pack the query came from (``"public"`` or a
            held-out pack's name; the public/held-out gap is computed from it).
        prompt_type: NetArena's prompt type the task was sent with (``zeroshot_base``: unchanged;
            :mod:`evaluator.prompting`).
    """

    app_id: str
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
    infrastructure: InfrastructureFailure | None = None
    changed_state: bool | None = None
    replay: JSON | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    served_model: str | None = None
    trial: int = 0
    blast_radius: int | None = None
    pack: str = "public"
    prompt_type: str = "zeroshot_base"

    @property
    def label(self) -> str:
        """Labels joined with ``+`` (``"remove+count"``, ``"DR+DI"``), as :attr:`Query.label`."""
        return "+".join(self.labels)

    @property
    def scored(self) -> bool:
        """True unless the episode is an infrastructure failure (those are never scored)."""
        return self.infrastructure is None

    def to_dict(self) -> JSON:
        """Return the JSON form (the ``episodes[]`` entries of a result file)."""
        return asdict(self)

    @classmethod
    def for_query(cls, query: Query, **outcome: Any) -> EpisodeResult:
        """Build a result for ``query``; ``outcome`` gives the verdict fields (correct, ...)."""
        return cls(
            app_id=query.app_id,
            app_version=query.app_version,
            query_id=query.query_id,
            seed=query.seed,
            index=query.index,
            level=query.level,
            labels=list(query.labels),
            pack=query.pack,
            **outcome,
        )

    @classmethod
    def for_infrastructure_failure(
        cls, query: Query, error: str, *, attempts: int = 1, details: JSON | None = None
    ) -> EpisodeResult:
        """Record for an episode the evaluator itself could not run (not the agent's fault).

        ``details`` is the emulator's evidence (``EmulatorError.details``), kept beside the
        error text in ``details["evidence"]``.
        """
        error = error[:INFRASTRUCTURE_ERROR_MAX_CHARS]
        return cls.for_query(
            query,
            correct=False,
            safe=False,
            latency_s=0.0,
            wall_s=0.0,
            agent_s=0.0,
            steps=0,
            failure=INFRASTRUCTURE_CATEGORY,
            details={"error": error, **({"evidence": details} if details else {})},
            infrastructure=InfrastructureFailure(error=error, attempts=attempts),
        )

    @classmethod
    def from_dict(cls, data: JSON) -> EpisodeResult:
        """Inverse of :meth:`to_dict`. Raises ``TypeError``/``KeyError`` on a bad dict."""
        fields = dict(data)
        infrastructure = fields.pop("infrastructure", None)
        return cls(
            **fields,
            infrastructure=None
            if infrastructure is None
            else InfrastructureFailure(**infrastructure),
        )
