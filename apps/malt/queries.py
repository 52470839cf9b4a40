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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evaluator.sampling import seeded_rng

from apps.malt.fabric import (
    GBPS,
    SPEEDS_BPS,
    GraphRef,
    graph_key,
    initial_view,
    operands,
    port_capacities,
)
from apps.malt.operations import (
    COLLECTIONS,
    Op,
    asks_question,
    changes_topology,
    execute,
    is_question,
)
from apps.malt.overlay import TopologyView
from apps.malt.phrasing import (
    ADD_PORT_NAMED,
    ADD_PORT_RULE,
    ADD_SWITCH_NAMED,
    ADD_SWITCH_RULE,
    FOR_ADD,
    FOR_IF,
    FOR_SET,
    IF_ELSE,
    KIND_WORDS,
    REMOVE,
    UPDATE,
    Ctx,
    Ref,
    fill_template,
    join_sentences,
    question_sentence,
)

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

#: Port capacities used for new or updated ports, in bit/s.
CAPACITIES_BPS = SPEEDS_BPS
#: Number of ports a new packet switch comes with.
NEW_SWITCH_PORTS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Draft:
    """A generated query before it becomes a :class:`evaluator.types.Query`."""

    level: int
    labels: tuple[str, ...]
    question: str
    program: list[Op]
    graph: GraphRef

    @property
    def graph_key(self) -> str:
        """The ground truth's ``graph_key`` (:attr:`GraphRef.key`)."""
        return self.graph.key



def label_at(seed: int, index: int, version: int) -> tuple[tuple[str, ...], int]:
    """Return ``(labels, level)`` of the query at ``index`` of ``seed``'s stream."""
    block, offset = divmod(index, BLOCK)
    order = list(range(BLOCK))
    seeded_rng("malt", version, seed, "block", block).shuffle(order)
    return ALL_LABELS[order[offset]]






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
        pool = ADD_PORT_NAMED if rng.random() < 0.4 else ADD_PORT_RULE
        sentence = fill_template(ctx.pick(pool), target, name=name, cap=cap)
        return op, sentence, target.node, target.node
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
    switch_pool = ADD_SWITCH_NAMED if rng.random() < 0.4 else ADD_SWITCH_RULE
    sentence = fill_template(
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
        fill_template(ctx.pick(REMOVE), target),
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
    return fill_template(ctx.pick(UPDATE), port, cap=ctx.cap_text(capacity)), [op]


def _l1_question(kind: str, parent_kinds: tuple[str, ...]) -> Callable[[Ctx], tuple[str, list[Op]]]:
    def make(ctx: Ctx) -> tuple[str, list[Op]]:
        op, sentence = question_sentence(ctx, kind, ctx.operand(ctx.pick(parent_kinds)))
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
        question_op, question = question_sentence(ctx, then, _follow_up(ctx, parent, mentioned))
        return join_sentences(ctx, sentence, question), [op, question_op]

    return make



def _if_else(ctx: Ctx) -> tuple[str, list[Op]]:
    rng, ops = ctx.rng, ctx.ops
    switch = ctx.operand("EK_PACKET_SWITCH")
    actual = ctx.capacity(switch.node)
    threshold = max(GBPS, actual + rng.choice((-3, -2, -1, 0, 1, 2, 3)) * 10 * GBPS)
    ports = ops.children(switch.node)
    found = ctx.extreme(ports)
    if found is not None:
        victim_node, largest = found
        victim = "its fastest port" if largest else "its slowest port"
    else:
        victim_node = rng.choice(ports)
        victim = f"its port `{ops.name(victim_node)}`"
    name = ops.new_port_name(switch.node)
    capacity = rng.choice(CAPACITIES_BPS)
    new = f" `{name}`" if rng.random() < 0.4 else ""
    sentence = fill_template(
        ctx.pick(IF_ELSE),
        switch,
        t=ctx.cap_text(threshold),
        victim=victim,
        cap=ctx.cap_text(capacity),
        new=new,
    )
    final_op, final_sentence = question_sentence(
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
    return join_sentences(ctx, sentence, final_sentence), program



def _for_loop(ctx: Ctx) -> tuple[str, list[Op]]:
    rng, ops = ctx.rng, ctx.ops
    if rng.random() < 0.5:
        block = ctx.operand(ctx.pick(("EK_AGG_BLOCK", "EK_SPINEBLOCK")))
        capacity = rng.choice(CAPACITIES_BPS)
        number = ops.highest_port_number(block.node) + 1  # 17: the example's switches have 16
        body = [
            {
                "op": "add_port",
                "parent": "$item",
                "name": f"$item_name.p{number}",
                "capacity_bps": capacity,
            }
        ]
        sentence = fill_template(ctx.pick(FOR_ADD), block, cap=ctx.cap_text(capacity))
        final_op, final_sentence = question_sentence(
            ctx, ctx.pick(("capacity", "rank")), _follow_up(ctx, block.node, block.node)
        )
        items = {"children_of": block.node, "kind": "EK_PACKET_SWITCH"}
        program = [{"op": "for_each", "items": items, "body": body}, final_op]
        return join_sentences(ctx, sentence, final_sentence), program
    switch = ctx.operand("EK_PACKET_SWITCH")
    ports = ops.children(switch.node)
    speeds = sorted({ctx.port_capacity(p) for p in ports})
    if len(speeds) < 2:
        speeds = [speeds[0], speeds[0] + GBPS]
    threshold = rng.choice(speeds[1:])
    chosen = [p for p in ports if ctx.port_capacity(p) < threshold]
    capacity = rng.choice([c for c in CAPACITIES_BPS if c >= threshold] or [CAPACITIES_BPS[-1]])
    body = [{"op": "set_capacity", "node": "$item", "capacity_bps": capacity}]
    sentence = fill_template(
        ctx.pick(FOR_SET), switch, t=ctx.cap_text(threshold), cap=ctx.cap_text(capacity)
    )
    after = {capacity if p in chosen else ctx.port_capacity(p) for p in ports}
    final_kind = ctx.pick(("capacity", "rank")) if len(after) > 1 else "capacity"
    final_op, final_sentence = question_sentence(
        ctx, final_kind, _follow_up(ctx, switch.node, switch.node)
    )
    program = [{"op": "for_each", "items": {"nodes": sorted(chosen)}, "body": body}, final_op]
    return join_sentences(ctx, sentence, final_sentence), program



def _for_loop_if_else(ctx: Ctx) -> tuple[str, list[Op]]:
    rng, ops = ctx.rng, ctx.ops
    block = ctx.operand(ctx.pick(("EK_AGG_BLOCK", "EK_SPINEBLOCK")))
    capacity = rng.choice(CAPACITIES_BPS)
    switches = ops.children(block.node)
    highest = ops.highest_port_number(block.node)  # 16 in the example, on every switch
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
                    "name": f"$item_name.p{highest + 1}",
                    "capacity_bps": capacity,
                }
            ],
            "else": [{"op": "remove", "node": f"EK_PORT:$item_name.p{highest}"}],
        }
    ]
    sentence = fill_template(ctx.pick(FOR_IF), block, cond=cond, cap=ctx.cap_text(capacity))
    final_op, final_sentence = question_sentence(
        ctx, ctx.pick(("capacity", "rank", "count")), _follow_up(ctx, block.node, block.node)
    )
    items = {"children_of": block.node, "kind": "EK_PACKET_SWITCH"}
    program = [{"op": "for_each", "items": items, "body": body}, final_op]
    return join_sentences(ctx, sentence, final_sentence), program


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
    """``graph``, ``set``, ``ranking`` or ``number``: the type of the program's answer, from
    its last top-level question (:func:`apps.malt.operations.is_question`): ``list`` and
    ``filter`` give a set, ``rank`` a ranking, ``count``, ``capacity`` and ``stage`` a number,
    a collecting ``for_each`` the kind of its ``collect`` (``COLLECTIONS``); ``graph`` when the
    top level asks nothing."""
    last = [op for op in program if is_question(op)]
    if not last:
        return "graph"
    if last[-1]["op"] == "for_each":
        return COLLECTIONS[last[-1]["collect"]]
    return {"list": "set", "filter": "set", "rank": "ranking"}.get(last[-1]["op"], "number")


def draft(seed: int, index: int, version: int, graph: GraphRef | None = None) -> Draft:
    """Generate the query at ``index`` of ``seed``'s stream (pure function of its arguments).

    ``graph`` puts the query on another graph (a pack's fabric variant,
    :func:`apps.malt.fabric.variant_ref`); by default it is the shipped fabric with the
    capacities of :func:`apps.malt.fabric.graph_key`. The variant's switches must each hold
    ports ``.p1`` to ``.p<N>`` with one ``N`` per block (the loops name ports by number).

    Raises:
        VariantPackError: the variant's pack is not loaded or its fabric is not valid.
    """
    labels, level = label_at(seed, index, version)
    rng = seeded_rng("malt", version, seed, index)
    ref = graph if graph is not None else GraphRef(graph_key(seed, index, version))
    ctx = Ctx(operands(ref), port_capacities(ref), rng, level)
    question, program = MAKERS[labels](ctx)
    return Draft(level=level, labels=labels, question=question, program=program, graph=ref)


def ground_truth(program: list[Op], ref: GraphRef | str) -> tuple[dict[str, Any], TopologyView]:
    """Execute ``program`` on a fresh view of the query graph ``ref`` (:func:`initial_view`;
    a string is a ``graph_key`` on the shipped fabric).

    Returns the ground-truth JSON (``program``, ``graph_key``, on a fabric variant
    ``fabric: {"seed": ...}``, ``answer_kind``, ``changes_topology``, ``expected`` — ``None``
    for graph answers —, and a summary of the final topology) and the view holding the
    expected final topology. A variant's pack is named by ``variant_pack``, which
    :func:`evaluator.variants.pack_query` adds. Raises ``ProgramError`` on a bad program and
    ``VariantPackError`` as :func:`apps.malt.fabric.base_graph`.
    """
    ref = GraphRef(ref) if isinstance(ref, str) else ref
    view = initial_view(ref)
    value = execute(view, program)
    kind = answer_kind(program)
    initial = port_capacities(ref)
    updated = sum(
        1
        for node, attrs in view.replaced_attrs.items()
        if attrs.get("physical_capacity_bps") != initial.get(node)
    )
    truth: dict[str, Any] = {
        "program": program,
        "graph_key": ref.key,
        **({"fabric": {"seed": ref.fabric_seed}} if ref.fabric is not None else {}),
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
