"""The assessment request an AgentBeats green agent receives, read and checked.

The request is one A2A message whose data part (or text, as JSON) is::

    {"participants": {"<role>": "<purple agent URL>"}, "config": {...}}

with exactly one participant. ``config`` takes the keys NetArena's green agent for the app
takes, with NetArena's defaults, plus ours (``seed``, ``trials``, and ``complexity_level``
for route and k8s, whose NetArena agents have no levels). :data:`CONFIG_KEYS` lists them per
app; docs/agentbeats.md has the table. Keys whose effect this engine does not reproduce are
either accepted with no effect (a file location) and reported in ``not_applied``, or accepted
only at NetArena's default value and refused otherwise (they would change what is run).

Every problem raises :class:`RequestError` naming the offending key; the server turns it
into an A2A ``InvalidParamsError`` (JSON-RPC -32602).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from evaluator.types import JSON, SEED_BITS, new_seed

#: NetArena's prompt types (zero-/few-shot x base/chain-of-thought).
NETARENA_PROMPT_TYPES = ("zeroshot_base", "fewshot_base", "zeroshot_cot", "fewshot_cot")
#: The one prompt type this engine reproduces: the app's task prompt sent unchanged, without
#: examples or a reasoning instruction. Few-shot and chain-of-thought are strategies of the
#: agent here (``serve_agent --agent llm --strategy``), not of the evaluator.
SUPPORTED_PROMPT_TYPE = "zeroshot_base"
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


@dataclass(frozen=True)
class ConfigKey:
    """One ``config`` key of an app's green agent.

    Attributes:
        name: the key as NetArena's scenario files spell it.
        default: the value when the key is absent (``None``: see ``doc``).
        origin: ``"netarena"`` (NetArena's green agent takes it) or ``"ours"``.
        effect: ``"applied"``, ``"none"`` (accepted, reported in ``not_applied``) or
            ``"default-only"`` (accepted at ``default`` only, reported in ``not_applied``).
        doc: what it does here (docs/agentbeats.md repeats it).
        check: validates and normalises a given value; raises ``ValueError`` with the reason.
    """

    name: str
    default: Any
    origin: str
    effect: str
    doc: str
    check: Callable[[Any], Any] = field(repr=False, compare=False)


def _int_in(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise ValueError(f"must be an integer from {low} to {high}")
        return value

    return check


def _optional_int(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("must be an integer or null")
    return value


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
    return _int_in(0, 2**SEED_BITS - 1)(value)


def _prompt_type(value: Any) -> str:
    if value == SUPPORTED_PROMPT_TYPE:
        return value
    if value in NETARENA_PROMPT_TYPES:
        raise ValueError(
            f"{value!r} is not reproduced here: this engine sends each app's own task prompt "
            f"unchanged, which is NetArena's {SUPPORTED_PROMPT_TYPE!r}; few-shot and "
            "chain-of-thought prompting belong to the purple agent (e.g. serve_agent --agent "
            "llm --strategy few-shot|cot)"
        )
    raise ValueError(f"must be one of {', '.join(NETARENA_PROMPT_TYPES)}")


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


def _equal_to(default: Any, why: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if isinstance(value, bool) or value != default:
            raise ValueError(f"only {default!r} (NetArena's default) is accepted: {why}")
        return value

    return check


def _common_keys(
    levels: tuple[int, ...], default_levels: tuple[int, ...], origin: str
) -> list[ConfigKey]:
    return [
        ConfigKey(
            "num_queries",
            10,
            "netarena",
            "applied",
            "queries per complexity level (each level's batch cycles through its labels)",
            _int_in(1, MAX_NUM_QUERIES),
        ),
        ConfigKey(
            "complexity_level",
            [f"level{k}" for k in default_levels],
            origin,
            "applied",
            "the levels to assess, in order; one batch per level",
            _levels_check(levels),
        ),
        ConfigKey(
            "prompt_type",
            SUPPORTED_PROMPT_TYPE,
            "netarena",
            "applied",
            "only zeroshot_base: the app's task prompt, unchanged",
            _prompt_type,
        ),
        ConfigKey(
            "seed",
            None,
            "ours",
            "applied",
            "generation seed (level L uses seed + L - 1); default: a fresh one when the "
            f"regenerate key is true, else {DEFAULT_SEED}",
            _seed,
        ),
        ConfigKey(
            "trials",
            1,
            "ours",
            "applied",
            "times every query is run (pass^k in the summary)",
            _int_in(1, MAX_TRIALS),
        ),
    ]


def _regenerate(name: str) -> ConfigKey:
    return ConfigKey(
        name,
        False,
        "netarena",
        "applied",
        "true: draw fresh queries (a new random seed, reported) unless seed is given",
        _bool,
    )


def _max_iterations() -> ConfigKey:
    return ConfigKey(
        "max_iterations",
        10,
        "netarena",
        "applied",
        "agent replies per episode (the step budget)",
        _int_in(1, MAX_ITERATIONS),
    )


#: The ``config`` keys each app's green agent takes, by app id.
CONFIG_KEYS: dict[str, tuple[ConfigKey, ...]] = {
    "malt": (
        *_common_keys((1, 2, 3), (1, 2), "netarena"),
        _regenerate("regenerate_query"),
        ConfigKey(
            "benchmark_path",
            "malt_benchmark.jsonl",
            "netarena",
            "none",
            "NetArena's saved benchmark file; queries are generated from the seed here",
            _str,
        ),
        ConfigKey(
            "start_index",
            None,
            "netarena",
            "applied",
            "first query to run (Python slice of the planned queries; null: from the start)",
            _optional_int,
        ),
        ConfigKey(
            "end_index",
            None,
            "netarena",
            "applied",
            "query to stop before (Python slice; null: to the end)",
            _optional_int,
        ),
    ),
    "route": (
        *_common_keys((1, 2, 3), (1, 2, 3), "ours"),
        _regenerate("regenerate_benchmark"),
        _max_iterations(),
        ConfigKey(
            "num_switches",
            2,
            "netarena",
            "default-only",
            "NetArena's fixed topology size; topologies here are sized by level",
            _equal_to(2, "topologies here are sized by level"),
        ),
        ConfigKey(
            "num_hosts_per_subnet",
            1,
            "netarena",
            "default-only",
            "NetArena's fixed topology size; topologies here are sized by level",
            _equal_to(1, "topologies here are sized by level"),
        ),
    ),
    "k8s": (
        *_common_keys((1, 2, 3), (1, 2, 3), "ours"),
        _regenerate("regenerate_config"),
        _max_iterations(),
        ConfigKey(
            "microservice_dir",
            None,
            "netarena",
            "none",
            "NetArena's manifest checkout; the engine deploys its own manifests per episode",
            _str,
        ),
    ),
}


@dataclass(frozen=True)
class AssessmentConfig:
    """The checked ``config`` of one assessment.

    Attributes:
        levels: complexity levels to assess, in the requested order.
        num_queries: queries per level.
        seed: the assessment seed; level ``L``'s batch is drawn with ``seed + L - 1``.
        seed_source: ``"config"``, ``"regenerated"`` (fresh random) or ``"default"``.
        trials: runs per query.
        max_steps: step budget per episode, ``None`` for the app's own.
        start_index, end_index: slice of the planned queries (``None``: open).
        prompt_type: always :data:`SUPPORTED_PROMPT_TYPE`.
        not_applied: keys given whose effect this engine does not reproduce, with their
            values; echoed in the summary.
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
    """Check ``config`` against :data:`CONFIG_KEYS` of ``app_id``.

    Raises:
        RequestError: unknown key, wrong type or value, a level the app does not have, a
            prompt type not reproduced here; ``key`` names it (``"config.<name>"``).
    """
    if not isinstance(config, Mapping):
        raise RequestError("config", "config must be a JSON object")
    keys = {k.name: k for k in CONFIG_KEYS[app_id]}
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
    not_applied = {
        name: values[name]
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
