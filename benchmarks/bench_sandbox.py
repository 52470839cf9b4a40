"""Benchmark: cost of one sandboxed agent call (evaluator.sandbox.run_function).

Measures, over ``--runs`` calls each (median and 90th percentile, milliseconds of wall time seen
by the caller, process start included), on the cold path (a fresh bubblewrap sandbox and
interpreter per call, ``NETARENA_SANDBOX_WARM=0``) and on the warm path (a fresh process forked
per call from the worker's zygote, docs/sandbox.md), the MALT preamble
(``import networkx as nx``) in every call:

* ``empty``        - integer argument, returns it: process start + protocol;
* ``graph-in``     - a MALT-sized DiGraph argument (5,493 nodes / 6,424 edges, the shape of
                     the MALT example topology), returns its node count;
                     the graph is pickled by the parent and unpickled by the child;
* ``graph-in-shared`` - the same as a ``SharedArgument`` (for a graph shared by many calls): pickled
                     once; on the warm path the zygote holds the graph and each call gets it
                     by fork;
* ``graph-roundtrip`` - shared graph in, the graph returned (node-link JSON back to the parent).

Usage: ``.venv/bin/python benchmarks/bench_sandbox.py [--runs 15] [--mode cold|warm|both]``
(needs root and bwrap). Run calls alternate between the modes case by case, so load from
other jobs hits both alike.

``--paired N`` instead compares, pair by pair (N pairs per shape, alternating), one MALT reply
judged from the sandbox against NetArena's reference way of running it in-process (``exec``
the code, call it on ``copy.deepcopy(graph)``; unsafe, the yardstick), on the graph above
pickled per call as the MALT app sends it, for three shapes of agent code: ``trivial``
(returns a constant), ``full-scan`` (reads every node and edge, returns a count) and
``graph-returning`` (changes one port's capacity, returns ``{"answer": G}``). The sandbox side
is ``run_function(..., graph_diffs=True)`` plus reading the returned graph into the judge's
form (``apps.malt.checks.parse_graph``: the change applied to the parent's copy); the
``graph-returning (whole)`` row is the same without diffs (node-link JSON, parsed whole). The
ratio is reference / sandbox per pair (above 1: the sandbox is faster); the median is printed.
"""

from __future__ import annotations

import argparse
import copy
import os
import pickle
import statistics
import sys
import time
from pathlib import Path

import networkx as nx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.sandbox import SandboxLimits, SharedArgument, run_function  # noqa: E402


def malt_shaped_graph() -> nx.DiGraph:
    """A DiGraph with the node/edge counts and attribute shapes of the MALT topology."""
    g = nx.DiGraph()

    def node(name: str, kind: str, **attrs: object) -> None:
        g.add_node(name, name=name, type=[kind], **attrs)

    def contains(a: str, z: str) -> None:
        g.add_edge(a, z, type="RK_CONTAINS")

    node("ju1", "EK_JUPITER")
    for s in range(1, 5):
        sb, spine, srack, sdom = f"ju1.a{s}", f"ju1.s{s}", f"ju1.s{s}rack", f"ju1.s{s}.dom"
        node(sb, "EK_SUPERBLOCK")
        node(spine, "EK_SPINEBLOCK")
        node(srack, "EK_RACK")
        node(sdom, "EK_CONTROL_DOMAIN")
        node(f"ju1.a{s}.dom", "EK_CONTROL_DOMAIN")
        node(f"ju1.a{s}.m0rack", "EK_RACK")  # placeholder so racks total 20 (4 + 16)
        contains("ju1", sb)
        contains("ju1", spine)
        switches = [(spine, f"ju1.s{s}.s{s}c{c}", srack, sdom, 2) for c in range(1, 17)]
        for m in range(1, 5):
            agg = f"ju1.a{s}.m{m}"
            node(agg, "EK_AGG_BLOCK")
            contains(sb, agg)
            rack = f"ju1.a{s}.m{m}rack"
            node(rack, "EK_RACK")
            switches += [
                (agg, f"{agg}.s{c}c{c}", rack, f"ju1.a{s}.dom", 1 + c % 3) for c in range(1, 17)
            ]
        g.remove_node(f"ju1.a{s}.m0rack")
        for parent, sw, rack, dom, stage in switches:
            node(sw, "EK_PACKET_SWITCH", switch_loc={"stage": float(stage)})
            g.nodes[sw]["type"] = ["EK_PACKET_SWITCH", "EK_CHASSIS", "EK_CONTROL_POINT"]
            contains(parent, sw)
            contains(rack, sw)
            contains(dom, sw)
            g.add_edge(sw, sw, type="RK_CONTROLS")
            for p in range(1, 17):
                port = f"{sw}.p{p}"
                node(port, "EK_PORT", physical_capacity_bps=1e9)
                contains(sw, port)
    return g


def measure(label: str, runs: int, code: str, argument: object) -> list[float]:
    """Wall seconds of ``runs`` calls (a failed call aborts the benchmark)."""
    limits = SandboxLimits(wall_timeout_s=60.0, cpu_time_s=60.0)
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        result = run_function(
            code, "process_graph", argument, limits=limits, preamble="import networkx as nx"
        )
        walls.append(time.perf_counter() - t0)
        if not result.ok:
            raise SystemExit(f"{label}: {result.failure}: {result.error}")
    return walls


def _line(label: str, mode: str, walls: list[float]) -> str:
    walls = sorted(walls)
    p90 = walls[min(len(walls) - 1, int(0.9 * len(walls)))]
    return (
        f"{label:16s} {mode:4s} median {statistics.median(walls) * 1000:7.1f} ms   "
        f"p90 {p90 * 1000:7.1f} ms"
    )


PAIRED_SHAPES = {
    "trivial": "def process_graph(G):\n    return {'answer': 1}\n",
    "full-scan": (
        "def process_graph(G):\n"
        "    ports = sum(1 for _, a in G.nodes(data=True) if 'EK_PORT' in a['type'])\n"
        "    links = sum(1 for _, _, a in G.edges(data=True) if a['type'] == 'RK_CONTAINS')\n"
        "    return {'answer': ports + links}\n"
    ),
    "graph-returning": (
        "def process_graph(G):\n"
        "    G.nodes['ju1.a1.m1.s1c1.p1']['physical_capacity_bps'] = 4e9\n"
        "    return {'answer': G}\n"
    ),
}


def _in_process(code: str, graph: nx.DiGraph) -> object:
    """NetArena's reference way: exec the code here and call it on a deep copy."""
    namespace: dict[str, object] = {"nx": nx}
    exec(compile(code, "<agent>", "exec"), namespace)  # noqa: S102 - the yardstick
    function = namespace["process_graph"]
    assert callable(function)
    return function(copy.deepcopy(graph))


def _sandboxed(code: str, graph: nx.DiGraph, base: object, diffs: bool) -> object:
    """One sandboxed call as the MALT app makes it, the returned graph read for the judge."""
    from apps.malt.checks import NormalizedGraph, is_graph_shaped, parse_graph

    result = run_function(
        code, "process_graph", graph, limits=SandboxLimits(wall_timeout_s=60.0,
                                                           cpu_time_s=60.0),
        preamble="import networkx as nx", graph_diffs=diffs,
    )
    if not result.ok:
        raise SystemExit(f"{result.failure}: {result.error}")
    answer = result.value["answer"]
    if is_graph_shaped(answer):
        assert isinstance(base, NormalizedGraph)
        return parse_graph(answer, None, base)
    return answer


def paired(pairs: int) -> None:
    """Print the paired ratio (reference / sandbox) per shape; see the module docstring."""
    from apps.malt.checks import parse_graph

    graph = malt_shaped_graph()
    base = parse_graph({"__networkx__": nx.node_link_data(graph, edges="links")})
    os.environ["NETARENA_SANDBOX_WARM"] = "1"
    print(f"graph: {graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges; "
          f"pairs per shape: {pairs}; warm path; load average {os.getloadavg()[0]:.1f}")
    print(f"{'shape':26s} {'sandbox ms':>11s} {'reference ms':>13s} {'ratio':>6s} "
          f"{'ratio p10-p90':>14s}")
    rows = [(name, code, True) for name, code in PAIRED_SHAPES.items()]
    rows.append(("graph-returning (whole)", PAIRED_SHAPES["graph-returning"], False))
    for name, code, diffs in rows:
        _sandboxed(code, graph, base, diffs)  # warm caches and the zygote
        _in_process(code, graph)
        ours, theirs, ratios = [], [], []
        for _ in range(pairs):
            t0 = time.perf_counter()
            _sandboxed(code, graph, base, diffs)
            t1 = time.perf_counter()
            _in_process(code, graph)
            t2 = time.perf_counter()
            ours.append(t1 - t0)
            theirs.append(t2 - t1)
            ratios.append((t2 - t1) / (t1 - t0))
        ratios.sort()
        print(f"{name:26s} {statistics.median(ours) * 1000:11.1f} "
              f"{statistics.median(theirs) * 1000:13.1f} {statistics.median(ratios):6.2f} "
              f"{ratios[len(ratios) // 10]:6.2f}-{ratios[(9 * len(ratios)) // 10]:<6.2f}",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--mode", choices=("cold", "warm", "both"), default="both")
    parser.add_argument("--paired", type=int, default=0, metavar="N",
                        help="paired comparison with in-process exec + deepcopy, N pairs")
    args = parser.parse_args()
    if args.paired:
        paired(args.paired)
        return
    graph = malt_shaped_graph()
    size = len(pickle.dumps(graph, protocol=pickle.HIGHEST_PROTOCOL))
    print(
        f"graph: {graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges, "
        f"pickle {size / 1e6:.2f} MB; runs per case and mode: {args.runs}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    modes = ("cold", "warm") if args.mode == "both" else (args.mode,)
    identity = "def process_graph(g):\n    return g\n"
    shared = SharedArgument(graph)
    cases = [
        ("empty", identity, 1),
        ("graph-in", "def process_graph(g):\n    return len(g)\n", graph),
        ("graph-in-shared", "def process_graph(g):\n    return len(g)\n", shared),
        ("graph-roundtrip", identity, shared),
    ]
    for label, code, argument in cases:
        walls: dict[str, list[float]] = {mode: [] for mode in modes}
        for mode in modes:  # warm caches (and start the zygote) outside the measurement
            os.environ["NETARENA_SANDBOX_WARM"] = "1" if mode == "warm" else "0"
            measure(label, 1, code, argument)
        for _ in range(args.runs):
            for mode in modes:
                os.environ["NETARENA_SANDBOX_WARM"] = "1" if mode == "warm" else "0"
                walls[mode] += measure(label, 1, code, argument)
        for mode in modes:
            print(_line(label, mode, walls[mode]), flush=True)


if __name__ == "__main__":
    main()
