"""The route green agent on Mininet: a canceled assessment leaves no network behind (no
interface or node shell with an episode prefix). The oracle and the null agent on NetArena's
published route config are in test_published_scenarios.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from apps.route.pool import POOL_ENV
from evaluator.green.assessment import StoppableClient
from tests.apps.route.helpers import host_footprint, require_emulator
from tests.evaluator.green.conftest import (
    Outcome,
    assess,
    cancel,
    wait_until,
)
from tests.evaluator.green.netarena_facts import PUBLISHED_SCENARIO_CONFIGS

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.slow]

#: NetArena's published scenario config, verbatim, shrunk to two level-1 queries by two keys of
#: ours (the full count, 30 queries, is checked without episodes in test_assessment.py).
CONFIG: dict[str, Any] = {
    **PUBLISHED_SCENARIO_CONFIGS["route"],
    "queries_per_level": 2,
    "complexity_level": ["level1"],
}


@pytest.fixture(autouse=True)
def _emulator(monkeypatch) -> None:
    require_emulator()
    monkeypatch.delenv(POOL_ENV, raising=False)  # a pooled network would stay up by design


def _route_footprint(prefixes: list[str]) -> list[str]:
    """Interfaces and Mininet node shells on this host carrying one of ``prefixes``."""
    found = host_footprint()
    names = [str(i) for i in found["interfaces"]]  # type: ignore[attr-defined]
    shells = []
    for pid in found["mininet_shells"]:  # type: ignore[attr-defined]
        try:
            shells.append(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
        except OSError:
            continue  # gone meanwhile
    return [x for x in names + shells for p in prefixes if p in x]


def test_cancel_mid_run_leaves_no_network_behind(start_green, start_purple, monkeypatch) -> None:
    """Other processes may run Mininet at the same time, so only the networks of this
    assessment's episodes (their prefixes, recorded as each episode starts) are checked."""
    prefixes: list[str] = []
    started = StoppableClient.episode_started

    def record(self: StoppableClient, instance_names: dict[str, str]) -> None:
        prefixes.append(instance_names["prefix"])
        started(self, instance_names)

    monkeypatch.setattr(StoppableClient, "episode_started", record)
    green = start_green("route")
    url = start_purple("oracle", "route", delay_s=0.3)
    seen: dict[str, Any] = {}

    async def cancel_after_first_query(client: Any, outcome: Outcome) -> None:
        if "task" not in seen and any("Query 1/" in s for s in outcome.statuses):
            for _ in range(100):  # until the second episode's network is up
                if len(prefixes) > 1 and _route_footprint(prefixes[1:]):
                    break
                await asyncio.sleep(0.1)
            seen["live"] = _route_footprint(prefixes[1:])
            seen["task"] = await cancel(client, outcome.task_id)

    config = {"queries_per_level": 3, "complexity_level": ["level1"], "seed": 4}
    outcome = assess(
        green.url, {"participants": {"agent": url}, "config": config},
        on_event=cancel_after_first_query,
    )
    assert seen["task"].status.state.value == "canceled"
    assert outcome.state == "canceled" and 1 <= len(outcome.queries) < 3
    assert len(prefixes) == 2 and seen["live"], "the second episode was running when canceled"
    assert wait_until(lambda: green.executor.running == 0, timeout_s=60)
    assert _route_footprint(prefixes) == []
