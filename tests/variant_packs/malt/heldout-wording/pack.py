"""A held-out MALT pack for the test suite: the public query families and operations, asked in
wording the public generator never produces.

Each query starts from a program the public generator would draw (same families, levels and
labels, same per-query capacities), seeded apart from the public stream, and is then asked
afresh: other sentences for every operation, other ways to join two requests, and operands
described by containment ("the rack that holds chassis `x`", "port number 7 of switch `y`")
instead of by name or by the public capacity superlatives. The ground truth is the program's
execution on the query graph, exactly as for public queries. A network engineer reads these
requests as easily as the public ones; a script written against the public templates does not.

A seeded half of the queries (:data:`VARIANT_SHARE`) run on a fabric variant
(:func:`fabric`, the MALT ``fabric(seed)`` hook): another site with 2-4 superblocks of 2-4
aggregation blocks and 2-4 spine blocks, 2-6 switches per stage in each block, 4-12 ports per
switch, names in another scheme (``ams4-pod2-agg3-t2-05``, racks ``ams4-rk07``, control
domains ``ams4-pod2-ctl``), port capacities drawn from the Ethernet rates of
:data:`apps.malt.fabric.SPEEDS_BPS`. The ground truth names the variant by this pack and the
fabric seed (``fabric: {"seed": ...}``); the episode, the judge and the oracle re-derive the
graph from this module.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import networkx as nx

from apps.malt import fabric as fabric_module
from apps.malt import phrasing
from apps.malt import queries as q
from apps.malt.prompt import render_prompt
from apps.malt.topology import split_node_id
from evaluator.variants import pack_query

LIST = (
    "Name every node that sits directly inside {x}.",
    "I need the immediate members of {x}, nothing deeper.",
    "What hangs directly off {x}? Give the node ids.",
)
COUNT = (
    "Tally the {plural} found anywhere inside {x}.",
    "Across all of {x}, how many {plural} exist?",
)
CAPACITY = (
    "Add up the bandwidth of all ports within {x}{unit}.",
    "{X}: report its aggregate port bandwidth{unit}.",
)
RANK = (
    "Put the immediate members of {x} in order of aggregate bandwidth, biggest first.",
    "Order what {x} holds one level down by summed port bandwidth, descending.",
)
REMOVE = (
    "Tear down {x} along with all of its contents.",
    "Retire {x}: it and everything beneath it must go.",
)
UPDATE = (
    "Bump {x} to {cap}.",
    "From now on {x} should operate at {cap}.",
)
ADD_PORT = (
    "Fit {x} with an additional port{new} running at {cap}.",
    "{X} needs one extra {cap} port{new}.",
)
ADD_SWITCH = (
    "Provision a new packet switch{new} under {x}: stage {stage}, {k} port(s) at {cap} each.",
)
JOIN = ("{a} Once that is done, {b}", "{a} Afterwards: {b}")
IF_ELSE = (
    "Look at {x}. Provided its ports add up to {t} or more, retire {victim}; if it falls "
    "short, fit it with an extra {cap} port{new}.",
)
FOR_ADD = ("Fit every packet switch under {x} with one extra {cap} port.",)
FOR_SET = ("Any port of {x} running under {t} gets raised to {cap}.",)
#: Share of the pack's queries drafted on a fabric variant instead of the shipped fabric.
VARIANT_SHARE = 0.5
SITES = ("ams", "fra", "sjc", "nrt", "gru", "syd")


def fabric(seed: int) -> nx.DiGraph:
    """The fabric variant of ``seed`` (module docstring), under the MALT schema as
    :func:`apps.malt.topology.build_graph` lays it out: every switch with its chassis and
    control point of the same name, the chassis in its block's rack, the control point in its
    superblock's (or the spine blocks') control domain."""
    rng = _rng("fabric", seed)
    site = f"{rng.choice(SITES)}{rng.randint(1, 9)}"
    ports = rng.choice((4, 6, 8, 12))
    graph = nx.DiGraph()

    def add(kind: str, name: str, **attrs: Any) -> str:
        node = f"{kind}:{name}"
        graph.add_node(node, name=name, type=kind, **attrs)
        return node

    def contains(parent: str, child: str) -> None:
        graph.add_edge(parent, child, type="RK_CONTAINS")

    jupiter = add("EK_JUPITER", site, jupiter_type="JDT_COLO")
    blocks: list[tuple[str, tuple[int, int], str]] = []
    for i in range(1, rng.randint(2, 4) + 1):
        pod = add("EK_SUPERBLOCK", f"{site}-pod{i}", index_within_jupiter=i)
        contains(jupiter, pod)
        domain = add("EK_CONTROL_DOMAIN", f"{site}-pod{i}-ctl")
        for j in range(1, rng.randint(2, 4) + 1):
            block = add("EK_AGG_BLOCK", f"{site}-pod{i}-agg{j}")
            contains(pod, block)
            blocks.append((block, (2, 3), domain))
    spine_domain = add("EK_CONTROL_DOMAIN", f"{site}-spine-ctl")
    for k in range(1, rng.randint(2, 4) + 1):
        block = add("EK_SPINEBLOCK", f"{site}-spine{k}")
        contains(jupiter, block)
        blocks.append((block, (1, 2), spine_domain))
    for number, (block, stages, domain) in enumerate(blocks, 1):
        rack = add("EK_RACK", f"{site}-rk{number:02d}")
        block_name = split_node_id(block)[1]
        for stage in stages:
            for n in range(1, rng.randint(2, 6) + 1):
                name = f"{block_name}-t{stage}-{n:02d}"
                switch = add("EK_PACKET_SWITCH", name, switch_loc={"stage": stage})
                chassis = add("EK_CHASSIS", name)
                control = add("EK_CONTROL_POINT", name)
                contains(block, switch)
                contains(rack, chassis)
                contains(chassis, switch)
                contains(chassis, control)
                contains(domain, control)
                graph.add_edge(control, switch, type="RK_CONTROLS")
                line = rng.choice(fabric_module.SPEEDS_BPS[1:])
                for m in range(1, ports + 1):
                    capacity = line if rng.random() < 0.6 else rng.choice(fabric_module.SPEEDS_BPS)
                    contains(switch, add("EK_PORT", f"{name}.p{m}", physical_capacity_bps=capacity))
    return graph


FOR_IF = (
    "Walk through the packet switches under {x}. {cond} receives an extra {cap} port; any "
    "other switch gives up its highest-numbered port.",
)


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class Speaker:
    """Renders one program as a request, with its own random choices."""

    def __init__(self, rng: random.Random, ops: fabric_module.Operands, variant: bool) -> None:
        self.rng, self.ops, self.variant = rng, ops, variant

    def pick(self, options: tuple[str, ...]) -> str:
        return self.rng.choice(options)

    def cap(self, bps: int) -> str:
        gbps = fabric_module.GBPS
        return f"{bps // gbps} Gbit/s" if bps % gbps == 0 else f"{bps} bit/s"

    def operand(self, node: str) -> str:
        """``node`` named in a held-out form, or described by containment."""
        kind, name = split_node_id(node)
        word = phrasing.KIND_WORDS[kind][0]
        ops, roll = self.ops, self.rng.random()
        parents = ops.parents(node) if node in ops.graph else []
        if kind == "EK_PORT" and parents and roll < 0.5:
            number = name.rsplit(".p", 1)[1]
            return f"port number {number} of switch `{split_node_id(parents[0])[1]}`"
        if kind in ("EK_RACK", "EK_AGG_BLOCK", "EK_SPINEBLOCK", "EK_CHASSIS") and roll < 0.6:
            held = [c for c in ops.children(node) if ops.kind(c) != "EK_PORT"]
            if held:
                child = self.rng.choice(held)
                child_kind, child_name = split_node_id(child)
                if sum(1 for p in ops.parents(child) if ops.kind(p) == kind) == 1:
                    return (f"the {word} that holds {phrasing.KIND_WORDS[child_kind][0]} "
                            f"`{child_name}`")
        article = "an" if word[0] in "aeiou" else "a"
        return self.pick((f"the {word} named `{name}`", f"`{name}` ({article} {word})"))

    def sentence(self, op: dict[str, Any], last: str | None) -> str:
        kind = op["op"]
        if kind == "if":
            return self._if_else(op)
        if kind == "for_each":
            return self._for_each(op)
        node: str = op.get("node") or op["parent"]
        if node == last:
            x = f"that {phrasing.KIND_WORDS[split_node_id(node)[0]][0]}"
        else:
            x = self.operand(node)
        fill = {"x": x, "X": x[:1].upper() + x[1:]}
        if kind == "list":
            return self.pick(LIST).format(**fill)
        if kind == "count":
            return self.pick(COUNT).format(plural=phrasing.PLURALS[op["kind"]], **fill)
        if kind == "capacity":
            unit = " (answer in Gbit/s)" if op.get("unit_bps") == fabric_module.GBPS else ""
            return self.pick(CAPACITY).format(unit=unit, **fill)
        if kind == "rank":
            return self.pick(RANK).format(**fill)
        if kind == "remove":
            return self.pick(REMOVE).format(**fill)
        if kind == "set_capacity":
            return self.pick(UPDATE).format(cap=self.cap(op["capacity_bps"]), **fill)
        if kind == "add_port":
            new = f" named `{op['name']}`" if self.rng.random() < 0.5 else ""
            return self.pick(ADD_PORT).format(cap=self.cap(op["capacity_bps"]), new=new, **fill)
        if kind == "add_switch":
            # on a variant the prompt's rule for switch names reads oddly: always named
            new = f" `{op['name']}`" if self.variant or self.rng.random() < 0.5 else ""
            return self.pick(ADD_SWITCH).format(
                new=new, stage=op["stage"], k=op["ports"],
                cap=self.cap(op["port_capacity_bps"]), **fill)
        raise ValueError(kind)

    def _if_else(self, op: dict[str, Any]) -> str:
        switch = op["cond"]["query"]["node"]
        victim = op["then"][0]["node"]
        added = op["else"][0]
        number = split_node_id(victim)[1].rsplit(".p", 1)[1]
        new = f" named `{added['name']}`" if self.rng.random() < 0.5 else ""
        return self.pick(IF_ELSE).format(
            x=self.operand(switch), t=self.cap(op["cond"]["value"]),
            victim=f"its port number {number}", cap=self.cap(added["capacity_bps"]), new=new)

    def _for_each(self, op: dict[str, Any]) -> str:
        items, body = op["items"], op["body"][0]
        if "children_of" in items and body["op"] == "add_port":
            return self.pick(FOR_ADD).format(
                x=self.operand(items["children_of"]), cap=self.cap(body["capacity_bps"]))
        if "children_of" in items:  # for each switch: if / else
            cond = body["cond"]
            added = body["then"][0]
            if cond["query"]["op"] == "stage":
                text = f"A switch at stage {cond['value']}"
            else:
                text = f"A switch whose ports add up to less than {self.cap(cond['value'])}"
            return self.pick(FOR_IF).format(
                x=self.operand(items["children_of"]), cond=text,
                cap=self.cap(added["capacity_bps"]))
        chosen = items["nodes"]
        switch = self.ops.parents(chosen[0])[0]
        return self.pick(FOR_SET).format(
            x=self.operand(switch), t=self.cap(op["threshold_bps"]),
            cap=self.cap(body["capacity_bps"]))


def _threshold(program: list[dict[str, Any]], graph: fabric_module.GraphRef) -> None:
    """Give a for-each over chosen ports the threshold that chose them (the program lists the
    ports; the request states the rule): the lowest capacity among the switch's other ports."""
    capacities = fabric_module.port_capacities(graph)
    ops = fabric_module.operands(graph)
    for op in program:
        if op["op"] == "for_each" and "nodes" in op["items"]:
            chosen = op["items"]["nodes"]
            ports = ops.children(ops.parents(chosen[0])[0])
            others = [capacities[p] for p in ports if p not in chosen]
            op["threshold_bps"] = (min(others) if others
                                   else max(capacities[p] for p in chosen) + fabric_module.GBPS)


def _question(
    program: list[dict[str, Any]], rng: random.Random, graph: fabric_module.GraphRef
) -> str:
    speaker = Speaker(rng, fabric_module.operands(graph), graph.fabric is not None)
    sentences, last = [], None
    for op in program:
        sentences.append(speaker.sentence(op, last))
        last = op.get("node") or op.get("parent")
        if op["op"] == "if":
            last = op["cond"]["query"]["node"]
        if op["op"] == "for_each":
            last = op["items"].get("children_of")
    text = sentences[0]
    for following in sentences[1:]:
        lowered = following if following.startswith("I ") else following[:1].lower() + following[1:]
        text = speaker.pick(JOIN).format(a=text, b=lowered)
    return text


def generate(app: Any, pack: Any, seed: int, indices: list[int], level: int | None) -> list[Any]:
    """One query per index (see the module docstring); ``level`` restricts the levels."""
    out = []
    for index in indices:
        graph = None
        if _rng(pack.name, "variant", seed, index).random() < VARIANT_SHARE:
            fabric_seed = _rng(pack.name, "fabric-seed", seed, index).getrandbits(63)
            graph = fabric_module.variant_ref(pack, fabric_seed)
        attempt = 0
        while True:
            stream = int.from_bytes(
                hashlib.sha256(f"{pack.name}/{seed}/{index}/{attempt}".encode()).digest()[:8],
                "big")
            made = q.draft(stream, index, app.version, graph=graph)
            if level is None or made.level == level:
                break
            attempt += 1
        program = [dict(op) for op in made.program]
        _threshold(program, made.graph)
        question = _question(program, _rng(pack.name, "words", seed, index), made.graph)
        clean = [{k: v for k, v in op.items() if k != "threshold_bps"} for op in program]
        truth, _ = q.ground_truth(clean, made.graph)
        truth["question"] = question
        # on a variant the instructions are worded from the variant's own fabric
        fabric = fabric_module.base_graph(made.graph) if graph is not None else None
        prompt = render_prompt(question, truth["answer_kind"], truth["changes_topology"], fabric)
        out.append(pack_query(app, pack, seed=seed, index=index, level=made.level,
                              labels=made.labels, prompt=prompt, ground_truth=truth))
    return out
