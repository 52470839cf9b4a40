"""Judging a MALT answer: graph normalisation, the safety checker and type-aware correctness.

Everything here takes *untrusted* values (decoded JSON from the sandbox) and must never raise
for the agent's reasons: a malformed value becomes a :class:`GraphFormatError` (caught by the
episode) or a failed comparison with an explanation. All checks are linear in the graph size;
no isomorphism search is done (the reference's VF2 costs ~25 s per graph, §B.8) because node
identity is part of the answer contract: node ids are ``"<KIND>:<name>"``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from evaluator.deadline import Deadline

from apps.malt.overlay import TopologyView
from apps.malt.topology import (
    ALLOWED_RELATIONS,
    CONTAINS,
    ENTITY_KINDS,
    MIN_PORT_CAPACITY_BPS,
    RELATION_KINDS,
)

#: How many examples of each difference/violation are kept in verdict details.
MAX_EXAMPLES = 5
#: Largest returned graph read (entries of ``nodes`` / of ``links``), checked before any is
#: parsed: about four times the MALT topology (6,133 nodes, 7,064 links), far above what any
#: query can produce (20,000 ids made parsing take 31 s).
MAX_GRAPH_NODES = 25_000
MAX_GRAPH_EDGES = 50_000
#: Entries parsed or checked between two looks at the judge's deadline.
DEADLINE_STRIDE = 1024


class GraphFormatError(ValueError):
    """A value meant to be a graph is not a readable node-link graph."""


@dataclass
class NormalizedGraph:
    """A graph as plain dicts: ``nodes[id] = attrs``, ``edges[(source, target)] = attrs``.

    ``directed``/``multigraph`` are the flags of the node-link data (a MALT topology must be
    a directed simple graph).
    """

    nodes: dict[Hashable, dict[str, Any]]
    edges: dict[tuple[Hashable, Hashable], dict[str, Any]]
    directed: bool = True
    multigraph: bool = False

    @classmethod
    def from_view(cls, view: TopologyView) -> NormalizedGraph:
        """The current state of a view (shares attribute dicts with the base; read-only).

        The base graph's dicts are built once per base graph and copied (C-level dict copy);
        only the view's changes are applied on top, so this costs O(graph) memcpy plus
        O(changes) Python work.
        """
        base_nodes, base_edges = _base_dicts(view.base)
        nodes = dict(base_nodes)
        edges = dict(base_edges)
        base = view.base
        for node in view.removed:
            del nodes[node]
            for target in base.successors(node):
                edges.pop((node, target), None)
            for source in base.predecessors(node):
                edges.pop((source, node), None)
        nodes.update(view.added_nodes)
        nodes.update(view.replaced_attrs)
        for (source, target), attrs in view.added_edges.items():
            if source in nodes and target in nodes:
                edges[(source, target)] = attrs
        return cls(nodes=nodes, edges=edges)


_BASE_CACHE: dict[int, tuple[Any, dict[Hashable, Any], dict[tuple[Hashable, Hashable], Any]]] = {}


def _base_dicts(
    base: Any,
) -> tuple[dict[Hashable, Any], dict[tuple[Hashable, Hashable], Any]]:
    """Node and edge dicts of a (never mutated) base graph, cached per graph object."""
    cached = _BASE_CACHE.get(id(base))
    if cached is None or cached[0] is not base:
        nodes = dict(base.nodes(data=True))
        edges = {(s, t): a for s, t, a in base.edges(data=True)}
        cached = (base, nodes, edges)
        _BASE_CACHE[id(base)] = cached
    return cached[1], cached[2]


#: The sandbox's form of a returned graph stated as its change against the argument graph
#: (``evaluator.sandbox.run_function(..., graph_diffs=True)``; docs/sandbox.md).
DIFF_KEY = "__networkx_diff__"


def is_graph_shaped(value: Any) -> bool:
    """True for the sandbox's ``{"__networkx__": ...}`` or ``{"__networkx_diff__": ...}``
    wrapper or a node-link dict."""
    return isinstance(value, dict) and (
        "__networkx__" in value or DIFF_KEY in value or "nodes" in value
    )


def _graph_too_large(nodes: int, links: int) -> GraphFormatError:
    return GraphFormatError(
        f"the graph has {nodes} nodes and {links} links; at most "
        f"{MAX_GRAPH_NODES} and {MAX_GRAPH_EDGES} are read"
    )


def _entry_attrs(entry: Any, keys: tuple[str, ...], what: str) -> tuple[list[Any], dict[str, Any]]:
    """(the values of ``keys``, the other attributes) of one node-link entry."""
    if not isinstance(entry, dict) or any(key not in entry for key in keys):
        raise GraphFormatError(f"every {what} entry must be a dict with {' and '.join(keys)}")
    attrs = dict(entry)
    ends = [attrs.pop(key) for key in keys]
    if what == "edge":
        attrs.pop("key", None)
    if any(type(end) is not str for end in ends):
        raise GraphFormatError(f"{what} ids must be strings")
    return ends, attrs


def apply_graph_diff(
    base: NormalizedGraph, diff: Any, deadline: Deadline | None = None
) -> NormalizedGraph:
    """The graph a ``__networkx_diff__`` states against ``base`` (the call's argument graph).

    Equal, order included, to :func:`parse_graph` of the returned graph's node-link form
    (the sandbox child sends a diff only when that holds; ``evaluator/sandbox/_child.py``,
    ``_GraphDiffer``). ``base``'s dicts are copied at C level and its attribute dicts shared
    (read-only), so this costs O(changed elements), plus one pass over the links when nodes
    were removed or the ``source`` link order is used. ``base`` must hold JSON values only
    (what the node-link path would decode to the same values; MALT fabrics do,
    :func:`apps.malt.fabric.fabric_problems`).

    Raises:
        GraphFormatError: the diff is malformed (the agent can write any result line) or the
            graph it states is larger than :data:`MAX_GRAPH_NODES` / :data:`MAX_GRAPH_EDGES`.
        evaluator.deadline.JudgeBudgetExceeded: ``deadline`` passed.
    """
    if deadline is not None:
        deadline.check()  # as parse_graph does on its first node, however small the change
    if not isinstance(diff, dict):
        raise GraphFormatError("a graph change must be a dict")
    removed_nodes, node_entries = diff.get("removed_nodes"), diff.get("nodes")
    removed_links, link_entries = diff.get("removed_links"), diff.get("links")
    if (
        not isinstance(removed_nodes, list)
        or not isinstance(node_entries, list)
        or not isinstance(removed_links, list)
        or not isinstance(link_entries, list)
        or diff.get("link_order") not in ("append", "source")
    ):
        raise GraphFormatError("a graph change needs four lists and a link order")
    if len(node_entries) > MAX_GRAPH_NODES or len(link_entries) > MAX_GRAPH_EDGES:
        raise _graph_too_large(len(node_entries), len(link_entries))
    nodes = dict(base.nodes)
    gone: set[Hashable] = set()
    for node in removed_nodes:
        if type(node) is not str or node not in nodes or node in gone:
            raise GraphFormatError(f"removed node {node!r} is not in the graph")
        del nodes[node]
        gone.add(node)
    listed: set[str] = set()
    for count, entry in enumerate(node_entries):
        if deadline is not None and count % DEADLINE_STRIDE == 0:
            deadline.check()
        (key,), attrs = _entry_attrs(entry, ("id",), "node")
        if key in listed:
            raise GraphFormatError(f"node {key!r} is listed twice")
        listed.add(key)
        nodes[key] = attrs
    dropped: set[tuple[Hashable, Hashable]] = set()
    for pair in removed_links:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or type(pair[0]) is not str
            or type(pair[1]) is not str
        ):
            raise GraphFormatError("a removed link must be [source, target]")
        link: tuple[Hashable, Hashable] = (pair[0], pair[1])
        if link not in base.edges or link in dropped:
            raise GraphFormatError(f"removed link {link!r} is not in the graph")
        dropped.add(link)
    changes: dict[tuple[Hashable, Hashable], dict[str, Any]] = {}
    for count, entry in enumerate(link_entries):
        if deadline is not None and count % DEADLINE_STRIDE == 0:
            deadline.check()
        (source, target), attrs = _entry_attrs(entry, ("source", "target"), "edge")
        if source not in nodes:
            nodes[source] = {}
        if target not in nodes:
            nodes[target] = {}
        link = (source, target)
        if link in dropped:
            raise GraphFormatError(f"link {link!r} is both removed and listed")
        if link in changes:
            changes[link].update(attrs)
        else:
            changes[link] = attrs
    added = sum(1 for link in changes if link not in base.edges)
    if len(nodes) > MAX_GRAPH_NODES:
        raise _graph_too_large(len(nodes), len(base.edges) - len(dropped) + added)
    if diff["link_order"] == "append":
        edges = dict(base.edges)
        for link in dropped:
            del edges[link]
        edges.update(changes)
    else:
        by_source: dict[Hashable, list[tuple[Hashable, Hashable]]] = {}
        for link in base.edges:
            by_source.setdefault(link[0], []).append(link)
        for link in changes:
            if link not in base.edges:
                by_source.setdefault(link[0], []).append(link)
        edges = {}
        for count, node in enumerate(nodes):
            if deadline is not None and count % DEADLINE_STRIDE == 0:
                deadline.check()
            for link in by_source.get(node, ()):
                if link not in dropped:
                    edges[link] = changes[link] if link in changes else base.edges[link]
        if len(edges) != len(base.edges) - len(dropped) + added:
            raise GraphFormatError("a link's source is not a node of the graph")
    if gone and any(s in gone or t in gone for s, t in edges):
        raise GraphFormatError("a removed node keeps links")
    if len(edges) > MAX_GRAPH_EDGES:
        raise _graph_too_large(len(nodes), len(edges))
    return NormalizedGraph(nodes=nodes, edges=edges, directed=True, multigraph=False)


def parse_graph(
    value: Any, deadline: Deadline | None = None, base: NormalizedGraph | None = None
) -> NormalizedGraph:
    """Read a returned graph: ``{"__networkx__": node_link}``, node-link data itself, or
    ``{"__networkx_diff__": change}`` against ``base`` (:func:`apply_graph_diff`).

    Node-link data follows ``networkx.node_link_data``: ``nodes`` (dicts with ``id``) and
    ``links`` or ``edges`` (dicts with ``source``/``target``), flags ``directed`` and
    ``multigraph`` defaulting to False as in ``node_link_graph``. Edge ends missing from
    ``nodes`` become attribute-less nodes (as networkx would do); a node listed twice is
    malformed. Node ids (and edge ends) must be strings, as every MALT id is
    (``"<KIND>:<name>"``): str hashing is randomised per process, so an agent cannot choose
    ids that collide in the dicts below (integer ids could, making parsing quadratic). At most
    :data:`MAX_GRAPH_NODES` nodes and :data:`MAX_GRAPH_EDGES` links are read, counted first.

    Raises:
        GraphFormatError: the value is not readable as a graph (or is a change and ``base``
            is None).
        evaluator.deadline.JudgeBudgetExceeded: ``deadline`` passed while parsing.
    """
    if isinstance(value, dict) and DIFF_KEY in value:
        if base is None:
            raise GraphFormatError("a graph change without the graph it changes")
        return apply_graph_diff(base, value[DIFF_KEY], deadline)
    if isinstance(value, dict) and "__networkx__" in value:
        value = value["__networkx__"]
    if not isinstance(value, dict):
        raise GraphFormatError(f"expected a graph, got {type(value).__name__}")
    raw_nodes = value.get("nodes")
    raw_edges = value.get("links", value.get("edges", []))
    if not isinstance(raw_nodes, list) or not isinstance(raw_edges, list):
        raise GraphFormatError("node-link data needs lists under 'nodes' and 'links'/'edges'")
    if len(raw_nodes) > MAX_GRAPH_NODES or len(raw_edges) > MAX_GRAPH_EDGES:
        raise GraphFormatError(
            f"the graph has {len(raw_nodes)} nodes and {len(raw_edges)} links; at most "
            f"{MAX_GRAPH_NODES} and {MAX_GRAPH_EDGES} are read"
        )
    directed = bool(value.get("directed", False))
    multigraph = bool(value.get("multigraph", False))
    nodes: dict[Hashable, dict[str, Any]] = {}
    for count, entry in enumerate(raw_nodes):
        if deadline is not None and count % DEADLINE_STRIDE == 0:
            deadline.check()
        if not isinstance(entry, dict) or "id" not in entry:
            raise GraphFormatError("every node entry must be a dict with an 'id'")
        attrs = dict(entry)
        key = attrs.pop("id")
        if type(key) is not str:
            raise GraphFormatError(f"node ids must be strings, got {type(key).__name__}")
        if key in nodes:
            raise GraphFormatError(f"node {key!r} is listed twice")
        nodes[key] = attrs
    edges: dict[tuple[Hashable, Hashable], dict[str, Any]] = {}
    for count, entry in enumerate(raw_edges):
        if deadline is not None and count % DEADLINE_STRIDE == 0:
            deadline.check()
        if not isinstance(entry, dict) or "source" not in entry or "target" not in entry:
            raise GraphFormatError("every edge entry must be a dict with 'source' and 'target'")
        attrs = dict(entry)
        source, target = attrs.pop("source"), attrs.pop("target")
        attrs.pop("key", None)
        if type(source) is not str or type(target) is not str:
            raise GraphFormatError("edge sources and targets must be node id strings")
        if source not in nodes:
            nodes[source] = {}
        if target not in nodes:
            nodes[target] = {}
        key = (source, target)
        if not directed and key not in edges and (target, source) in edges:
            key = (target, source)
        if key in edges:
            edges[key].update(attrs)
        else:
            edges[key] = attrs
    return NormalizedGraph(nodes=nodes, edges=edges, directed=directed, multigraph=multigraph)


# --------------------------------------------------------------------------- safety


@dataclass
class SafetyReport:
    """Result of :func:`check_safety`: ``counts[constraint]`` violations and a few examples."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    @property
    def safe(self) -> bool:
        """True when no constraint is violated."""
        return not self.counts

    def add(self, constraint: str, message: str) -> None:
        """Record one violation of ``constraint``."""
        if self.counts[constraint] < 2 and len(self.examples) < 4 * MAX_EXAMPLES:
            self.examples.append(f"{constraint}: {message}")
        self.counts[constraint] += 1

    def to_dict(self) -> dict[str, Any]:
        """JSON form for verdict details."""
        return {"safe": self.safe, "violations": dict(self.counts), "examples": self.examples}


#: The constraints :func:`check_safety` enforces, in the order they are checked.
SAFETY_CONSTRAINTS: dict[str, str] = {
    "graph_shape": "the topology is a non-empty directed simple graph (DiGraph)",
    "node_type": "every node has a str 'name' and a 'type' that is one of the 10 EK_* kinds",
    "unique_entity": "no two nodes are the same entity (same type and name)",
    "edge_type": "every edge has 'type' RK_CONTAINS or RK_CONTROLS and is not a self-loop",
    "hierarchy": "every edge links kinds the MALT hierarchy allows (topology.ALLOWED_RELATIONS)",
    "required_attribute": "ports carry physical_capacity_bps; packet switches carry "
    "switch_loc with an integer stage >= 1",
    "bandwidth": f"every port's physical_capacity_bps is an integer >= {MIN_PORT_CAPACITY_BPS}",
    "isolated_node": "no node is without edges",
    "port_on_switch": "every port is contained by exactly one packet switch and every packet "
    "switch contains at least one port",
}


def _is_int(value: Any) -> bool:
    """An integer value: int (not bool), or a float with an integral, finite value."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value) and value.is_integer()


def check_safety(graph: NormalizedGraph, deadline: Deadline | None = None) -> SafetyReport:
    """Check every topology constraint of :data:`SAFETY_CONSTRAINTS` in one linear pass.

    The constraints are the paper's (Appendix B.3/B.4: node types, edge types, hierarchy,
    required attributes, no isolated nodes, ports on switches, bandwidth threshold) made
    precise for MALT's (kind, name) entities. Never raises for malformed attribute values;
    raises ``evaluator.deadline.JudgeBudgetExceeded`` once ``deadline`` has passed.
    """
    report = SafetyReport()
    if not graph.directed or graph.multigraph:
        report.add("graph_shape", "the graph must be a networkx DiGraph (directed, not multi)")
    if not graph.nodes:
        report.add("graph_shape", "the topology is empty")
        return report
    valid_kinds = frozenset(ENTITY_KINDS)
    kinds: dict[Hashable, str | None] = {}
    seen_entities: set[tuple[str, str]] = set()
    ports: list[Hashable] = []
    switches: list[Hashable] = []
    for count, (node, attrs) in enumerate(graph.nodes.items()):
        if deadline is not None and count % DEADLINE_STRIDE == 0:
            deadline.check()
        kind = attrs.get("type")
        name = attrs.get("name")
        if type(kind) is not str or kind not in valid_kinds:
            report.add("node_type", f"{node!r} has type {kind!r}")
            kinds[node] = None
        else:
            kinds[node] = kind
            if type(name) is str and name:
                entity = (kind, name)
                if entity in seen_entities:
                    report.add("unique_entity", f"{kind} {name} appears twice")
                seen_entities.add(entity)
        if type(name) is not str or not name:
            report.add("node_type", f"{node!r} has no str name")
        if kind == "EK_PORT":
            ports.append(node)
            capacity = attrs.get("physical_capacity_bps")
            if capacity is None:
                report.add("required_attribute", f"port {node!r} has no physical_capacity_bps")
            elif not _is_int(capacity) or capacity < MIN_PORT_CAPACITY_BPS:
                report.add("bandwidth", f"port {node!r} has physical_capacity_bps {capacity!r}")
        elif kind == "EK_PACKET_SWITCH":
            switches.append(node)
            loc = attrs.get("switch_loc")
            stage = loc.get("stage") if isinstance(loc, dict) else None
            if stage is None or not _is_int(stage) or stage < 1:
                report.add("required_attribute", f"switch {node!r} has switch_loc {loc!r}")
    touched: set[Hashable] = {source for source, _ in graph.edges}
    touched.update(target for _, target in graph.edges)
    port_parents: dict[Hashable, int] = {}
    switches_with_ports: set[Hashable] = set()
    relation_kinds = frozenset(RELATION_KINDS)
    for count, ((source, target), attrs) in enumerate(graph.edges.items()):
        if deadline is not None and count % DEADLINE_STRIDE == 0:
            deadline.check()
        relation = attrs.get("type")
        if type(relation) is not str or relation not in relation_kinds:
            report.add("edge_type", f"{source!r}->{target!r} has type {relation!r}")
            continue
        if source == target:
            report.add("edge_type", f"self-loop on {source!r}")
            continue
        triple = (kinds.get(source), relation, kinds.get(target))
        if triple not in ALLOWED_RELATIONS:
            report.add(
                "hierarchy", f"{source!r} -{relation}-> {target!r} ({triple[0]} -> {triple[2]})"
            )
            continue
        if relation == CONTAINS and triple[2] == "EK_PORT":
            port_parents[target] = port_parents.get(target, 0) + 1
            switches_with_ports.add(source)
    if len(touched) != len(graph.nodes):
        for node in graph.nodes:
            if node not in touched:
                report.add("isolated_node", f"{node!r} has no edges")
    for port in ports:
        if port_parents.get(port, 0) != 1:
            report.add("port_on_switch", f"port {port!r} has {port_parents.get(port, 0)} parents")
    for switch in switches:
        if switch not in switches_with_ports:
            report.add("port_on_switch", f"switch {switch!r} contains no port")
    return report


# ---------------------------------------------------------------------- correctness


@dataclass
class Comparison:
    """Outcome of a correctness comparison: ``equal`` plus a short human explanation."""

    equal: bool
    explanation: str = ""
    diff: dict[str, Any] = field(default_factory=dict)


def _examples(items: Iterable[Any]) -> list[str]:
    out: list[str] = []
    for item in items:
        if len(out) >= MAX_EXAMPLES:
            break
        out.append(repr(item) if not isinstance(item, str) else item)
    return out


def same_graph(actual: NormalizedGraph, expected: NormalizedGraph) -> bool:
    """``compare_graphs(actual, expected).equal`` without building a diff (C-level dict
    equality; stops at the first difference)."""
    return (
        actual.directed
        and not actual.multigraph
        and actual.nodes == expected.nodes
        and actual.edges == expected.edges
    )


def compare_graphs(actual: NormalizedGraph, expected: NormalizedGraph) -> Comparison:
    """Compare by node identity, node attributes and edge attributes (O(nodes + edges)).

    Node attribute dicts must be equal (same keys, equal values; ``1e9 == 1000000000``), so
    extra or missing attributes count. Edges are compared with their attributes (``type``).
    """
    if same_graph(actual, expected):
        return Comparison(True)  # C-level dict equality: the common, correct case is fast
    diff: dict[str, Any] = {}
    if not actual.directed or actual.multigraph:
        diff["shape"] = "the returned graph is not a directed simple graph"
    missing = [n for n in expected.nodes if n not in actual.nodes]
    extra = [n for n in actual.nodes if n not in expected.nodes]
    changed = [
        n for n, attrs in expected.nodes.items() if n in actual.nodes and actual.nodes[n] != attrs
    ]
    missing_edges = [e for e in expected.edges if e not in actual.edges]
    extra_edges = [e for e in actual.edges if e not in expected.edges]
    changed_edges = [
        e for e, attrs in expected.edges.items() if e in actual.edges and actual.edges[e] != attrs
    ]
    for key, items in (
        ("missing_nodes", missing),
        ("unexpected_nodes", extra),
        ("missing_edges", missing_edges),
        ("unexpected_edges", extra_edges),
        ("edges_with_wrong_attributes", changed_edges),
    ):
        if items:
            diff[key] = {"count": len(items), "examples": _examples(items)}
    if changed:
        diff["nodes_with_wrong_attributes"] = {
            "count": len(changed),
            "examples": [
                {"node": str(n), "expected": expected.nodes[n], "got": actual.nodes[n]}
                for n in changed[:MAX_EXAMPLES]
            ],
        }
    if not diff:
        return Comparison(True)
    parts = [f"{k.replace('_', ' ')}: {v['count']}" for k, v in diff.items() if isinstance(v, dict)]
    if "shape" in diff:
        parts.insert(0, diff["shape"])
    return Comparison(
        False, "graph differs from the expected topology (" + "; ".join(parts) + ")", diff
    )


def compare_set(actual: Any, expected: list[str]) -> Comparison:
    """A list of node ids compared as a set; duplicates are wrong (a set has none)."""
    if not isinstance(actual, list) or not all(isinstance(x, str) for x in actual):
        return Comparison(False, f"expected a list of node id strings, got {_kind(actual)}")
    duplicates = [x for x, n in Counter(actual).items() if n > 1]
    got, want = set(actual), set(expected)
    diff = {}
    if want - got:
        diff["missing"] = _examples(sorted(want - got))
    if got - want:
        diff["unexpected"] = _examples(sorted(got - want))
    if duplicates:
        diff["duplicates"] = _examples(sorted(duplicates))
    if not diff:
        return Comparison(True)
    return Comparison(
        False,
        f"node set differs: {len(want - got)} missing, {len(got - want)} unexpected, "
        f"{len(duplicates)} duplicated (expected {len(want)} ids)",
        diff,
    )


def _number_equal(actual: Any, expected: float) -> bool:
    if isinstance(actual, bool) or not isinstance(actual, int | float):
        return False
    return bool(actual == expected)


def compare_ranking(actual: Any, expected: list[list[Any]]) -> Comparison:
    """Ordered comparison of ``[[id, capacity_bps], ...]`` (order matters, ties by id asc)."""
    if not isinstance(actual, list) or not all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in actual
    ):
        return Comparison(
            False, f"expected a list of [node id, capacity] pairs, got {_kind(actual)}"
        )
    if len(actual) != len(expected):
        return Comparison(
            False,
            f"ranking has {len(actual)} entries, expected {len(expected)}",
            {"expected_head": expected[:MAX_EXAMPLES], "got_head": actual[:MAX_EXAMPLES]},
        )
    for position, (got, want) in enumerate(zip(actual, expected, strict=True)):
        if got[0] != want[0] or not _number_equal(got[1], want[1]):
            return Comparison(
                False,
                f"ranking differs first at position {position}: expected {want}, got {got}",
                {"position": position, "expected": want, "got": got},
            )
    return Comparison(True)


def compare_number(actual: Any, expected: int) -> Comparison:
    """Exact numeric equality (an integral float such as ``16.0`` equals ``16``; no strings)."""
    if _number_equal(actual, expected):
        return Comparison(True)
    return Comparison(
        False, f"expected the number {expected}, got {_kind(actual)} {_short(actual)}"
    )


def _kind(value: Any) -> str:
    return type(value).__name__


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
