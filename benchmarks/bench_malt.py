"""Benchmark: median cost per MALT query of each evaluation stage.

Stages: query generation (operands + ground truth + prompt), ground truth alone (program
executed on the copy-on-write view), sandboxed execution of the oracle's code (wall time of
``run_function`` and the in-sandbox ``exec_s``), and the judge (correctness + safety). The
judge is reported for graph answers and for value answers separately, since graph answers
parse and check the whole 6,133-node topology.

Usage: .venv/bin/python benchmarks/bench_malt.py [--queries 60] [--seed 0] [--no-sandbox]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apps.malt.app import MaltApp  # noqa: E402
from apps.malt.prompt import SANDBOX_PREAMBLE  # noqa: E402
from apps.malt.queries import ground_truth, query_graph  # noqa: E402
from apps.malt.replies import extract_code  # noqa: E402
from apps.malt.scoring import judge  # noqa: E402
from apps.malt.topology import load_graph  # noqa: E402


def _ms(values: list[float]) -> str:
    if not values:
        return "      -"
    return f"{statistics.median(values) * 1000:9.2f}"


def main() -> None:
    """Run the benchmark and print a table of medians (milliseconds)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-sandbox", action="store_true", help="skip sandboxed execution")
    args = parser.parse_args()

    started = time.perf_counter()
    load_graph()
    load_s = time.perf_counter() - started
    app = MaltApp()
    app.generate(1, seed=args.seed + 1)  # warm caches (operand index)

    rows: dict[str, list[float]] = {
        k: [] for k in ("generate", "ground_truth", "sandbox_wall", "exec", "overhead")
    }
    judge_graph: list[float] = []
    judge_value: list[float] = []
    queries = []
    for index in range(args.queries):
        t0 = time.perf_counter()
        query = app._query(args.seed, index)
        rows["generate"].append(time.perf_counter() - t0)
        queries.append(query)
        t0 = time.perf_counter()
        ground_truth(query.ground_truth["program"], query.ground_truth["graph_key"])
        rows["ground_truth"].append(time.perf_counter() - t0)

    if not args.no_sandbox:
        from evaluator.sandbox import run_function

        for query in queries:
            code = extract_code(app.oracle_reply(query.ground_truth, [])).code
            assert code is not None
            t0 = time.perf_counter()
            result = run_function(
                code,
                "process_graph",
                query_graph(query.ground_truth["graph_key"]),
                preamble=SANDBOX_PREAMBLE,
            )
            wall = time.perf_counter() - t0
            if not result.ok:
                raise SystemExit(f"oracle failed in the sandbox: {result.failure} {result.error}")
            rows["sandbox_wall"].append(wall)
            rows["exec"].append(result.exec_s)
            rows["overhead"].append(wall - result.exec_s)
            t0 = time.perf_counter()
            verdict = judge(query.ground_truth, result.value, result.exec_s)
            elapsed = time.perf_counter() - t0
            if not (verdict.correct and verdict.safe):
                raise SystemExit(f"oracle judged wrong on {query.label}: {verdict.details}")
            kind = query.ground_truth["answer_kind"]
            (
                judge_graph
                if kind == "graph" or query.ground_truth["changes_topology"]
                else judge_value
            ).append(elapsed)

    print(
        f"MALT benchmark: {args.queries} queries, seed {args.seed}, "
        f"graph load {load_s * 1000:.0f} ms"
    )
    print(f"{'stage':<44}{'median ms':>10}{'n':>6}")
    table = [
        ("generation (operands + ground truth + prompt)", rows["generate"]),
        ("ground truth (program on overlay view)", rows["ground_truth"]),
        ("sandbox run_function wall (oracle code)", rows["sandbox_wall"]),
        ("  of which agent code exec_s", rows["exec"]),
        ("  of which sandbox start/transfer", rows["overhead"]),
        ("judge: graph returned (correct + safety)", judge_graph),
        ("judge: value only (correct)", judge_value),
    ]
    for name, values in table:
        print(f"{name:<44}{_ms(values):>10}{len(values):>6}")


if __name__ == "__main__":
    main()
