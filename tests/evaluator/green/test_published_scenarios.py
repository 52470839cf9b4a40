"""NetArena's published route and k8s scenario configs, verbatim and at full size (30 NetArena
queries each, plus our healthy controls), against the green agent: the reference oracle scores
``avg_correctness`` 1.0 and the null agent 0.0, at NetArena's query count and with NetArena's
``iterations`` per query. (The MALT config runs at full size in test_green_malt.py.)

The oracle's and the null agent's assessments run at the same time, each against a green agent
of its own, as two AgentBeats runs on one host would: the episodes of one never see the other's
emulator state.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from apps.route.pool import POOL_ENV
from tests.evaluator.green.conftest import Outcome, assess
from tests.evaluator.green.netarena_facts import PUBLISHED_SCENARIO_CONFIGS, expected_count

pytestmark = [pytest.mark.root, pytest.mark.slow]


def _assess_both(app_id: str, start_green, start_purple) -> dict[str, Outcome]:
    """The published config of ``app_id`` assessed for the oracle and the null agent at once."""
    config = PUBLISHED_SCENARIO_CONFIGS[app_id]
    requests = {
        kind: (start_green(app_id).url,
               {"participants": {f"{app_id}_operator": start_purple(kind, app_id)},
                "config": config})
        for kind in ("oracle", "null")
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {kind: pool.submit(assess, url, request, streaming=kind == "oracle")
                   for kind, (url, request) in requests.items()}
        return {kind: future.result() for kind, future in futures.items()}


def _check(app_id: str, kind: str, outcome: Outcome) -> list[dict[str, Any]]:
    """The assessment completed at NetArena's count with the agent's score; returns the
    NetArena-counted query records (healthy controls and infrastructure failures left out)."""
    assert outcome.state == "completed", (kind, outcome.message)
    summary = outcome.summary
    failures = [f for f in summary["infrastructure_failures"] if "HEALTHY" not in f["labels"]]
    assert not failures, (kind, failures)
    expected = expected_count(app_id, PUBLISHED_SCENARIO_CONFIGS[app_id])
    assert summary["netarena_n"] == expected  # NetArena's count
    assert len(outcome.queries) == expected + summary["controls"]
    assert summary["avg_correctness"] == (1.0 if kind == "oracle" else 0.0), (kind, summary)
    counted = [q for q in outcome.queries if "HEALTHY" not in q["labels"]]
    assert len(counted) == expected
    if kind == "oracle":
        assert summary["avg_safety"] == 1.0
        assert all(q["correctness"] and q["safety"] and q["success"] for q in counted)
    else:
        assert not any(q["correctness"] or q["success"] for q in counted)
    return counted


@pytest.mark.netns
def test_route_published_scenario(start_green, start_purple, monkeypatch) -> None:
    from tests.apps.route.helpers import require_emulator

    require_emulator()
    monkeypatch.delenv(POOL_ENV, raising=False)
    outcomes = _assess_both("route", start_green, start_purple)
    limit = PUBLISHED_SCENARIO_CONFIGS["route"]["max_iterations"]
    oracle = _check("route", "oracle", outcomes["oracle"])
    null = _check("route", "null", outcomes["null"])
    # NetArena's route iterations: one reply more than the repair took; a failure max + 1
    assert all(q["iterations"] == q["agent_replies"] + 1 for q in oracle), oracle
    assert all(q["iterations"] == limit + 1 for q in null)
    assert outcomes["oracle"].summary["avg_iterations"] == pytest.approx(
        sum(q["iterations"] for q in oracle) / len(oracle))
    assert "avg_latency_s" not in outcomes["oracle"].summary
    assert set(outcomes["oracle"].summary["not_applied"]) == {
        "benchmark_path", "output_dir", "num_switches", "num_hosts_per_subnet"}


@pytest.mark.k8s
@pytest.mark.usefixtures("k8s_cluster")
def test_k8s_published_scenario(start_green, start_purple) -> None:
    outcomes = _assess_both("k8s", start_green, start_purple)
    limit = PUBLISHED_SCENARIO_CONFIGS["k8s"]["max_iterations"]
    oracle = _check("k8s", "oracle", outcomes["oracle"])
    null = _check("k8s", "null", outcomes["null"])
    # NetArena's k8s iterations: the replies when repaired, max_iterations when not
    assert all(1 <= q["iterations"] <= limit for q in oracle)
    assert all(q["iterations"] == limit for q in null)
