"""The copy-on-write view and the ground-truth interpreter."""

from __future__ import annotations

import json
from typing import Any

import networkx as nx
import pytest

from apps.malt.app import MaltApp
from apps.malt.checks import NormalizedGraph, compare_graphs
from apps.malt.fabric import query_graph
from apps.malt.operations import ProgramError, capacity_bps, execute, ranking
from apps.malt.overlay import TopologyView
from apps.malt.queries import BLOCK, ground_truth
from apps.malt.reference import oracle_code
from apps.malt.scoring import judge
from apps.malt.topology import load_graph

SWITCH = "EK_PACKET_SWITCH:ju1.a2.m1.s3c4"
CHASSIS = "EK_CHASSIS:ju1.a2.m1.s3c4"


def test_remove_takes_everything_contained_and_nothing_else() -> None:
    view = TopologyView(load_graph())
    gone = view.remove(CHASSIS)
    # the chassis contains the switch (with its 16 ports) and the control point
    assert gone == {CHASSIS, SWITCH, "EK_CONTROL_POINT:ju1.a2.m1.s3c4"} | {
        f"EK_PORT:ju1.a2.m1.s3c4.p{i}" for i in range(1, 17)
    }
    assert view.number_of_nodes() == 6133 - 19
    assert SWITCH not in view.children("EK_AGG_BLOCK:ju1.a2.m1")
    assert (
        view.has_node("EK_RACK:ju1.a2.m1rack") and len(view.children("EK_RACK:ju1.a2.m1rack")) == 15
    )
    assert not any(SWITCH in (s, t) for s, t, _ in view.edges())


def test_view_never_mutates_the_base_graph() -> None:
    base = load_graph()
    before = (
        base.number_of_nodes(),
        base.number_of_edges(),
        dict(base.nodes[f"EK_PORT:{SWITCH[17:]}.p1"]),
    )
    view = TopologyView(base)
    view.set_attr(f"EK_PORT:{SWITCH[17:]}.p1", "physical_capacity_bps", 7 * 10**9)
    view.remove("EK_AGG_BLOCK:ju1.a1.m1")
    view.add_node("EK_RACK:new", {"name": "new", "type": "EK_RACK"})
    assert (
        base.number_of_nodes(),
        base.number_of_edges(),
        dict(base.nodes[f"EK_PORT:{SWITCH[17:]}.p1"]),
    ) == before
    assert view.attrs(f"EK_PORT:{SWITCH[17:]}.p1")["physical_capacity_bps"] == 7 * 10**9
    with pytest.raises(ValueError):
        view.add_node("EK_AGG_BLOCK:ju1.a1.m1", {})  # a removed base id is not reused


def test_capacity_and_ranking_tie_order() -> None:
    view = TopologyView(load_graph())
    assert capacity_bps(view, SWITCH) == 16 * 10**9
    assert capacity_bps(view, "EK_AGG_BLOCK:ju1.a2.m1") == 256 * 10**9
    assert capacity_bps(view, "EK_CONTROL_DOMAIN:ju1.a2.dom") == 0  # control points hold no ports
    view.set_attr(f"EK_PORT:{SWITCH[17:]}.p9", "physical_capacity_bps", 5 * 10**9)
    ranked = ranking(view, "EK_AGG_BLOCK:ju1.a2.m1")
    assert ranked[0] == [SWITCH, 20 * 10**9]
    rest = [node for node, _ in ranked[1:]]
    assert rest == sorted(rest)  # equal capacities ordered by node id


def test_if_else_takes_each_branch() -> None:
    port = f"EK_PORT:{SWITCH[17:]}.p3"
    for threshold, expected in ((16 * 10**9, 15), (17 * 10**9, 17)):
        program: list[dict[str, Any]] = [
            {
                "op": "if",
                "cond": {
                    "query": {"op": "capacity", "node": SWITCH},
                    "cmp": ">=",
                    "value": threshold,
                },
                "then": [{"op": "remove", "node": port}],
                "else": [
                    {"op": "add_port", "parent": SWITCH, "name": "x.p17", "capacity_bps": 10**9}
                ],
            },
            {"op": "count", "node": SWITCH, "kind": "EK_PORT"},
        ]
        assert execute(TopologyView(load_graph()), program) == expected


def test_bad_programs_raise_program_error() -> None:
    with pytest.raises(ProgramError):
        execute(TopologyView(load_graph()), [{"op": "explode"}])
    with pytest.raises(ProgramError):
        execute(TopologyView(load_graph()), [{"op": "list", "node": "EK_RACK:nowhere"}])


def test_oracle_code_and_interpreter_agree_in_process() -> None:
    """Two independent implementations (view interpreter, oracle on networkx) agree."""
    app = MaltApp()
    for q in app.generate(2 * BLOCK, seed=13):
        truth = q.ground_truth
        namespace: dict[str, object] = {}
        exec(oracle_code(truth), namespace)  # our own generated code, not agent code
        graph = query_graph(truth["graph_key"]).copy()
        result = namespace["process_graph"](graph)  # type: ignore[operator]
        assert isinstance(result, dict)
        _, expected_view = ground_truth(truth["program"], truth["graph_key"])
        if truth["answer_kind"] != "graph":
            answer = result["answer"]
            if truth["answer_kind"] == "set":
                answer = sorted(answer)
            assert answer == truth["expected"], q.label
        if truth["changes_topology"]:
            actual = NormalizedGraph(
                nodes=dict(graph.nodes(data=True)),
                edges={(s, t): a for s, t, a in graph.edges(data=True)},
            )
            assert compare_graphs(actual, NormalizedGraph.from_view(expected_view)).equal, q.label
        # and the judge accepts it once it has crossed JSON the way the sandbox sends it
        wire = {
            key: {"__networkx__": nx.node_link_data(value, edges="links")}
            if isinstance(value, nx.DiGraph)
            else value
            for key, value in result.items()
        }
        verdict = judge(truth, json.loads(json.dumps(wire)), 0.0)
        assert verdict.correct and verdict.safe, (q.label, verdict.details)
