"""Several episodes at once in separate processes (as Celery prefork workers run them)."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest

from apps.route.app import RouteApp
from tests.apps.route.helpers import (
    host_footprint,
    require_emulator,
    run_oracle_episode_in_subprocess,
)

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


def test_a_killed_episode_process_is_cleaned_up_without_touching_live_ones() -> None:
    from apps.route.network import (
        RouteNetwork,
        cleanup_stale_prefixes,
        list_interfaces,
        node_shell_pids,
    )
    from apps.route.topology import RouteTopology
    from tests.apps.route.helpers import start_network_and_hang

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=start_network_and_hang, args=(queue,))
    child.start()
    try:
        dead_prefix = queue.get(timeout=60)
    finally:
        child.kill()
        child.join()
    # the crash left the bridges behind (node shells die with their pty, and so do the
    # namespaces and veths; the bridges live in the host namespace)
    assert any(i.startswith(dead_prefix) for i in list_interfaces())
    # the next network's start cleans stale prefixes (their lock died with the process)...
    with RouteNetwork(RouteTopology(2, 2)) as live:
        assert not any(i.startswith(dead_prefix) for i in list_interfaces())
        assert node_shell_pids(dead_prefix) == []
        # ...and never a live network, whose lock is held
        assert cleanup_stale_prefixes() == []
        assert live.pingall().lost == 0
        assert node_shell_pids(live.topology.prefix)
