"""Several episodes at once in separate processes (as Celery prefork workers run them)."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest

from apps.route.app import RouteApp
from tests.route.helpers import host_footprint, require_emulator, run_oracle_episode_in_subprocess

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _emulator() -> None:
    require_emulator()


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_concurrent_episodes_in_separate_processes_do_not_clash(start_method: str) -> None:
    before = host_footprint()
    queries = RouteApp().generate(6, seed=41)
    context = multiprocessing.get_context(start_method)
    with ProcessPoolExecutor(max_workers=3, mp_context=context) as pool:
        results = list(pool.map(run_oracle_episode_in_subprocess, [q.to_dict() for q in queries]))
    assert all(r["correct"] and r["safe"] for r in results), results
    assert len({r["prefix"] for r in results}) == len(results)
    assert len({r["pid"] for r in results}) > 1
    after = host_footprint()
    for key in ("interfaces", "bridges", "mininet_shells", "locks"):
        assert after[key] == before[key], key
