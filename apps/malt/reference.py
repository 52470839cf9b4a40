"""MALT's reference agents: the null reply, the oracle that turns a ground-truth program into
``process_graph`` code, and the ``template`` floor agent (no model, no ground truth).

The oracle's code is a second, independent implementation of the operation language
(:mod:`apps.malt.operations` works on a copy-on-write view; this one mutates the networkx
graph the sandbox hands it). The oracle scoring 100% correct and safe through the real
sandbox therefore checks the judge, the prompt contract and the ground truth against each
other. The program is embedded as a Python literal (``repr`` of JSON data), never as code.

The floor agent (:func:`template_reply`, the app's ``heuristic_reply``) pattern-matches the
prompt; see the section "The template floor agent" below.
"""


from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from evaluator.types import JSON

from apps.malt import phrasing
from apps.malt.fabric import GBPS
from apps.malt.operations import Op, changes_topology
from apps.malt.queries import answer_kind

#: Null agent: well-formed code that answers nothing and changes nothing.
NULL_REPLY = '```python\ndef process_graph(graph_data):\n    return {"answer": None}\n```\n'

_RUNTIME = """
import re

CONTAINS = "RK_CONTAINS"


def _children(g, node):
    return sorted(c for c in g.successors(node) if g.edges[node, c].get("type") == CONTAINS)


def _below(g, node):
    seen, todo = set(), [node]
    while todo:
        for child in _children(g, todo.pop()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    seen.discard(node)
    return seen


def _capacity(g, node):
    members = _below(g, node) | {node}
    return sum(
        g.nodes[m]["physical_capacity_bps"] for m in members if g.nodes[m]["type"] == "EK_PORT"
    )


def _members(g, items):
    if "children_of" in items:
        return [c for c in _children(g, items["children_of"])
                if g.nodes[c]["type"] == items["kind"]]
    if "within" in items:
        return sorted(m for m in _below(g, items["within"])
                      if g.nodes[m]["type"] == items["kind"])
    return sorted(items["nodes"])


def _names(op):
    names = ["$item", "$item_name"]
    if op.get("as"):
        names += ["$" + op["as"], "$" + op["as"] + "_name"]
    return names


def _bound(g, op, member):
    values = [member, g.nodes[member]["name"]] * 2
    return dict(zip(_names(op), values))


def _holds(g, cond):
    left, right = _ask(g, cond["query"]), cond["value"]
    return {">=": left >= right, ">": left > right, "<=": left <= right,
            "<": left < right, "==": left == right, "!=": left != right}[cond["cmp"]]


def _ask(g, op):
    kind = op["op"]
    if kind == "filter":
        return [m for m in _members(g, op["items"])
                if _holds(g, _fill(op["cond"], _bound(g, op, m)))]
    node = op["node"]
    if kind == "list":
        return _children(g, node)
    if kind == "count":
        return len([m for m in _below(g, node) if g.nodes[m]["type"] == op["kind"]])
    if kind == "capacity":
        return _capacity(g, node) // op.get("unit_bps", 1)
    if kind == "rank":
        pairs = [[c, _capacity(g, c)] for c in _children(g, node)]
        return sorted(pairs, key=lambda p: (-p[1], p[0]))
    if kind == "stage":
        return g.nodes[node]["switch_loc"]["stage"]
    raise ValueError(kind)


_VARIABLE = re.compile(r"[$][a-z][a-z0-9]*(?:_name)?(?![A-Za-z0-9_])")


def _fill(value, bound):
    if isinstance(value, str):
        return _VARIABLE.sub(lambda m: bound.get(m.group(0), m.group(0)), value)
    if isinstance(value, list):
        return [_fill(v, bound) for v in value]
    if isinstance(value, dict):
        if value.get("op") in ("for_each", "filter"):
            inner = {k: v for k, v in bound.items() if k not in _names(value)}
            return {k: _fill(v, inner if k in ("body", "cond") else bound)
                    for k, v in value.items()}
        return {k: _fill(v, bound) for k, v in value.items()}
    return value


def _port(g, parent, name, capacity):
    port = "EK_PORT:" + name
    g.add_node(port, name=name, type="EK_PORT", physical_capacity_bps=capacity)
    g.add_edge(parent, port, type=CONTAINS)


def _run(g, program):
    answer = None
    for op in program:
        kind = op["op"]
        if kind == "add_switch":
            switch = "EK_PACKET_SWITCH:" + op["name"]
            g.add_node(switch, name=op["name"], type="EK_PACKET_SWITCH",
                       switch_loc={"stage": op["stage"]})
            g.add_edge(op["parent"], switch, type=CONTAINS)
            for number in range(1, op["ports"] + 1):
                _port(g, switch, op["name"] + ".p" + str(number), op["port_capacity_bps"])
        elif kind == "add_port":
            _port(g, op["parent"], op["name"], op["capacity_bps"])
        elif kind == "remove":
            g.remove_nodes_from(_below(g, op["node"]) | {op["node"]})
        elif kind == "set_capacity":
            g.nodes[op["node"]]["physical_capacity_bps"] = op["capacity_bps"]
        elif kind == "if":
            value = _run(g, op["then"] if _holds(g, op["cond"]) else op["else"])
            answer = answer if value is None else value
        elif kind == "for_each":
            values = []
            for member in _members(g, op["items"]):
                value = _run(g, _fill(op["body"], _bound(g, op, member)))
                if value is not None:
                    values.append(value)
                    answer = answer if "collect" in op else value
            if op.get("collect") == "sum":
                answer = sum(values)
            elif op.get("collect") == "set":
                answer = sorted({i for v in values for i in ([v] if isinstance(v, str) else v)})
        else:
            answer = _ask(g, op)
    return answer


def process_graph(graph_data):
    answer = _run(graph_data, PROGRAM)
    if ANSWER_IS_GRAPH:
        return {"answer": graph_data}
    if CHANGES_TOPOLOGY:
        return {"answer": answer, "updated_graph": graph_data}
    return {"answer": answer}
"""


def oracle_code(ground_truth: dict[str, Any]) -> str:
    """Return Python source defining ``process_graph`` that executes the ground-truth program.

    Raises ``KeyError`` when ``ground_truth`` lacks ``program``/``answer_kind``.
    """
    header = (
        f"PROGRAM = {ground_truth['program']!r}\n"
        f"ANSWER_IS_GRAPH = {ground_truth['answer_kind'] == 'graph'!r}\n"
        f"CHANGES_TOPOLOGY = {bool(ground_truth.get('changes_topology'))!r}\n"
    )
    return header + _RUNTIME


def oracle_reply_text(ground_truth: dict[str, Any]) -> str:
    """The oracle's full reply: a short sentence and one fenced python block."""
    return "Here is the code.\n\n```python\n" + oracle_code(ground_truth) + "```\n"


# ------------------------------------------------------------------ the template floor agent
#
# The MALT ``template`` floor agent: pattern matching on the prompt, no model, no ground truth.
#
# It reads the ``## Request`` section of the task prompt, recognises each operation sentence with a
# regular expression, turns the matches, in the order they occur, into an operation program (the
# language of :mod:`apps.malt.operations`) and answers with the same ``process_graph`` runtime the
# oracle uses (:func:`oracle_code`). It never sees the ground truth:
# everything comes from the prompt text. This agent is an honest adversary of
# the queries: whatever it solves, a benchmark cannot credit to understanding. A request it
# cannot read gets the null reply.
#
# It knows two wordings, so that it is as strong as a pattern matcher can be made cheaply:
#
# * every sentence shape of query version 1 (one template per label, every operand spelled out
#   as a node id), which it solves completely;
# * every phrasing of version 2, compiled from the generator's own sentence templates
#   (:mod:`apps.malt.queries`), with operands that are *named*: a node name with or without its
#   kind word (the kind of a bare name is read off the name's shape, ``.p<N>`` a port,
#   ``ju1.a1.m1`` an aggregation block, ...), "that <kind>" for the last node of that kind the
#   request named, capacities in Gbit/s or bit/s, new names when the request spells them out.
#
# What it does not do, because no fixed pattern does it: resolve an operand given by a property
# ("the slowest port of ...", "the busiest chassis in ..."), or apply the naming rule the prompt
# states once to a new node the request does not name. Those queries it answers wrongly.

_ID = r"`(?P<{0}>[^`]+)`"
_BPS = r"(?P<{0}>\d+) bit/s"


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.DOTALL)


#: (pattern, builder of the operation) per sentence shape, most specific shapes first.
_SHAPES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], Op]]] = [
    (
        _re(
            r"For each packet switch that is a direct child of "
            + _ID.format("block")
            + r": if its switch_loc stage is (?P<stage>\d+), add one new port named "
            r"`<switch name>\.p(?P<num>\d+)` with physical_capacity_bps "
            + _BPS.format("cap")
            + r".*?; otherwise remove its port `<switch name>\.p(?P<old>\d+)`"
        ),
        lambda m: {
            "op": "for_each",
            "items": {"children_of": m["block"], "kind": "EK_PACKET_SWITCH"},
            "body": [
                {
                    "op": "if",
                    "cond": {
                        "query": {"op": "stage", "node": "$item"},
                        "cmp": "==",
                        "value": int(m["stage"]),
                    },
                    "then": [
                        {
                            "op": "add_port",
                            "parent": "$item",
                            "name": f"$item_name.p{m['num']}",
                            "capacity_bps": int(m["cap"]),
                        }
                    ],
                    "else": [{"op": "remove", "node": f"EK_PORT:$item_name.p{m['old']}"}],
                }
            ],
        },
    ),
    (
        _re(
            r"For each packet switch that is a direct child of "
            + _ID.format("block")
            + r", add one new port named `<switch name>\.p(?P<num>\d+)`.*?with "
            r"physical_capacity_bps " + _BPS.format("cap")
        ),
        lambda m: {
            "op": "for_each",
            "items": {"children_of": m["block"], "kind": "EK_PACKET_SWITCH"},
            "body": [
                {
                    "op": "add_port",
                    "parent": "$item",
                    "name": f"$item_name.p{m['num']}",
                    "capacity_bps": int(m["cap"]),
                }
            ],
        },
    ),
    (
        _re(
            r"For each of the ports (?P<ports>(?:`[^`]+`(?:, )?)+), set physical_capacity_bps "
            r"to " + _BPS.format("cap")
        ),
        lambda m: {
            "op": "for_each",
            "items": {"nodes": sorted(re.findall(r"`([^`]+)`", m["ports"]))},
            "body": [{"op": "set_capacity", "node": "$item", "capacity_bps": int(m["cap"])}],
        },
    ),
    (
        _re(
            r"If the total capacity of the packet switch "
            + _ID.format("switch")
            + r" is at least "
            + _BPS.format("threshold")
            + r".*?, remove its port "
            + _ID.format("victim")
            + r"; otherwise add a new port named "
            + _ID.format("name")
            + r".*?with physical_capacity_bps "
            + _BPS.format("cap")
        ),
        lambda m: {
            "op": "if",
            "cond": {
                "query": {"op": "capacity", "node": m["switch"]},
                "cmp": ">=",
                "value": int(m["threshold"]),
            },
            "then": [{"op": "remove", "node": m["victim"]}],
            "else": [
                {
                    "op": "add_port",
                    "parent": m["switch"],
                    "name": m["name"],
                    "capacity_bps": int(m["cap"]),
                }
            ],
        },
    ),
    (
        _re(
            r"Add a new port named "
            + _ID.format("name")
            + r".*?with physical_capacity_bps "
            + _BPS.format("cap")
            + r".*? to the packet switch "
            + _ID.format("parent")
        ),
        lambda m: {
            "op": "add_port",
            "parent": m["parent"],
            "name": m["name"],
            "capacity_bps": int(m["cap"]),
        },
    ),
    (
        _re(
            r"Add a new packet switch named "
            + _ID.format("name")
            + r".*?stage (?P<stage>\d+)\) to "
            + _ID.format("parent")
            + r"\. It comes with (?P<ports>\d+) new ports?.*?with physical_capacity_bps "
            + _BPS.format("cap")
        ),
        lambda m: {
            "op": "add_switch",
            "parent": m["parent"],
            "name": m["name"],
            "stage": int(m["stage"]),
            "ports": int(m["ports"]),
            "port_capacity_bps": int(m["cap"]),
        },
    ),
    (
        _re(r"Remove " + _ID.format("node") + r" from the topology"),
        lambda m: {"op": "remove", "node": m["node"]},
    ),
    (
        _re(
            r"Set the physical_capacity_bps of port "
            + _ID.format("node")
            + r" to "
            + _BPS.format("cap")
        ),
        lambda m: {"op": "set_capacity", "node": m["node"], "capacity_bps": int(m["cap"])},
    ),
    (
        _re(r"[Ll]ist the direct child nodes of " + _ID.format("node")),
        lambda m: {"op": "list", "node": m["node"]},
    ),
    (
        _re(r"[Rr]ank the direct child nodes of " + _ID.format("node") + r" by their total"),
        lambda m: {"op": "rank", "node": m["node"]},
    ),
    (
        _re(r"[Rr]eport the total capacity of " + _ID.format("node")),
        lambda m: {"op": "capacity", "node": m["node"]},
    ),
    (
        _re(r"[Cc]ount the (?P<kind>EK_\w+) nodes contained in " + _ID.format("node")),
        lambda m: {"op": "count", "node": m["node"], "kind": m["kind"]},
    ),
]

_REQUEST_RE = re.compile(r"## Request\n(?P<request>.*?)\n\n## Answer format", re.DOTALL)


def request_text(history: list[JSON]) -> str:
    """The ``## Request`` section of the first user message ('' when there is none)."""
    for message in history:
        if message.get("role") == "user":
            match = _REQUEST_RE.search(str(message.get("content") or ""))
            return match["request"] if match else ""
    return ""


def _apply(
    build: Callable[..., Op | None], match: re.Match[str], with_memory: bool, memory: dict[str, str]
) -> Op | None:
    return build(match, memory) if with_memory else build(match)


def template_program(request: str) -> list[Op]:
    """The operation program the sentence shapes find in ``request``, in text order.

    A span matched by an earlier (more specific) shape is not matched again by a later one.
    Version 1 shapes are tried first, then the version 2 phrasings (:data:`_V2_SHAPES`).
    """
    found: list[tuple[int, Callable[[dict[str, str]], Op | None], re.Match[str]]] = []
    taken: list[tuple[int, int]] = []
    shapes: list[tuple[re.Pattern[str], Callable[..., Op | None], bool]] = [
        (pattern, build, False) for pattern, build in _SHAPES
    ] + [(pattern, build, True) for pattern, build in _V2_SHAPES]
    for pattern, build, with_memory in shapes:
        for match in pattern.finditer(request):
            start, end = match.span()
            if any(start < t_end and t_start < end for t_start, t_end in taken):
                continue
            taken.append((start, end))
            found.append((start, partial(_apply, build, match, with_memory), match))
    program: list[Op] = []
    memory: dict[str, str] = {}  # kind -> the last node of that kind the request named
    for _, build_op, _match in sorted(found, key=lambda item: item[0]):
        op = build_op(memory)
        if op is not None:
            program.append(op)
    return program


# ------------------------------------------------------------------ version 2 phrasings

_KIND_OF_WORD = {
    word.lower(): kind for kind, words in phrasing.KIND_WORDS.items() for word in words
}
_KIND_WORDS_RE = "|".join(re.escape(w) for w in sorted(_KIND_OF_WORD, key=len, reverse=True))
_KIND_OF_PLURAL = {plural.lower(): kind for kind, plural in phrasing.PLURALS.items()}
_PLURALS_RE = "|".join(re.escape(w) for w in sorted(_KIND_OF_PLURAL, key=len, reverse=True))
#: Kind of a bare name, read off its shape (the MALT example's naming scheme).
_NAME_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r".*\.p\d+"), "EK_PORT"),
    (re.compile(r".*rack"), "EK_RACK"),
    (re.compile(r".*\.dom"), "EK_CONTROL_DOMAIN"),
    (re.compile(r"ju\d+"), "EK_JUPITER"),
    (re.compile(r"ju\d+\.s\d+"), "EK_SPINEBLOCK"),
    (re.compile(r"ju\d+\.a\d+"), "EK_SUPERBLOCK"),
    (re.compile(r"ju\d+\.a\d+\.m\d+"), "EK_AGG_BLOCK"),
)


def _operand_re(group: str) -> str:
    return (
        rf"(?:(?:(?P<{group}_kw>{_KIND_WORDS_RE}) )?`(?P<{group}>[^`]+)`"
        rf"|that (?P<{group}_that>{_KIND_WORDS_RE}))"
    )


def _bps_re(group: str) -> str:
    return rf"(?P<{group}>\d+) (?P<{group}_u>Gbit/s|bit/s)"


_SLOTS: dict[str, str] = {
    "x": _operand_re("x"),
    "X": _operand_re("x"),
    "cap": _bps_re("cap"),
    "t": _bps_re("t"),
    "name": r"(?P<name>[^`]+)",
    "kind": r"(?P<kind>EK_[A-Z_]+)",
    "plural": rf"(?P<plural>{_PLURALS_RE})",
    "unit": r"(?P<unit>(?: in (?:Gbit/s|bit/s))?)",
    "stage": r"(?P<stage>\d+)",
    "k": r"(?P<k>\d+)",
    "ports": r"ports?",
    "victim": r"its port `(?P<victim>[^`]+)`",
    "new": r" `(?P<name>[^`]+)`",
    "cond": r"(?:it is at stage (?P<stage>\d+)|it sits in stage (?P<stage2>\d+)"
    r"|its total capacity is below (?P<t>\d+) (?P<t_u>Gbit/s|bit/s))",
}


def template_pattern(template: str, slots: Mapping[str, str]) -> re.Pattern[str]:
    """A sentence template (``{slot}`` placeholders) as a regex: literal text escaped, each
    slot replaced by ``slots[slot]``. Raises ``KeyError`` for a slot ``slots`` lacks."""
    parts = re.split(r"\{(\w+)\}", template)
    pattern = "".join(
        re.escape(part) if i % 2 == 0 else slots[part] for i, part in enumerate(parts)
    )
    return re.compile(pattern, re.IGNORECASE | re.DOTALL)


def match_bps(m: re.Match[str], group: str) -> int:
    """Bit/s of a matched ``<group>`` number with its ``<group>_u`` unit (Gbit/s or bit/s)."""
    value = int(m[group])
    return value * GBPS if m[f"{group}_u"].lower() == "gbit/s" else value


def _node(m: re.Match[str], memory: dict[str, str], group: str = "x") -> str | None:
    """The node id of an operand slot (None when it cannot be read)."""
    groups = m.groupdict()
    if groups.get(f"{group}_that"):
        return memory.get(_KIND_OF_WORD[groups[f"{group}_that"].lower()])
    name = groups[group]
    word = groups.get(f"{group}_kw")
    if word:
        kind = _KIND_OF_WORD[word.lower()]
    else:
        kind = next(
            (k for shape, k in reversed(_NAME_SHAPES) if shape.fullmatch(name)), "EK_PACKET_SWITCH"
        )
    node = f"{kind}:{name}"
    memory[kind] = node
    return node


def _v2_question(kind: str) -> Callable[[re.Match[str], dict[str, str]], Op | None]:
    def build(m: re.Match[str], memory: dict[str, str]) -> Op | None:
        node = _node(m, memory)
        if node is None:
            return None
        op: Op = {"op": kind, "node": node}
        if kind == "count":
            groups = m.groupdict()
            op["kind"] = (
                groups["kind"].upper()
                if groups.get("kind")
                else _KIND_OF_PLURAL[groups["plural"].lower()]
            )
        if kind == "capacity" and "gbit" in (m.groupdict().get("unit") or "").lower():
            op["unit_bps"] = GBPS
        return op

    return build


def _v2_remove(m: re.Match[str], memory: dict[str, str]) -> Op | None:
    node = _node(m, memory)
    return None if node is None else {"op": "remove", "node": node}


def _v2_update(m: re.Match[str], memory: dict[str, str]) -> Op | None:
    node = _node(m, memory)
    if node is None:
        return None
    return {"op": "set_capacity", "node": node, "capacity_bps": match_bps(m, "cap")}


def _v2_add_port(m: re.Match[str], memory: dict[str, str]) -> Op | None:
    node = _node(m, memory)
    if node is None:
        return None
    cap = match_bps(m, "cap")
    return {"op": "add_port", "parent": node, "name": m["name"], "capacity_bps": cap}


def _v2_add_switch(m: re.Match[str], memory: dict[str, str]) -> Op | None:
    node = _node(m, memory)
    if node is None:
        return None
    return {
        "op": "add_switch",
        "parent": node,
        "name": m["name"],
        "stage": int(m["stage"]),
        "ports": int(m["k"]),
        "port_capacity_bps": match_bps(m, "cap"),
    }


def _v2_if_else(m: re.Match[str], memory: dict[str, str]) -> Op | None:
    node = _node(m, memory)
    if node is None:
        return None
    return {
        "op": "if",
        "cond": {
            "query": {"op": "capacity", "node": node}, "cmp": ">=", "value": match_bps(m, "t")
        },
        "then": [{"op": "remove", "node": f"EK_PORT:{m['victim']}"}],
        "else": [
            {
                "op": "add_port", "parent": node, "name": m["name"],
                "capacity_bps": match_bps(m, "cap"),
            }
        ],
    }


def _v2_shapes() -> list[tuple[re.Pattern[str], Callable[..., Op | None]]]:
    """One pattern per version 2 phrasing whose operands a pattern can read."""
    families: list[tuple[tuple[str, ...], Callable[..., Op | None]]] = [
        (phrasing.IF_ELSE, _v2_if_else),
        (phrasing.ADD_SWITCH_NAMED, _v2_add_switch),
        (phrasing.ADD_PORT_NAMED, _v2_add_port),
        (phrasing.UPDATE, _v2_update),
        (phrasing.REMOVE, _v2_remove),
        (phrasing.RANK, _v2_question("rank")),
        (phrasing.COUNT, _v2_question("count")),
        (phrasing.CAPACITY, _v2_question("capacity")),
        (phrasing.LIST, _v2_question("list")),
    ]
    return [
        (template_pattern(template, _SLOTS), build) for pool, build in families for template in pool
    ]


_V2_SHAPES = _v2_shapes()


def template_reply(history: list[JSON]) -> str:
    """The template agent's reply: ``process_graph`` code for the program it read, or the
    null reply when it recognised nothing."""
    program = template_program(request_text(history))
    if not program:
        return NULL_REPLY
    plan: dict[str, Any] = {
        "program": program,
        "answer_kind": answer_kind(program),
        "changes_topology": changes_topology(program),
    }
    return "```python\n" + oracle_code(plan) + "```\n"
