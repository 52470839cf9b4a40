"""Safety checker (one test per constraint) and type-aware correctness comparisons."""

from __future__ import annotations

import copy
import json
from typing import Any

import networkx as nx
import pytest

from apps.malt.checks import (
    SAFETY_CONSTRAINTS,
    GraphFormatError,
    NormalizedGraph,
    check_safety,
    compare_graphs,
    compare_number,
    compare_ranking,
    compare_set,
    parse_graph,
)
from apps.malt.overlay import TopologyView
from apps.malt.topology import load_graph

SWITCH = "EK_PACKET_SWITCH:ju1.a1.m1.s2c1"
PORT = "EK_PORT:ju1.a1.m1.s2c1.p1"


@pytest.fixture(scope="module")
def base_link() -> dict[str, Any]:
    """The MALT graph as the sandbox sends it back (JSON node-link data)."""
    data = nx.node_link_data(load_graph(), edges="links")
    return {"__networkx__": json.loads(json.dumps(data))}


def _graph(link: dict[str, Any]) -> NormalizedGraph:
    return parse_graph(copy.deepcopy(link))


def _violations(graph: NormalizedGraph) -> set[str]:
    return set(check_safety(graph).counts)


def test_base_graph_round_trips_and_is_safe(base_link: dict[str, Any]) -> None:
    graph = _graph(base_link)
    assert len(graph.nodes) == 6133 and len(graph.edges) == 7064
    assert check_safety(graph).safe
    expected = NormalizedGraph.from_view(TopologyView(load_graph()))
    assert compare_graphs(graph, expected).equal


@pytest.mark.parametrize(
    ("constraint", "damage"),
    [
        ("graph_shape", lambda g: setattr(g, "directed", False)),
        ("graph_shape", lambda g: (g.nodes.clear(), g.edges.clear())),
        ("node_type", lambda g: g.nodes[SWITCH].__setitem__("type", ["EK_PACKET_SWITCH"])),
        ("node_type", lambda g: g.nodes[SWITCH].pop("name")),
        (
            "unique_entity",
            lambda g: g.nodes["EK_PORT:ju1.a1.m1.s2c1.p2"].__setitem__("name", "ju1.a1.m1.s2c1.p1"),
        ),
        ("edge_type", lambda g: g.edges[(SWITCH, PORT)].__setitem__("type", "RK_CONTROL")),
        ("edge_type", lambda g: g.edges.__setitem__((SWITCH, SWITCH), {"type": "RK_CONTAINS"})),
        (
            "hierarchy",
            lambda g: g.edges.__setitem__(
                ("EK_AGG_BLOCK:ju1.a1.m1", PORT), {"type": "RK_CONTAINS"}
            ),
        ),
        ("required_attribute", lambda g: g.nodes[PORT].pop("physical_capacity_bps")),
        ("required_attribute", lambda g: g.nodes[SWITCH].pop("switch_loc")),
        ("bandwidth", lambda g: g.nodes[PORT].__setitem__("physical_capacity_bps", 1000)),
        ("bandwidth", lambda g: g.nodes[PORT].__setitem__("physical_capacity_bps", "1e9")),
        (
            "isolated_node",
            lambda g: g.nodes.__setitem__("EK_RACK:new", {"name": "new", "type": "EK_RACK"}),
        ),
        (
            "port_on_switch",
            lambda g: [g.edges.pop((SWITCH, f"EK_PORT:ju1.a1.m1.s2c1.p{i}")) for i in range(1, 17)],
        ),
        (
            "port_on_switch",
            lambda g: g.edges.__setitem__(
                ("EK_PACKET_SWITCH:ju1.a1.m1.s2c2", PORT), {"type": "RK_CONTAINS"}
            ),
        ),
    ],
)
def test_safety_catches_each_constraint(
    base_link: dict[str, Any], constraint: str, damage: Any
) -> None:
    graph = _graph(base_link)
    damage(graph)
    found = _violations(graph)
    assert constraint in found, found
    assert constraint in SAFETY_CONSTRAINTS


def test_removing_a_switch_without_its_ports_is_unsafe(base_link: dict[str, Any]) -> None:
    """Leaving the ports of a removed switch behind orphans them (the reference's GT bug)."""
    graph = _graph(base_link)
    del graph.nodes[SWITCH]
    for edge in [e for e in graph.edges if SWITCH in e]:
        del graph.edges[edge]
    assert {"isolated_node", "port_on_switch"} <= _violations(graph)


def test_parse_graph_rejects_malformed_values() -> None:
    for bad in (
        "graph",
        [1, 2],
        {"nodes": "x", "links": []},
        {"nodes": [{"name": "no id"}], "links": []},
        {"nodes": [{"id": "a"}, {"id": "a"}], "links": []},
        {"nodes": [{"id": "a"}], "links": [{"source": "a"}]},
        {"__networkx__": None},
        {"nodes": [{"id": {"a": 1}}], "links": []},
    ):
        with pytest.raises(GraphFormatError):
            parse_graph(bad)


def test_parse_graph_accepts_edges_key_and_adds_implicit_nodes() -> None:
    graph = parse_graph(
        {
            "directed": True,
            "nodes": [{"id": "a", "type": "x"}],
            "edges": [{"source": "a", "target": "b", "type": "t"}],
        }
    )
    assert graph.nodes == {"a": {"type": "x"}, "b": {}}
    assert graph.edges == {("a", "b"): {"type": "t"}}


# ------------------------------------------------------------------ correctness


def test_graph_compare_by_identity_attributes_and_edge_types(base_link: dict[str, Any]) -> None:
    expected = NormalizedGraph.from_view(TopologyView(load_graph()))
    graph = _graph(base_link)
    assert compare_graphs(graph, expected).equal

    graph.nodes[PORT]["physical_capacity_bps"] = 1e9  # same value as a float: equal
    assert compare_graphs(graph, expected).equal

    graph.nodes[PORT]["physical_capacity_bps"] = 2 * 10**9
    result = compare_graphs(graph, expected)
    assert not result.equal and result.diff["nodes_with_wrong_attributes"]["count"] == 1

    graph = _graph(base_link)
    graph.nodes[SWITCH]["type"] = ["EK_PACKET_SWITCH"]  # list vs str is a different value
    assert not compare_graphs(graph, expected).equal

    graph = _graph(base_link)
    graph.nodes[PORT]["colour"] = "blue"  # extra attribute
    assert not compare_graphs(graph, expected).equal

    graph = _graph(base_link)
    graph.edges[("EK_CONTROL_POINT:ju1.a1.m1.s2c1", SWITCH)]["type"] = "RK_CONTAINS"
    assert compare_graphs(graph, expected).diff["edges_with_wrong_attributes"]["count"] == 1

    graph = _graph(base_link)
    graph.nodes["renamed"] = graph.nodes.pop(PORT)  # same attributes, different identity
    result = compare_graphs(graph, expected)
    assert result.diff["missing_nodes"]["count"] == 1
    assert result.diff["unexpected_nodes"]["count"] == 1

    graph = _graph(base_link)
    graph.edges[(PORT, SWITCH)] = graph.edges.pop((SWITCH, PORT))  # reversed direction
    assert not compare_graphs(graph, expected).equal

    graph = _graph(base_link)
    graph.directed = False
    assert not compare_graphs(graph, expected).equal


def test_set_compare() -> None:
    expected = ["a", "b", "c"]
    assert compare_set(["c", "a", "b"], expected).equal
    assert not compare_set(["a", "b"], expected).equal
    assert not compare_set(["a", "b", "c", "d"], expected).equal
    assert not compare_set(["a", "b", "c", "c"], expected).equal  # duplicates
    assert not compare_set("a,b,c", expected).equal
    assert not compare_set([["a"], "b", "c"], expected).equal
    assert not compare_set(None, expected).equal


def test_ranking_compare_is_ordered() -> None:
    expected = [["s2", 3], ["s1", 2], ["s3", 2]]
    assert compare_ranking([["s2", 3], ["s1", 2.0], ["s3", 2]], expected).equal
    swapped = compare_ranking([["s2", 3], ["s3", 2], ["s1", 2]], expected)  # wrong tie order
    assert not swapped.equal and swapped.diff["position"] == 1
    assert not compare_ranking([["s1", 2], ["s2", 3], ["s3", 2]], expected).equal
    assert not compare_ranking([["s2", 3], ["s1", 2]], expected).equal
    assert not compare_ranking([["s2", "3"], ["s1", 2], ["s3", 2]], expected).equal
    assert not compare_ranking({"s2": 3, "s1": 2, "s3": 2}, expected).equal
    assert not compare_ranking([["s2", 3, 0], ["s1", 2], ["s3", 2]], expected).equal


def test_number_compare_is_exact_and_typed() -> None:
    assert compare_number(16, 16).equal
    assert compare_number(16.0, 16).equal
    for wrong in (15, 16.5, "16", True, None, [16], float("nan")):
        assert not compare_number(wrong, 16).equal
    assert not compare_number(True, 1).equal  # bool is not a number here
