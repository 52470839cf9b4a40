"""Seeded MALT query generation (paper Appendix B.2, Table 4).

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

Determinism: the batch of a seed is an infinite stream; within each block of 15 consecutive
indices every label occurs once, in an order drawn from the seed. The query at (seed, index)
depends on nothing else, so filtering by level keeps each query's index and content.
Operands are drawn from the live MALT graph with ``random.Random`` seeded per query.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import networkx as nx

from apps.malt.operations import Op, asks_question, changes_topology, execute
from apps.malt.overlay import TopologyView
from apps.malt.topology import CONTAINS, load_graph

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

#: Port capacities used for new or updated ports, in bit/s (all >= the 1 Gbit/s floor).
CAPACITIES_BPS = (1_000_000_000, 2_000_000_000, 4_000_000_000, 10_000_000_000, 40_000_000_000)
#: Number of ports a new packet switch comes with.
NEW_SWITCH_PORTS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Draft:
    """A generated query before it becomes a :class:`evaluator.types.Query`."""

    level: int
    labels: tuple[str, ...]
    question: str
    program: list[Op]


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
    """Sorted node lists of the base graph, by kind, to draw operands from."""

    def __init__(self, graph: nx.DiGraph) -> None:
        self.graph = graph
        self.by_kind: dict[str, list[str]] = {}
        for node, attrs in graph.nodes(data=True):
            self.by_kind.setdefault(attrs["type"], []).append(node)
        for nodes in self.by_kind.values():
            nodes.sort()

    def pick(self, rng: random.Random, *kinds: str) -> str:
        """A node of one of ``kinds`` (the kind first, uniformly, then the node)."""
        return rng.choice(self.by_kind[rng.choice(kinds)])

    def name(self, node: str) -> str:
        """The ``name`` attribute of a base node."""
        name: str = self.graph.nodes[node]["name"]
        return name

    def children(self, node: str) -> list[str]:
        """Direct RK_CONTAINS children of a base node, sorted."""
        graph = self.graph
        return sorted(c for c in graph.successors(node) if graph.edges[node, c]["type"] == CONTAINS)

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


def _lower(sentence: str) -> str:
    return sentence[:1].lower() + sentence[1:]


def _gbps(bps: int) -> str:
    return f"{bps} bit/s ({bps // 1_000_000_000} Gbit/s)"


# ------------------------------------------------------------------ building blocks


def _add_op(ops: Operands, rng: random.Random) -> tuple[Op, str, str]:
    """A random add: ``(op, sentence, node to ask about afterwards)``."""
    if rng.random() < 0.5:
        switch = ops.pick(rng, "EK_PACKET_SWITCH")
        name = ops.new_port_name(switch)
        capacity = rng.choice(CAPACITIES_BPS)
        op = {"op": "add_port", "parent": switch, "name": name, "capacity_bps": capacity}
        sentence = (
            f"Add a new port named `{name}` (node id `EK_PORT:{name}`) with physical_capacity_bps "
            f"{_gbps(capacity)} to the packet switch `{switch}`."
        )
        return op, sentence, switch
    block = ops.pick(rng, "EK_AGG_BLOCK", "EK_SPINEBLOCK")
    stage = rng.choice(ops.stages(block))
    name = ops.new_switch_name(block, stage)
    ports = rng.choice(NEW_SWITCH_PORTS)
    capacity = rng.choice(CAPACITIES_BPS)
    op = {
        "op": "add_switch",
        "parent": block,
        "name": name,
        "stage": stage,
        "ports": ports,
        "port_capacity_bps": capacity,
    }
    port_names = f"`{name}.p1`" if ports == 1 else f"`{name}.p1` to `{name}.p{ports}`"
    sentence = (
        f"Add a new packet switch named `{name}` (node id `EK_PACKET_SWITCH:{name}`, switch_loc "
        f"stage {stage}) to `{block}`. It comes with {ports} new port{'s' if ports > 1 else ''} "
        f"named {port_names}, {'each ' if ports > 1 else ''}with physical_capacity_bps "
        f"{_gbps(capacity)}."
    )
    return op, sentence, block


def _remove_op(ops: Operands, rng: random.Random) -> tuple[Op, str, str]:
    """A random remove: ``(op, sentence, a containment parent of the removed node)``."""
    node = ops.pick(rng, "EK_PORT", "EK_PACKET_SWITCH", "EK_CHASSIS")
    sentence = f"Remove `{node}` from the topology."
    return {"op": "remove", "node": node}, sentence, rng.choice(ops.parents(node))


def _count_kind(ops: Operands, rng: random.Random, node: str) -> str:
    """A kind that ``node`` contains in the base graph (so the count is usually non-zero)."""
    kinds = sorted({ops.graph.nodes[d]["type"] for d in _base_descendants(ops, node)})
    return rng.choice(kinds) if kinds else "EK_PORT"


def _base_descendants(ops: Operands, node: str) -> set[str]:
    seen: set[str] = set()
    stack = [node]
    while stack:
        for child in ops.children(stack.pop()):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


def _question(kind: str, node: str, ops: Operands, rng: random.Random) -> tuple[Op, str]:
    if kind == "list":
        return {"op": "list", "node": node}, f"List the direct child nodes of `{node}`."
    if kind == "rank":
        return {"op": "rank", "node": node}, (
            f"Rank the direct child nodes of `{node}` by their total capacity."
        )
    if kind == "capacity":
        return {"op": "capacity", "node": node}, f"Report the total capacity of `{node}`."
    counted = _count_kind(ops, rng, node)
    return {"op": "count", "node": node, "kind": counted}, (
        f"Count the {counted} nodes contained in `{node}`."
    )


# ------------------------------------------------------------------------ labels


def _l1_add(ops: Operands, rng: random.Random) -> tuple[str, list[Op]]:
    op, sentence, _ = _add_op(ops, rng)
    return sentence, [op]


def _l1_remove(ops: Operands, rng: random.Random) -> tuple[str, list[Op]]:
    op, sentence, _ = _remove_op(ops, rng)
    return sentence, [op]


def _l1_update(ops: Operands, rng: random.Random) -> tuple[str, list[Op]]:
    port = ops.pick(rng, "EK_PORT")
    current = ops.graph.nodes[port]["physical_capacity_bps"]
    capacity = rng.choice([c for c in CAPACITIES_BPS if c != current])
    op = {"op": "set_capacity", "node": port, "capacity_bps": capacity}
    return f"Set the physical_capacity_bps of port `{port}` to {_gbps(capacity)}.", [op]


def _l1_question(kind: str, parent_kinds: tuple[str, ...]) -> Callable[..., tuple[str, list[Op]]]:
    def make(ops: Operands, rng: random.Random) -> tuple[str, list[Op]]:
        op, sentence = _question(kind, ops.pick(rng, *parent_kinds), ops, rng)
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


def _sequence(first: str, then: str) -> Callable[..., tuple[str, list[Op]]]:
    def make(ops: Operands, rng: random.Random) -> tuple[str, list[Op]]:
        maker = _add_op if first == "add" else _remove_op
        op, sentence, parent = maker(ops, rng)
        if then == "count" and rng.random() < 0.3 and ops.parents(parent):
            parent = rng.choice(ops.parents(parent))  # ask one level higher up
        question_op, question = _question(then, parent, ops, rng)
        return f"{sentence} Then, in the updated topology, {_lower(question)}", [op, question_op]

    return make


def _if_else(ops: Operands, rng: random.Random) -> tuple[str, list[Op]]:
    switch = ops.pick(rng, "EK_PACKET_SWITCH")
    ports = ops.children(switch)
    actual = sum(ops.graph.nodes[p]["physical_capacity_bps"] for p in ports)
    threshold = actual + rng.choice((-3, -2, -1, 0, 1, 2, 3)) * 1_000_000_000
    victim = rng.choice(ports)
    name = ops.new_port_name(switch)
    capacity = rng.choice(CAPACITIES_BPS)
    then_ops = [{"op": "remove", "node": victim}]
    else_ops = [{"op": "add_port", "parent": switch, "name": name, "capacity_bps": capacity}]
    final_kind = rng.choice(("list", "capacity", "rank"))
    final_op, final_sentence = _question(final_kind, switch, ops, rng)
    program = [
        {
            "op": "if",
            "cond": {"query": {"op": "capacity", "node": switch}, "cmp": ">=", "value": threshold},
            "then": then_ops,
            "else": else_ops,
        },
        final_op,
    ]
    question = (
        f"If the total capacity of the packet switch `{switch}` is at least {_gbps(threshold)}, "
        f"remove its port `{victim}`; otherwise add a new port named `{name}` (node id "
        f"`EK_PORT:{name}`) with physical_capacity_bps {_gbps(capacity)} to it. "
        f"Then, in the updated topology, {_lower(final_sentence)}"
    )
    return question, program


def _for_loop(ops: Operands, rng: random.Random) -> tuple[str, list[Op]]:
    if rng.random() < 0.5:
        block = ops.pick(rng, "EK_AGG_BLOCK", "EK_SPINEBLOCK")
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
        final_op, final_sentence = _question(rng.choice(("capacity", "rank")), block, ops, rng)
        example = f"{ops.name(ops.children(block)[0])}.p{number}"
        question = (
            f"For each packet switch that is a direct child of `{block}`, add one new port named "
            f"`<switch name>.p{number}` (for example `{example}`) "
            f"with physical_capacity_bps {_gbps(capacity)}. Then, in the updated topology, "
            f"{_lower(final_sentence)}"
        )
        items = {"children_of": block, "kind": "EK_PACKET_SWITCH"}
        return question, [{"op": "for_each", "items": items, "body": body}, final_op]
    switch = ops.pick(rng, "EK_PACKET_SWITCH")
    ports = rng.sample(ops.children(switch), rng.randint(2, 4))
    capacity = rng.choice(CAPACITIES_BPS[1:])
    body = [{"op": "set_capacity", "node": "$item", "capacity_bps": capacity}]
    listed = ", ".join(f"`{p}`" for p in sorted(ports))
    final_op, final_sentence = _question(rng.choice(("capacity", "rank")), switch, ops, rng)
    question = (
        f"For each of the ports {listed}, set physical_capacity_bps to {_gbps(capacity)}. "
        f"Then, in the updated topology, {_lower(final_sentence)}"
    )
    return question, [{"op": "for_each", "items": {"nodes": sorted(ports)}, "body": body}, final_op]


def _for_loop_if_else(ops: Operands, rng: random.Random) -> tuple[str, list[Op]]:
    block = ops.pick(rng, "EK_AGG_BLOCK", "EK_SPINEBLOCK")
    stage = rng.choice(ops.stages(block))
    capacity = rng.choice(CAPACITIES_BPS)
    body = [
        {
            "op": "if",
            "cond": {"query": {"op": "stage", "node": "$item"}, "cmp": "==", "value": stage},
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
    final_op, final_sentence = _question(rng.choice(("capacity", "rank", "count")), block, ops, rng)
    question = (
        f"For each packet switch that is a direct child of `{block}`: if its switch_loc stage is "
        f"{stage}, add one new port named `<switch name>.p17` with physical_capacity_bps "
        f"{_gbps(capacity)}; otherwise remove its port `<switch name>.p16`. Then, in the updated "
        f"topology, {_lower(final_sentence)}"
    )
    items = {"children_of": block, "kind": "EK_PACKET_SWITCH"}
    return question, [{"op": "for_each", "items": items, "body": body}, final_op]


MAKERS: dict[tuple[str, ...], Callable[..., tuple[str, list[Op]]]] = {
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
    question, program = MAKERS[labels](operands(), rng)
    return Draft(level=level, labels=labels, question=question, program=program)


def ground_truth(program: list[Op]) -> tuple[dict[str, Any], TopologyView]:
    """Execute ``program`` on a fresh view of the MALT graph.

    Returns the ground-truth JSON (``program``, ``answer_kind``, ``changes_topology``,
    ``expected`` — ``None`` for graph answers —, and a summary of the final topology) and the
    view holding the expected final topology. Raises ``ProgramError`` on a bad program.
    """
    view = TopologyView(load_graph())
    value = execute(view, program)
    kind = answer_kind(program)
    truth: dict[str, Any] = {
        "program": program,
        "answer_kind": kind,
        "changes_topology": changes_topology(program),
        "expected": value if asks_question(program) else None,
        "final_topology": {
            "nodes": view.number_of_nodes(),
            "removed": len(view.removed),
            "added": len(view.added_nodes),
            "updated": len(view.replaced_attrs),
        },
    }
    return truth, view
