"""A second held-out MALT pack for the test suite: query families the public generator lacks,
in wording of its own, on the shipped fabric.

Each query starts from a program the public generator would draw (seeded apart from the public
stream and from the other test pack). A seeded half of the programs whose question is a
``list``, ``count`` or ``rank`` ask a ``capacity`` question about the same node instead: a
capacity question alone at level 1, and after a removal or an addition at levels 2 and 3, which
the public generator never asks (it asks capacity only after a condition or a loop). Labels
say so (``capacity`` in place of the question's label).

Every request is then written afresh: sentences of this pack's own (neither the public nor the
``heldout-wording`` ones), other joins, and operands named "<kind> `name`", "the <kind> called
`name`", "port #7 on switch `x`" or by containment ("the rack in which chassis `x` sits").
The ground truth is the program's execution on the query graph, as for public queries.

It exists so that the exposed-vs-sealed measurement (``benchmarks/bench_difficulty.py
--exposed-pack ... --sealed-pack ...``) has two MALT packs: an agent that learned one pack's
wording from an exposed batch (:mod:`apps.malt.adaptive`) must not carry it over to this one.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from apps.malt import fabric as fabric_module
from apps.malt import phrasing
from apps.malt import queries as q
from apps.malt.prompt import render_prompt
from apps.malt.topology import split_node_id
from evaluator.variants import pack_query

LIST = ("Which nodes does {x} hold one level down?", "Show me the direct contents of {x}.")
COUNT = (
    "Find out how many {plural} {x} holds in all.",
    "What is the number of {plural} somewhere below {x}?",
)
CAPACITY = (
    "What bandwidth do the ports of {x} sum to{unit}?",
    "Compute the summed port speed of {x}{unit}.",
)
RANK = ("List the direct contents of {x}, heaviest total bandwidth first.",)
REMOVE = ("Drop {x} and whatever it holds.", "Clear {x} out of the model.")
UPDATE = ("Change {x} so that it runs at {cap}.", "Let {x} run at {cap} from now on.")
ADD_PORT = ("Give {x} a fresh port{new} of {cap}.",)
ADD_SWITCH = ("Under {x}, bring up a stage-{stage} switch{new} having {k} port(s) of {cap}.",)
JOIN = ("{a} Next, {b}", "{a} With that change made, {b}")
IF_ELSE = (
    "Measure {x}: at {t} or above, drop its port #{number}; below that, give it a fresh "
    "{cap} port{new}.",
)
FOR_ADD = ("Each packet switch directly in {x} gets a fresh {cap} port.",)
FOR_SET = ("On {x}, lift each port slower than {t} to {cap}.",)
FOR_IF = (
    "For the switches of {x}: where {cond}, add a fresh {cap} port; elsewhere drop the "
    "top-numbered port.",
)
#: Share of list, count and rank questions asked as a capacity question instead.
CAPACITY_SHARE = 0.5


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class Writer:
    """Writes one program as a request, with its own random choices."""

    def __init__(self, rng: random.Random, ops: fabric_module.Operands) -> None:
        self.rng, self.ops = rng, ops

    def cap(self, bps: int) -> str:
        gbps = fabric_module.GBPS
        return f"{bps // gbps} Gbit/s" if bps % gbps == 0 and self.rng.random() < 0.7 else (
            f"{bps} bit/s")

    def operand(self, node: str, last: str | None) -> str:
        """``node`` as this pack names it."""
        kind, name = split_node_id(node)
        word = phrasing.KIND_WORDS[kind][0]
        if node == last:
            return f"that {word}"
        ops, roll = self.ops, self.rng.random()
        parents = ops.parents(node) if node in ops.graph else []
        if kind == "EK_PORT" and parents and roll < 0.5:
            number = name.rsplit(".p", 1)[1]
            return f"port #{number} on switch `{split_node_id(parents[0])[1]}`"
        if kind in ("EK_RACK", "EK_AGG_BLOCK", "EK_SPINEBLOCK") and roll < 0.5:
            held = [c for c in ops.children(node) if ops.kind(c) != "EK_PORT"]
            if held:
                child = self.rng.choice(held)
                child_kind, child_name = split_node_id(child)
                if sum(1 for p in ops.parents(child) if ops.kind(p) == kind) == 1:
                    child_word = phrasing.KIND_WORDS[child_kind][0]
                    return f"the {word} in which {child_word} `{child_name}` sits"
        if self.rng.random() < 0.5:
            return f"{word} `{name}`"
        return f"the {word} called `{name}`"

    def sentence(self, op: dict[str, Any], last: str | None) -> str:
        """One operation as a sentence; ``last`` is the node the previous one named."""
        kind = op["op"]
        if kind == "if":
            return self._if_else(op, last)
        if kind == "for_each":
            return self._for_each(op, last)
        x = self.operand(op.get("node") or op["parent"], last)
        pick = self.rng.choice
        if kind == "list":
            return pick(LIST).format(x=x)
        if kind == "count":
            return pick(COUNT).format(x=x, plural=phrasing.PLURALS[op["kind"]])
        if kind == "capacity":
            unit = " (in Gbit/s)" if op.get("unit_bps") == fabric_module.GBPS else ""
            return pick(CAPACITY).format(x=x, unit=unit)
        if kind == "rank":
            return pick(RANK).format(x=x)
        if kind == "remove":
            return pick(REMOVE).format(x=x)
        if kind == "set_capacity":
            return pick(UPDATE).format(x=x, cap=self.cap(op["capacity_bps"]))
        new = f" named `{op['name']}`" if self.rng.random() < 0.5 else ""
        if kind == "add_port":
            return pick(ADD_PORT).format(x=x, new=new, cap=self.cap(op["capacity_bps"]))
        if kind == "add_switch":
            return pick(ADD_SWITCH).format(x=x, new=new, stage=op["stage"], k=op["ports"],
                                           cap=self.cap(op["port_capacity_bps"]))
        raise ValueError(kind)

    def _if_else(self, op: dict[str, Any], last: str | None) -> str:
        victim = split_node_id(op["then"][0]["node"])[1].rsplit(".p", 1)[1]
        added = op["else"][0]
        new = f" named `{added['name']}`" if self.rng.random() < 0.5 else ""
        return self.rng.choice(IF_ELSE).format(
            x=self.operand(op["cond"]["query"]["node"], last), t=self.cap(op["cond"]["value"]),
            number=victim, cap=self.cap(added["capacity_bps"]), new=new)

    def _for_each(self, op: dict[str, Any], last: str | None) -> str:
        items, body = op["items"], op["body"][0]
        if "children_of" in items and body["op"] == "add_port":
            return self.rng.choice(FOR_ADD).format(
                x=self.operand(items["children_of"], last), cap=self.cap(body["capacity_bps"]))
        if "children_of" in items:
            cond = body["cond"]
            if cond["query"]["op"] == "stage":
                text = f"the stage is {cond['value']}"
            else:
                text = f"the summed bandwidth is under {self.cap(cond['value'])}"
            return self.rng.choice(FOR_IF).format(
                x=self.operand(items["children_of"], last), cond=text,
                cap=self.cap(body["then"][0]["capacity_bps"]))
        switch = self.ops.parents(items["nodes"][0])[0]
        return self.rng.choice(FOR_SET).format(
            x=self.operand(switch, last), t=self.cap(op["threshold_bps"]),
            cap=self.cap(body["capacity_bps"]))


def _threshold(program: list[dict[str, Any]], capacities: dict[str, int],
               ops: fabric_module.Operands) -> None:
    """Give a loop over listed ports a threshold that picks exactly those ports of their
    switch (the slowest capacity among the others, or just above the listed ones)."""
    for op in program:
        if op["op"] == "for_each" and "nodes" in op["items"]:
            chosen = op["items"]["nodes"]
            others = [capacities[p] for p in ops.children(ops.parents(chosen[0])[0])
                      if p not in chosen]
            op["threshold_bps"] = (min(others) if others
                                   else max(capacities[p] for p in chosen) + fabric_module.GBPS)


def _new_family(program: list[dict[str, Any]], labels: tuple[str, ...],
                rng: random.Random) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """Ask a capacity question in place of a list, count or rank question (seeded share)."""
    last = program[-1]
    if last["op"] not in ("list", "count", "rank") or program[0]["op"] in ("if", "for_each"):
        return program, labels
    if rng.random() >= CAPACITY_SHARE:
        return program, labels
    question: dict[str, Any] = {"op": "capacity", "node": last["node"]}
    if rng.random() < 0.5:
        question["unit_bps"] = fabric_module.GBPS
    renamed = tuple("capacity" if label == last["op"] else label for label in labels)
    return [*program[:-1], question], renamed


def generate(app: Any, pack: Any, seed: int, indices: list[int], level: int | None) -> list[Any]:
    """One query per index (see the module docstring); ``level`` restricts the levels."""
    out = []
    for index in indices:
        attempt = 0
        while True:
            stream = int.from_bytes(hashlib.sha256(
                f"{pack.name}/{seed}/{index}/{attempt}".encode()).digest()[:8], "big")
            made = q.draft(stream, index, app.version)
            if level is None or made.level == level:
                break
            attempt += 1
        ops = fabric_module.operands(made.graph)
        program, labels = _new_family([dict(op) for op in made.program], made.labels,
                                      _rng(pack.name, "family", seed, index))
        _threshold(program, fabric_module.port_capacities(made.graph), ops)
        writer = Writer(_rng(pack.name, "words", seed, index), ops)
        sentences, last = [], None
        for op in program:
            sentences.append(writer.sentence(op, last))
            last = op.get("node") or op.get("parent")
            if op["op"] == "if":
                last = op["cond"]["query"]["node"]
            if op["op"] == "for_each":
                last = op["items"].get("children_of")
        question = sentences[0]
        for following in sentences[1:]:
            question = writer.rng.choice(JOIN).format(
                a=question, b=following[:1].lower() + following[1:])
        clean = [{k: v for k, v in op.items() if k != "threshold_bps"} for op in program]
        truth, _ = q.ground_truth(clean, made.graph)
        truth["question"] = question
        prompt = render_prompt(question, truth["answer_kind"], truth["changes_topology"])
        out.append(pack_query(app, pack, seed=seed, index=index, level=made.level,
                              labels=labels, prompt=prompt, ground_truth=truth))
    return out
