"""How MALT queries are worded: kind words, operand descriptions and sentence templates
(paper Appendix B.2, Table 4; every other phrasing written for this project).

:class:`Ctx` holds the drawing state of one query and renders operands, by name or by a
property that picks exactly one node ("the slowest port of switch X"); the upper-case tuples
(:data:`LIST`, :data:`COUNT`, ... :data:`FOR_IF`) hold the sentences, drawn by the seed. The
public scripted and floor agents compile these same tuples (:mod:`apps.malt.scripted`,
:mod:`apps.malt.reference`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from apps.malt.fabric import GBPS, Operands
from apps.malt.operations import Op
from apps.malt.topology import split_node_id

#: Share of operands given by a property instead of a name, per level.
PROPERTY_SHARE = {1: 0.8, 2: 0.9, 3: 0.9}


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

    def extreme(self, candidates: list[str]) -> tuple[str, bool] | None:
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
        found = self.extreme(candidates)
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

LIST = (
    "List all the child nodes of {x}.",  # the paper's wording (Table 4)
    "What does {x} directly contain?",
    "Which nodes sit directly under {x}?",
    "Give the direct children of {x}.",
    "Enumerate the nodes one containment level below {x}.",
)
COUNT = (
    "Count the number of nodes with type={kind} under {x}.",  # the paper's wording
    "How many {plural} does {x} contain?",
    "How many {plural} are there in {x}?",
    "Give the number of {plural} inside {x}.",
    "Count the {plural} in {x}.",
)
RANK = (
    "Rank the child nodes of {x} based on the total bandwidth.",  # the paper's wording
    "Order the direct children of {x} by total capacity.",
    "Rank everything {x} directly contains by capacity.",
    "Sort the children of {x} from the largest total capacity to the smallest.",
    "Which direct child of {x} has the most capacity? Rank them all.",
)
CAPACITY = (
    "What is the total capacity of {x}{unit}?",
    "Report the total capacity of {x}{unit}.",
    "How much port capacity does {x} have in total{unit}?",
    "Sum the capacity of every port in {x}{unit}.",
    "Give the total bandwidth of {x}{unit}.",
)
REMOVE = (
    "Remove {x} from the graph.",  # the paper's wording
    "Decommission {x}.",
    "Take {x} out of the topology.",
    "Delete {x} together with everything it contains.",
    "{X} is being retired; remove it.",
)
UPDATE = (
    "Update {x} to {cap}.",
    "Set the capacity of {x} to {cap}.",
    "Change the physical capacity of {x} to {cap}.",
    "Reconfigure {x} to run at {cap}.",
    "{X} now runs at {cap}; update the topology.",
)
ADD_PORT_NAMED = (
    "Add a new PORT `{name}` with type=EK_PORT to {x}, capacity {cap}.",  # paper-like
    "Add a new port `{name}` of {cap} to {x}.",
    "Attach a {cap} port called `{name}` to {x}.",
)
ADD_PORT_RULE = (
    "Add one more {cap} port to {x}.",
    "{X} gets an extra port running at {cap}.",
    "Install a new {cap} port on {x}.",
)
ADD_SWITCH_NAMED = (
    "Add new packet switch `{name}` to {x}: stage {stage}, {k} {ports} of {cap}.",  # paper-like
    "Add switch `{name}` at stage {stage} to {x} and give it {k} {ports} at {cap}.",
)
ADD_SWITCH_RULE = (
    "Install a stage-{stage} packet switch with {k} {ports} of {cap} in {x}.",
    "{X} gets a new stage-{stage} switch with {k} {cap} {ports}.",
    "Put one more switch into {x} (stage {stage}); it has {k} {ports} of {cap}.",
)
JOIN = (
    "{a} {B}",
    "{a} Then {b}",
    "{a} After that, {b}",
    "{a} In the updated topology, {b}",
    "First, {la} Second, {b}",
)


def fill_template(template: str, ref: Ref | None = None, **values: object) -> str:
    """``template`` with its slots filled; ``{x}``/``{X}`` take ``ref``'s text (``{X}``
    capitalised)."""
    if ref is not None:
        values["x"], values["X"] = ref.text, _cap(ref.text)
    return template.format(**values)


def join_sentences(ctx: Ctx, first: str, second: str) -> str:
    """Two requests joined into one text by a :data:`JOIN` form (seeded)."""
    return ctx.pick(JOIN).format(a=first, la=_low(first), b=_low(second), B=_cap(second))


def question_sentence(ctx: Ctx, kind: str, target: Ref) -> tuple[Op, str]:
    """``(op, sentence)`` of a question of ``kind`` (``list``, ``rank``, ``capacity`` or
    ``count``, the counted kind drawn among those below the target) about ``target``."""
    node = target.node
    if kind == "list":
        return {"op": "list", "node": node}, fill_template(ctx.pick(LIST), target)
    if kind == "rank":
        return {"op": "rank", "node": node}, fill_template(ctx.pick(RANK), target)
    if kind == "capacity":
        unit = ctx.pick(("", "", " in bit/s", " in Gbit/s"))
        op: Op = {"op": "capacity", "node": node}
        if unit == " in Gbit/s":
            op["unit_bps"] = GBPS
        return op, fill_template(ctx.pick(CAPACITY), target, unit=unit)
    kinds = list(ctx.ops.kinds_below(node)) or ["EK_PORT"]
    counted = ctx.pick(kinds)
    sentence = fill_template(ctx.pick(COUNT), target, kind=counted, plural=PLURALS[counted])
    return {"op": "count", "node": node, "kind": counted}, sentence


#: Sentences of the control-flow families (``if-else``, ``for-loop``, ``for-loop+if-else``).
IF_ELSE = (
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



FOR_ADD = (
    "For each packet switch in {x}, add one new port of {cap}.",
    "Give every switch of {x} one more {cap} port.",
    "Add a {cap} port to each packet switch that {x} contains.",
    "Every switch in {x} gets an extra port at {cap}.",
    "Loop over the switches of {x} and add a new {cap} port to each.",
)
FOR_SET = (
    "Upgrade every port of {x} slower than {t} to {cap}.",
    "For each port of {x} with a capacity below {t}, set the capacity to {cap}.",
    "Set all ports of {x} under {t} to {cap}.",
    "Each port in {x} running below {t} should be reconfigured to {cap}.",
    "Raise every port of {x} below {t} to {cap}.",
)



FOR_IF = (
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
