"""Benchmark of the route app's emulator costs (needs root and Mininet).

Prints medians, in seconds, for the 2x2 and 4x4 topologies (switches x hosts per switch):

* setup     -- claim a prefix, build and start the Mininet network, enable forwarding
* pingall   -- one full-mesh probe on a healthy network, and on a network with a fault
              (a lossy probe waits out its timeout twice)
* teardown  -- stop Mininet and remove every trace of the prefix
* reset by rebuild  -- teardown + setup
* reset by pool     -- a pooled network after an episode's distractors and faults: restore
              and verify the touched machines, flush learned state everywhere, check the
              root-namespace links, lease it again (``apps.route.pool``; docs/route.md);
              wall time and CPU time (this process and its children)
* episode   -- a whole oracle episode through ``run_episode`` (level-1 and level-2 queries)

Usage: ``sudo .venv/bin/python benchmarks/bench_route.py [--reps N]``
"""

from __future__ import annotations

import argparse
import resource
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.route.app import RouteApp  # noqa: E402
from apps.route.faults import with_prefix  # noqa: E402
from apps.route.network import RouteNetwork  # noqa: E402
from apps.route.pool import RoutePool  # noqa: E402
from apps.route.topology import RouteTopology  # noqa: E402
from evaluator.runner import run_episode  # noqa: E402
from evaluator.testing import ScriptedClient  # noqa: E402


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.3f}"


def _cpu_s() -> float:
    """CPU seconds used so far by this process and its waited-for children (user + system):
    on a machine shared with other jobs, the wall time of a reset grows with their load,
    its CPU time does not."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _inject(net: RouteNetwork, truth: dict) -> None:
    """Apply a query's distractors and faults, as an episode's reset does."""
    changes = [(d["machine"], d["command"]) for d in truth.get("distractors", [])]
    changes += [(f["machine"], c) for f in truth["faults"] for c in f["inject"]]
    for machine, command in changes:
        net.exec(
            net.topology.prefix + machine, shlex.split(with_prefix(command, net.topology.prefix))
        )


def bench_topology(switches: int, hosts: int, reps: int) -> None:
    setup, teardown, healthy, lossy, rebuild = [], [], [], [], []
    pool_reset, pool_cpu, touched = [], [], []
    app = RouteApp(switches=(switches, switches), hosts=(hosts, hosts))
    queries = [
        q for q in app.generate(reps * 4, seed=7, level=1) if not q.ground_truth.get("healthy")
    ]
    for rep in range(reps):
        net = RouteNetwork(RouteTopology(switches, hosts))
        net.start()
        setup.append(net.build_s)
        healthy.append(statistics.median([net.pingall().elapsed_s for _ in range(5)]))
        _inject(net, queries[rep].ground_truth)
        lossy.append(net.pingall().elapsed_s)
        started = time.perf_counter()
        net.stop()
        teardown.append(net.stop_s)
        again = RouteNetwork(RouteTopology(switches, hosts)).start()
        rebuild.append(time.perf_counter() - started)
        again.stop()
    pool = RoutePool(max_idle=1)
    net = pool.acquire(RouteTopology(switches, hosts))
    for rep in range(reps):
        # an episode's changes: its distractors and faults, then a pingall that fails
        _inject(net, queries[rep].ground_truth)
        net.pingall(attempts=1)
        touched.append(len(net.touched))
        started, cpu = time.perf_counter(), _cpu_s()
        pool.release(net)
        net = pool.acquire(RouteTopology(switches, hosts))
        pool_reset.append(time.perf_counter() - started)
        pool_cpu.append(_cpu_s() - cpu)
        assert net.pingall().lost == 0, "restored network is not healthy"
    pool.release(net)
    pool.shutdown()
    assert pool.stats.rebuilds == 0, pool.stats.failures
    print(
        f"{switches}x{hosts}: setup {_median(setup)} s | pingall healthy {_median(healthy)} s, "
        f"with a fault {_median(lossy)} s | teardown {_median(teardown)} s | "
        f"reset by rebuild {_median(rebuild)} s | reset by pool (restore + verify of "
        f"{statistics.median(touched):g} touched machines) {_median(pool_reset)} s "
        f"(max {max(pool_reset):.3f} s; CPU {_median(pool_cpu)} s; "
        f"rebuilds {pool.stats.rebuilds}/{reps})"
    )


def bench_episodes(reps: int) -> None:
    app = RouteApp()
    for level in (1, 2):
        walls, steps = [], []
        for query in app.generate(reps, seed=11, level=level):
            truth = query.ground_truth
            oracle = ScriptedClient(lambda m, _e, t=truth: app.oracle_reply(t, m))  # type: ignore[misc]
            result = run_episode(app, query, oracle)
            assert result.correct and result.safe
            walls.append(result.wall_s)
            steps.append(result.steps)
        print(
            f"oracle episode, level {level}, S,H in 2..4: median wall {_median(walls)} s, "
            f"median steps {statistics.median(steps)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    for switches, hosts in ((2, 2), (4, 4)):
        bench_topology(switches, hosts, args.reps)
    bench_episodes(args.reps)


if __name__ == "__main__":
    main()
