"""A returned graph comes back from the sandbox as its change against the query's graph
(``run_function(..., graph_diffs=True)``) and the judge applies it to its own copy: the graph it
judges is the one the whole node-link form gives, order included, and so is every verdict."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

from apps.malt.app import MaltApp
from apps.malt.checks import (
    DIFF_KEY,
    MAX_GRAPH_NODES,
    GraphFormatError,
    NormalizedGraph,
    apply_graph_diff,
    parse_graph,
)
from apps.malt.fabric import graph_ref, query_graph
from apps.malt.prompt import SANDBOX_PREAMBLE
from apps.malt.queries import BLOCK
from apps.malt.reference import oracle_code
from apps.malt.scoring import _shipped_topology, judge
from apps.malt.topology import load_graph
from evaluator.sandbox import SandboxLimits, run_function
from evaluator.types import Query
from tests.conftest import require_root, require_tool

APP = MaltApp()


def _query() -> Query:
    return next(q for q in APP.generate(BLOCK, seed=17) if q.ground_truth["changes_topology"])


def _ids(query: Query) -> tuple[str, str, str]:
    graph = query_graph(graph_ref(query.ground_truth))
    switch = next(n for n, a in graph.nodes(data=True) if a["type"] == "EK_PACKET_SWITCH")
    port = next(n for n, a in graph.nodes(data=True) if a["type"] == "EK_PORT")
    return switch, port, next(iter(graph.successors(switch)))


#: name -> (body of process_graph with {switch}/{port}/{child} filled in, whole form expected)
PROGRAMS: dict[str, tuple[str, bool]] = {
    "unchanged": ("return {{'answer': G, 'updated_graph': G}}", False),
    "remove_switch": ("G.remove_node({switch!r})\n    return {{'answer': G}}", False),
    "add_port": (
        "G.add_node('EK_PORT:x.p1', name='x.p1', type='EK_PORT', physical_capacity_bps=10**9)\n"
        "    G.add_edge({switch!r}, 'EK_PORT:x.p1', type='RK_CONTAINS')\n"
        "    return {{'answer': G}}", False),
    "new_node_links": (
        "G.add_node('EK_RACK:r', name='r', type='EK_RACK')\n"
        "    G.add_edge('EK_RACK:r', {switch!r}, type='RK_CONTAINS')\n"
        "    return {{'answer': G}}", False),
    "remove_link": ("G.remove_edge({switch!r}, {child!r})\n    return {{'answer': G}}", False),
    "int_to_float": (
        "G.nodes[{port!r}]['physical_capacity_bps'] *= 1.0\n    return {{'answer': G}}", False),
    "equal_new_str": (
        "G.nodes[{port!r}]['type'] = ''.join(['EK_', 'PORT'])\n    return {{'answer': G}}", False),
    "tuple_attr": ("G.nodes[{port!r}]['x'] = (1, 2)\n    return {{'answer': G}}", False),
    "copy_changed": (
        "H = G.copy()\n    H.nodes[{port!r}]['physical_capacity_bps'] = 5\n"
        "    return {{'answer': 1, 'updated_graph': H}}", False),
    "bare_graph": ("return G", True),
    "undirected": ("return {{'answer': nx.Graph(G)}}", True),
    "node_readded": (
        "a = dict(G.nodes[{port!r}])\n    G.remove_node({port!r})\n    G.add_node({port!r}, **a)\n"
        "    return {{'answer': G}}", True),
    "link_readded": (
        "G.remove_edge({switch!r}, {child!r})\n"
        "    G.add_edge({switch!r}, {child!r}, type='RK_CONTAINS')\n"
        "    return {{'answer': G}}", True),
    "int_node_id": ("G.add_node(5)\n    return {{'answer': G}}", True),
}


def _form(value: Any) -> dict[str, str]:
    return {key: "diff" if isinstance(v, dict) and DIFF_KEY in v else "whole"
            for key, v in value.items() if isinstance(v, dict)} if isinstance(value, dict) else {}


def _ordered(graph: NormalizedGraph) -> tuple[Any, ...]:
    return (list(graph.nodes.items()), list(graph.edges.items()), graph.directed,
            graph.multigraph)


@pytest.mark.root
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_graph_judged_from_its_change_is_the_whole_graph(name: str) -> None:
    """Through the real sandbox: the form is a change where it can be stated, and the graph
    the judge reads, its order and the verdict are those of the whole node-link form."""
    require_root()
    require_tool("bwrap")
    query = _query()
    switch, port, child = _ids(query)
    body, whole = PROGRAMS[name]
    code = "def process_graph(G):\n    " + body.format(switch=switch, port=port, child=child)
    graph = query_graph(graph_ref(query.ground_truth))
    results = [run_function(code, "process_graph", graph, limits=SandboxLimits(),
                            preamble=SANDBOX_PREAMBLE, graph_diffs=diffs)
               for diffs in (False, True)]
    assert all(r.ok for r in results), [r.error for r in results]
    plain, changed = results
    assert set(_form(plain.value).values()) <= {"whole"}
    assert set(_form(changed.value).values()) == ({"whole"} if whole else {"diff"})
    base = _shipped_topology(graph_ref(query.ground_truth))

    def read(value: Any) -> Any:
        try:
            return repr(_ordered(parse_graph(value, None, base)))  # repr: exact types too
        except GraphFormatError as exc:
            return str(exc)

    for key in _form(changed.value):
        assert read(changed.value[key]) == read(plain.value[key])
    verdicts = [judge(query.ground_truth, r.value, 0.0) for r in results]
    for verdict in verdicts:
        verdict.details.pop("judge_s")
    assert verdicts[0] == verdicts[1]


@pytest.mark.root
def test_the_oracle_and_a_nan_answer_keep_their_verdicts() -> None:
    """The oracle's graph comes back as a change and is correct; NaN is refused either way."""
    require_root()
    require_tool("bwrap")
    query = _query()
    graph = query_graph(graph_ref(query.ground_truth))
    oracle = run_function(oracle_code(query.ground_truth), "process_graph", graph,
                          preamble=SANDBOX_PREAMBLE, graph_diffs=True)
    assert oracle.ok and "diff" in _form(oracle.value).values()
    assert judge(query.ground_truth, oracle.value, 0.0).correct
    _, port, _ = _ids(query)
    nan = (f"def process_graph(G):\n    G.nodes[{port!r}]['physical_capacity_bps'] = "
           "float('nan')\n    return {'answer': G}\n")
    refused = run_function(nan, "process_graph", graph, preamble=SANDBOX_PREAMBLE,
                           graph_diffs=True)
    assert not refused.ok and refused.failure == "bad_result"


def test_the_query_graph_is_its_unchanged_topology_order_included() -> None:
    """The judge applies a change to ``_shipped_topology``: it must equal the graph the agent
    got as the whole form reads it (values, exact types and order), for shipped queries."""
    for query in APP.generate(4, seed=3):
        ref = graph_ref(query.ground_truth)
        graph = query_graph(ref)
        from networkx import node_link_data

        whole = parse_graph(json.loads(json.dumps(node_link_data(graph, edges="links"))))
        shipped = _shipped_topology(ref)
        assert repr(_ordered(whole)) == repr(_ordered(shipped))  # exact types and order


def _base() -> NormalizedGraph:
    return NormalizedGraph(
        nodes={"a": {"type": "x"}, "b": {"type": "y"}, "c": {}},
        edges={("a", "b"): {"type": "t"}, ("b", "c"): {"type": "t"}},
    )


def _diff(**fields: Any) -> dict[str, Any]:
    diff: dict[str, Any] = {"removed_nodes": [], "nodes": [], "removed_links": [],
                            "links": [], "link_order": "append"}
    diff.update(fields)
    return diff


def test_applying_a_change_orders_links_as_node_link_data_would() -> None:
    base = _base()
    got = apply_graph_diff(base, _diff(
        nodes=[{"id": "d", "type": "z"}],
        links=[{"source": "a", "target": "d", "type": "t"}, {"source": "b", "target": "c"}],
        link_order="source"))
    assert list(got.nodes) == ["a", "b", "c", "d"]
    assert list(got.edges.items()) == [(("a", "b"), {"type": "t"}), (("a", "d"), {"type": "t"}),
                                       (("b", "c"), {})]
    assert base.edges[("b", "c")] == {"type": "t"}  # the base is never changed
    removed = apply_graph_diff(base, _diff(removed_nodes=["c"], removed_links=[["b", "c"]]))
    assert list(removed.nodes) == ["a", "b"] and list(removed.edges) == [("a", "b")]


@pytest.mark.parametrize("diff", [
    "not a dict",
    {"nodes": []},
    _diff(link_order="random"),
    _diff(removed_nodes=["zz"]),
    _diff(removed_nodes=["c"]),  # its link b->c stays
    _diff(removed_links=[["a", "c"]]),
    _diff(removed_links=[["a", "b"], ["a", "b"]]),
    _diff(nodes=[{"id": 5}]),
    _diff(nodes=[{"id": "d"}, {"id": "d"}]),
    _diff(nodes=[{"name": "no id"}]),
    _diff(links=[{"source": "a"}]),
    _diff(removed_links=[["a", "b"]], links=[{"source": "a", "target": "b"}]),
    _diff(nodes=[{"id": f"n{i}"} for i in range(MAX_GRAPH_NODES)]),
], ids=lambda d: str(d)[:40])
def test_a_malformed_or_oversized_change_is_an_unreadable_graph(diff: Any) -> None:
    """The agent can write any result line: a forged change is a GraphFormatError (wrong and
    unsafe), never an exception of another kind, and the node cap holds."""
    with pytest.raises(GraphFormatError):
        apply_graph_diff(_base(), diff)


def test_a_change_without_the_graph_it_changes_is_unreadable() -> None:
    with pytest.raises(GraphFormatError):
        parse_graph({DIFF_KEY: _diff()})


def test_the_shipped_topology_holds_json_values_only() -> None:
    """Unchanged elements are taken from the parent's copy, so their values must be what the
    node-link JSON would decode to: the same values with the same types."""
    graph = load_graph()
    for _, attrs in graph.nodes(data=True):
        assert pickle.dumps(json.loads(json.dumps(attrs))) == pickle.dumps(attrs)
    for _, _, attrs in graph.edges(data=True):
        assert pickle.dumps(json.loads(json.dumps(attrs))) == pickle.dumps(attrs)


def test_a_fabric_whose_attributes_json_would_change_is_refused() -> None:
    """A variant fabric must hold JSON values too (see the test above); a tuple is refused."""
    from apps.malt.fabric import fabric_problems

    graph = load_graph().copy()
    switch = next(n for n, a in graph.nodes(data=True) if a["type"] == "EK_PACKET_SWITCH")
    assert not [p for p in fabric_problems(graph) if "JSON" in p]
    graph.nodes[switch]["switch_loc"] = {"stage": (1,)}
    assert [p for p in fabric_problems(graph) if "JSON" in p]
