"""The MALT *scripted* agent: the strongest program without a model that its authors could write
against the public query generator (:mod:`apps.malt.queries`), used to measure the benchmark.

It knows every sentence template, descriptor form and naming rule of the public generator. It
parses the ``## Request`` section into an operation program (the language of
:mod:`apps.malt.operations`) whose operands may be *descriptions* ("the slowest port of the
busiest switch in aggregation block `ju1.a1.m1`", "that chassis", "its highest-numbered port",
a new node left to the naming rule), and answers with code that carries a small interpreter:
at run time, inside the sandbox, it resolves each description on the live graph (in the
topology before any change, as the prompt says), applies the naming rule on the current graph,
and executes the program. It never sees the ground truth.

A request it cannot read gets the null reply. What it cannot do is exactly what it was not
written for: phrasings, descriptor forms, query families or answer shapes outside the public
generator (held-out variant packs, docs/writing-a-variant-pack.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from evaluator.types import JSON

from apps.malt import phrasing
from apps.malt.fabric import GBPS
from apps.malt.operations import Op, changes_topology
from apps.malt.queries import answer_kind
from apps.malt.reference import (
    _NAME_SHAPES,
    NULL_REPLY,
    match_bps,
    request_text,
    template_pattern,
)

#: A description of a node, resolved at run time (see ``_RUNTIME``):
#: ``{"id": node id}``, ``{"name": name, "kind": kind or None}``,
#: ``{"extreme": "max"|"min", "kind": kind, "scope": description or None}``,
#: ``{"holder_of": description, "kind": kind}`` (the described node's container of that kind).
Ref = dict[str, Any]

_KIND_OF_WORD = {
    word.lower(): kind for kind, words in phrasing.KIND_WORDS.items() for word in words
}
_WORDS = "|".join(re.escape(w) for w in sorted(_KIND_OF_WORD, key=len, reverse=True))
_KIND_OF_PLURAL = {plural.lower(): kind for kind, plural in phrasing.PLURALS.items()}
_PLURALS = "|".join(re.escape(w) for w in sorted(_KIND_OF_PLURAL, key=len, reverse=True))
#: Adjectives that pick the highest total capacity (the prompt's "How requests name things").
_MOST = frozenset({"most", "highest", "highest-capacity", "largest", "busiest", "biggest",
                   "fastest"})

# ------------------------------------------------------------------ operand descriptions

_NAMED = re.compile(rf"(?:(?P<word>{_WORDS}) )?`(?P<name>[^`]+)`", re.IGNORECASE)
_THAT = re.compile(rf"that (?P<word>{_WORDS})", re.IGNORECASE)
_PORT_EXTREME = re.compile(
    r"the (?:(?P<adj>fastest|slowest) port(?: of (?P<scope1>.+))?"
    r"|port(?: of (?P<scope2>.+?))? with the (?P<adj2>highest|lowest) capacity)",
    re.IGNORECASE,
)
_WITH = re.compile(
    rf"the (?P<word>{_WORDS})(?: of (?P<scope>.+?))? with the (?P<adj>most|least) capacity",
    re.IGNORECASE,
)
_ADJ = re.compile(
    rf"the (?P<adj>highest-capacity|lowest-capacity|largest|smallest|busiest|least loaded|"
    rf"biggest) (?P<word>{_WORDS})(?: in (?P<scope>.+))?",
    re.IGNORECASE,
)


class Reader:
    """Reads operand texts into descriptions; remembers the last node of each kind named or
    described (for "that <kind>")."""

    def __init__(self) -> None:
        self.memory: dict[str, Ref] = {}

    def operand(self, text: str) -> Ref | None:
        """The description of ``text``, or None when it is not an operand form we know."""
        text = text.strip()
        if (m := _THAT.fullmatch(text)) is not None:
            return self.memory.get(_KIND_OF_WORD[m["word"].lower()])
        if (m := _NAMED.fullmatch(text)) is not None:
            if m["word"]:
                kind = _KIND_OF_WORD[m["word"].lower()]
                ref: Ref = {"id": f"{kind}:{m['name']}"}
                self.memory[kind] = ref
                return ref
            # a bare name: its node is found by name at run time; its kind is read off the
            # name's shape for a later "that <kind>"
            ref = {"name": m["name"], "kind": None}
            shape = next((k for pattern, k in reversed(_NAME_SHAPES)
                          if pattern.fullmatch(m["name"])), "EK_PACKET_SWITCH")
            self.memory[shape] = ref
            return ref
        if (m := _PORT_EXTREME.fullmatch(text)) is not None:
            scope_text = m["scope1"] or m["scope2"]
            return self._extreme("EK_PORT", (m["adj"] or m["adj2"]).lower(), scope_text)
        if (m := _WITH.fullmatch(text)) is not None:
            return self._extreme(_KIND_OF_WORD[m["word"].lower()], m["adj"].lower(), m["scope"])
        if (m := _ADJ.fullmatch(text)) is not None:
            return self._extreme(_KIND_OF_WORD[m["word"].lower()], m["adj"].lower(), m["scope"])
        return None

    def _extreme(self, kind: str, adjective: str, scope_text: str | None) -> Ref | None:
        scope = None
        if scope_text is not None:
            scope = self.operand(scope_text)
            if scope is None:
                return None
        ref: Ref = {"extreme": "max" if adjective in _MOST else "min", "kind": kind,
                    "scope": scope}
        self.memory[kind] = ref
        return ref


# ------------------------------------------------------------------ sentence templates

_OPERAND = r"(?P<{0}>(?:`[^`]*`|[^`.;:?!\n])+?)"
_SLOTS: dict[str, str] = {
    "x": _OPERAND.format("x"),
    "X": _OPERAND.format("x"),
    "cap": r"(?P<cap>\d+) (?P<cap_u>Gbit/s|bit/s)",
    "t": r"(?P<t>\d+) (?P<t_u>Gbit/s|bit/s)",
    "name": r"(?P<name>[^`]+)",
    "kind": r"(?P<kind>EK_[A-Z_]+)",
    "plural": rf"(?P<plural>{_PLURALS})",
    "unit": r"(?P<unit>(?: in (?:Gbit/s|bit/s))?)",
    "stage": r"(?P<stage>\d+)",
    "k": r"(?P<k>\d+)",
    "ports": r"ports?",
    "victim": r"its (?P<victim>fastest port|slowest port|port `[^`]+`)",
    "new": r"(?: `(?P<name>[^`]+)`)?",
    "cond": r"(?:it is at stage (?P<stage>\d+)|it sits in stage (?P<stage2>\d+)"
    r"|its total capacity is below (?P<t>\d+) (?P<t_u>Gbit/s|bit/s))",
}


Builder = Callable[[re.Match[str], Ref, Reader], list[Op] | None]


def _question(kind: str) -> Builder:
    def build(m: re.Match[str], x: Ref, reader: Reader) -> list[Op]:
        op: Op = {"op": kind, "node": x}
        groups = m.groupdict()
        if kind == "count":
            op["kind"] = (groups["kind"].upper() if groups.get("kind")
                          else _KIND_OF_PLURAL[groups["plural"].lower()])
        if kind == "capacity" and "gbit" in (groups.get("unit") or "").lower():
            op["unit_bps"] = GBPS
        return [op]

    return build


def _remove(m: re.Match[str], x: Ref, reader: Reader) -> list[Op]:
    return [{"op": "remove", "node": x}]


def _update(m: re.Match[str], x: Ref, reader: Reader) -> list[Op]:
    return [{"op": "set_capacity", "node": x, "capacity_bps": match_bps(m, "cap")}]


def _add_port(m: re.Match[str], x: Ref, reader: Reader) -> list[Op]:
    name = m.groupdict().get("name") or {"new_port_of": x}
    return [{"op": "add_port", "parent": x, "name": name, "capacity_bps": match_bps(m, "cap")}]


def _add_switch(m: re.Match[str], x: Ref, reader: Reader) -> list[Op]:
    stage = int(m["stage"])
    name = m.groupdict().get("name") or {"new_switch_of": x, "stage": stage}
    return [{"op": "add_switch", "parent": x, "name": name, "stage": stage,
             "ports": int(m["k"]), "port_capacity_bps": match_bps(m, "cap")}]


def _if_else(m: re.Match[str], x: Ref, reader: Reader) -> list[Op]:
    victim_text = m["victim"].lower()
    victim: Ref
    if victim_text.startswith("port `"):
        victim = {"id": "EK_PORT:" + m["victim"][len("port `"):-1]}
    else:
        victim = {"extreme": "max" if "fastest" in victim_text else "min", "kind": "EK_PORT",
                  "scope": x}
    name = m.groupdict().get("name") or {"new_port_of": x}
    return [{
        "op": "if",
        "cond": {"query": {"op": "capacity", "node": x}, "cmp": ">=", "value": match_bps(m, "t")},
        "then": [{"op": "remove", "node": victim}],
        "else": [{"op": "add_port", "parent": x, "name": name,
                  "capacity_bps": match_bps(m, "cap")}],
    }]


def _for_add(m: re.Match[str], x: Ref, reader: Reader) -> list[Op]:
    body = [{"op": "add_port", "parent": "$item", "name": {"new_port_of": "$item"},
             "capacity_bps": match_bps(m, "cap")}]
    items = {"children_of": x, "kind": "EK_PACKET_SWITCH"}
    return [{"op": "for_each", "items": items, "body": body}]


def _for_set(m: re.Match[str], x: Ref, reader: Reader) -> list[Op]:
    body = [{"op": "set_capacity", "node": "$item", "capacity_bps": match_bps(m, "cap")}]
    items = {"ports_below": x, "under_bps": match_bps(m, "t")}
    return [{"op": "for_each", "items": items, "body": body}]


def _for_if(m: re.Match[str], x: Ref, reader: Reader) -> list[Op]:
    groups = m.groupdict()
    stage = groups.get("stage") or groups.get("stage2")
    query: Op
    if stage is not None:
        query, cmp, value = {"op": "stage", "node": "$item"}, "==", int(stage)
    else:
        query, cmp, value = {"op": "capacity", "node": "$item"}, "<", match_bps(m, "t")
    body = [{
        "op": "if",
        "cond": {"query": query, "cmp": cmp, "value": value},
        "then": [{"op": "add_port", "parent": "$item", "name": {"new_port_of": "$item"},
                  "capacity_bps": match_bps(m, "cap")}],
        "else": [{"op": "remove", "node": {"highest_port_of": "$item"}}],
    }]
    items = {"children_of": x, "kind": "EK_PACKET_SWITCH"}
    return [{"op": "for_each", "items": items, "body": body}]


def _shapes() -> list[tuple[re.Pattern[str], Builder]]:
    """Every public sentence template, most specific families first."""
    families: list[tuple[tuple[str, ...], Builder]] = [
        (phrasing.FOR_IF, _for_if),
        (phrasing.FOR_SET, _for_set),
        (phrasing.FOR_ADD, _for_add),
        (phrasing.IF_ELSE, _if_else),
        (phrasing.ADD_SWITCH_NAMED, _add_switch),
        (phrasing.ADD_SWITCH_RULE, _add_switch),
        (phrasing.ADD_PORT_NAMED, _add_port),
        (phrasing.ADD_PORT_RULE, _add_port),
        (phrasing.UPDATE, _update),
        (phrasing.REMOVE, _remove),
        (phrasing.RANK, _question("rank")),
        (phrasing.COUNT, _question("count")),
        (phrasing.CAPACITY, _question("capacity")),
        (phrasing.LIST, _question("list")),
    ]
    return [
        (template_pattern(template, _SLOTS), build) for pool, build in families for template in pool
    ]


_SHAPES = _shapes()


def scripted_program(request: str) -> list[Op]:
    """The program the public templates find in ``request``, in text order ([] if none).

    Each template is searched from every position (a match whose operand is not a known form
    is retried one character later), and a span matched by a more specific template is not
    matched again. Operands are read in text order, so "that <kind>" refers back correctly.
    """
    found: list[tuple[int, re.Match[str], Builder]] = []
    taken: list[tuple[int, int]] = []
    probe = Reader()  # only to test that an operand is readable
    for pattern, build in _SHAPES:
        position = 0
        while (m := pattern.search(request, position)) is not None:
            start, end = m.span()
            position = start + 1
            if any(start < t_end and t_start < end for t_start, t_end in taken):
                continue
            text = m["x"]
            if probe.operand(text) is None and not _THAT.fullmatch(text.strip()):
                continue
            taken.append((start, end))
            found.append((start, m, build))
            position = end
    reader = Reader()
    program: list[Op] = []
    for _, m, build in sorted(found, key=lambda item: item[0]):
        x = reader.operand(m["x"])
        if x is None:
            return []
        ops = build(m, x, reader)
        if ops is None:
            return []
        program.extend(ops)
    return program


def scripted_reply(history: list[JSON]) -> str:
    """The scripted agent's reply: ``process_graph`` code carrying the program and the run-time
    interpreter, or the null reply when the request matched no public template."""
    program = scripted_program(request_text(history))
    if not program:
        return NULL_REPLY
    return program_reply(program)


def program_reply(program: list[Op]) -> str:
    """A reply whose ``process_graph`` runs ``program`` with the run-time interpreter below.

    ``program`` is in the language of :mod:`apps.malt.operations`, except that node operands
    and new names may be descriptions (:data:`Ref`; also ``{"holder_of": ref, "kind": kind}``,
    the container of that kind of the node ``ref`` names), resolved inside the sandbox. Other
    no-model agents (:mod:`apps.malt.adaptive`) answer through this too.
    """
    header = (
        f"PROGRAM = json.loads({json.dumps(json.dumps(program))})\n"
        f"ANSWER_IS_GRAPH = {answer_kind(program) == 'graph'!r}\n"
        f"CHANGES_TOPOLOGY = {bool(changes_topology(program))!r}\n"
    )
    return "```python\nimport json\n" + header + _RUNTIME + "```\n"


_RUNTIME = r'''
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
    return sum(g.nodes[m].get("physical_capacity_bps", 0) for m in members
               if g.nodes[m]["type"] == "EK_PORT")


def _number(name):
    tail = name.rsplit(".p", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _resolve(initial, g, ref, item):
    """A description -> node id: on the topology before any change (names: current graph)."""
    if ref == "$item":
        return item
    if isinstance(ref, str):
        return ref
    if "id" in ref:
        return ref["id"]
    if "name" in ref:
        hits = [n for n, a in initial.nodes(data=True) if a.get("name") == ref["name"]
                and (ref.get("kind") is None or a["type"] == ref["kind"])]
        if len(hits) > 1:
            hits = [h for h in hits if initial.nodes[h]["type"] not in
                    ("EK_CHASSIS", "EK_CONTROL_POINT")] or hits
        return hits[0] if hits else ref["kind"] + ":" + ref["name"]
    if "holder_of" in ref:
        child = _resolve(initial, g, ref["holder_of"], item)
        return sorted(p for p in initial.predecessors(child)
                      if initial.edges[p, child].get("type") == CONTAINS
                      and initial.nodes[p]["type"] == ref["kind"])[0]
    if "highest_port_of" in ref:
        switch = _resolve(initial, g, ref["highest_port_of"], item)
        ports = [p for p in _children(g, switch) if g.nodes[p]["type"] == "EK_PORT"]
        return max(ports, key=lambda p: _number(g.nodes[p]["name"]))
    scope = ref.get("scope")
    if scope is None:
        pool = [n for n, a in initial.nodes(data=True) if a["type"] == ref["kind"]]
    else:
        pool = [c for c in _children(initial, _resolve(initial, g, scope, item))
                if initial.nodes[c]["type"] == ref["kind"]]
    values = {n: _capacity(initial, n) for n in pool}
    best = max(values.values()) if ref["extreme"] == "max" else min(values.values())
    return sorted(n for n, v in values.items() if v == best)[0]


def _new_name(initial, g, spec, item):
    if isinstance(spec, str):
        return spec
    if "new_port_of" in spec:
        switch = _resolve(initial, g, spec["new_port_of"], item)
        used = [_number(g.nodes[p]["name"]) for p in _children(g, switch)]
        return g.nodes[switch]["name"] + ".p" + str(max(used, default=0) + 1)
    block = _resolve(initial, g, spec["new_switch_of"], item)
    prefix = g.nodes[block]["name"] + ".s" + str(spec["stage"]) + "c"
    used = [int(g.nodes[s]["name"][len(prefix):]) for s in _children(g, block)
            if g.nodes[s]["name"].startswith(prefix) and g.nodes[s]["name"][len(prefix):].isdigit()]
    return prefix + str(max(used, default=0) + 1)


def _ask(initial, g, op, item):
    kind, node = op["op"], _resolve(initial, g, op["node"], item)
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


def _port(g, parent, name, capacity):
    port = "EK_PORT:" + name
    g.add_node(port, name=name, type="EK_PORT", physical_capacity_bps=capacity)
    g.add_edge(parent, port, type=CONTAINS)


def _run(initial, g, program, item=None):
    answer = None
    for op in program:
        kind = op["op"]
        if kind == "add_switch":
            parent = _resolve(initial, g, op["parent"], item)
            name = _new_name(initial, g, op["name"], item)
            switch = "EK_PACKET_SWITCH:" + name
            g.add_node(switch, name=name, type="EK_PACKET_SWITCH",
                       switch_loc={"stage": op["stage"]})
            g.add_edge(parent, switch, type=CONTAINS)
            for number in range(1, op["ports"] + 1):
                _port(g, switch, name + ".p" + str(number), op["port_capacity_bps"])
        elif kind == "add_port":
            parent = _resolve(initial, g, op["parent"], item)
            _port(g, parent, _new_name(initial, g, op["name"], item), op["capacity_bps"])
        elif kind == "remove":
            node = _resolve(initial, g, op["node"], item)
            g.remove_nodes_from(_below(g, node) | {node})
        elif kind == "set_capacity":
            g.nodes[_resolve(initial, g, op["node"], item)]["physical_capacity_bps"] = (
                op["capacity_bps"])
        elif kind == "if":
            cond = op["cond"]
            left, right = _ask(initial, g, cond["query"], item), cond["value"]
            holds = {">=": left >= right, ">": left > right, "<=": left <= right,
                     "<": left < right, "==": left == right}[cond["cmp"]]
            value = _run(initial, g, op["then"] if holds else op["else"], item)
            answer = answer if value is None else value
        elif kind == "for_each":
            items = op["items"]
            if "children_of" in items:
                parent = _resolve(initial, g, items["children_of"], item)
                members = [c for c in _children(g, parent) if g.nodes[c]["type"] == items["kind"]]
            else:
                switch = _resolve(initial, g, items["ports_below"], item)
                members = [p for p in _children(initial, switch)
                           if initial.nodes[p]["type"] == "EK_PORT"
                           and initial.nodes[p]["physical_capacity_bps"] < items["under_bps"]]
            for member in members:
                value = _run(initial, g, op["body"], member)
                answer = answer if value is None else value
        else:
            answer = _ask(initial, g, op, item)
    return answer


def process_graph(graph_data):
    initial = graph_data.copy()
    answer = _run(initial, graph_data, PROGRAM)
    if ANSWER_IS_GRAPH:
        return {"answer": graph_data}
    if CHANGES_TOPOLOGY:
        return {"answer": answer, "updated_graph": graph_data}
    return {"answer": answer}
'''
