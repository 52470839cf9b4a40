"""The graph of each MALT query: the fabric, its per-query port capacities, and the operand
index drafting reads (paper Appendix B.1-B.2).

A query's graph is the shipped MALT example (:func:`apps.malt.topology.load_graph`) with the
port capacities its ``graph_key`` names (:func:`port_capacities`). Everything that reads a
query's graph goes through this module: ground-truth execution, the graph handed to the
agent's sandbox (:func:`query_graph`), the judge's expected and unchanged topologies
(:func:`initial_view`).
"""

from __future__ import annotations

import hashlib
import random
from functools import cache, lru_cache
from typing import Any

import networkx as nx

from apps.malt.overlay import TopologyView
from apps.malt.topology import CONTAINS, load_graph

GBPS = 1_000_000_000
#: Port rates in bit/s: the IEEE 802.3 Ethernet rates from 1 to 400 Gbit/s (1 Gbit/s is the
#: smallest capacity of the MALT example and our safety floor).
SPEEDS_BPS = tuple(g * GBPS for g in (1, 10, 25, 40, 100, 200, 400))


def seeded_rng(*parts: object) -> random.Random:
    """A ``random.Random`` seeded from the SHA-256 of ``parts`` joined by ``/`` (stable across
    processes and Python versions, unlike ``hash``)."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))



class Operands:
    """Index of the base graph's *topology* to draw operands from: sorted node lists by kind,
    containment children, descendants, the kinds below a node and the ports within it.

    Everything here depends only on the base graph's nodes, kinds and RK_CONTAINS edges, which
    no query changes (the shared graph is read-only; per-query port capacities live in
    :func:`port_capacities` and in views, never here). So one index per process serves every
    query, whatever its capacities (the drafts walked whole subtrees per
    question before). Per-node results are computed on first use and kept.
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


@cache
def operands() -> Operands:
    """Operand index of the shared MALT graph (built once per process)."""
    return Operands(load_graph())


# ------------------------------------------------------------------ per-query capacities


def graph_key(seed: int, index: int, version: int) -> str:
    """The key of the port capacities of query (seed, index) (stored in the ground truth)."""
    return f"v{version}/{seed}/{index}"


@lru_cache(maxsize=32)
def port_capacities(key: str) -> dict[str, int]:
    """Port id -> ``physical_capacity_bps`` of the query graph named ``key`` (deterministic).

    Every packet switch gets a line rate drawn from :data:`SPEEDS_BPS` (10 Gbit/s and up); each
    of its ports runs at that rate with probability 0.6, else at a rate drawn from all of
    :data:`SPEEDS_BPS`. Treat the returned dict as read-only.
    """
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


@lru_cache(maxsize=8)
def initial_port_attrs(key: str) -> dict[str, dict[str, Any]]:
    """Port id -> its attribute dict in the query graph ``key``: the base port's attributes
    with ``physical_capacity_bps`` from :func:`port_capacities` (shared by the views of
    :func:`initial_view`, which copy one before changing it; never mutate)."""
    node_attrs = operands().node_attrs
    return {
        port: dict(node_attrs[port], physical_capacity_bps=capacity)
        for port, capacity in port_capacities(key).items()
    }


def initial_view(key: str) -> TopologyView:
    """A fresh view of the MALT graph with the port capacities of ``key``.

    The port attribute dicts are built once per key (:func:`initial_port_attrs`, about
    1-2 ms) and shared copy-on-write (``TopologyView.owned_attrs``), so another view of a
    recent key costs one C-level dict update.
    """
    view = TopologyView(load_graph())
    view.replaced_attrs.update(initial_port_attrs(key))
    return view


@lru_cache(maxsize=2)
def query_graph(key: str) -> nx.DiGraph:
    """The graph an agent receives for the query of ``key`` (shared; treat as read-only)."""
    graph = load_graph().copy()
    for port, capacity in port_capacities(key).items():
        graph.nodes[port]["physical_capacity_bps"] = capacity
    return graph
