"""The graph of each MALT query: the fabric, its per-query port capacities, and the operand
index drafting reads (paper Appendix B.1-B.2).

A query's graph is named by its ground truth (:func:`graph_ref`):

* on the shipped fabric (every public query), the MALT example
  (:func:`apps.malt.topology.load_graph`) with the port capacities its ``graph_key`` names
  (:func:`port_capacities`);
* on a fabric variant, the graph that the ``fabric(seed)`` hook of the variant pack named by
  ``variant_pack`` builds for ``fabric["seed"]`` (docs/writing-a-variant-pack.md): other block
  and switch counts, names and capacities under the same schema (:func:`fabric_problems`).
  The graph is never stored in the ground truth; every process re-derives it, and one
  without the pack raises ``VariantPackError``.

Everything that reads a query's graph goes through this module: drafting (:func:`operands`),
ground-truth execution and the judge's expected and unchanged topologies
(:func:`initial_view`), the graph handed to the agent's sandbox (:func:`query_graph`). Caches
are keyed by the graph (:class:`GraphRef`).
"""

from __future__ import annotations

import json
import pickle
import random
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import networkx as nx
from evaluator.sampling import seeded_rng
from evaluator.variants import VariantPack, VariantPackError, find_pack, register_pack

from apps.malt.checks import NormalizedGraph, check_safety
from apps.malt.overlay import TopologyView
from apps.malt.topology import CONTAINS, load_graph, node_id

GBPS = 1_000_000_000
#: Port rates in bit/s: the IEEE 802.3 Ethernet rates from 1 to 400 Gbit/s (1 Gbit/s is the
#: smallest capacity of the MALT example and our safety floor).
SPEEDS_BPS = tuple(g * GBPS for g in (1, 10, 25, 40, 100, 200, 400))



class Operands:
    """Index of the base graph's *topology* to draw operands from: sorted node lists by kind,
    containment children, descendants, the kinds below a node and the ports within it.

    Everything here depends only on the base graph's nodes, kinds and RK_CONTAINS edges, which
    no query changes (the shared graph is read-only; per-query port capacities live in
    :func:`port_capacities` and in views, never here). So one index per fabric and process
    (:func:`operands`) serves every query on it, whatever its capacities (the drafts walked
    whole subtrees per question before). Per-node results are computed on first use and kept.
    """

    def __init__(self, graph: nx.DiGraph) -> None:
        self.graph = graph
        self.by_kind: dict[str, list[str]] = {}
        for node, attrs in graph.nodes(data=True):
            self.by_kind.setdefault(attrs["type"], []).append(node)
        for nodes in self.by_kind.values():
            nodes.sort()
        #: node -> the base graph's own attribute dict (read-only; avoids NodeView lookups)
        self.node_attrs: dict[str, dict[str, Any]] = dict(graph.nodes(data=True))
        self._children: dict[str, list[str]] = {}
        self._descendants: dict[str, frozenset[str]] = {}
        self._kinds_below: dict[str, tuple[str, ...]] = {}
        self._ports_within: dict[str, tuple[str, ...]] = {}

    def pick(self, rng: random.Random, *kinds: str) -> str:
        """A node of one of ``kinds`` (the kind first, uniformly, then the node)."""
        return rng.choice(self.by_kind[rng.choice(kinds)])

    def name(self, node: str) -> str:
        """The ``name`` attribute of a base node."""
        name: str = self.graph.nodes[node]["name"]
        return name

    def kind(self, node: str) -> str:
        """The ``type`` attribute of a base node."""
        kind: str = self.graph.nodes[node]["type"]
        return kind

    def children(self, node: str) -> list[str]:
        """Direct RK_CONTAINS children of a base node, sorted (cached)."""
        cached = self._children.get(node)
        if cached is None:
            graph = self.graph
            cached = sorted(
                c for c in graph.successors(node) if graph.edges[node, c]["type"] == CONTAINS
            )
            self._children[node] = cached
        return cached

    def descendants(self, node: str) -> frozenset[str]:
        """Every node reachable from ``node`` over RK_CONTAINS edges (cached per node).

        ``node`` itself is included only when a containment cycle leads back to it (never in
        the MALT data). The walk takes the cached set of any node it meets instead of walking
        below it again (a reachable set is complete, so that is exact even with cycles); the
        first uses in a process cost one pass over the graph in all.
        """
        cached = self._descendants.get(node)
        if cached is not None:
            return cached
        known = self._descendants
        seen: set[str] = set()
        stack = [node]
        while stack:
            for child in self.children(stack.pop()):
                if child not in seen:
                    seen.add(child)
                    below = known.get(child)
                    if below is None:
                        stack.append(child)
                    else:
                        seen.update(below)
        cached = frozenset(seen)
        known[node] = cached
        return cached

    def kinds_below(self, node: str) -> tuple[str, ...]:
        """Sorted distinct kinds of the nodes ``node`` contains (cached per node)."""
        cached = self._kinds_below.get(node)
        if cached is None:
            cached = tuple(sorted({self.kind(d) for d in self.descendants(node)}))
            self._kinds_below[node] = cached
        return cached

    def ports_within(self, node: str) -> tuple[str, ...]:
        """The distinct ports ``node`` contains, or ``(node,)`` for a port (cached per node)."""
        cached = self._ports_within.get(node)
        if cached is None:
            cached = tuple(
                sorted(d for d in self.descendants(node) | {node} if self.kind(d) == "EK_PORT")
            )
            self._ports_within[node] = cached
        return cached

    def parents(self, node: str) -> list[str]:
        """RK_CONTAINS parents of a base node, sorted."""
        graph = self.graph
        return sorted(
            p for p in graph.predecessors(node) if graph.edges[p, node]["type"] == CONTAINS
        )

    def new_port_name(self, switch: str) -> str:
        """Next free port name of a switch: ``<switch name>.p<max+1>`` (``...p17``)."""
        numbers = [int(self.name(p).rsplit(".p", 1)[1]) for p in self.children(switch)]
        return f"{self.name(switch)}.p{max(numbers, default=0) + 1}"

    def new_switch_name(self, block: str, stage: int) -> str:
        """Next free switch name of a block for a stage: ``<block>.s<stage>c<max+1>``."""
        prefix = f"{self.name(block)}.s{stage}c"
        numbers = [
            int(self.name(s)[len(prefix) :])
            for s in self.children(block)
            if self.name(s).startswith(prefix)
        ]
        return f"{prefix}{max(numbers, default=0) + 1}"

    def stages(self, block: str) -> list[int]:
        """Switch stages present in a block (agg blocks: 2 and 3; spineblocks: 1 and 2)."""
        return sorted(
            {int(self.graph.nodes[s]["switch_loc"]["stage"]) for s in self.children(block)}
        )

    def highest_port_number(self, block: str) -> int:
        """The highest ``N`` of a port ``<switch name>.p<N>`` among the switches of ``block``
        (16 in the MALT example, where every switch has ports p1..p16)."""
        return max(
            (
                int(self.name(p).rsplit(".p", 1)[1])
                for s in self.children(block)
                for p in self.children(s)
            ),
            default=0,
        )


# ------------------------------------------------------------------ which graph a query uses


@dataclass(frozen=True)
class GraphRef:
    """The graph a query runs on: the fabric and the port capacities on it.

    Attributes:
        key: the ground truth's ``graph_key``. On the shipped fabric it names the query's port
            capacities (:func:`port_capacities`); on a variant it names the variant.
        pack: ``(name, sha256)`` of the variant pack whose ``fabric(seed)`` builds the fabric,
            or None for the shipped MALT example.
        fabric_seed: the variant's seed (None on the shipped fabric).
    """

    key: str
    pack: tuple[str, str] | None = None
    fabric_seed: int | None = None

    @property
    def fabric(self) -> tuple[str, str, int] | None:
        """``(pack name, pack sha256, seed)`` of a variant fabric, None for the shipped one."""
        if self.pack is None or self.fabric_seed is None:
            return None
        return (self.pack[0], self.pack[1], self.fabric_seed)


def graph_key(seed: int, index: int, version: int) -> str:
    """The key of the port capacities of query (seed, index) (stored in the ground truth)."""
    return f"v{version}/{seed}/{index}"


def variant_ref(pack: VariantPack, fabric_seed: int) -> GraphRef:
    """The graph of a query on variant ``fabric_seed`` of ``pack``'s ``fabric`` hook.

    For a pack's ``generate``: it also registers ``pack`` in this process
    (:func:`evaluator.variants.register_pack`), so the process drafting the query can build
    the variant; any other process finds the pack with ``find_pack``.
    """
    register_pack(pack)
    return GraphRef(f"fabric/{pack.name}/{fabric_seed}", (pack.name, pack.sha256), fabric_seed)


def graph_ref(truth: Mapping[str, Any]) -> GraphRef:
    """The graph a ground truth names: ``graph_key``, plus ``fabric: {"seed": s}`` and the
    ``variant_pack`` reference for a query on a pack's fabric variant.

    Raises:
        VariantPackError: ``fabric`` is given without a ``variant_pack`` reference.
    """
    fabric = truth.get("fabric")
    if fabric is None:
        return GraphRef(truth["graph_key"])
    pack = truth.get("variant_pack")
    if not isinstance(pack, Mapping):
        raise VariantPackError("a MALT fabric variant needs the variant_pack that builds it")
    return GraphRef(
        truth["graph_key"], (str(pack["name"]), str(pack["sha256"])), int(fabric["seed"])
    )


def _ref(ref: GraphRef | str) -> GraphRef:
    return GraphRef(ref) if isinstance(ref, str) else ref


#: Attributes a node of each kind may carry besides ``name`` and ``type`` (malt.proto's
#: ``*_attr`` messages, flattened as :func:`apps.malt.topology.build_graph` does).
KIND_ATTRIBUTES: dict[str, frozenset[str]] = {
    "EK_JUPITER": frozenset({"jupiter_type"}),
    "EK_SUPERBLOCK": frozenset({"index_within_jupiter"}),
    "EK_PACKET_SWITCH": frozenset({"switch_loc"}),
    "EK_PORT": frozenset({"physical_capacity_bps"}),
}


def fabric_problems(graph: nx.DiGraph) -> list[str]:
    """Why ``graph`` cannot be a MALT fabric ([] when it can).

    A fabric must pass every safety constraint (:func:`apps.malt.checks.check_safety`: the
    entity kinds and relationships of paper Appendix B.1 as :data:`ALLOWED_RELATIONS`
    lists them, required attributes, the bandwidth floor, no isolated node), key every
    node ``"<KIND>:<name>"``, carry only the schema's attributes, give edges only ``type``,
    and name every port ``<switch name>.p<N>`` (the naming rule the prompt states).
    """
    problems = list(check_safety(NormalizedGraph.from_view(TopologyView(graph))).examples)
    for node, attrs in graph.nodes(data=True):
        kind, name = attrs.get("type"), attrs.get("name")
        if node != node_id(str(kind), str(name)):
            problems.append(f"node {node!r} is not keyed {kind}:{name}")
        extra = set(attrs) - {"name", "type"} - KIND_ATTRIBUTES.get(str(kind), frozenset())
        if extra:
            problems.append(f"node {node!r} has attributes outside the schema: {sorted(extra)}")
        if kind == "EK_PORT":
            switches = [p for p in graph.predecessors(node) if p.startswith("EK_PACKET_SWITCH:")]
            stem, _, number = str(name).rpartition(".p")
            if not number.isdigit() or [f"EK_PACKET_SWITCH:{stem}"] != switches:
                problems.append(f"port {node!r} is not named <switch name>.p<N>")
    for source, target, attrs in graph.edges(data=True):
        if set(attrs) != {"type"}:
            problems.append(f"edge {source}->{target} has attributes {sorted(attrs)}")
    strange = [node for node, attrs in graph.nodes(data=True) if not _json_values(attrs)]
    strange += [(s, t) for s, t, attrs in graph.edges(data=True) if not _json_values(attrs)]
    if strange:
        problems.append(f"attributes that JSON would change (tuples, sets, non-finite or "
                        f"non-str keys...): {strange[:3]}")
    return problems


def _json_values(attrs: Mapping[str, Any]) -> bool:
    """True when ``attrs`` come out of a JSON round trip the same, exact types included.

    The judge takes unchanged elements of a returned graph from its own copy of the query's
    graph (``apps.malt.checks.apply_graph_diff``), where the whole node-link form would have
    given their JSON-decoded values: the two agree only for such attributes.
    """
    try:
        again = json.loads(json.dumps(dict(attrs), allow_nan=False))
    except (TypeError, ValueError):
        return False
    return pickle.dumps(again) == pickle.dumps(dict(attrs))


@lru_cache(maxsize=8)
def _variant_graph(fabric: tuple[str, str, int]) -> nx.DiGraph:
    name, sha256, seed = fabric
    pack = find_pack("malt", {"name": name, "sha256": sha256})
    build = getattr(pack.module, "fabric", None)
    if not callable(build):
        raise VariantPackError(f"variant pack {name!r} has no fabric(seed) hook")
    graph = build(seed)
    if not isinstance(graph, nx.DiGraph) or graph.is_multigraph():
        raise VariantPackError(f"{name}: fabric({seed}) did not return a networkx DiGraph")
    problems = fabric_problems(graph)
    if problems:
        raise VariantPackError(f"{name}: fabric({seed}) is not a MALT fabric: {problems[:3]}")
    return graph


def base_graph(ref: GraphRef | str | None = None) -> nx.DiGraph:
    """The fabric of a query before its per-query capacities: the shipped MALT example, or
    the variant its pack builds (checked with :func:`fabric_problems`, kept for the last 8
    variants). Shared: never mutate it.

    Raises:
        VariantPackError: the pack is not loaded in this process (a configuration fault of the
            worker), has no ``fabric`` hook, or built something that is not a MALT fabric.
    """
    fabric = None if ref is None else _ref(ref).fabric
    return load_graph() if fabric is None else _variant_graph(fabric)


@cache
def _shipped_operands() -> Operands:
    return Operands(load_graph())


@lru_cache(maxsize=8)
def _variant_operands(fabric: tuple[str, str, int]) -> Operands:
    return Operands(_variant_graph(fabric))


def operands(ref: GraphRef | str | None = None) -> Operands:
    """Operand index of a query's fabric (the shipped one by default; built once per fabric).

    Raises:
        VariantPackError: as :func:`base_graph`.
    """
    fabric = None if ref is None else _ref(ref).fabric
    return _shipped_operands() if fabric is None else _variant_operands(fabric)


# ------------------------------------------------------------------ per-query capacities


def port_capacities(ref: GraphRef | str) -> dict[str, int]:
    """Port id -> ``physical_capacity_bps`` of a query's initial graph (deterministic).

    On the shipped fabric every packet switch gets a line rate drawn from :data:`SPEEDS_BPS`
    (10 Gbit/s and up), seeded by the ``graph_key``; each of its ports runs at that rate with
    probability 0.6, else at a rate drawn from all of :data:`SPEEDS_BPS`. On a variant the
    capacities are the fabric's own. Treat the returned dict as read-only.

    Raises:
        VariantPackError: as :func:`base_graph`.
    """
    ref = _ref(ref)
    fabric = ref.fabric
    return _shipped_capacities(ref.key) if fabric is None else _variant_capacities(fabric)


@lru_cache(maxsize=8)
def _variant_capacities(fabric: tuple[str, str, int]) -> dict[str, int]:
    return {
        port: int(attrs["physical_capacity_bps"])
        for port, attrs in _variant_graph(fabric).nodes(data=True)
        if attrs["type"] == "EK_PORT"
    }


@lru_cache(maxsize=32)
def _shipped_capacities(key: str) -> dict[str, int]:
    rng = seeded_rng("malt-capacity", key)
    ops = operands()
    capacities: dict[str, int] = {}
    # ``rng.choice(seq)`` inlined (this loop makes ~7,000 draws per query): CPython's
    # ``Random.choice`` takes ``seq[r]`` for the first ``r = getrandbits(len(seq).bit_length())``
    # below ``len(seq)``, so these draws and values are the same as ``rng.choice``'s
    # (tests/apps/malt/test_costs.py compares with the plain form and pins the digests).
    draw, bits = rng.random, rng.getrandbits
    lines, speeds = SPEEDS_BPS[1:], SPEEDS_BPS
    n_lines, n_speeds = len(lines), len(speeds)
    k_lines, k_speeds = n_lines.bit_length(), n_speeds.bit_length()
    for switch in ops.by_kind["EK_PACKET_SWITCH"]:
        pick = bits(k_lines)
        while pick >= n_lines:
            pick = bits(k_lines)
        line = lines[pick]
        for port in ops.children(switch):
            if draw() < 0.6:
                capacities[port] = line
            else:
                pick = bits(k_speeds)
                while pick >= n_speeds:
                    pick = bits(k_speeds)
                capacities[port] = speeds[pick]
    return capacities


def initial_port_attrs(ref: GraphRef | str) -> dict[str, dict[str, Any]]:
    """Port id -> its attribute dict in a query's initial graph where it differs from the
    fabric's: on the shipped fabric, the base port's attributes with ``physical_capacity_bps``
    from :func:`port_capacities` (built once per key, shared by the views of
    :func:`initial_view`, which copy one before changing it; never mutate); on a variant,
    none (the fabric carries its capacities).
    """
    ref = _ref(ref)
    return {} if ref.fabric is not None else _shipped_port_attrs(ref.key)


@lru_cache(maxsize=8)
def _shipped_port_attrs(key: str) -> dict[str, dict[str, Any]]:
    node_attrs = operands().node_attrs
    return {
        port: dict(node_attrs[port], physical_capacity_bps=capacity)
        for port, capacity in _shipped_capacities(key).items()
    }


def initial_view(ref: GraphRef | str) -> TopologyView:
    """A fresh view of a query's initial graph (its fabric with its port capacities).

    The port attribute dicts are built once per key (:func:`initial_port_attrs`, about
    1-2 ms) and shared copy-on-write (``TopologyView.owned_attrs``), so another view of a
    recent key costs one C-level dict update.

    Raises:
        VariantPackError: as :func:`base_graph`.
    """
    view = TopologyView(base_graph(ref))
    view.replaced_attrs.update(initial_port_attrs(ref))
    return view


def query_graph(ref: GraphRef | str) -> nx.DiGraph:
    """The graph an agent receives for a query (shared; treat as read-only).

    Raises:
        VariantPackError: as :func:`base_graph`.
    """
    ref = _ref(ref)
    fabric = ref.fabric
    return _shipped_query_graph(ref.key) if fabric is None else _variant_graph(fabric)


@lru_cache(maxsize=2)
def _shipped_query_graph(key: str) -> nx.DiGraph:
    graph = load_graph().copy()
    for port, capacity in _shipped_capacities(key).items():
        graph.nodes[port]["physical_capacity_bps"] = capacity
    return graph
