"""The assessment request an AgentBeats green agent receives, read and checked.

The request is one A2A message whose data part (or text, as JSON) is::

    {"participants": {"<role>": "<purple agent URL>"}, "config": {...}}

with exactly one participant. The keys ``config`` takes are the app's own
(:meth:`evaluator.app.App.green_config_keys`, read by :func:`config_keys`): an app that
declares none takes :func:`generic_config_keys`. NetArena's apps declare theirs in their
packages (``apps/<app>/green.py``): every field of NetArena's config class for the app
(``MaltConfig`` in NetArena's ``app-malt/main.py``, ``AppRouteConfig`` in
``app-route/test_function.py``, ``K8sConfig`` in ``app-k8s/run_workflow.py``, commit 93225b4),
with NetArena's defaults, plus ours (``seed``, ``trials``, ``queries_per_level``, and
``complexity_level`` for route and k8s, whose NetArena agents have no levels), built from the
helpers here (:func:`common_keys`, :func:`regenerate_key`, :func:`ignored_key`,
:func:`max_iterations_key`); docs/agentbeats.md has the table. A NetArena key whose effect
this engine does not reproduce (a file location, NetArena's fixed topology size, its agent
list) is accepted, type-checked, and reported in ``not_applied`` with the reason; a key
NetArena does not know either is refused, named.

Every problem raises :class:`RequestError` naming the offending key; the server turns it
into an A2A ``InvalidParamsError`` (JSON-RPC -32602).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from evaluator.app import App
from evaluator.green.declarations import ConfigKey
from evaluator.prompting import DEFAULT_PROMPT_TYPE, PROMPT_TYPES
from evaluator.registry import get_app
from evaluator.types import JSON, SEED_BITS, new_seed

#: NetArena's prompt types (zero-/few-shot x base/chain-of-thought).
NETARENA_PROMPT_TYPES = PROMPT_TYPES
#: NetArena's default prompt type: the app's task prompt sent unchanged, without examples or a
#: reasoning instruction. The four are applied by :mod:`evaluator.prompting`.
SUPPORTED_PROMPT_TYPE = DEFAULT_PROMPT_TYPE

#: Seed of an assessment that neither names a seed nor asks for regeneration: the same
#: queries every time, as NetArena re-reads its saved benchmark file unless told to
#: regenerate it.
DEFAULT_SEED = 0
#: Upper bounds that keep one request from occupying a host for days.
MAX_NUM_QUERIES = 1000
MAX_TRIALS = 20
MAX_ITERATIONS = 50


class RequestError(ValueError):
    """The assessment request is malformed or asks for something this engine does not do.

    Attributes:
        key: the offending field (``"participants"``, ``"config.num_queries"``, ...), or
            ``""`` when the whole message is unusable.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def int_in(low: int, high: int) -> Callable[[Any], int]:
    """A ``ConfigKey.check`` accepting an integer (not a bool) from ``low`` to ``high``.

    The returned check raises ``ValueError`` with the reason for anything else.
    """

    def check(value: Any) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise ValueError(f"must be an integer from {low} to {high}")
        return value

    return check


def optional_int(value: Any) -> int | None:
    """A ``ConfigKey.check`` accepting any integer or ``None``.

    Raises:
        ValueError: anything else.
    """
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("must be an integer or null")
    return value


def _optional_count(value: Any) -> int | None:
    return None if value is None else int_in(1, MAX_NUM_QUERIES)(value)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


def _seed(value: Any) -> int | None:
    if value is None:
        return None
    return int_in(0, 2**SEED_BITS - 1)(value)


def _prompt_type(value: Any) -> str:
    if value in NETARENA_PROMPT_TYPES:
        return str(value)
    raise ValueError(f"must be one of {', '.join(NETARENA_PROMPT_TYPES)}")


def agent_client_configs(value: Any) -> list[Any]:
    """A ``ConfigKey.check`` for NetArena's ``list[AgentClientConfig]``: a list of objects (its
    green agents replace it with the one participant, as this one does).

    Raises:
        ValueError: not a list of objects.
    """
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise ValueError("must be a list of objects (NetArena's AgentClientConfig)")
    return value


def positive_int(value: Any) -> int:
    """A ``ConfigKey.check`` accepting an integer from 1 to 2**31 - 1.

    Raises:
        ValueError: anything else.
    """
    return int_in(1, 2**31 - 1)(value)


def parse_level(value: Any) -> int:
    """A complexity level as NetArena writes it (``"level2"``) or as a number (``2``).

    Raises:
        ValueError: anything else.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.startswith("level") and value[5:].isdigit():
        return int(value[5:])
    raise ValueError(f"{value!r} is not a level (write 'level1', 'level2', ...)")


def _levels_check(levels: Sequence[int]) -> Callable[[Any], tuple[int, ...]]:
    def check(value: Any) -> tuple[int, ...]:
        if not isinstance(value, list) or not value:
            raise ValueError('must be a non-empty list such as ["level1", "level2"]')
        chosen: list[int] = []
        for item in value:
            level = parse_level(item)
            if level not in levels:
                known = ", ".join(f"level{k}" for k in levels)
                raise ValueError(f"{item!r} is not a level of this app ({known})")
            if level in chosen:
                raise ValueError(f"{item!r} is listed twice")
            chosen.append(level)
        return tuple(chosen)

    return check


def _levels_key(
    levels: Sequence[int], default_levels: Sequence[int], origin: str
) -> ConfigKey:
    return ConfigKey(
        "complexity_level",
        [f"level{k}" for k in default_levels],
        origin,
        "applied",
        "the levels to assess, in order; one batch per level",
        _levels_check(levels),
    )


def _prompt_type_key() -> ConfigKey:
    return ConfigKey(
        "prompt_type",
        SUPPORTED_PROMPT_TYPE,
        "netarena",
        "applied",
        "NetArena's prompt strategy: zeroshot_base (the task prompt unchanged), "
        "fewshot_base, zeroshot_cot, fewshot_cot",
        _prompt_type,
    )


def _seed_key(fresh: str) -> ConfigKey:
    return ConfigKey(
        "seed",
        None,
        "ours",
        "applied",
        f"generation seed (level L uses seed + L - 1); default: {fresh}{DEFAULT_SEED}",
        _seed,
    )


def _trials_key() -> ConfigKey:
    return ConfigKey(
        "trials",
        1,
        "ours",
        "applied",
        "times every query is run (pass^k in the summary)",
        int_in(1, MAX_TRIALS),
    )


def common_keys(
    levels: tuple[int, ...], default_levels: tuple[int, ...], origin: str, num_queries: int
) -> list[ConfigKey]:
    """The keys every NetArena app's green agent takes: ``num_queries`` (per NetArena query
    type, default ``num_queries``), ``complexity_level`` (one of ``levels``, default
    ``default_levels``; ``origin`` ``"netarena"`` where NetArena's config class has it, else
    ``"ours"``), ``prompt_type``, and ours: ``queries_per_level``, ``seed``, ``trials``."""
    return [
        ConfigKey(
            "num_queries",
            num_queries,
            "netarena",
            "applied",
            "queries per NetArena query type (MALT operation, route and k8s error type) at "
            "each level, as NetArena counts them (docs/agentbeats.md, Query counts)",
            int_in(1, MAX_NUM_QUERIES),
        ),
        _levels_key(levels, default_levels, origin),
        _prompt_type_key(),
        ConfigKey(
            "queries_per_level",
            None,
            "ours",
            "applied",
            "instead of NetArena's count: this many queries per level, the first of the "
            "level's batch (exactly evaluate's --queries); null: NetArena's count",
            _optional_count,
        ),
        _seed_key("a fresh one when the regenerate key is true, else "),
        _trials_key(),
    ]


def regenerate_key(name: str) -> ConfigKey:
    """NetArena's regeneration flag under the app's own name (``regenerate_query``, ...): true
    draws a fresh seed unless ``seed`` is given. The name must start with ``regenerate_``."""
    return ConfigKey(
        name,
        False,
        "netarena",
        "applied",
        "true: draw fresh queries (a new random seed, reported) unless seed is given",
        _bool,
    )


def ignored_key(
    name: str, default: Any, why: str, check: Callable[[Any], Any] = _str
) -> ConfigKey:
    """A NetArena key accepted for its type (``check``, default: a string) and reported in
    ``not_applied`` with ``why``."""
    return ConfigKey(name, default, "netarena", "none", why, check)


#: Reasons of the NetArena keys without effect here, shared by the apps' key lists.
OUTPUT_DIR_REASON = (
    "NetArena's directory for logs and result files; results here are the A2A artifacts"
)
OUTPUT_FILE_REASON = "NetArena's result file name; results here are the A2A artifacts"
BENCHMARK_PATH_REASON = (
    "NetArena's saved benchmark file; queries here are generated from the seed (regenerate "
    "or seed decide which)"
)
AGENT_CLIENT_CONFIGS_REASON = (
    "NetArena's list of agents; its green agents replace it with the one participant, as "
    "this one does"
)


def max_iterations_key(default: int = 10, origin: str = "netarena") -> ConfigKey:
    """``max_iterations``: agent replies per episode (the step budget), 1 to
    :data:`MAX_ITERATIONS`; absent, the app's own budget applies."""
    return ConfigKey(
        "max_iterations",
        default,
        origin,
        "applied",
        "agent replies per episode (the step budget)",
        int_in(1, MAX_ITERATIONS),
    )


#: Default ``num_queries`` of an app without NetArena query types.
GENERIC_NUM_QUERIES = 10


def generic_config_keys(app: App) -> tuple[ConfigKey, ...]:
    """The ``config`` keys of the green agent of an app that declares none of its own
    (:meth:`evaluator.app.App.green_config_keys`): ``num_queries`` (queries per level, the
    first of the level's batch; default :data:`GENERIC_NUM_QUERIES`), ``complexity_level``
    (the app's levels, default all), ``prompt_type``, ``seed`` (default
    :data:`DEFAULT_SEED`), ``trials``, and ``max_iterations`` when the app's episodes take
    more than one reply (default: the app's ``max_steps``)."""
    keys = [
        ConfigKey(
            "num_queries",
            GENERIC_NUM_QUERIES,
            "ours",
            "applied",
            "queries per level, the first of the level's batch (exactly evaluate's --queries)",
            int_in(1, MAX_NUM_QUERIES),
        ),
        _levels_key(app.levels, app.levels, "ours"),
        _prompt_type_key(),
        _seed_key(""),
        _trials_key(),
    ]
    if app.max_steps > 1:
        keys.append(max_iterations_key(app.max_steps, "ours"))
    return tuple(keys)


def config_keys(app_id: str) -> tuple[ConfigKey, ...]:
    """The ``config`` keys the green agent of ``app_id`` takes: the app's own
    (:meth:`evaluator.app.App.green_config_keys`).

    Raises:
        UnknownAppError: ``app_id`` is not registered.
    """
    app = get_app(app_id)
    declared = app.green_config_keys()
    return generic_config_keys(app) if declared is None else tuple(declared)


@dataclass(frozen=True)
class AssessmentConfig:
    """The checked ``config`` of one assessment.

    Attributes:
        levels: complexity levels to assess, in the requested order.
        num_queries: queries per NetArena query type at each level
            (:mod:`evaluator.green.counts`); per level for an app without a NetArena profile.
        queries_per_level: when set, instead of NetArena's count: this many queries per
            level, the first of its batch.
        seed: the assessment seed; level ``L``'s batch is drawn with ``seed + L - 1``.
        seed_source: ``"config"``, ``"regenerated"`` (fresh random) or ``"default"``.
        trials: runs per query.
        max_steps: step budget per episode, ``None`` for the app's own.
        start_index, end_index: slice of the planned queries (``None``: open).
        prompt_type: one of :data:`NETARENA_PROMPT_TYPES`.
        not_applied: ``{key: {"value": given value, "reason": why it has no effect}}`` for
            every key given whose effect this engine does not reproduce; echoed in the summary.
        given: the config as received (JSON).
    """

    levels: tuple[int, ...]
    num_queries: int
    seed: int
    seed_source: str
    trials: int = 1
    max_steps: int | None = None
    start_index: int | None = None
    end_index: int | None = None
    queries_per_level: int | None = None
    prompt_type: str = SUPPORTED_PROMPT_TYPE
    not_applied: JSON = field(default_factory=dict)
    given: JSON = field(default_factory=dict)

    def level_seed(self, level: int) -> int:
        """The seed of level ``level``'s batch: ``seed + level - 1`` (distinct batches, so no
        two queries of one assessment share an id)."""
        return self.seed + level - 1


@dataclass(frozen=True)
class AssessmentRequest:
    """A checked assessment request: who to assess, on which app, how."""

    app_id: str
    role: str
    participant_url: str
    config: AssessmentConfig


def parse_config(app_id: str, config: Any) -> AssessmentConfig:
    """Check ``config`` against the keys of ``app_id`` (:func:`config_keys`).

    Raises:
        RequestError: a key the app does not take (for NetArena's apps: neither in NetArena's
            config class for the app nor ours), a wrong type or value, a level the app does
            not have; ``key`` names it (``"config.<name>"``).
        UnknownAppError: ``app_id`` is not registered.
    """
    if not isinstance(config, Mapping):
        raise RequestError("config", "config must be a JSON object")
    keys = {k.name: k for k in config_keys(app_id)}
    unknown = sorted(str(name) for name in config if name not in keys)
    if unknown:
        raise RequestError(
            f"config.{unknown[0]}",
            f"unknown config key {unknown[0]!r} for the {app_id} green agent; known keys: "
            + ", ".join(sorted(keys)),
        )
    values: dict[str, Any] = {}
    for name, key in keys.items():
        if name in config:
            try:
                values[name] = key.check(config[name])
            except ValueError as exc:
                raise RequestError(f"config.{name}", f"config key {name!r} {exc}") from None
        else:
            values[name] = key.check(key.default) if key.default is not None else None
    regenerate = next((values[k] for k in values if k.startswith("regenerate_")), False)
    if values["seed"] is not None:
        seed, source = values["seed"], "config"
    elif regenerate:
        seed, source = new_seed(), "regenerated"
    else:
        seed, source = DEFAULT_SEED, "default"
    not_applied: JSON = {
        name: {"value": values[name], "reason": key.doc}
        for name, key in keys.items()
        if key.effect != "applied" and name in config
    }
    return AssessmentConfig(
        levels=values["complexity_level"],
        num_queries=values["num_queries"],
        seed=seed,
        seed_source=source,
        trials=values["trials"],
        max_steps=values["max_iterations"] if "max_iterations" in config else None,
        start_index=values.get("start_index"),
        end_index=values.get("end_index"),
        queries_per_level=values.get("queries_per_level"),
        prompt_type=values["prompt_type"],
        not_applied=not_applied,
        given=dict(config),
    )


def _participant(participants: Any) -> tuple[str, str]:
    if not isinstance(participants, Mapping) or len(participants) != 1:
        count = len(participants) if isinstance(participants, Mapping) else "no"
        raise RequestError(
            "participants",
            f"participants must map exactly one role to the purple agent's URL (got {count})",
        )
    ((role, url),) = participants.items()
    if not isinstance(role, str) or not role.strip():
        raise RequestError("participants", "the participant's role must be a non-empty string")
    if not isinstance(url, str):
        raise RequestError(f"participants.{role}", "the participant's URL must be a string")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise RequestError(f"participants.{role}", f"bad participant URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise RequestError(
            f"participants.{role}", f"the participant URL must be http(s)://host..., got {url!r}"
        )
    return role, url


def parse_request(app_id: str, payload: Any) -> AssessmentRequest:
    """Check an assessment request already decoded from JSON (see the module docstring).

    Raises:
        RequestError: not an object, other top-level keys, not exactly one participant, a bad
            URL, or a bad ``config`` (:func:`parse_config`).
    """
    if not isinstance(payload, Mapping):
        raise RequestError("", "the request must be a JSON object {participants, config}")
    extra = sorted(str(k) for k in payload if k not in ("participants", "config"))
    if extra:
        raise RequestError(
            extra[0], f"unknown request field {extra[0]!r}; expected participants and config"
        )
    if "participants" not in payload:
        raise RequestError("participants", "the request has no participants")
    role, url = _participant(payload["participants"])
    config = payload.get("config")
    checked = parse_config(app_id, {} if config is None else config)
    return AssessmentRequest(app_id=app_id, role=role, participant_url=url, config=checked)


def request_payload(texts: Sequence[str], data: Sequence[Any]) -> Any:
    """The request object carried by a message: its first data part that is a JSON object,
    else its text parts joined and parsed as JSON.

    Raises:
        RequestError: no data part and the text is not JSON.
    """
    for item in data:
        if isinstance(item, Mapping):
            return item
    text = "\n".join(texts).strip()
    if not text:
        raise RequestError("", "the message carries no request: send {participants, config}")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise RequestError(
            "", f"the message text is not JSON {{participants, config}}: {exc}"
        ) from None
