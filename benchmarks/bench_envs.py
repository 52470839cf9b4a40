"""Benchmark: resets per second and steps per second of the Gymnasium environments.

For each app: ``--resets`` seeded resets of ``netarena/<app>-v1`` (each one also tears the
previous episode down: MALT draws a query; route builds a Mininet network and injects the
faults; k8s creates a namespace, checks it and injects the faults), then steps:

* MALT: the oracle's code (a sandboxed run and the judge) and a reply without code, each
  after its own reset (one step ends a MALT episode; the reset is not in the step time);
* route: read-only diagnostic commands (``ip route show`` on r0) after one reset;
* k8s: read-only diagnostic commands (``kubectl get networkpolicy``) after one reset.

Prints, per app and kind, the count, the median seconds and the rate (1 / median).

Usage: .venv/bin/python benchmarks/bench_envs.py [--apps APP,...] [--resets 5]
       [--steps 20] [--seed 0]
(route and k8s need root, Mininet and the embedded cluster.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gymnasium as gym  # noqa: E402

import training  # noqa: E402
from evaluator.registry import app_ids  # noqa: E402
from training.gym_envs import CANONICAL_NAMES, NetArenaEnv  # noqa: E402

_DIAGNOSTIC = {
    "route": '{"machine": "r0", "command": "ip route show"}',
    "k8s": f"```\nkubectl get networkpolicy -n {CANONICAL_NAMES['namespace']}\n```",
}


def _row(app: str, kind: str, seconds: list[float]) -> str:
    median = statistics.median(seconds)
    return f"{app:6} {kind:22} {len(seconds):5d} {median:10.4f} {1 / median:10.2f}"


def bench(app_id: str, resets: int, steps: int, seed: int) -> list[str]:
    """Time resets and steps of one app's environment; return table rows."""
    env = gym.make(training.ENV_IDS[app_id], level=1)
    inner = env.unwrapped
    assert isinstance(inner, NetArenaEnv)
    rows = []
    try:
        reset_s = []
        for i in range(resets):
            t0 = time.perf_counter()
            env.reset(seed=seed + i)
            reset_s.append(time.perf_counter() - t0)
        rows.append(_row(app_id, "reset", reset_s))
        if app_id == "malt":
            oracle_s, invalid_s = [], []
            for i in range(steps):
                observation, _ = env.reset(seed=seed + i)
                assert inner.query is not None
                reply = inner.app.oracle_reply(
                    inner.query.ground_truth, [{"role": "user", "content": observation}]
                )
                t0 = time.perf_counter()
                env.step(reply)
                oracle_s.append(time.perf_counter() - t0)
                env.reset(seed=seed + i)
                t0 = time.perf_counter()
                env.step("no code")
                invalid_s.append(time.perf_counter() - t0)
            rows.append(_row(app_id, "step (oracle code)", oracle_s))
            rows.append(_row(app_id, "step (no code)", invalid_s))
        else:
            step_s: list[float] = []
            env.reset(seed=seed)
            # a read-only command where the app has one here, else its null reply
            reply = _DIAGNOSTIC.get(app_id) or inner.app.null_reply([])
            while len(step_s) < steps:
                t0 = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(reply)
                step_s.append(time.perf_counter() - t0)
                if terminated or truncated:
                    env.reset(seed=seed + len(step_s))
            rows.append(_row(app_id, "step (read-only)", step_s))
    finally:
        env.close()
    return rows


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", default=",".join(app_ids()))
    parser.add_argument("--resets", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{'app':6} {'kind':22} {'count':>5} {'median_s':>10} {'per_s':>10}")
    for app_id in args.apps.split(","):
        for row in bench(app_id.strip(), args.resets, args.steps, args.seed):
            print(row, flush=True)


if __name__ == "__main__":
    main()
