"""The green agent's records without a server: infrastructure failures are listed and never
averaged, the figures follow the app, a canceled assessment refuses further agent calls."""

from __future__ import annotations

import threading
from typing import Any

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
    # NetArena's route iterations: a repair after 3 commands is 4, a failure 10 + 1
    assert summary["avg_iterations"] == 7.5 and "avg_latency_s" not in summary
    assert summary["avg_agent_replies"] == 6.5 and summary["netarena_n"] == 2
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
    # NetArena's MALT latency is the reply time; ours (the code's run time) has its own name
    assert summary["avg_latency_s"] == 0.5 and "avg_iterations" not in summary
    assert summary["avg_app_latency_s"] == 2.0
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


def _control(app_id: str, index: int) -> EpisodeResult:
    query = Query(app_id, 1, seed=5, index=index, level=1, labels=("HEALTHY",), prompt="p")
    return EpisodeResult.for_query(query, correct=True, safe=True, latency_s=1.0, wall_s=1.0,
                                   agent_s=0.1, steps=1, failure=None)


def _netarena_records() -> dict[str, list[dict[str, Any]]]:
    """Our records of a small assessment per app: a repair, a failure, an unanswered query,
    a healthy control (route, k8s)."""
    records: dict[str, list[dict[str, Any]]] = {}
    for app_id in ("malt", "route", "k8s"):
        request = _request(app_id)
        results = [
            _scored(app_id, 0, correct=True, safe=True, steps=2),
            _scored(app_id, 1, correct=False, safe=True, steps=10),
            EpisodeResult.for_query(
                _query(app_id, 2), correct=False, safe=False, latency_s=0.0, wall_s=60.0,
                agent_s=60.0, steps=0, failure="agent:timeout",
            ),
        ]
        if app_id != "malt":
            results.append(_control(app_id, 3))
        records[app_id] = [query_record(i, r, request=request) for i, r in enumerate(results)]
        records[app_id].append(summary_record(app_id, request, results))
    return records


def test_netarenas_fields_carry_netarenas_meanings_beside_ours() -> None:
    records = _netarena_records()
    for app_id, rows in records.items():
        for row in rows:  # no name of ours equals one of NetArena's ignoring case
            names = [name.lower() for name in row]
            assert len(names) == len(set(names)), (app_id, sorted(row))
    malt = records["malt"]
    assert malt[0]["Result-Correctness"] == "Pass" and malt[1]["Result-Correctness"] == "Fail"
    assert malt[0]["Result-Latency"] == 0.5 and malt[0]["latency_s"] == 2.0
    assert malt[2]["Result-Latency"] is None  # unanswered: no reply time, as in NetArena
    assert malt[-1]["avg_latency_s"] == 0.5 and malt[-1]["avg_correctness"] == pytest.approx(1 / 3)
    assert malt[0]["agent_info"] == {"base_url": "http://127.0.0.1:1", "name": "agent",
                                     "prompt_type": "zeroshot_base"}
    route = records["route"]
    assert route[0]["error_type"] == "disable_routing" and route[0]["success"] is True
    assert [r["iterations"] for r in route[:3]] == [3, 11, 11]  # NetArena: replies + 1, max + 1
    assert [r["agent_replies"] for r in route[:3]] == [2, 10, 0]
    assert "success" not in route[3] and route[3]["labels"] == ["HEALTHY"]  # a control
    k8s = records["k8s"]
    assert [r["iterations"] for r in k8s[:3]] == [2, 10, 10]  # NetArena: replies, max
    summary = route[-1]
    # the unanswered query counts as wrong (NetArena would leave it out: 1/2, not 1/3)
    assert summary["avg_correctness"] == pytest.approx(1 / 3) and summary["unanswered"] == 1
    assert summary["netarena_n"] == 3 and summary["controls"] == 1 and summary["n"] == 4
    assert any("left out" in d or "leaves it out" in d for d in summary["netarena_deviations"])
    assert summary["avg_iterations"] == pytest.approx((3 + 11 + 11) / 3)


def _netarena_shaped(app_id: str) -> dict[str, Any]:
    """A results file as NetArena's leaderboard stores it (key names and value kinds, facts
    from its published result files): per-query records, then the summary."""
    info = {"base_url": "http://x_operator:9009/", "name": "x_operator",
            "prompt_type": "zeroshot_base"}
    if app_id == "malt":
        rows: list[dict[str, Any]] = [
            {"Query": "q", "Label": "capacity planning, level-1, add",
             "Result-Correctness": "Fail", "Result-Safety": "Fail", "GT-Result-Safety": "Pass",
             "Result-Latency": 3.3, "Ground truth code": "g", "LLM code": "c",
             "Error": "e", "Verifier-Error": "v", "agent_info": info},
            {"Query": "q2", "Label": "capacity planning, level-2, remove-list",
             "Result-Correctness": "Pass", "Result-Safety": "Pass", "GT-Result-Safety": "Pass",
             "Result-Latency": 2.0, "Ground truth code": "g", "LLM code": "c",
             "Error": None, "Verifier-Error": None, "agent_info": info},
        ]
        rows.append({"avg_correctness": 0.5, "avg_safety": 0.5, "avg_latency_s": 2.65})
    else:
        rows = [
            {"agent_info": info, "error_type": "disable_routing",
             "error_detail": {"action": "a", "method": 4}, "success": True, "safe": True,
             "iterations": 1, "log_content": "l"},
            {"agent_info": info, "error_type": "disable_interface",
             "error_detail": {"interface": "r0-eth1", "method": 3}, "success": False,
             "safe": True, "iterations": 11, "log_content": "l"},
        ]
        rows.append({"avg_correctness": 0.5, "avg_safety": 1.0, "avg_iterations": 6.0})
    return {"participants": {"x_operator": "019b"}, "results": rows}


def test_duckdb_reads_netarenas_results_and_ours_together(tmp_path) -> None:
    import importlib.util
    import json

    from tests.conftest import require

    # a pinned dev requirement: under CI=true its absence fails instead of skipping
    require(importlib.util.find_spec("duckdb") is not None, "duckdb is not installed")
    import duckdb

    ours = _netarena_records()
    for app_id in ("malt", "route"):
        (tmp_path / f"netarena-{app_id}.json").write_text(json.dumps(_netarena_shaped(app_id)))
        mine = {"participants": {"agent": "http://127.0.0.1:1"}, "results": ours[app_id]}
        (tmp_path / f"ours-{app_id}.json").write_text(json.dumps(mine))
    con = duckdb.connect()

    def rows(app_id: str) -> str:
        return (f"(SELECT filename, unnest(results) AS r FROM read_json_auto("
                f"'{tmp_path}/*-{app_id}.json', union_by_name=true, filename=true))")

    malt = con.execute(
        "SELECT filename LIKE '%ours%' AS ours, count(*) AS n, "
        "avg(CASE WHEN r.\"Result-Correctness\" = 'Pass' THEN 1.0 ELSE 0.0 END) AS correct, "
        "avg(r.\"Result-Latency\") AS latency "
        f"FROM {rows('malt')} WHERE r.\"Label\" IS NOT NULL GROUP BY ours ORDER BY ours"
    ).fetchall()
    assert [(o, n, round(c, 3)) for o, n, c, _ in malt] == [(False, 2, 0.5), (True, 3, 0.333)]
    assert [round(latency, 3) for *_, latency in malt] == [2.65, 0.5]
    summaries = con.execute(
        f"SELECT filename LIKE '%ours%', r.avg_correctness FROM {rows('malt')} "
        "WHERE r.avg_correctness IS NOT NULL ORDER BY 1"
    ).fetchall()
    assert [round(v, 3) for _, v in summaries] == [0.5, 0.333]
    route = con.execute(
        "SELECT filename LIKE '%ours%' AS ours, count(*), avg(r.success::INT), "
        f"avg(r.iterations) FROM {rows('route')} WHERE r.success IS NOT NULL "
        "GROUP BY ours ORDER BY ours"
    ).fetchall()
    assert [(o, n, round(s, 3)) for o, n, s, _ in route] == [(False, 2, 0.5), (True, 3, 0.333)]
    assert route[1][3] == pytest.approx(25 / 3)  # NetArena's iterations, on our records
