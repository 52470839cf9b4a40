"""The operation language of MALT queries and its reference interpreter (the ground truth).

A query's hidden ground truth holds a *program*: a JSON list of operations (paper Appendix B.2:
add, remove, update, list, count, rank, composed sequentially, with if-else and for-loop
control sequences). Executing the program on a :class:`~apps.malt.overlay.TopologyView` of the
MALT graph yields the expected answer and the expected final topology; nothing is hand-written
per query. Operations (node operands are node ids ``"<KIND>:<name>"``):

Mutations
    ``{"op": "add_switch", "parent", "name", "stage", "ports", "port_capacity_bps"}``: a new
    ``EK_PACKET_SWITCH`` with ``switch_loc {"stage"}``, contained by ``parent``, holding ``ports``
    new ``EK_PORT`` nodes ``<name>.p1`` .. ``<name>.p<ports>`` of ``port_capacity_bps`` each.
    ``{"op": "add_port", "parent", "name", "capacity_bps"}``: a new port in switch ``parent``.
    ``{"op": "remove", "node"}``: removes the node and everything it contains (its RK_CONTAINS
    descendants) with all their edges.
    ``{"op": "set_capacity", "node", "capacity_bps"}``: sets a port's ``physical_capacity_bps``.
Questions (the value of the last top-level question is the answer)
    ``{"op": "list", "node"}``: ids of the direct RK_CONTAINS children (a set; we sort it).
    ``{"op": "count", "node", "kind"}``: number of RK_CONTAINS descendants of that kind.
    ``{"op": "capacity", "node"}``: total capacity in bit/s, the sum of
    ``physical_capacity_bps`` over the distinct ports the node contains (a port: its own);
    with ``"unit_bps": u`` the total is given in units of ``u`` bit/s (``total // u``; the
    generator only asks in Gbit/s, and every rate is a whole number of Gbit/s).
    ``{"op": "rank", "node"}``: ``[[child, capacity_bps], ...]`` over the direct children,
    capacity descending, ties by child id ascending.
    ``{"op": "stage", "node"}``: the ``switch_loc`` stage of a packet switch.
Control
    ``{"op": "if", "cond": {"query": <question>, "cmp": ">=", "value": int}, "then": [...],
    "else": [...]}``
    ``{"op": "for_each", "items": {"children_of": id, "kind": K} | {"nodes": [ids]},
    "body": [...]}``: runs ``body`` once per item (sorted by id); inside ``body`` the strings
    ``$item`` and ``$item_name`` stand for the item's id and its ``name``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from apps.malt.overlay import TopologyView
from apps.malt.topology import CONTAINS, node_id

Op = dict[str, Any]

MUTATIONS = frozenset({"add_switch", "add_port", "remove", "set_capacity"})
QUESTIONS = frozenset({"list", "count", "capacity", "rank", "stage"})

COMPARATORS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
}


class ProgramError(ValueError):
    """A program names a missing node or an unknown operation (a generator bug)."""


def capacity_bps(view: TopologyView, node: str) -> int:
    """Total capacity of ``node`` in bit/s: sum over the distinct ports it contains (or is)."""
    total = 0
    for item in view.descendants(node) | {node}:
        attrs = view.attrs(item)
        if attrs.get("type") == "EK_PORT":
            total += int(attrs.get("physical_capacity_bps", 0))
    return total


def ranking(view: TopologyView, node: str) -> list[list[Any]]:
    """Direct children of ``node`` as ``[id, capacity_bps]``, capacity desc, ties by id asc."""
    pairs = sorted(
        ((child, capacity_bps(view, child)) for child in view.children(node)),
        key=lambda pair: (-pair[1], pair[0]),
    )
    return [[child, capacity] for child, capacity in pairs]


def _substitute(value: Any, item: str, item_name: str) -> Any:
    if isinstance(value, str):
        return value.replace("$item_name", item_name).replace("$item", item)
    if isinstance(value, list):
        return [_substitute(v, item, item_name) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, item, item_name) for k, v in value.items()}
    return value


def _require(view: TopologyView, node: str) -> str:
    if not view.has_node(node):
        raise ProgramError(f"operation names a node that does not exist: {node}")
    return node


def _question(view: TopologyView, op: Op) -> Any:
    name = op["op"]
    node = _require(view, op["node"])
    if name == "list":
        return view.children(node)
    if name == "count":
        return sum(1 for d in view.descendants(node) if view.kind(d) == op["kind"])
    if name == "capacity":
        return capacity_bps(view, node) // int(op.get("unit_bps", 1))
    if name == "rank":
        return ranking(view, node)
    if name == "stage":
        return int(view.attrs(node)["switch_loc"]["stage"])
    raise ProgramError(f"unknown question {name!r}")


def _mutate(view: TopologyView, op: Op) -> None:
    name = op["op"]
    if name == "add_switch":
        parent = _require(view, op["parent"])
        switch = node_id("EK_PACKET_SWITCH", op["name"])
        view.add_node(
            switch,
            {"name": op["name"], "type": "EK_PACKET_SWITCH", "switch_loc": {"stage": op["stage"]}},
        )
        view.add_edge(parent, switch, {"type": CONTAINS})
        for number in range(1, int(op["ports"]) + 1):
            port_name = f"{op['name']}.p{number}"
            port = node_id("EK_PORT", port_name)
            view.add_node(
                port,
                {
                    "name": port_name,
                    "type": "EK_PORT",
                    "physical_capacity_bps": op["port_capacity_bps"],
                },
            )
            view.add_edge(switch, port, {"type": CONTAINS})
    elif name == "add_port":
        parent = _require(view, op["parent"])
        port = node_id("EK_PORT", op["name"])
        view.add_node(
            port,
            {"name": op["name"], "type": "EK_PORT", "physical_capacity_bps": op["capacity_bps"]},
        )
        view.add_edge(parent, port, {"type": CONTAINS})
    elif name == "remove":
        view.remove(_require(view, op["node"]))
    elif name == "set_capacity":
        view.set_attr(_require(view, op["node"]), "physical_capacity_bps", op["capacity_bps"])
    else:
        raise ProgramError(f"unknown mutation {name!r}")


def execute(view: TopologyView, program: list[Op]) -> Any:
    """Run ``program`` on ``view`` (mutating the view) and return the last question's value.

    Returns ``None`` when the program asks no question (a pure change: the answer is the
    graph). Raises :class:`ProgramError` on a malformed program.
    """
    answer: Any = None
    for op in program:
        name = op.get("op")
        if name in MUTATIONS:
            _mutate(view, op)
        elif name in QUESTIONS:
            answer = _question(view, op)
        elif name == "if":
            cond = op["cond"]
            compare = COMPARATORS[cond["cmp"]]
            branch = (
                op["then"] if compare(_question(view, cond["query"]), cond["value"]) else op["else"]
            )
            value = execute(view, branch)
            if value is not None:
                answer = value
        elif name == "for_each":
            items = op["items"]
            if "children_of" in items:
                parent = _require(view, items["children_of"])
                members = [c for c in view.children(parent) if view.kind(c) == items["kind"]]
            else:
                members = sorted(_require(view, n) for n in items["nodes"])
            for member in members:
                body = _substitute(op["body"], member, view.attrs(member)["name"])
                value = execute(view, body)
                if value is not None:
                    answer = value
        else:
            raise ProgramError(f"unknown operation {name!r}")
    return answer


def changes_topology(program: list[Op]) -> bool:
    """True when some path through ``program`` may mutate the graph."""
    for op in program:
        name = op.get("op")
        if name in MUTATIONS:
            return True
        if name == "if" and (changes_topology(op["then"]) or changes_topology(op["else"])):
            return True
        if name == "for_each" and changes_topology(op["body"]):
            return True
    return False


def asks_question(program: list[Op]) -> bool:
    """True when the program's top level contains a question (its answer is not the graph)."""
    return any(op.get("op") in QUESTIONS for op in program)
