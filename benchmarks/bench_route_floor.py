"""Correctness of the route reference agents by level: oracle, heuristic floor and null.

Runs each agent on ``--per-level`` seeded queries of every level (real Mininet, needs root)
and prints correct / safe counts with 95% Wilson intervals, plus the mean step count. The
queries are ``RouteApp().generate(per_level, seed, level=L)`` for L in 1..3, so a run is
reproducible from its seed. The agents are driven directly through the episode API (the
same loop as ``evaluator.runner.run_episode``, without an agent transport).

Usage: ``sudo .venv/bin/python benchmarks/bench_route_floor.py --per-level 20 --seed 501``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.route.app import RouteApp  # noqa: E402
from evaluator.app import EmulatorError  # noqa: E402
from evaluator.stats import wilson_interval  # noqa: E402
from evaluator.testing import play_reference  # noqa: E402
from evaluator.types import Query  # noqa: E402


def _play(app: RouteApp, query: Query, agent: str) -> tuple[bool, bool, int]:
    """One episode of ``agent`` on ``query``: (correct, safe, steps)."""
    verdict = play_reference(app, query, agent)
    return verdict.correct, verdict.safe, verdict.steps


def main() -> None:
    """Parse the arguments, run every agent on every level, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-level", type=int, default=20)
    parser.add_argument("--seed", type=int, default=501)
    parser.add_argument("--agents", default="oracle,heuristic,null")
    parser.add_argument("--levels", default="1,2,3")
    args = parser.parse_args()
    app = RouteApp()
    rows: list[dict[str, Any]] = []
    for level in (int(x) for x in args.levels.split(",")):
        queries = app.generate(args.per_level, args.seed, level=level)
        for agent in args.agents.split(","):
            correct = safe = steps = errors = 0
            started = time.perf_counter()
            misses: list[str] = []
            for query in queries:
                try:
                    ok, harmless, n = _play(app, query, agent)
                except EmulatorError as exc:
                    errors += 1
                    print(f"  emulator error L{level} {agent} #{query.index}: {exc}", flush=True)
                    continue
                correct += ok
                safe += harmless
                steps += n
                if not ok and agent == "oracle":
                    misses.append(f"#{query.index} {'+'.join(query.labels)}")
            n_ok = len(queries) - errors
            ci = wilson_interval(correct, n_ok) if n_ok else None
            rows.append(
                {
                    "level": level,
                    "agent": agent,
                    "n": n_ok,
                    "correct": correct,
                    "safe": safe,
                    "ci": ci,
                    "steps": steps / n_ok if n_ok else 0.0,
                    "errors": errors,
                    "s": time.perf_counter() - started,
                }  # fmt: skip
            )
            r = rows[-1]
            ci_text = f"[{ci.low:.2f}, {ci.high:.2f}]" if ci else "-"
            print(
                f"L{level} {agent:9s} correct {correct}/{n_ok} ({correct / max(n_ok, 1):.0%}) "
                f"{ci_text} safe {safe}/{n_ok} steps {r['steps']:.1f} "
                f"emulator errors {errors} ({r['s']:.0f} s)"
                + (f" misses: {', '.join(misses)}" if misses else ""),
                flush=True,
            )


if __name__ == "__main__":
    main()
