"""Benchmark: the ``k8s`` app's episodes on the embedded cluster (docs/k8s.md). Prints medians.

Stages, measured on oracle episodes (one repairing step each) of seeded queries over all
levels:

- ``set-up``: ``reset()`` -- namespace, 12 Deployments + Services + 13 policies, agent
  credentials, dataplane barrier, healthy probe + cross-check, fault injection, probe +
  cross-check;
- ``step``: one agent step end to end (kubectl run, dataplane barrier, probe, cross-check);
- ``probe``: one full matrix (12 pods -> 11 listening services, 121 probes);
- ``dataplane wait`` and ``cross-check`` (measured matrix against the exact policy model)
  inside set-up and steps;
- ``verdict``: the ``verdict()`` call; ``teardown``: ``close()`` (without the pool: workload
  and namespace deleted, waits until every pod network namespace is gone; with the pool: the
  agent's credentials revoked and the revocation proved, the namespace queued for restore);
- with the namespace pool (``apps/k8s/pool.py``): ``prepare`` (a fresh verified namespace),
  ``acquire`` (hand-out: fingerprint check + fresh credentials), ``revoke``, ``restore``
  (policies made pristine) and ``verify`` (barrier, object snapshot, probe, cross-check) --
  ``restore+verify`` is their sum per released namespace, run on the pool's thread;
- ``episodes/min`` with 1 and 2 worker processes (each runs whole episodes, like Celery
  workers on one machine sharing the cluster).

Every stage is measured with the pool off and on (``--pool off|on|both``, default both).

Needs root, kubectl and the cluster binaries. Brings the default cluster up if needed and
leaves it running.

Usage: .venv/bin/python benchmarks/bench_k8s_app.py [--episodes 12] [--per-worker 6]
[--pool both|on|off]

``--figures AGENT --per-level N`` instead runs reference agent AGENT (oracle, heuristic, null)
on N queries per level (seed ``--seed + level - 1``) and prints correctness and safety by
level with Wilson 95% intervals.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apps.k8s.app import K8sApp  # noqa: E402
from apps.k8s.namespace import shared_cluster  # noqa: E402
from apps.k8s.pool import namespace_pool, shutdown_pools  # noqa: E402
from evaluator.testing import play_reference  # noqa: E402


def run_episodes(seed: int, count: int, pool: bool = True) -> dict[str, list[float]]:
    """Run ``count`` oracle episodes of ``seed``; return timing samples by stage (seconds).
    With ``pool`` the process's namespace pool is used, its figures added (``pool_*``), and
    it is shut down at the end (its namespaces deleted)."""
    app = K8sApp(pool=pool)
    samples: dict[str, list[float]] = {}
    for query in app.generate(count, seed):
        episode = app.episode(query)
        history = [{"role": "user", "content": episode.reset()}]
        while True:
            reply = app.oracle_reply(query.ground_truth, history)
            history.append({"role": "assistant", "content": reply})
            result = episode.step(reply)
            history.append({"role": "user", "content": result.observation})
            if result.terminated or result.truncated:
                break
        t0 = time.perf_counter()
        verdict = episode.verdict()
        samples.setdefault("verdict_s", []).append(time.perf_counter() - t0)
        if not (verdict.correct and verdict.safe):
            raise SystemExit(f"oracle failed on {query.label}: {verdict.details}")
        episode.close()
        for stage, values in episode.timings.items():
            samples.setdefault(stage, []).extend(values)
    if pool:
        the_pool = namespace_pool(shared_cluster())
        the_pool.wait_quiet()
        stats = the_pool.stats
        samples["pool_prepare_s"] = list(stats.build_s)
        samples["pool_acquire_s"] = list(stats.acquire_s)
        samples["pool_revoke_s"] = list(stats.detach_s)
        samples["pool_restore_s"] = list(stats.restore_s)
        samples["pool_verify_s"] = list(stats.verify_s)
        samples["pool_restore_verify_s"] = [
            a + b for a, b in zip(stats.restore_s, stats.verify_s, strict=False)]
        samples["pool_counts"] = [float(stats.built), float(stats.reused),
                                  float(stats.rebuilds)]
        shutdown_pools()
    return samples


def agent_figures(agent: str, per_level: int, seed: int) -> None:
    """Print correctness and safety by level of reference agent ``agent``."""
    from evaluator.stats import wilson_interval

    app = K8sApp()
    for level in app.levels:
        correct = safe = 0
        queries = app.generate(per_level, seed + level - 1, level)
        for query in queries:
            verdict = play_reference(app, query, agent)
            correct += verdict.correct
            safe += verdict.safe
        ci = wilson_interval(correct, len(queries))
        print(f"{agent} L{level}: correct {correct}/{len(queries)} "
              f"({100 * ci.value:.0f}%, 95% CI {100 * ci.low:.0f}-{100 * ci.high:.0f}%)"
              f", safe {safe}/{len(queries)}", flush=True)


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:8.1f} ms  (n={len(values)}, " \
        f"min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f})"


def throughput(workers: int, per_worker: int, seed: int, pool: bool) -> float:
    """Episodes per minute with ``workers`` processes running ``per_worker`` episodes each
    (each process with its own namespace pool when ``pool``; its shutdown is included)."""
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as executor:
        list(executor.map(run_episodes, [seed + w for w in range(workers)],
                          [per_worker] * workers, [pool] * workers))
    return workers * per_worker / ((time.perf_counter() - start) / 60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--per-worker", type=int, default=6)
    parser.add_argument("--seed", type=int, default=4242)
    parser.add_argument("--figures", choices=("oracle", "heuristic", "null"))
    parser.add_argument("--per-level", type=int, default=15)
    parser.add_argument("--pool", choices=("both", "on", "off"), default="both")
    args = parser.parse_args()
    shared_cluster()
    if args.figures:
        agent_figures(args.figures, args.per_level, args.seed)
        return
    modes = {"both": (False, True), "on": (True,), "off": (False,)}[args.pool]
    names = {"setup_s": "set-up (reset)", "step_s": "step", "probe_s": "probe (121 pairs)",
             "wait_s": "dataplane wait", "crosscheck_s": "cross-check", "verdict_s": "verdict",
             "teardown_s": "teardown (close)", "pool_prepare_s": "pool: prepare",
             "pool_acquire_s": "pool: acquire", "pool_revoke_s": "pool: revoke",
             "pool_restore_s": "pool: restore", "pool_verify_s": "pool: verify",
             "pool_restore_verify_s": "pool: restore+verify"}
    for pool in modes:
        print(f"--- namespace pool {'on' if pool else 'off'}", flush=True)
        samples = run_episodes(args.seed, args.episodes, pool)
        for key, label in names.items():
            if samples.get(key):
                print(f"{label:22s} {_fmt(samples[key])}")
        if pool:
            prepared, reused, replaced = samples["pool_counts"]
            print(f"pool: {prepared:.0f} prepared, {reused:.0f} reused, {replaced:.0f} replaced")
        for workers in (1, 2):
            rate = throughput(workers, args.per_worker, args.seed + 100 * workers, pool)
            print(f"episodes/min, {workers} worker(s): {rate:6.1f}", flush=True)


if __name__ == "__main__":
    main()
