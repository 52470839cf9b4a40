"""The assessment request of the green agent: NetArena's keys and defaults, ours, and a clear
refusal naming the key for everything else (no server involved)."""

from __future__ import annotations

from typing import Any

import pytest

from evaluator.green.request import (
    DEFAULT_SEED,
    RequestError,
    config_keys,
    parse_config,
    parse_request,
    request_payload,
)
from tests.evaluator.green.netarena_facts import (
    CONFIG_CLASS_FIELDS,
    PROMPT_TYPES,
    PUBLISHED_SCENARIO_CONFIGS,
)

URL = "http://127.0.0.1:9009"


def request(config: dict[str, Any] | None = None, **participants: str) -> dict[str, Any]:
    return {"participants": participants or {"agent": URL}, "config": config or {}}


def test_netarena_defaults_apply_when_the_config_is_empty() -> None:
    malt = parse_request("malt", request()).config
    assert (malt.levels, malt.num_queries, malt.prompt_type) == ((1, 2), 10, "zeroshot_base")
    assert (malt.seed, malt.seed_source, malt.trials, malt.max_steps) == (
        DEFAULT_SEED,
        "default",
        1,
        None,
    )
    route = parse_request("route", request()).config
    assert route.levels == (1, 2, 3) and route.not_applied == {}


@pytest.mark.parametrize("app_id", ["malt", "route", "k8s"])
def test_netarenas_published_scenario_configs_are_accepted_verbatim(app_id: str) -> None:
    """The leaderboard's own ``[config]`` tables: every key accepted; those with no effect
    here listed in ``not_applied`` with a reason, the others applied."""
    given = PUBLISHED_SCENARIO_CONFIGS[app_id]
    parsed = parse_request(app_id, request(given))
    assert parsed.role == "agent" and parsed.participant_url == URL
    config = parsed.config
    assert config.num_queries == given["num_queries"] and config.prompt_type == "zeroshot_base"
    assert config.seed_source == "regenerated"  # every published scenario regenerates
    assert parse_config(app_id, given).seed != config.seed  # a fresh seed each time
    ignored = {"output_dir", "output_file", "benchmark_path", "microservice_dir",
               "num_switches", "num_hosts_per_subnet"}
    assert set(config.not_applied) == ignored & set(given)
    for name, entry in config.not_applied.items():
        assert entry["value"] == given[name] and "NetArena's" in entry["reason"]
    if "max_iterations" in given:
        assert config.max_steps == given["max_iterations"]
    if app_id == "malt":
        assert config.levels == (1, 2)


@pytest.mark.parametrize("app_id", ["malt", "route", "k8s"])
def test_every_field_of_netarenas_config_class_is_accepted(app_id: str) -> None:
    fields = CONFIG_CLASS_FIELDS[app_id]
    assert set(fields) <= {key.name for key in config_keys(app_id)}
    netarena = {key.name: key.default for key in config_keys(app_id) if key.origin == "netarena"}
    for name, default in fields.items():
        if name in netarena:  # complexity_level is NetArena's for MALT only
            assert netarena[name] == default, name
    explicit = {**fields, "agent_client_configs": [{"name": "x", "base_url": URL}]}
    config = parse_config(app_id, explicit)
    assert "agent_client_configs" in config.not_applied
    assert "participant" in config.not_applied["agent_client_configs"]["reason"]
    for prompt_type in PROMPT_TYPES:
        assert parse_config(app_id, {"prompt_type": prompt_type}).prompt_type == prompt_type


def test_seed_wins_over_regeneration_and_levels_get_their_own_seeds() -> None:
    config = parse_config("k8s", {"seed": 41, "regenerate_config": True, "trials": 3})
    assert (config.seed, config.seed_source, config.trials) == (41, "config", 3)
    assert [config.level_seed(k) for k in (1, 2, 3)] == [41, 42, 43]


def test_levels_may_be_written_as_numbers() -> None:
    assert parse_config("malt", {"complexity_level": [3, "level1"]}).levels == (3, 1)


@pytest.mark.parametrize(
    ("app_id", "config", "key", "fragment"),
    [
        ("malt", {"num_querys": 3}, "config.num_querys", "unknown config key 'num_querys'"),
        ("malt", {"max_iterations": 3}, "config.max_iterations", "unknown config key"),
        ("route", {"regenerate_query": True}, "config.regenerate_query", "unknown config key"),
        ("malt", {"num_queries": "10"}, "config.num_queries", "must be an integer"),
        ("malt", {"num_queries": 0}, "config.num_queries", "from 1 to"),
        ("malt", {"num_queries": True}, "config.num_queries", "must be an integer"),
        ("malt", {"complexity_level": ["level4"]}, "config.complexity_level", "not a level of"),
        ("malt", {"complexity_level": "level1"}, "config.complexity_level", "non-empty list"),
        ("malt", {"complexity_level": []}, "config.complexity_level", "non-empty list"),
        ("malt", {"complexity_level": ["one"]}, "config.complexity_level", "is not a level"),
        ("malt", {"complexity_level": [1, "level1"]}, "config.complexity_level", "twice"),
        ("malt", {"regenerate_query": "yes"}, "config.regenerate_query", "true or false"),
        ("malt", {"seed": -1}, "config.seed", "integer from 0"),
        ("malt", {"trials": 0}, "config.trials", "integer from 1"),
        ("malt", {"start_index": "2"}, "config.start_index", "integer from 0"),
        ("route", {"num_switches": "4"}, "config.num_switches", "from 1 to"),
        ("route", {"output_file": "x.jsonl"}, "config.output_file", "unknown config key"),
        ("malt", {"max_iteration": 10}, "config.max_iteration", "unknown config key"),
        ("k8s", {"agent_client_configs": {}}, "config.agent_client_configs", "list of objects"),
        ("k8s", {"max_iterations": 0}, "config.max_iterations", "from 1 to"),
        ("k8s", {"microservice_dir": 3}, "config.microservice_dir", "must be a string"),
        ("malt", {"prompt_type": "react"}, "config.prompt_type", "must be one of"),
    ],
)
def test_bad_config_is_refused_naming_the_key(
    app_id: str, config: dict[str, Any], key: str, fragment: str
) -> None:
    with pytest.raises(RequestError, match=fragment) as info:
        parse_request(app_id, request(config))
    assert info.value.key == key
    assert key.split(".", 1)[1] in str(info.value)


@pytest.mark.parametrize(
    ("payload", "key", "fragment"),
    [
        ([], "", "JSON object"),
        ({"config": {}}, "participants", "no participants"),
        (request(a=URL, b=URL), "participants", "exactly one"),
        ({"participants": {}, "config": {}}, "participants", "exactly one"),
        ({"participants": [URL], "config": {}}, "participants", "exactly one"),
        (request(agent="ftp://host/x"), "participants.agent", r"http\(s\)"),
        (request(agent="not a url"), "participants.agent", r"http\(s\)"),
        ({"participants": {"agent": 5}, "config": {}}, "participants.agent", "string"),
        ({**request(), "mode": "x"}, "mode", "unknown request field"),
        ({"participants": {"agent": URL}, "config": []}, "config", "JSON object"),
    ],
)
def test_bad_requests_are_refused(payload: Any, key: str, fragment: str) -> None:
    with pytest.raises(RequestError, match=fragment) as info:
        parse_request("malt", payload)
    assert info.value.key == key


def test_the_request_is_read_from_a_data_part_or_json_text() -> None:
    data = request({"num_queries": 2})
    assert request_payload(["ignored"], ["not an object", data]) == data
    assert request_payload(['{"participants": {}}'], []) == {"participants": {}}
    with pytest.raises(RequestError, match="not JSON"):
        request_payload(["please assess my agent"], [])
    with pytest.raises(RequestError, match="carries no request"):
        request_payload([" "], [])


def test_every_key_is_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "agentbeats.md").read_text()
    from evaluator.registry import app_ids

    for app_id in app_ids():
        for key in config_keys(app_id):
            assert f"`{key.name}`" in doc, (app_id, key.name)
