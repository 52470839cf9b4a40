"""Benchmark: a full evaluation round, measured end to end.

The served ``oracle`` reference agent (``python -m evaluator.reference``, http-json, its own
process) answers every query of every app; the evaluator plays ``--queries`` seeded queries
per app through the real episodes (MALT sandbox, Mininet, the embedded Kubernetes cluster)
with ``evaluator.evaluation.evaluate_agent``, once per worker count in ``--workers``
(episodes played at once). For each app and worker count it prints:

* episodes per minute (episodes / wall time of that app's run);
* our time per episode, median, split into set-up (emulator build and fault injection:
  route and k8s ``details.setup_s``), agent (the evaluator's clock around each HTTP exchange,
  ``agent_s``), work (sandbox run for MALT, commands, probes and verdicts for route and k8s:
  the rest of the episode's wall time) and storage (encoding the stored episode record:
  ``EpisodeResult.to_dict`` to JSON bytes; the database write itself is measured by
  ``bench_site.py``);
* the wall time of the whole round (all apps, one after the other).

Targets on 2 cores: MALT >= 300 episodes/min, route and k8s >= 30/min each.
Needs root, bwrap, Mininet and the k8s binaries, like the apps' episodes.

Usage: .venv/bin/python benchmarks/bench_round.py [--apps malt,route,k8s] [--queries 100]
       [--workers 1,2] [--seed 0]
(run it with the venv's real interpreter, e.g. /work/main/.venv/bin/python: the MALT sandbox
binds the interpreter's real path.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evaluator.agents import LOOPBACK_NETWORKS, make_client  # noqa: E402
from evaluator.evaluation import evaluate_agent  # noqa: E402
from evaluator.oracle_vault import OracleVault  # noqa: E402
from evaluator.registry import app_ids  # noqa: E402
from evaluator.types import EpisodeResult  # noqa: E402

TARGET_PER_MIN = {"malt": 300.0, "route": 30.0, "k8s": 30.0}


def serve_oracle(apps: list[str], vault: Path) -> tuple[subprocess.Popen[str], str]:
    """Start the oracle reference agent for ``apps`` on a free port; return (process, url).

    Raises:
        RuntimeError: the server did not announce its URL within 60 s.
    """
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "evaluator.reference",
            "--agent",
            "oracle",
            "--app",
            ",".join(apps),
            "--protocol",
            "http-json",
            "--port",
            "0",
            "--vault",
            str(vault),
        ],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        match = re.search(r" at (http://\S+)", line)
        if match:
            return process, match.group(1)
        if process.poll() is not None:
            break
    process.kill()
    raise RuntimeError("the oracle server did not start")


def split(result: EpisodeResult) -> dict[str, float]:
    """Our time of one episode in seconds: set-up, agent, work, storage."""
    setup_s = float(result.details.get("setup_s") or 0.0)
    t0 = time.perf_counter()
    json.dumps(result.to_dict()).encode()
    storage_s = time.perf_counter() - t0
    work_s = max(0.0, result.wall_s - setup_s - result.agent_s)
    return {"setup": setup_s, "agent": result.agent_s, "work": work_s, "storage": storage_s}


def _ms(values: list[float]) -> str:
    return f"{1000 * statistics.median(values):8.1f}" if values else "       -"


def main() -> None:
    """Parse arguments, run the round once per worker count, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--apps", default="", help="comma-separated app ids (default: all)")
    parser.add_argument("--queries", type=int, default=100, help="queries per app")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    apps = [a for a in args.apps.split(",") if a] or app_ids()
    workers = [int(w) for w in args.workers.split(",") if w]
    vault_dir = Path(tempfile.mkdtemp(prefix="bench-round-vault-"))
    os.chmod(vault_dir, 0o700)
    server, url = serve_oracle(apps, vault_dir)
    client = make_client("http-json", url, allowed_networks=LOOPBACK_NETWORKS)
    vault = OracleVault(vault_dir)
    print(f"round: {args.queries} queries per app, seed {args.seed}, oracle over http-json")
    print(
        f"{'app':<6} {'workers':>7} {'episodes/min':>12} {'target':>7} {'correct':>8} "
        f"{'setup ms':>9} {'agent ms':>9} {'work ms':>8} {'store ms':>9}  (medians per episode)"
    )
    try:
        for count in workers:
            round_t0 = time.perf_counter()
            for app_id in apps:
                t0 = time.perf_counter()
                document = evaluate_agent(
                    client,
                    [app_id],
                    queries_per_app=args.queries,
                    seed=args.seed,
                    vault=vault,
                    concurrency=count,
                )
                wall_s = time.perf_counter() - t0
                results = [EpisodeResult.from_dict(e) for e in document["episodes"]]
                parts = [split(r) for r in results if r.scored]
                correct = sum(r.correct and r.safe for r in results)
                rate = 60.0 * len(results) / wall_s
                target = TARGET_PER_MIN.get(app_id)
                print(
                    f"{app_id:<6} {count:>7} {rate:>12.1f} {target or 0:>7.0f} "
                    f"{correct:>4}/{len(results):<3} "
                    f"{_ms([p['setup'] for p in parts]):>9} {_ms([p['agent'] for p in parts]):>9} "
                    f"{_ms([p['work'] for p in parts]):>8} "
                    f"{_ms([p['storage'] for p in parts]):>9}",
                    flush=True,
                )
            print(f"whole round with {count} worker(s): {time.perf_counter() - round_t0:.1f} s")
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
