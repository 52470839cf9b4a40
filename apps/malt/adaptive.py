"""The MALT *adaptive* agent: no model, it learns a pack's wording from one exposed batch.

After a practice submission a team sees, per episode, the prompt and (once the pack is spent)
the query's ground truth: here the operation program with every node resolved
(:mod:`apps.malt.operations`). This agent learns from exactly that and nothing else, then
answers fresh queries of the same pack. It measures how much one exposure of a held-out pack
is worth to a team that scripts against it: the benchmark stays honest only
while a pack is unseen.

The rule (:class:`MaltLearner`):

1. **Clauses.** The ``## Request`` text of a prompt (:func:`apps.malt.reference.request_text`)
   is cut into one clause per top-level operation of the program (:func:`clauses`: a program
   of two operations is cut at the last sentence end whose tail mentions a node), and a short
   leading connective ("Once that is done, ") is dropped.
2. **Forms.** Each clause becomes a *form* (:func:`abstract`): node names in backticks, numbers
   with their unit (Gbit/s, bit/s), bare numbers and the kind words of the public prompt
   ("rack", "packet switches", "that spine block") are replaced by typed slots ``<N>``, ``<C>``,
   ``<I>``, ``<K>``, ``<T>``; the rest is lower-cased text.
3. **Templates.** The clause's ground-truth operation is turned into a template: every leaf is
   given the list of *derivations* from the clause's slots that reproduce it
   (:func:`_derivations`): a slot value (a capacity, a stage, a kind), a node id built from a
   kind slot and a name slot ("port number 7 of switch `x`": ``EK_PORT:<N>.p<I>``), the node an
   earlier clause named ("that rack"), or a relation resolved on the live graph by the scripted
   agent's interpreter (:func:`apps.malt.scripted.program_reply`): the container of a named
   node (``holder_of``), the next port or switch name by the prompt's naming rule, a switch's
   highest-numbered port, the ports of a switch under a threshold. Relations are checked on the
   query's graph when the ground truth names the shipped fabric (a team can rebuild it from the
   public repository and the ``graph_key``); on a pack's fabric variant they are taken on trust.
   A form seen again keeps only the derivations every example agrees on.
4. **Answer.** A fresh request is cut the same way (one clause, else two); when every clause's
   form is known, each template is filled from the new clause's slots (the first surviving
   derivation by preference: slots, then relations, then literals) and the program is answered
   with the scripted agent's run-time interpreter. A request with an unknown form gets the
   scripted agent's reply (public-looking queries).

Shapes: :meth:`MaltLearner.learn` takes :class:`evaluator.types.Query` objects (it reads only
``prompt`` and ``ground_truth``); :meth:`MaltLearner.reply` takes the chat history and returns
a reply text (``process_graph`` code in a fenced block).

Targets (``benchmarks/bench_difficulty.py --agents adaptive``; checked on a small batch by
``tests/apps/malt/test_adaptive.py``): at least 80% correct and safe on a fresh batch of the
exposed pack, at most 20% on levels 2 and 3 of a pack it never saw; the oracle 100% on both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from evaluator.types import JSON, Query

from apps.malt import phrasing
from apps.malt.fabric import GBPS, GraphRef, operands, port_capacities
from apps.malt.reference import request_text
from apps.malt.scripted import program_reply, scripted_reply
from apps.malt.topology import split_node_id

#: Kind of each kind word and plural of the public prompt (``apps.malt.phrasing``).
KIND_OF_WORD: dict[str, str] = {
    **{w.lower(): k for k, words in phrasing.KIND_WORDS.items() for w in words},
    **{p.lower(): k for k, p in phrasing.PLURALS.items()},
}
_WORDS = "|".join(re.escape(w) for w in sorted(KIND_OF_WORD, key=len, reverse=True))
_SLOT_RE = re.compile(
    rf"`(?P<N>[^`]+)`|(?P<C>\d+) (?P<unit>Gbit/s|bit/s)|(?P<I>\b\d+\b)"
    rf"|\bthat (?P<T>{_WORDS})\b|\b(?P<K>{_WORDS})\b",
    re.IGNORECASE,
)
_CONNECTIVE_RE = re.compile(r"^([A-Za-z][A-Za-z ]{0,28}?)[,:] ")
_SENTENCE_END_RE = re.compile(r"[.?!] +")
_MENTION_RE = re.compile(rf"`|\bthat (?:{_WORDS})\b", re.IGNORECASE)
#: Operation fields that hold a node id (the others are numbers, kinds or literals).
NODE_KEYS = frozenset({"node", "parent", "children_of"})

#: One slot of a clause: ``(type, value)``; type ``N`` (a name, str), ``C`` (a capacity in
#: bit/s, int), ``I`` (a bare integer), ``K`` (a kind word: the kind, str), ``T`` ("that
#: <kind word>": the kind, str).
Slot = tuple[str, Any]
#: A derivation of a leaf value from a clause's slots (hashable; see :func:`_derivations`).
Derivation = tuple[Any, ...]


def clauses(request: str, parts: int) -> list[str] | None:
    """``request`` cut into ``parts`` clauses (1 or 2), connectives dropped; None if it
    cannot be cut so. Two clauses are cut at the last sentence end after which the text still
    mentions a node (a backticked name or "that <kind>")."""
    text = " ".join(request.split())
    if parts == 1:
        return [_drop_connective(text)]
    if parts != 2:
        return None
    for match in reversed(list(_SENTENCE_END_RE.finditer(text))):
        head, tail = text[: match.start() + 1], text[match.end():]
        if tail and _MENTION_RE.search(tail):
            return [_drop_connective(head), _drop_connective(tail)]
    return None


def _drop_connective(text: str) -> str:
    match = _CONNECTIVE_RE.match(text)
    if match and not _SLOT_RE.search(match[1]):
        return text[match.end():]
    return text


def abstract(clause: str) -> tuple[str, list[Slot]]:
    """``(form, slots)`` of a clause: the text with typed slots (module docstring, step 2),
    lower-cased, "an" read as "a"; the slots in text order."""
    slots: list[Slot] = []

    def slot(m: re.Match[str]) -> str:
        if m["N"] is not None:
            slots.append(("N", m["N"]))
            return "<N>"
        if m["C"] is not None:
            value = int(m["C"])
            slots.append(("C", value * GBPS if m["unit"].lower() == "gbit/s" else value))
            return "<C>"
        if m["I"] is not None:
            slots.append(("I", int(m["I"])))
            return "<I>"
        if m["T"] is not None:
            slots.append(("T", KIND_OF_WORD[m["T"].lower()]))
            return "<T>"
        slots.append(("K", KIND_OF_WORD[m["K"].lower()]))
        return "<K>"

    form = re.sub(r"\ban\b", "a", _SLOT_RE.sub(slot, clause).lower())
    for token in "NCIKT":
        form = form.replace(f"<{token.lower()}>", f"<{token}>")
    return form, slots


# ------------------------------------------------------------------ derivations
#
# A derivation is a tuple whose first item names its rule; the number after it is its rank
# (lower is preferred when several survive):
#   ("slot", j)                  0  the value of slot j (a capacity, integer or kind)
#   ("id", kind, parts)          0-1 a node id or name: ``kind`` is ("K", j), ("lit", KIND) or
#                                None (a bare name); parts are ("N", j), ("I", j), ("lit", s)
#   ("that", j)                  0  the node an earlier clause named, of slot j's kind
#   ("holder", j_kind, child)    2  the container of kind slot j_kind of node id ``child``
#   ("new_port",)                2  the next port name of the operation's parent (naming rule)
#   ("new_switch",)              2  the next switch name of the parent block at the stage
#   ("highest",)                 2  the highest-numbered port of the loop's switch
#   ("ports_below", sw, j)       2  the ports of switch ``sw`` slower than capacity slot j
#   ("lit", value)               4  the value itself


def _rank(derivation: Derivation) -> int:
    rule = derivation[0]
    if rule in ("slot", "that"):
        return 0
    if rule == "id":
        parts = derivation[2]
        if any(p[0] == "lit" and any(c.isdigit() for c in p[1]) for p in parts):
            return 3  # a number the text does not state: a coincidence of this example
        return 0 if len(parts) == 1 and derivation[1] is not None else 1
    if rule == "lit":
        return 4
    return 2


@dataclass
class _Context:
    """What derivations of one clause may use: its slots, the nodes earlier clauses named (by
    kind), and the query graph when it is public (else None)."""

    slots: list[Slot]
    memory: dict[str, Any]
    graph: Any = None
    capacities: dict[str, int] = field(default_factory=dict)


def _name_parts(text: str, slots: list[Slot]) -> list[tuple[tuple[str, Any], ...]]:
    """Ways to write ``text`` as a name slot, optionally followed by literal text whose
    trailing number may be an integer slot."""
    found: list[tuple[tuple[str, Any], ...]] = []
    for j, (kind, value) in enumerate(slots):
        if kind != "N" or not text.startswith(value):
            continue
        rest = text[len(value):]
        if not rest:
            found.append((("N", j),))
            continue
        found.append((("N", j), ("lit", rest)))
        number = re.fullmatch(r"(.*?)(\d+)", rest)
        if number:
            for i, (ikind, ivalue) in enumerate(slots):
                if ikind == "I" and ivalue == int(number[2]):
                    found.append((("N", j), ("lit", number[1]), ("I", i)))
    return found


def _node_derivations(value: str, ctx: _Context) -> list[Derivation]:
    """Derivations of a node id ``value`` (``"<KIND>:<name>"``)."""
    out: list[Derivation] = []
    if ":" not in value or value.startswith("$"):
        return [("lit", value)]
    kind, name = split_node_id(value)
    kinds: list[Any] = [("K", j) for j, (t, v) in enumerate(ctx.slots) if t == "K" and v == kind]
    for parts in _name_parts(name, ctx.slots):
        out.extend(("id", k, parts) for k in kinds)
        out.append(("id", ("lit", kind), parts))
    for j, (t, v) in enumerate(ctx.slots):
        if t == "T" and v == kind and ctx.memory.get(kind) == value:
            out.append(("that", j))
    # the container of a named node: checked on a public graph, else taken on trust
    for j in (j for j, (t, v) in enumerate(ctx.slots) if t == "K" and v == kind):
        for c, (t, child_kind) in enumerate(ctx.slots):
            if t != "K" or c == j:
                continue
            for n, (tn, child_name) in enumerate(ctx.slots):
                if tn != "N":
                    continue
                child = f"{child_kind}:{child_name}"
                if ctx.graph is None or (
                    child in ctx.graph.graph and value in ctx.graph.parents(child)
                ):
                    out.append(("holder", j, ("id", ("K", c), (("N", n),))))
    out.append(("lit", value))
    return out


def _leaf_derivations(key: str, value: Any, op: dict[str, Any], ctx: _Context) -> list[Derivation]:
    """Derivations of the leaf ``op[key] == value`` (module docstring, step 3)."""
    out: list[Derivation] = []
    if isinstance(value, bool) or key == "unit_bps" or key == "cmp" or key == "op":
        return [("lit", value)]
    if isinstance(value, int):
        out = [("slot", j) for j, (t, v) in enumerate(ctx.slots) if t in "CI" and v == value]
    elif key in NODE_KEYS:
        if op.get("op") == "remove" and value.startswith("EK_PORT:$item_name.p"):
            out.append(("highest",))
        return out + _node_derivations(value, ctx)
    elif key == "kind" and isinstance(value, str):
        out = [("slot", j) for j, (t, v) in enumerate(ctx.slots) if t in "KT" and v == value]
    elif key == "name" and isinstance(value, str):
        out = [("id", None, parts) for parts in _name_parts(value, ctx.slots)]
        if op.get("op") == "add_port":
            parent = op.get("parent", "")
            parent_name = "$item_name" if parent == "$item" else parent.split(":", 1)[-1]
            if value.startswith(parent_name + ".p") and _next_port_ok(parent, value, ctx):
                out.append(("new_port",))
        if op.get("op") == "add_switch":
            out.append(("new_switch",))
    out.append(("lit", value))
    return out


def _next_port_ok(parent: str, name: str, ctx: _Context) -> bool:
    """Whether ``name`` is the naming rule's next port of ``parent`` (True when it cannot be
    checked: a loop variable or a graph the learner cannot build)."""
    if ctx.graph is None or parent == "$item" or parent not in ctx.graph.graph:
        return True
    numbers = [int(p.rsplit(".p", 1)[1]) for p in ctx.graph.children(parent)
               if p.rsplit(".p", 1)[-1].isdigit()]
    return name == f"{parent.split(':', 1)[1]}.p{max(numbers, default=0) + 1}"


def _items_derivations(items: dict[str, Any], ctx: _Context) -> list[Derivation]:
    """Derivations of a loop over listed ports: the ports of one switch under a threshold."""
    nodes = items["nodes"]
    if not nodes:
        return [("lit", items)]
    switch = "EK_PACKET_SWITCH:" + split_node_id(nodes[0])[1].rsplit(".p", 1)[0]
    out: list[Derivation] = []
    switch_ways = [d for d in _node_derivations(switch, ctx) if d[0] != "lit"]
    for j, (t, threshold) in enumerate(ctx.slots):
        if t != "C":
            continue
        if ctx.graph is not None and switch in ctx.graph.graph:
            below = sorted(p for p in ctx.graph.children(switch)
                           if ctx.capacities.get(p, 0) < threshold)
            if below != sorted(nodes):
                continue
        out.extend(("ports_below", way, j) for way in switch_ways)
    out.append(("lit", items))
    return out


def _template(op: Any, ctx: _Context, key: str = "", parent: Any = None) -> Any:
    """The template of ``op``: the same structure with every leaf a list of derivations."""
    if isinstance(op, dict):
        if key == "items" and "nodes" in op:
            return _Leaf(_items_derivations(op, ctx))
        return {k: _template(v, ctx, k, op) for k, v in op.items()}
    if isinstance(op, list):
        return [_template(v, ctx, key, parent) for v in op]
    return _Leaf(_leaf_derivations(key, op, parent or {}, ctx))


@dataclass
class _Leaf:
    """A template leaf: the derivations still consistent with every example."""

    ways: list[Derivation]

    def merge(self, other: _Leaf) -> None:
        """Keep the derivations both agree on (keep ours when they share none)."""
        common = [w for w in self.ways if w in other.ways]
        if common:
            self.ways = common

    def best(self) -> Derivation:
        """The preferred surviving derivation (lowest rank, then first found)."""
        return min(self.ways, key=_rank)


def _merge(ours: Any, theirs: Any) -> bool:
    """Merge template ``theirs`` into ``ours`` (same structure); False when they differ."""
    if isinstance(ours, _Leaf) and isinstance(theirs, _Leaf):
        ours.merge(theirs)
        return True
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if ours.keys() != theirs.keys():
            return False
        return all(_merge(ours[k], theirs[k]) for k in ours)
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return False
        return all(_merge(a, b) for a, b in zip(ours, theirs, strict=True))
    return False


def _signature(template: Any) -> Any:
    """The structure of a template with every leaf's literal value kept only for ``op``."""
    if isinstance(template, dict):
        return tuple(sorted((k, _signature(v)) for k, v in template.items()))
    if isinstance(template, list):
        return tuple(_signature(v) for v in template)
    return "leaf"


# ------------------------------------------------------------------ filling a template


class _Fill:
    """Builds concrete operations from templates for one fresh request."""

    def __init__(self) -> None:
        self.memory: dict[str, Any] = {}  # kind -> the last node reference of that kind

    def op(self, template: Any, slots: list[Slot]) -> Any:
        """The operation of ``template`` filled from ``slots`` (raises ``LookupError`` when a
        derivation does not apply)."""
        if isinstance(template, _Leaf):
            return self.value(template.best(), slots, template)
        if isinstance(template, list):
            return [self.op(v, slots) for v in template]
        filled = {k: self.op(v, slots) for k, v in template.items()}
        self._name_rules(filled)
        for key in ("node", "parent"):
            self._remember(filled.get(key))
        items = filled.get("items")
        if isinstance(items, dict):
            self._remember(items.get("children_of"))
        return filled

    def _name_rules(self, op: dict[str, Any]) -> None:
        if op.get("name") == _NEW_PORT:
            op["name"] = {"new_port_of": op["parent"]}
        if op.get("name") == _NEW_SWITCH:
            op["name"] = {"new_switch_of": op["parent"], "stage": op["stage"]}

    def _remember(self, ref: Any) -> None:
        kind = _ref_kind(ref)
        if kind is not None:
            self.memory[kind] = ref

    def value(self, way: Derivation, slots: list[Slot], leaf: _Leaf) -> Any:
        rule = way[0]
        if rule == "lit":
            return way[1]
        if rule == "slot":
            return slots[way[1]][1]
        if rule == "id":
            return _build_id(way, slots)
        if rule == "that":
            kind = slots[way[1]][1]
            if kind not in self.memory:
                raise LookupError(f"no earlier {kind}")
            return self.memory[kind]
        if rule == "holder":
            return {"holder_of": _build_id(way[2], slots), "kind": slots[way[1]][1]}
        if rule == "new_port":
            return _NEW_PORT
        if rule == "new_switch":
            return _NEW_SWITCH
        if rule == "highest":
            return {"highest_port_of": "$item"}
        if rule == "ports_below":
            switch = self.value(way[1], slots, leaf)
            return {"ports_below": switch, "under_bps": slots[way[2]][1]}
        raise LookupError(rule)


_NEW_PORT = "\x00new-port"
_NEW_SWITCH = "\x00new-switch"


def _build_id(way: Derivation, slots: list[Slot]) -> str:
    _, kind, parts = way
    text = "".join(str(slots[p[1]][1]) if p[0] in ("N", "I") else p[1] for p in parts)
    if kind is None:
        return text
    return f"{slots[kind[1]][1] if kind[0] == 'K' else kind[1]}:{text}"


def _ref_kind(ref: Any) -> str | None:
    if isinstance(ref, str) and ":" in ref and not ref.startswith("$"):
        return split_node_id(ref)[0]
    if isinstance(ref, dict) and "holder_of" in ref:
        return str(ref["kind"])
    return None


# ------------------------------------------------------------------ the learner


class MaltLearner:
    """Learns clause forms and their program templates from exposed queries (module docstring).

    ``forms`` maps a form to the templates seen with it, each with its support:
    ``{form: [[template, count], ...]}``.
    """

    def __init__(self) -> None:
        self.forms: dict[str, list[list[Any]]] = {}
        self.learned = 0

    def __str__(self) -> str:
        return f"{len(self.forms)} clause forms from {self.learned} queries"

    def learn(self, queries: Iterable[Query]) -> None:
        """Learn from each query's prompt and ground truth (``program``, ``graph_key``, and
        ``fabric`` on a pack's fabric variant, whose graph the learner does not build)."""
        for query in queries:
            self._learn_one(query.prompt, query.ground_truth)

    def _learn_one(self, prompt: str, truth: JSON) -> None:
        program = truth.get("program")
        if not isinstance(program, list):
            return
        request = request_text([{"role": "user", "content": prompt}])
        cut = clauses(request, len(program))
        if cut is None:
            return
        graph, capacities = _public_graph(truth)
        memory: dict[str, Any] = {}
        for clause, op in zip(cut, program, strict=True):
            form, slots = abstract(clause)
            template = _template(op, _Context(slots, dict(memory), graph, capacities))
            self._add(form, template)
            for value in _nodes_named(op):
                memory[split_node_id(value)[0]] = value
        self.learned += 1

    def _add(self, form: str, template: Any) -> None:
        entries = self.forms.setdefault(form, [])
        for entry in entries:
            if _signature(entry[0]) == _signature(template) and _merge(entry[0], template):
                entry[1] += 1
                return
        entries.append([template, 1])

    def program(self, request: str) -> list[dict[str, Any]] | None:
        """The program for a fresh ``request`` from the learned forms, or None."""
        for parts in (1, 2):
            cut = clauses(request, parts)
            if cut is None:
                continue
            abstracted = [abstract(c) for c in cut]
            if not all(form in self.forms for form, _ in abstracted):
                continue
            fill = _Fill()
            try:
                return [
                    fill.op(max(self.forms[form], key=lambda e: e[1])[0], slots)
                    for form, slots in abstracted
                ]
            except (LookupError, TypeError, ValueError):
                continue
        return None

    def reply(self, history: list[JSON]) -> str:
        """The reply to a chat history: code for the learned program, else the scripted
        agent's reply (a request in no learned form)."""
        program = self.program(request_text(history))
        if program is None:
            return scripted_reply(history)
        return program_reply(program)


def _nodes_named(op: Any) -> list[str]:
    """Node ids an operation names at its top level (what "that <kind>" may refer to)."""
    found = [op.get(k) for k in ("node", "parent")]
    items = op.get("items")
    if isinstance(items, dict):
        found.append(items.get("children_of"))
    cond = op.get("cond")
    if isinstance(cond, dict):
        found.append(cond.get("query", {}).get("node"))
    return [v for v in found if isinstance(v, str) and ":" in v and not v.startswith("$")]


def _public_graph(truth: JSON) -> tuple[Any, dict[str, int]]:
    """The query's initial graph index and port capacities when it is the shipped fabric
    (public code rebuilds it from ``graph_key``); ``(None, {})`` on a pack's fabric variant."""
    if truth.get("fabric") is not None or not isinstance(truth.get("graph_key"), str):
        return None, {}
    ref = GraphRef(truth["graph_key"])
    return operands(ref), port_capacities(ref)


def learner_from(queries: Iterable[Query]) -> MaltLearner:
    """A :class:`MaltLearner` that has learned from ``queries``."""
    learner = MaltLearner()
    learner.learn(queries)
    return learner
