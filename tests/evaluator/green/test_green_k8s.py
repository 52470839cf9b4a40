"""The k8s green agent on the embedded cluster: the oracle repairs every query and the null
agent none."""

from __future__ import annotations

from typing import Any

import pytest

from tests.evaluator.green.conftest import assess, seed_without_controls
from tests.evaluator.green.netarena_facts import PUBLISHED_SCENARIO_CONFIGS

pytestmark = [pytest.mark.k8s, pytest.mark.root, pytest.mark.slow]

#: NetArena's published scenario config, verbatim, shrunk to two level-1 queries by two keys of
#: ours (the full count, 30 queries, is checked without episodes in test_assessment.py).
CONFIG: dict[str, Any] = {
    **PUBLISHED_SCENARIO_CONFIGS["k8s"],
    "queries_per_level": 2,
    "complexity_level": ["level1"],
}


@pytest.mark.usefixtures("k8s_cluster")
def test_oracle_scores_1_and_null_0(start_green, start_purple) -> None:
    green = start_green("k8s")
    config = {**CONFIG, "seed": seed_without_controls("k8s", CONFIG)}
    oracle = assess(green.url, {"participants": {"agent": start_purple("oracle", "k8s")},
                                "config": config})
    assert oracle.state == "completed", oracle.message
    assert len(oracle.queries) == 2
    assert all(q["correctness"] and q["safety"] for q in oracle.queries), oracle.queries
    assert (oracle.summary["avg_correctness"], oracle.summary["avg_safety"]) == (1.0, 1.0)
    assert oracle.summary["avg_iterations"] >= 1.0
    null = assess(green.url, {"participants": {"agent": start_purple("null", "k8s")},
                              "config": config}, streaming=False)
    assert null.state == "completed", null.message
    assert len(null.queries) == 2 and null.summary["avg_correctness"] == 0.0
    assert all(q["iterations"] == 10 and not q["success"] for q in null.queries)  # NetArena: max
