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
    ``{"op": "stage", "node"}``: the ``switch_loc`` stage of a packet switch (a number).
    ``{"op": "filter", "items": <items>, "cond": <cond>}``: the ids of the items for which
    ``cond`` holds (a set, sorted); ``cond``'s question names the item as ``$item``. Nothing
    changes: the way to ask for "the ports of X slower than 40 Gbit/s".
Control
    ``{"op": "if", "cond": <cond>, "then": [...], "else": [...]}`` where ``<cond>`` is
    ``{"query": <question>, "cmp": c, "value": int}`` and ``c`` one of :data:`COMPARATORS`
    (``>=``, ``>``, ``<=``, ``<``, ``==``, ``!=``).
    ``{"op": "for_each", "items": <items>, "body": [...]}``: runs ``body`` once per item;
    inside ``body`` the strings ``$item`` and ``$item_name`` stand for the item's id and its
    ``name``. Optional keys:

    * ``"as": "v"`` also binds ``$v`` and ``$v_name`` (``[a-z][a-z0-9]*``), so that a loop
      nested in ``body`` can still name this loop's item: a nested ``for_each`` (or
      ``filter``) rebinds ``$item`` and ``$item_name`` to its own item, and its own ``as``
      name, but leaves the outer names visible (lexical scoping, innermost wins);
    * ``"collect": "sum" | "set"`` accumulates across iterations: the loop's value is the sum
      of the numbers the iterations answer (``sum``, 0 when none does) or the union of the
      node ids they answer, a single id or a list of ids (``set``, sorted). An iteration
      that asks no question adds nothing. A top-level collecting loop is a question: its
      value is the query's answer (``number`` or ``set``).

    ``<items>`` is ``{"children_of": id, "kind": K}`` (direct RK_CONTAINS children of kind
    ``K``), ``{"within": id, "kind": K}`` (every RK_CONTAINS descendant of kind ``K``) or
    ``{"nodes": [ids]}``; items are visited in id order, and the set is fixed before the
    first iteration runs.

The answer of a program is the value of its last top-level question
(:func:`apps.malt.queries.answer_kind` gives its type): a question inside ``if`` or a
non-collecting ``for_each`` body also sets the value, but only top-level questions decide the
answer's type, so a program should end with one.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

from apps.malt.overlay import TopologyView
from apps.malt.topology import CONTAINS, node_id

Op = dict[str, Any]

MUTATIONS = frozenset({"add_switch", "add_port", "remove", "set_capacity"})
QUESTIONS = frozenset({"list", "count", "capacity", "rank", "stage", "filter"})
#: Accumulations a ``for_each`` may ``collect`` and the answer kind each gives.
COLLECTIONS: dict[str, str] = {"sum": "number", "set": "set"}

COMPARATORS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
    "!=": operator.ne,
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


def loop_names(op: Op) -> tuple[str, ...]:
    """The variable names a ``for_each`` or ``filter`` binds for its body: ``$item``,
    ``$item_name`` and, with ``"as": "v"``, ``$v`` and ``$v_name``.

    Raises:
        ProgramError: ``as`` is not a lowercase identifier (``[a-z][a-z0-9]*``).
    """
    names = ["$item", "$item_name"]
    alias = op.get("as")
    if alias is not None:
        if not (isinstance(alias, str) and alias[:1].isalpha() and alias.isalnum()
                and alias.isascii() and alias == alias.lower()):
            raise ProgramError(f"'as' must be a lowercase identifier, not {alias!r}")
        names += [f"${alias}", f"${alias}_name"]
    return tuple(names)


def bindings(op: Op, item: str, item_name: str) -> dict[str, str]:
    """``{variable: value}`` for one item of a ``for_each`` or ``filter`` (:func:`loop_names`)."""
    names = loop_names(op)
    return {name: item if index % 2 == 0 else item_name for index, name in enumerate(names)}


#: A variable in a program string: ``$`` and a name not followed by a name character
#: (``$item_name.p17`` holds ``$item_name``; ``$items`` holds no variable).
VARIABLE_RE = re.compile(r"\$[a-z][a-z0-9]*(?:_name)?(?![A-Za-z0-9_])")


def _substitute(value: Any, bound: dict[str, str]) -> Any:
    """``value`` with every bound variable (:data:`VARIABLE_RE`) replaced; unbound ones stay.
    A nested ``for_each`` or ``filter`` shadows the names it binds itself: its ``items`` are
    substituted (they are evaluated in this scope), its ``body`` / ``cond`` only with the
    names it leaves visible."""
    if isinstance(value, str):
        return VARIABLE_RE.sub(lambda m: bound.get(m.group(0), m.group(0)), value)
    if isinstance(value, list):
        return [_substitute(v, bound) for v in value]
    if isinstance(value, dict):
        if value.get("op") in ("for_each", "filter"):
            inner = {k: v for k, v in bound.items() if k not in loop_names(value)}
            return {
                k: _substitute(v, inner if k in ("body", "cond") else bound)
                for k, v in value.items()
            }
        return {k: _substitute(v, bound) for k, v in value.items()}
    return value


def _require(view: TopologyView, node: str) -> str:
    if not view.has_node(node):
        raise ProgramError(f"operation names a node that does not exist: {node}")
    return node


def members(view: TopologyView, items: Op) -> list[str]:
    """The nodes an ``<items>`` spec names (module docstring), in id order.

    Raises:
        ProgramError: a missing node, or a spec of none of the three shapes.
    """
    if "children_of" in items:
        parent = _require(view, items["children_of"])
        return [c for c in view.children(parent) if view.kind(c) == items["kind"]]
    if "within" in items:
        top = _require(view, items["within"])
        return sorted(d for d in view.descendants(top) if view.kind(d) == items["kind"])
    if "nodes" in items:
        return sorted(_require(view, n) for n in items["nodes"])
    raise ProgramError(f"items must name children_of, within or nodes: {sorted(items)}")


def _item(view: TopologyView, op: Op, member: str) -> dict[str, str]:
    return bindings(op, member, str(view.attrs(member)["name"]))


def _holds(view: TopologyView, cond: Op) -> bool:
    compare = COMPARATORS.get(cond.get("cmp", ""))
    if compare is None:
        raise ProgramError(f"unknown comparison {cond.get('cmp')!r}")
    return bool(compare(_question(view, cond["query"]), cond["value"]))


def _question(view: TopologyView, op: Op) -> Any:
    name = op["op"]
    if name == "filter":
        return [
            member
            for member in members(view, op["items"])
            if _holds(view, _substitute(op["cond"], _item(view, op, member)))
        ]
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
            value = execute(view, op["then"] if _holds(view, op["cond"]) else op["else"])
            if value is not None:
                answer = value
        elif name == "for_each":
            collect = op.get("collect")
            if collect is not None and collect not in COLLECTIONS:
                raise ProgramError(f"unknown collect {collect!r} (one of {sorted(COLLECTIONS)})")
            collected: list[Any] = []
            for member in members(view, op["items"]):
                body = _substitute(op["body"], _item(view, op, member))
                value = execute(view, body)
                if value is not None:
                    collected.append(value)
                    if collect is None:
                        answer = value
            if collect is not None:
                answer = _collect(collect, collected)
        else:
            raise ProgramError(f"unknown operation {name!r}")
    return answer


def _collect(how: str, values: list[Any]) -> Any:
    """The value of a collecting loop from its iterations' values (module docstring)."""
    if how == "sum":
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise ProgramError("collect 'sum' needs every iteration to answer a number")
        return sum(values)
    ids: set[str] = set()
    for value in values:
        chosen = [value] if isinstance(value, str) else value
        if not isinstance(chosen, list) or not all(isinstance(v, str) for v in chosen):
            raise ProgramError("collect 'set' needs every iteration to answer node ids")
        ids.update(chosen)
    return sorted(ids)


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


def is_question(op: Op) -> bool:
    """True when ``op`` is a question: one of :data:`QUESTIONS` or a collecting ``for_each``."""
    return op.get("op") in QUESTIONS or (op.get("op") == "for_each" and "collect" in op)


def asks_question(program: list[Op]) -> bool:
    """True when the program's top level contains a question (its answer is not the graph)."""
    return any(is_question(op) for op in program)
