"""Benchmark: median cost per MALT query of each evaluation stage.

Stages:

* drafting (:func:`apps.malt.queries.draft`: the query's port capacities, operands, wording and
  program), in microseconds, over ``--queries`` queries, each drafted once (a fresh query
  never hits a cache that depends on its capacities);
* ground truth alone (the program executed on the copy-on-write view) and the whole
  generation of a query (draft + ground truth + prompt);
* sandboxed execution of the oracle's code (wall time of ``run_function`` and the in-sandbox
  ``exec_s``) for the first ``--judged`` queries;
* the judge (correctness + safety + changed state + blast radius) of those oracle answers,
  for answers that include a graph and for value answers separately, since graph answers
  parse and check the whole 6,133-node topology. Each answer is judged right after its run,
  as :class:`apps.malt.episode.MaltEpisode` does (the "first" figure: the query's caches are as
  warm as in an episode, the returned value freshly decoded), then ``--rounds - 1`` more
  times (caches of that query warm).

With ``--no-sandbox`` the oracle's answers are made in-process exactly as the sandbox returns
them (the expected topology as ``node_link_data`` after a JSON round trip), so the judge is
still measured. Machines are shared: compare medians taken under similar ``uptime`` load.

Usage: .venv/bin/python benchmarks/bench_malt.py [--queries 300] [--judged 60] [--rounds 5]
       [--seed 0] [--no-sandbox]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import networkx as nx  # noqa: E402

from apps.malt.app import MaltApp  # noqa: E402
from apps.malt.fabric import port_capacities, query_graph  # noqa: E402
from apps.malt.prompt import SANDBOX_PREAMBLE  # noqa: E402
from apps.malt.queries import draft, ground_truth  # noqa: E402
from apps.malt.replies import extract_code  # noqa: E402
from apps.malt.scoring import judge  # noqa: E402
from apps.malt.topology import load_graph  # noqa: E402


def _timed(call: Any, wall: list[float], cpu: list[float]) -> Any:
    """Run ``call()``; append its wall time and this process's CPU time (seconds)."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = call()
    cpu.append(time.process_time() - c0)
    wall.append(time.perf_counter() - w0)
    return out


def _median(values: list[float], scale: float) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values) * scale:.3f}"


def _oracle_value_in_process(truth: dict[str, Any]) -> Any:
    """The oracle's return value as the sandbox would hand it back (JSON-decoded)."""
    _, view = ground_truth(truth["program"], truth["graph_key"])
    graph = json.loads(
        json.dumps({"__networkx__": nx.node_link_data(view.to_networkx(), edges="links")})
    )
    if truth["answer_kind"] == "graph":
        return {"answer": graph}
    value: dict[str, Any] = {"answer": truth["expected"]}
    if truth["changes_topology"]:
        value["updated_graph"] = graph
    return value


def main() -> None:
    """Run the benchmark and print a table of medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300, help="queries drafted/generated")
    parser.add_argument("--judged", type=int, default=60, help="queries run and judged")
    parser.add_argument("--rounds", type=int, default=5, help="judgements per answer")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-sandbox", action="store_true", help="oracle answers in-process")
    args = parser.parse_args()

    started = time.perf_counter()
    load_graph()
    load_s = time.perf_counter() - started
    app = MaltApp()
    app.generate(1, seed=args.seed + 1)  # warm the per-process caches (operand index)

    rows: dict[str, list[float]] = {
        k: []
        for k in (
            "draft",
            "capacities",
            "generate",
            "ground_truth",
            "sandbox_wall",
            "exec",
            "overhead",
        )
    }
    cpu: dict[str, list[float]] = {
        k: [] for k in ("draft", "capacities", "judge_graph", "judge_graph_first")
    }
    queries = []
    for index in range(args.queries):
        _timed(lambda i=index: draft(args.seed, i, app.version), rows["draft"], cpu["draft"])
    for index in range(args.queries):  # the capacity draw alone, on keys not drawn yet
        key = f"bench/{args.seed}/{index}"
        _timed(lambda k=key: port_capacities(k), rows["capacities"], cpu["capacities"])
    for index in range(args.queries):
        t0 = time.perf_counter()
        query = app._query(args.seed + 2, index)
        rows["generate"].append(time.perf_counter() - t0)
        queries.append(query)
        t0 = time.perf_counter()
        ground_truth(query.ground_truth["program"], query.ground_truth["graph_key"])
        rows["ground_truth"].append(time.perf_counter() - t0)

    judge_graph: list[float] = []
    judge_graph_first: list[float] = []
    judge_value: list[float] = []
    for query in queries[: args.judged]:
        truth = query.ground_truth
        if args.no_sandbox:
            value = _oracle_value_in_process(truth)
        else:
            from evaluator.sandbox import run_function

            code = extract_code(app.oracle_reply(truth, [])).code
            assert code is not None
            t0 = time.perf_counter()
            result = run_function(
                code, "process_graph", query_graph(truth["graph_key"]), preamble=SANDBOX_PREAMBLE
            )
            run_s = time.perf_counter() - t0
            if not result.ok:
                raise SystemExit(f"oracle failed in the sandbox: {result.failure} {result.error}")
            rows["sandbox_wall"].append(run_s)
            rows["exec"].append(result.exec_s)
            rows["overhead"].append(run_s - result.exec_s)
            value = result.value
        # judged right after the run, as MaltEpisode.step does; then --rounds - 1 more times
        has_graph = truth["answer_kind"] == "graph" or truth["changes_topology"]
        for round_ in range(args.rounds):
            wall: list[float] = []
            spent: list[float] = []
            verdict = _timed(lambda v=value, t=truth: judge(t, v, 0.0), wall, spent)
            if not (verdict.correct and verdict.safe):
                raise SystemExit(f"oracle judged wrong on {query.label}: {verdict.details}")
            (judge_graph if has_graph else judge_value).append(wall[0])
            if has_graph:
                cpu["judge_graph"].append(spent[0])
            if has_graph and round_ == 0:
                judge_graph_first.append(wall[0])
                cpu["judge_graph_first"].append(spent[0])
        del value

    load = os.getloadavg()
    print(
        f"MALT benchmark: {args.queries} queries drafted and generated, "
        f"{min(args.judged, args.queries)} judged x {args.rounds} "
        f"({'in-process answers' if args.no_sandbox else 'sandbox'}), "
        f"seed {args.seed}, graph load {load_s * 1000:.0f} ms, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(f"{'stage':<48}{'median':>10} {'unit':<5}{'n':>6}   (wall; cpu = process CPU time)")
    table = [
        ("drafting per query (capacities, operands, text)", rows["draft"], 1e6, "us"),
        ("  cpu", cpu["draft"], 1e6, "us"),
        ("  of which the port capacity draw", rows["capacities"], 1e6, "us"),
        ("  cpu", cpu["capacities"], 1e6, "us"),
        ("ground truth (program on overlay view)", rows["ground_truth"], 1e3, "ms"),
        ("generation (draft + ground truth + prompt)", rows["generate"], 1e3, "ms"),
        ("sandbox run_function wall (oracle code)", rows["sandbox_wall"], 1e3, "ms"),
        ("  of which agent code exec_s", rows["exec"], 1e3, "ms"),
        ("  of which sandbox start/transfer", rows["overhead"], 1e3, "ms"),
        ("judge per graph answer, first after the run", judge_graph_first, 1e3, "ms"),
        ("  cpu", cpu["judge_graph_first"], 1e3, "ms"),
        ("judge per graph answer, all rounds", judge_graph, 1e3, "ms"),
        ("  cpu", cpu["judge_graph"], 1e3, "ms"),
        ("judge per value-only answer", judge_value, 1e3, "ms"),
    ]
    for name, values, scale, unit in table:
        print(f"{name:<48}{_median(values, scale):>10} {unit:<5}{len(values):>6}")


if __name__ == "__main__":
    main()
