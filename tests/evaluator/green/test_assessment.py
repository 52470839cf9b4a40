"""The green agent's records without a server: infrastructure failures are listed and never
averaged, the figures follow the app, a canceled assessment refuses further agent calls."""

from __future__ import annotations

import threading

import pytest

from evaluator.agents.base import AgentError
from evaluator.green.assessment import StoppableClient, query_record, summary_record
from evaluator.green.request import AssessmentRequest, parse_request
from evaluator.testing import ScriptedClient
from evaluator.types import EpisodeResult, Query


def _query(app_id: str, index: int, level: int = 1) -> Query:
    return Query(app_id, 1, seed=5, index=index, level=level, labels=("DR",), prompt="p")


def _scored(app_id: str, index: int, *, correct: bool, safe: bool, steps: int) -> EpisodeResult:
    return EpisodeResult.for_query(
        _query(app_id, index),
        correct=correct,
        safe=safe,
        latency_s=2.0 * (index + 1),
        wall_s=1.0,
        agent_s=0.5,
        steps=steps,
        failure=None if correct else "wrong_answer",
    )


def _request(app_id: str) -> AssessmentRequest:
    return parse_request(app_id, {"participants": {"agent": "http://127.0.0.1:1"}})


def test_infrastructure_failures_are_listed_and_never_averaged() -> None:
    results = [
        _scored("route", 0, correct=True, safe=True, steps=3),
        EpisodeResult.for_infrastructure_failure(
            _query("route", 1), "EmulatorError: mininet did not start", attempts=3
        ),
        _scored("route", 2, correct=False, safe=True, steps=10),
    ]
    summary = summary_record("route", _request("route"), results)
    assert (summary["n"], summary["episodes"]) == (2, 3)
    assert (summary["avg_correctness"], summary["avg_safety"]) == (0.5, 1.0)
    assert summary["avg_iterations"] == 6.5 and "avg_latency_s" not in summary
    assert summary["correct_and_safe"]["value"] == 0.5 and summary["correct_and_safe"]["n"] == 2
    assert summary["by_level"]["1"]["n"] == 2
    assert summary["infrastructure_failures"] == [
        {
            "query_index": 1,
            "level": 1,
            "labels": ["DR"],
            "trial": 0,
            "kind": "EmulatorError",
            "error": "EmulatorError: mininet did not start",
            "attempts": 3,
        }
    ]
    record = query_record(1, results[1])
    assert record["infrastructure_failure"]["kind"] == "EmulatorError"
    assert record["failure"] == "infrastructure" and record["correctness"] is False
    assert query_record(0, results[0])["infrastructure_failure"] is None


def test_malt_reports_latency_and_no_scored_episode_gives_null_means() -> None:
    results = [_scored("malt", 0, correct=True, safe=False, steps=1)]
    summary = summary_record("malt", _request("malt"), results)
    assert summary["avg_latency_s"] == 2.0 and "avg_iterations" not in summary
    failed = EpisodeResult.for_infrastructure_failure(_query("malt", 0), "OSError: x")
    empty = summary_record("malt", _request("malt"), [failed])
    assert (empty["avg_correctness"], empty["avg_safety"], empty["avg_latency_s"]) == (
        None,
        None,
        None,
    )
    assert empty["n"] == 0 and empty["correct_and_safe"]["value"] is None


def test_a_stopped_client_refuses_further_calls() -> None:
    stop = threading.Event()
    client = StoppableClient(ScriptedClient(["a", "b"]), stop)
    assert client.complete([{"role": "user", "content": "x"}], episode_id="e").text == "a"
    stop.set()
    with pytest.raises(AgentError) as info:
        client.complete([{"role": "user", "content": "x"}], episode_id="e")
    assert info.value.category == "canceled"


@pytest.mark.parametrize("app_id", ["malt", "route", "k8s"])
def test_netarenas_published_configs_plan_netarenas_query_counts(app_id: str) -> None:
    """``num_queries`` per NetArena query type: MALT per operation type of each level, route
    and k8s per single and paired error type; healthy controls come on top."""
    from collections import Counter

    from evaluator.green.assessment import plan_queries
    from evaluator.green.counts import netarena_type
    from evaluator.green.request import parse_config
    from evaluator.registry import get_app
    from tests.evaluator.green import netarena_facts as facts

    given = {**facts.PUBLISHED_SCENARIO_CONFIGS[app_id], "seed": 3}
    planned = plan_queries(get_app(app_id), parse_config(app_id, given))
    types = Counter(netarena_type(app_id, q.level, q.labels) for q in planned)
    controls = types.pop(None, 0)
    assert all(tuple(q.labels) == ("HEALTHY",) for q in planned
               if netarena_type(app_id, q.level, q.labels) is None)
    n = given["num_queries"]
    if app_id == "malt":
        expected = {t: n for level in (1, 2) for t in facts.MALT_TYPES[level]}
        assert controls == 0
    else:
        errors = facts.ROUTE_ERRORS if app_id == "route" else facts.K8S_ERRORS
        pairs = [f"{a}+{b}" for i, a in enumerate(errors) for b in errors[i + 1:]]
        expected = {t: n for t in errors + pairs}
        assert 0 < controls <= len(planned) // 5
    assert dict(types) == expected
    assert sum(types.values()) == facts.expected_count(app_id, given)


def test_k8s_single_types_stop_where_netarenas_catalogue_does() -> None:
    from evaluator.green.counts import netarena_quota

    quota = netarena_quota("k8s", 1, 30)
    assert quota == {"remove_ingress": 14, "add_ingress": 30, "change_port": 30,
                     "change_protocol": 20, "add_egress": 30}
    assert set(netarena_quota("k8s", 2, 30).values()) == {30}


def test_queries_per_level_keeps_the_first_of_each_levels_batch() -> None:
    from evaluator.green.assessment import plan_queries
    from evaluator.green.request import parse_config
    from evaluator.registry import get_app
    from evaluator.variants import generate_batch

    app = get_app("route")
    config = parse_config("route", {"queries_per_level": 3, "complexity_level": [2, 1],
                                    "seed": 8, "num_queries": 4})
    planned = plan_queries(app, config)
    assert planned == generate_batch(app, 3, 9, 2) + generate_batch(app, 3, 8, 1)
