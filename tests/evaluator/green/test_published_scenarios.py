"""At full size: NetArena's published route and k8s scenario
configs, verbatim (30 NetArena queries each, plus healthy controls), against the green agent
with the reference oracle (avg_correctness 1.0) and the null agent (0.0).

Minutes per app, so opt-in: set NETARENA_ACCEPTANCE=1 (CI runs the shrunk versions in
test_green_route.py and test_green_k8s.py, and the MALT config at full size in
test_green_malt.py).
"""

from __future__ import annotations

import os

import pytest

from apps.route.pool import POOL_ENV
from tests.evaluator.green.conftest import assess
from tests.evaluator.green.netarena_facts import PUBLISHED_SCENARIO_CONFIGS, expected_count

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("NETARENA_ACCEPTANCE") != "1", reason="set NETARENA_ACCEPTANCE=1"
    ),
]


def _run(app_id: str, start_green, start_purple) -> None:
    green = start_green(app_id)
    config = PUBLISHED_SCENARIO_CONFIGS[app_id]
    expected = expected_count(app_id, config)
    for kind, score in (("oracle", 1.0), ("null", 0.0)):
        purple = start_purple(kind, app_id)
        outcome = assess(green.url, {"participants": {f"{app_id}_operator": purple},
                                     "config": config})
        assert outcome.state == "completed", outcome.message
        summary = outcome.summary
        failures = [f for f in summary["infrastructure_failures"] if "HEALTHY" not in f["labels"]]
        assert summary["netarena_n"] + len(failures) == expected  # NetArena's count
        assert summary["avg_correctness"] == score, (kind, summary["avg_correctness"])
        assert len(outcome.queries) == expected + summary["controls"] + len(
            summary["infrastructure_failures"]) - len(failures)


@pytest.mark.netns
def test_route_published_scenario(start_green, start_purple, monkeypatch) -> None:
    from tests.apps.route.helpers import require_emulator

    require_emulator()
    monkeypatch.delenv(POOL_ENV, raising=False)
    _run("route", start_green, start_purple)


@pytest.mark.k8s
@pytest.mark.usefixtures("k8s_cluster")
def test_k8s_published_scenario(start_green, start_purple) -> None:
    _run("k8s", start_green, start_purple)
