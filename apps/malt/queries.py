"""Seeded MALT query generation (paper Appendix B.2, Table 4), version 2.

Labels and levels:

======  =======================================================================
level   labels
======  =======================================================================
1       ``add``, ``remove``, ``update``, ``list``, ``count``, ``rank``
2       ``remove+count``, ``remove+list``, ``remove+rank``, ``if-else``
3       ``add+count``, ``add+list``, ``add+rank``, ``for-loop``, ``for-loop+if-else``
======  =======================================================================

Levels 1-3 of Table 4 are kept as published (level 1 also gets ``update`` and ``count``, which
Appendix B.2 lists among the basic operations). The control-sequence forms of B.2 are placed by
the number of operations they run: ``if-else`` evaluates a condition and runs one of two
single-operation branches before a question (two operations, like level 2); ``for-loop`` runs
an operation on each member of a set of nodes before a question (several operations, level
3), and ``for-loop+if-else`` adds a per-member condition (level 3).

What makes a query need understanding:

* **Wording.** Every sentence kind has at least five phrasings written for this project (the
  paper's Table 4 wording is one of them), drawn by the seed. Operands are stated tersely: node
  names as the topology names them (with the kind word where a name is shared by a switch, its
  chassis and its control point), capacities in Gbit/s or bit/s by phrasing, and names of new
  nodes often left to the naming rule the prompt states once (:mod:`apps.malt.prompt`).
* **Operands found by a property.** Many operands are given by what they are ("the slowest
  port of switch X", "the aggregation block of superblock Y with the most capacity"); the
  generator resolves them on the query's own graph, and only unique extremes are used.
* **Data that varies.** Every query has its own port capacities (:func:`port_capacities`),
  drawn from its seed and index among the IEEE 802.3 Ethernet rates, so capacity sums and
  rankings depend on the graph, not on counting ports, and rankings are rarely ties.

Determinism: the batch of a seed is an infinite stream; within each block of 15 consecutive
indices every label occurs once, in an order drawn from the seed. The query at (seed, index)
depends on nothing else, so filtering by level keeps each query's index and content.
Operands, wording and capacities are drawn with ``random.Random`` seeded per query.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import networkx as nx

from apps.malt.operations import Op, asks_question, changes_topology, execute
from apps.malt.overlay import TopologyView
from apps.malt.topology import CONTAINS, load_graph, split_node_id

LEVEL_LABELS: dict[int, tuple[tuple[str, ...], ...]] = {
    1: (("add",), ("remove",), ("update",), ("list",), ("count",), ("rank",)),
    2: (("remove", "count"), ("remove", "list"), ("remove", "rank"), ("if-else",)),
    3: (
        ("add", "count"),
        ("add", "list"),
        ("add", "rank"),
        ("for-loop",),
        ("for-loop", "if-else"),
    ),
}
ALL_LABELS: tuple[tuple[tuple[str, ...], int], ...] = tuple(
    (labels, level) for level, group in LEVEL_LABELS.items() for labels in group
)
BLOCK = len(ALL_LABELS)

GBPS = 1_000_000_000
#: Port rates in bit/s: the IEEE 802.3 Ethernet rates from 1 to 400 Gbit/s (1 Gbit/s is the
#: smallest capacity of the MALT example and our safety floor).
SPEEDS_BPS = tuple(g * GBPS for g in (1, 10, 25, 40, 100, 200, 400))
#: Port capacities used for new or updated ports, in bit/s.
CAPACITIES_BPS = SPEEDS_BPS
#: Number of ports a new packet switch comes with.
NEW_SWITCH_PORTS = (1, 2, 4, 8)
#: Share of operands given by a property instead of a name, per level.
PROPERTY_SHARE = {1: 0.8, 2: 0.9, 3: 0.9}


@dataclass(frozen=True)
class Draft:
    """A generated query before it becomes a :class:`evaluator.types.Query`."""

    level: int
    labels: tuple[str, ...]
    question: str
    program: list[Op]
    graph_key: str


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def label_at(seed: int, index: int, version: int) -> tuple[tuple[str, ...], int]:
    """Return ``(labels, level)`` of the query at ``index`` of ``seed``'s stream."""
    block, offset = divmod(index, BLOCK)
    order = list(range(BLOCK))
    _rng("malt", version, seed, "block", block).shuffle(order)
    return ALL_LABELS[order[offset]]


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
    rng = _rng("malt-capacity", key)
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


# ------------------------------------------------------------------ wording

#: Words for a node of each kind (the first is the plain one).
KIND_WORDS: dict[str, tuple[str, ...]] = {
    "EK_JUPITER": ("fabric", "Jupiter fabric"),
    "EK_SUPERBLOCK": ("superblock",),
    "EK_SPINEBLOCK": ("spine block", "spineblock"),
    "EK_AGG_BLOCK": ("aggregation block", "agg block"),
    "EK_RACK": ("rack",),
    "EK_CHASSIS": ("chassis",),
    "EK_CONTROL_DOMAIN": ("control domain",),
    "EK_CONTROL_POINT": ("control point",),
    "EK_PACKET_SWITCH": ("packet switch", "switch"),
    "EK_PORT": ("port",),
}
PLURALS: dict[str, str] = {
    "EK_SUPERBLOCK": "superblocks",
    "EK_SPINEBLOCK": "spine blocks",
    "EK_AGG_BLOCK": "aggregation blocks",
    "EK_RACK": "racks",
    "EK_CHASSIS": "chassis",
    "EK_CONTROL_DOMAIN": "control domains",
    "EK_CONTROL_POINT": "control points",
    "EK_PACKET_SWITCH": "packet switches",
    "EK_PORT": "ports",
}
#: Kinds whose names are shared (a switch, its chassis and its control point): always with a
#: kind word.
_SHARED_NAMES = frozenset({"EK_PACKET_SWITCH", "EK_CHASSIS", "EK_CONTROL_POINT"})


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _low(text: str) -> str:
    return text[:1].lower() + text[1:] if text[1:2].islower() or text[1:2] == " " else text


@dataclass(frozen=True)
class Ref:
    """An operand: the node, the words naming it, and a container the words mention."""

    node: str
    text: str
    scope: str | None = None


class Ctx:
    """Drawing state of one query: operand index, the query's port capacities, rng, level.

    Drafting only reads the query's initial graph, which is the base graph with the port
    capacities of ``capacities`` (:func:`port_capacities`), exactly what :func:`initial_view`
    shows; so capacities are read from that dict and sums taken over the topology index's
    ports, without building a view.
    """

    def __init__(
        self, ops: Operands, capacities: dict[str, int], rng: random.Random, level: int
    ) -> None:
        self.ops, self.capacities, self.rng, self.level = ops, capacities, rng, level

    def pick(self, options: tuple[str, ...] | list[str]) -> str:
        """One of ``options`` (seeded)."""
        return self.rng.choice(options)

    def named(self, node: str) -> Ref:
        """``node`` by its name, with a kind word unless the name alone is unambiguous."""
        kind, name = split_node_id(node)
        if kind not in _SHARED_NAMES and self.rng.random() < 0.4:
            return Ref(node, f"`{name}`")
        return Ref(node, f"{self.pick(KIND_WORDS[kind])} `{name}`")

    def cap_text(self, bps: int) -> str:
        """A capacity in Gbit/s or bit/s, by phrasing."""
        if self.rng.random() < 0.7:
            return f"{bps // GBPS} Gbit/s"
        return f"{bps} bit/s"

    def port_capacity(self, port: str) -> Any:
        """``physical_capacity_bps`` of a base port in the query's initial graph."""
        capacity = self.capacities.get(port)
        if capacity is None:
            return self.ops.graph.nodes[port]["physical_capacity_bps"]
        return capacity

    def capacity(self, node: str) -> int:
        """Total capacity of ``node`` in the query's initial graph, bit/s (as
        :func:`apps.malt.operations.capacity_bps` computes it on :func:`initial_view`)."""
        capacities, base = self.capacities, self.ops.graph.nodes
        total = 0
        for port in self.ops.ports_within(node):
            capacity = capacities.get(port)
            if capacity is None:
                capacity = base[port].get("physical_capacity_bps", 0)
            total += int(capacity)
        return total

    def operand(self, kind: str) -> Ref:
        """A node of ``kind``: by a property (level's share, when one is unique) or by name."""
        if self.rng.random() < PROPERTY_SHARE[self.level]:
            found = self._by_property(kind)
            if found is not None:
                return found
        return self.named(self.rng.choice(self.ops.by_kind[kind]))

    def _extreme(self, candidates: list[str]) -> tuple[str, bool] | None:
        """``(node, largest?)``: a candidate with the unique highest or lowest capacity."""
        values = {c: self.capacity(c) for c in candidates}
        for largest in self.rng.sample([True, False], 2):
            best = max(values.values()) if largest else min(values.values())
            winners = [c for c, v in values.items() if v == best]
            if len(winners) == 1:
                return winners[0], largest
        return None

    def _by_property(self, kind: str) -> Ref | None:
        ops = self.ops
        scope: Ref | None = None
        if kind == "EK_PACKET_SWITCH":
            scope = self.named(ops.pick(self.rng, "EK_AGG_BLOCK", "EK_SPINEBLOCK"))
        elif kind == "EK_PORT":
            switch = ops.pick(self.rng, "EK_PACKET_SWITCH")
            scope = self.named(switch)
            if self.level > 1 and self.rng.random() < 0.3:
                scope = self.operand("EK_PACKET_SWITCH")
        elif kind == "EK_CHASSIS":
            scope = self.named(self.rng.choice(ops.by_kind["EK_RACK"]))
        elif kind == "EK_AGG_BLOCK":
            scope = self.named(self.rng.choice(ops.by_kind["EK_SUPERBLOCK"]))
        elif kind not in ("EK_SPINEBLOCK", "EK_SUPERBLOCK", "EK_RACK"):
            return None
        candidates = (
            [c for c in ops.children(scope.node) if ops.kind(c) == kind]
            if scope is not None
            else list(ops.by_kind[kind])
        )
        found = self._extreme(candidates)
        if found is None:
            return None
        node, largest = found
        word = self.pick(KIND_WORDS[kind])
        where = f" of {scope.text}" if scope is not None else ""
        inside = f" in {scope.text}" if scope is not None else ""
        pool: tuple[str, ...]
        if kind == "EK_PORT" and scope is not None and not scope.text.endswith("`"):
            # the switch is itself described: "with the ... capacity" would be ambiguous
            pool = (f"the fastest port{where}",) if largest else (f"the slowest port{where}",)
        elif kind == "EK_PORT":
            pool = (
                (f"the fastest port{where}", f"the port{where} with the highest capacity")
                if largest
                else (f"the slowest port{where}", f"the port{where} with the lowest capacity")
            )
        else:
            pool = (
                (
                    f"the {word}{where} with the most capacity",
                    f"the highest-capacity {word}{inside}",
                    f"the largest {word}{inside}",
                    f"the busiest {word}{inside}",
                )
                if largest
                else (
                    f"the {word}{where} with the least capacity",
                    f"the lowest-capacity {word}{inside}",
                    f"the smallest {word}{inside}",
                    f"the least loaded {word}{inside}",
                )
            )
        return Ref(node, self.pick(pool), scope.node if scope is not None else None)


# ---------------------------------------------------------------- sentences

_LIST = (
    "List all the child nodes of {x}.",  # the paper's wording (Table 4)
    "What does {x} directly contain?",
    "Which nodes sit directly under {x}?",
    "Give the direct children of {x}.",
    "Enumerate the nodes one containment level below {x}.",
)
_COUNT = (
    "Count the number of nodes with type={kind} under {x}.",  # the paper's wording
    "How many {plural} does {x} contain?",
    "How many {plural} are there in {x}?",
    "Give the number of {plural} inside {x}.",
    "Count the {plural} in {x}.",
)
_RANK = (
    "Rank the child nodes of {x} based on the total bandwidth.",  # the paper's wording
    "Order the direct children of {x} by total capacity.",
    "Rank everything {x} directly contains by capacity.",
    "Sort the children of {x} from the largest total capacity to the smallest.",
    "Which direct child of {x} has the most capacity? Rank them all.",
)
_CAPACITY = (
    "What is the total capacity of {x}{unit}?",
    "Report the total capacity of {x}{unit}.",
    "How much port capacity does {x} have in total{unit}?",
    "Sum the capacity of every port in {x}{unit}.",
    "Give the total bandwidth of {x}{unit}.",
)
_REMOVE = (
    "Remove {x} from the graph.",  # the paper's wording
    "Decommission {x}.",
    "Take {x} out of the topology.",
    "Delete {x} together with everything it contains.",
    "{X} is being retired; remove it.",
)
_UPDATE = (
    "Update {x} to {cap}.",
    "Set the capacity of {x} to {cap}.",
    "Change the physical capacity of {x} to {cap}.",
    "Reconfigure {x} to run at {cap}.",
    "{X} now runs at {cap}; update the topology.",
)
_ADD_PORT_NAMED = (
    "Add a new PORT `{name}` with type=EK_PORT to {x}, capacity {cap}.",  # paper-like
    "Add a new port `{name}` of {cap} to {x}.",
    "Attach a {cap} port called `{name}` to {x}.",
)
_ADD_PORT_RULE = (
    "Add one more {cap} port to {x}.",
    "{X} gets an extra port running at {cap}.",
    "Install a new {cap} port on {x}.",
)
_ADD_SWITCH_NAMED = (
    "Add new packet switch `{name}` to {x}: stage {stage}, {k} {ports} of {cap}.",  # paper-like
    "Add switch `{name}` at stage {stage} to {x} and give it {k} {ports} at {cap}.",
)
_ADD_SWITCH_RULE = (
    "Install a stage-{stage} packet switch with {k} {ports} of {cap} in {x}.",
    "{X} gets a new stage-{stage} switch with {k} {cap} {ports}.",
    "Put one more switch into {x} (stage {stage}); it has {k} {ports} of {cap}.",
)
_JOIN = (
    "{a} {B}",
    "{a} Then {b}",
    "{a} After that, {b}",
    "{a} In the updated topology, {b}",
    "First, {la} Second, {b}",
)


def _fill(template: str, ref: Ref | None = None, **values: object) -> str:
    if ref is not None:
        values["x"], values["X"] = ref.text, _cap(ref.text)
    return template.format(**values)


def _join(ctx: Ctx, first: str, second: str) -> str:
    return ctx.pick(_JOIN).format(a=first, la=_low(first), b=_low(second), B=_cap(second))


def _question(ctx: Ctx, kind: str, target: Ref) -> tuple[Op, str]:
    node = target.node
    if kind == "list":
        return {"op": "list", "node": node}, _fill(ctx.pick(_LIST), target)
    if kind == "rank":
        return {"op": "rank", "node": node}, _fill(ctx.pick(_RANK), target)
    if kind == "capacity":
        unit = ctx.pick(("", "", " in bit/s", " in Gbit/s"))
        op: Op = {"op": "capacity", "node": node}
        if unit == " in Gbit/s":
            op["unit_bps"] = GBPS
        return op, _fill(ctx.pick(_CAPACITY), target, unit=unit)
    kinds = list(ctx.ops.kinds_below(node)) or ["EK_PORT"]
    counted = ctx.pick(kinds)
    sentence = _fill(ctx.pick(_COUNT), target, kind=counted, plural=PLURALS[counted])
    return {"op": "count", "node": node, "kind": counted}, sentence


def _follow_up(ctx: Ctx, node: str, mentioned: str | None) -> Ref:
    """A container to ask about after a change: "that <kind>" when the text named it."""
    if node == mentioned and ctx.rng.random() < 0.5:
        return Ref(node, f"that {ctx.pick(KIND_WORDS[ctx.ops.kind(node)])}")
    return ctx.named(node)


def _add_op(ctx: Ctx) -> tuple[Op, str, str, str | None]:
    """A random add: ``(op, sentence, the node added to, the container the text names)``."""
    ops, rng = ctx.ops, ctx.rng
    capacity = rng.choice(CAPACITIES_BPS)
    cap = ctx.cap_text(capacity)
    if rng.random() < 0.5:
        target = ctx.operand("EK_PACKET_SWITCH")
        name = ops.new_port_name(target.node)
        op: Op = {"op": "add_port", "parent": target.node, "name": name, "capacity_bps": capacity}
        pool = _ADD_PORT_NAMED if rng.random() < 0.4 else _ADD_PORT_RULE
        return op, _fill(ctx.pick(pool), target, name=name, cap=cap), target.node, target.node
    target = ctx.operand(ctx.pick(("EK_AGG_BLOCK", "EK_SPINEBLOCK")))
    stage = rng.choice(ops.stages(target.node))
    name = ops.new_switch_name(target.node, stage)
    ports = rng.choice(NEW_SWITCH_PORTS)
    op = {
        "op": "add_switch",
        "parent": target.node,
        "name": name,
        "stage": stage,
        "ports": ports,
        "port_capacity_bps": capacity,
    }
    switch_pool = _ADD_SWITCH_NAMED if rng.random() < 0.4 else _ADD_SWITCH_RULE
    sentence = _fill(
        ctx.pick(switch_pool),
        target,
        name=name,
        stage=stage,
        k=ports,
        ports="port" if ports == 1 else "ports",
        cap=cap,
    )
    return op, sentence, target.node, target.node


def _remove_op(ctx: Ctx) -> tuple[Op, str, str, str | None]:
    """A random remove: ``(op, sentence, a containment parent of the removed node, the
    container the text names)``."""
    target = ctx.operand(ctx.pick(("EK_PORT", "EK_PACKET_SWITCH", "EK_CHASSIS")))
    parents = ctx.ops.parents(target.node)
    parent = target.scope if target.scope in parents else ctx.rng.choice(parents)
    return (
        {"op": "remove", "node": target.node},
        _fill(ctx.pick(_REMOVE), target),
        parent,
        target.scope,
    )


# ------------------------------------------------------------------------ labels


def _l1_add(ctx: Ctx) -> tuple[str, list[Op]]:
    op, sentence, _, _ = _add_op(ctx)
    return sentence, [op]


def _l1_remove(ctx: Ctx) -> tuple[str, list[Op]]:
    op, sentence, _, _ = _remove_op(ctx)
    return sentence, [op]


def _l1_update(ctx: Ctx) -> tuple[str, list[Op]]:
    port = ctx.operand("EK_PORT")
    current = ctx.port_capacity(port.node)
    capacity = ctx.rng.choice([c for c in CAPACITIES_BPS if c != current])
    op = {"op": "set_capacity", "node": port.node, "capacity_bps": capacity}
    return _fill(ctx.pick(_UPDATE), port, cap=ctx.cap_text(capacity)), [op]


def _l1_question(kind: str, parent_kinds: tuple[str, ...]) -> Callable[[Ctx], tuple[str, list[Op]]]:
    def make(ctx: Ctx) -> tuple[str, list[Op]]:
        op, sentence = _question(ctx, kind, ctx.operand(ctx.pick(parent_kinds)))
        return sentence, [op]

    return make


_CONTAINERS = (
    "EK_JUPITER",
    "EK_SUPERBLOCK",
    "EK_SPINEBLOCK",
    "EK_AGG_BLOCK",
    "EK_RACK",
    "EK_CHASSIS",
    "EK_CONTROL_DOMAIN",
    "EK_PACKET_SWITCH",
)
#: Ranking a control domain's control points is left out: they contain no ports (all 0).
_RANKABLE = ("EK_JUPITER", "EK_SUPERBLOCK", "EK_SPINEBLOCK", "EK_AGG_BLOCK", "EK_RACK")


def _sequence(first: str, then: str) -> Callable[[Ctx], tuple[str, list[Op]]]:
    def make(ctx: Ctx) -> tuple[str, list[Op]]:
        maker = _add_op if first == "add" else _remove_op
        op, sentence, parent, mentioned = maker(ctx)
        if then == "rank" and ctx.ops.kind(parent) not in _RANKABLE + ("EK_PACKET_SWITCH",):
            # a chassis holds one switch and a control point: rank the switch's block instead
            parent = next(
                p for p in ctx.ops.parents(op["node"]) if ctx.ops.kind(p) in _RANKABLE
            )
        if then == "count" and ctx.rng.random() < 0.3 and ctx.ops.parents(parent):
            parent = ctx.rng.choice(ctx.ops.parents(parent))  # ask one level higher up
        question_op, question = _question(ctx, then, _follow_up(ctx, parent, mentioned))
        return _join(ctx, sentence, question), [op, question_op]

    return make


_IF_ELSE = (
    "If the total capacity of {x} is at least {t}, remove {victim}; otherwise add a {cap} "
    "port{new} to it.",
    "Check {x}: when its capacity reaches {t}, take out {victim}, else give it a new {cap} "
    "port{new}.",
    "{X} -- if it has {t} or more of capacity, remove {victim}; if not, add a new port{new} of "
    "{cap}.",
    "Should {x} have a total capacity of {t} or more, delete {victim}; otherwise install a "
    "{cap} port{new} on it.",
    "Compare the total capacity of {x} with {t}: at or above it, remove {victim}; below it, "
    "add a {cap} port{new}.",
)


def _if_else(ctx: Ctx) -> tuple[str, list[Op]]:
    rng, ops = ctx.rng, ctx.ops
    switch = ctx.operand("EK_PACKET_SWITCH")
    actual = ctx.capacity(switch.node)
    threshold = max(GBPS, actual + rng.choice((-3, -2, -1, 0, 1, 2, 3)) * 10 * GBPS)
    ports = ops.children(switch.node)
    found = ctx._extreme(ports)
    if found is not None:
        victim_node, largest = found
        victim = "its fastest port" if largest else "its slowest port"
    else:
        victim_node = rng.choice(ports)
        victim = f"its port `{ops.name(victim_node)}`"
    name = ops.new_port_name(switch.node)
    capacity = rng.choice(CAPACITIES_BPS)
    new = f" `{name}`" if rng.random() < 0.4 else ""
    sentence = _fill(
        ctx.pick(_IF_ELSE),
        switch,
        t=ctx.cap_text(threshold),
        victim=victim,
        cap=ctx.cap_text(capacity),
        new=new,
    )
    final_op, final_sentence = _question(
        ctx, ctx.pick(("list", "capacity", "rank")), _follow_up(ctx, switch.node, switch.node)
    )
    program = [
        {
            "op": "if",
            "cond": {
                "query": {"op": "capacity", "node": switch.node},
                "cmp": ">=",
                "value": threshold,
            },
            "then": [{"op": "remove", "node": victim_node}],
            "else": [
                {"op": "add_port", "parent": switch.node, "name": name, "capacity_bps": capacity}
            ],
        },
        final_op,
    ]
    return _join(ctx, sentence, final_sentence), program


_FOR_ADD = (
    "For each packet switch in {x}, add one new port of {cap}.",
    "Give every switch of {x} one more {cap} port.",
    "Add a {cap} port to each packet switch that {x} contains.",
    "Every switch in {x} gets an extra port at {cap}.",
    "Loop over the switches of {x} and add a new {cap} port to each.",
)
_FOR_SET = (
    "Upgrade every port of {x} slower than {t} to {cap}.",
    "For each port of {x} with a capacity below {t}, set the capacity to {cap}.",
    "Set all ports of {x} under {t} to {cap}.",
    "Each port in {x} running below {t} should be reconfigured to {cap}.",
    "Raise every port of {x} below {t} to {cap}.",
)


def _for_loop(ctx: Ctx) -> tuple[str, list[Op]]:
    rng, ops = ctx.rng, ctx.ops
    if rng.random() < 0.5:
        block = ctx.operand(ctx.pick(("EK_AGG_BLOCK", "EK_SPINEBLOCK")))
        capacity = rng.choice(CAPACITIES_BPS)
        number = 17  # every switch of the example has ports p1..p16
        body = [
            {
                "op": "add_port",
                "parent": "$item",
                "name": f"$item_name.p{number}",
                "capacity_bps": capacity,
            }
        ]
        sentence = _fill(ctx.pick(_FOR_ADD), block, cap=ctx.cap_text(capacity))
        final_op, final_sentence = _question(
            ctx, ctx.pick(("capacity", "rank")), _follow_up(ctx, block.node, block.node)
        )
        items = {"children_of": block.node, "kind": "EK_PACKET_SWITCH"}
        program = [{"op": "for_each", "items": items, "body": body}, final_op]
        return _join(ctx, sentence, final_sentence), program
    switch = ctx.operand("EK_PACKET_SWITCH")
    ports = ops.children(switch.node)
    speeds = sorted({ctx.port_capacity(p) for p in ports})
    if len(speeds) < 2:
        speeds = [speeds[0], speeds[0] + GBPS]
    threshold = rng.choice(speeds[1:])
    chosen = [p for p in ports if ctx.port_capacity(p) < threshold]
    capacity = rng.choice([c for c in CAPACITIES_BPS if c >= threshold] or [CAPACITIES_BPS[-1]])
    body = [{"op": "set_capacity", "node": "$item", "capacity_bps": capacity}]
    sentence = _fill(
        ctx.pick(_FOR_SET), switch, t=ctx.cap_text(threshold), cap=ctx.cap_text(capacity)
    )
    after = {capacity if p in chosen else ctx.port_capacity(p) for p in ports}
    final_kind = ctx.pick(("capacity", "rank")) if len(after) > 1 else "capacity"
    final_op, final_sentence = _question(
        ctx, final_kind, _follow_up(ctx, switch.node, switch.node)
    )
    program = [{"op": "for_each", "items": {"nodes": sorted(chosen)}, "body": body}, final_op]
    return _join(ctx, sentence, final_sentence), program


_FOR_IF = (
    "For each packet switch in {x}: if {cond}, add a new {cap} port to it; otherwise remove "
    "its highest-numbered port.",
    "Go through the switches of {x}. Those where {cond} get one more {cap} port; the others "
    "lose their highest-numbered port.",
    "In {x}, every switch for which {cond} gets an extra {cap} port, and every other switch "
    "has its highest-numbered port removed.",
    "For every switch of {x}, add a {cap} port when {cond}, else delete its highest-numbered "
    "port.",
    "Loop over the packet switches of {x}: when {cond}, add a new {cap} port; otherwise remove "
    "the port with the highest number.",
)


def _for_loop_if_else(ctx: Ctx) -> tuple[str, list[Op]]:
    rng, ops = ctx.rng, ctx.ops
    block = ctx.operand(ctx.pick(("EK_AGG_BLOCK", "EK_SPINEBLOCK")))
    capacity = rng.choice(CAPACITIES_BPS)
    switches = ops.children(block.node)
    if rng.random() < 0.5:
        stage = rng.choice(ops.stages(block.node))
        query: Op = {"op": "stage", "node": "$item"}
        cmp, value = "==", stage
        cond = ctx.pick((f"it is at stage {stage}", f"it sits in stage {stage}"))
    else:
        totals = sorted(ctx.capacity(s) for s in switches)
        value = totals[len(totals) // 2]
        query, cmp = {"op": "capacity", "node": "$item"}, "<"
        cond = f"its total capacity is below {ctx.cap_text(value)}"
    body = [
        {
            "op": "if",
            "cond": {"query": query, "cmp": cmp, "value": value},
            "then": [
                {
                    "op": "add_port",
                    "parent": "$item",
                    "name": "$item_name.p17",
                    "capacity_bps": capacity,
                }
            ],
            "else": [{"op": "remove", "node": "EK_PORT:$item_name.p16"}],
        }
    ]
    sentence = _fill(ctx.pick(_FOR_IF), block, cond=cond, cap=ctx.cap_text(capacity))
    final_op, final_sentence = _question(
        ctx, ctx.pick(("capacity", "rank", "count")), _follow_up(ctx, block.node, block.node)
    )
    items = {"children_of": block.node, "kind": "EK_PACKET_SWITCH"}
    program = [{"op": "for_each", "items": items, "body": body}, final_op]
    return _join(ctx, sentence, final_sentence), program


MAKERS: dict[tuple[str, ...], Callable[[Ctx], tuple[str, list[Op]]]] = {
    ("add",): _l1_add,
    ("remove",): _l1_remove,
    ("update",): _l1_update,
    ("list",): _l1_question("list", _CONTAINERS),
    ("count",): _l1_question("count", _CONTAINERS),
    ("rank",): _l1_question("rank", _RANKABLE + ("EK_PACKET_SWITCH",)),
    ("remove", "count"): _sequence("remove", "count"),
    ("remove", "list"): _sequence("remove", "list"),
    ("remove", "rank"): _sequence("remove", "rank"),
    ("if-else",): _if_else,
    ("add", "count"): _sequence("add", "count"),
    ("add", "list"): _sequence("add", "list"),
    ("add", "rank"): _sequence("add", "rank"),
    ("for-loop",): _for_loop,
    ("for-loop", "if-else"): _for_loop_if_else,
}


def answer_kind(program: list[Op]) -> str:
    """``graph``, ``set``, ``ranking`` or ``number``: the type of the program's answer."""
    last = [op["op"] for op in program if op["op"] in ("list", "rank", "count", "capacity")]
    if not last:
        return "graph"
    return {"list": "set", "rank": "ranking"}.get(last[-1], "number")


def draft(seed: int, index: int, version: int) -> Draft:
    """Generate the query at ``index`` of ``seed``'s stream (pure function of its arguments)."""
    labels, level = label_at(seed, index, version)
    rng = _rng("malt", version, seed, index)
    key = graph_key(seed, index, version)
    ctx = Ctx(operands(), port_capacities(key), rng, level)
    question, program = MAKERS[labels](ctx)
    return Draft(level=level, labels=labels, question=question, program=program, graph_key=key)


def ground_truth(program: list[Op], key: str) -> tuple[dict[str, Any], TopologyView]:
    """Execute ``program`` on a fresh view of the query graph ``key`` (:func:`initial_view`).

    Returns the ground-truth JSON (``program``, ``graph_key``, ``answer_kind``,
    ``changes_topology``, ``expected`` — ``None`` for graph answers —, and a summary of the
    final topology) and the view holding the expected final topology. Raises
    ``ProgramError`` on a bad program.
    """
    view = initial_view(key)
    value = execute(view, program)
    kind = answer_kind(program)
    initial = port_capacities(key)
    updated = sum(
        1
        for node, attrs in view.replaced_attrs.items()
        if attrs.get("physical_capacity_bps") != initial.get(node)
    )
    truth: dict[str, Any] = {
        "program": program,
        "graph_key": key,
        "answer_kind": kind,
        "changes_topology": changes_topology(program),
        "expected": value if asks_question(program) else None,
        "final_topology": {
            "nodes": view.number_of_nodes(),
            "removed": len(view.removed),
            "added": len(view.added_nodes),
            "updated": updated,
        },
    }
    return truth, view
