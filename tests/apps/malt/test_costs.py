"""Faster drafting and judging change no query and no verdict.

The digests below were recorded on ``main`` at commit ``59a4672`` (before the cost work):
the JSON of every generated query (prompt, ground truth, ids) and the JSON of the verdicts
of a fixed batch of answers, right and wrong, safe and unsafe. Any change of a query's bytes
or of a verdict (correctness, safety, failure, explanation, diffs, safety examples,
changed_state, blast_radius; ``judge_s`` aside) fails these tests.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

import networkx as nx
import pytest

from apps.malt import fabric, safe_views
from apps.malt.app import MaltApp
from apps.malt.checks import NormalizedGraph, check_safety
from apps.malt.fabric import SPEEDS_BPS, query_graph
from apps.malt.operations import capacity_bps
from apps.malt.phrasing import Ctx
from apps.malt.queries import BLOCK, ground_truth
from apps.malt.scoring import judge
from apps.malt.topology import load_graph
from evaluator.sampling import seeded_rng

APP = MaltApp()
#: Query fields outside the pins (the id is keyed per installation; the pack joined later).
UNPINNED = ("query_id", "pack")

#: sha256 of the sorted-key JSON of ``[q.to_dict() for q in generate(count, seed)]`` on main,
#: ``query_id`` left out (it is an HMAC under a per-installation key, not a function of the seed).
QUERY_DIGESTS = {
    (300, 0): "fcd128c29af6669f72f51eedf043c451f97317d9c16bf89a84e2359ca562afef",
    (300, 7): "cd2cb729c98268596c54366a6b602671a8e01f97358c06b8bb3de415efb2e198",
}
#: sha256 of the verdicts of :func:`_answers` over the first 15 queries of seed 4 (every label
#: once), on main.
VERDICT_DIGEST = "8a93d4c03ab9d7ae15b7300938072c6b94827e2f98bf04c48b6a23446900e35e"


def _digest(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


@pytest.mark.parametrize(("count", "seed"), sorted(QUERY_DIGESTS))
def test_generated_queries_are_byte_identical_to_those_recorded_on_main(
    count: int, seed: int
) -> None:
    queries = APP.generate(count, seed=seed)
    assert {q.pack for q in queries} == {"public"}
    # ``pack`` joined Query after these digests were recorded; public queries unchanged.
    data = [{k: v for k, v in q.to_dict().items() if k not in UNPINNED}
            for q in queries]
    assert _digest(data) == QUERY_DIGESTS[(count, seed)]


def _node_link(graph: nx.DiGraph) -> dict[str, Any]:
    """What the sandbox returns for a graph: node-link data after a JSON round trip."""
    data = {"__networkx__": nx.node_link_data(graph, edges="links")}
    decoded: dict[str, Any] = json.loads(json.dumps(data))
    return decoded


def _variants(correct: dict[str, Any]) -> list[dict[str, Any]]:
    """The correct graph and graphs broken in one way each (wrong, unsafe or unreadable)."""
    inner = correct["__networkx__"]
    encoded = json.dumps(inner)
    out: list[dict[str, Any]] = [correct]

    def edit(change: Any) -> None:
        data = json.loads(encoded)
        change(data)
        out.append({"__networkx__": data})

    port = next(i for i, n in enumerate(inner["nodes"]) if n["type"] == "EK_PORT")
    switch = next(i for i, n in enumerate(inner["nodes"]) if n["type"] == "EK_PACKET_SWITCH")
    edit(lambda d: d["nodes"][port].update(physical_capacity_bps=500_000_000))  # bandwidth
    edit(lambda d: d["nodes"][port].update(physical_capacity_bps=1e9 + 0.5))
    edit(lambda d: d["nodes"][port].pop("physical_capacity_bps"))  # required attribute
    edit(lambda d: d["nodes"][switch].update(switch_loc={"stage": 0}))
    edit(lambda d: d["nodes"][switch].update(type=["EK_PACKET_SWITCH"]))  # node type
    edit(lambda d: d["nodes"].append(dict(d["nodes"][port], id="EK_PORT:copy")))  # dup, isolated
    edit(lambda d: d["nodes"].pop(port))  # becomes an attribute-less edge end
    edit(lambda d: d["links"].pop(0))
    edit(lambda d: d["links"].append(dict(d["links"][0], type="RK_OWNS")))
    edit(
        lambda d: d["links"].append(
            {
                "source": d["nodes"][port]["id"],
                "target": d["nodes"][switch]["id"],
                "type": "RK_CONTAINS",
            }
        )
    )  # hierarchy
    edit(
        lambda d: d["links"].append(
            {
                "source": d["nodes"][switch]["id"],
                "target": d["nodes"][switch]["id"],
                "type": "RK_CONTAINS",
            }
        )
    )  # self-loop
    edit(lambda d: d.update(directed=False))
    edit(lambda d: d.update(multigraph=True))
    edit(lambda d: d["nodes"].append(7))  # unreadable
    edit(lambda d: d["links"].append({"source": 1, "target": 2}))  # unreadable
    edit(lambda d: d.update(nodes=[]))  # empty
    return out


def _answers(truth: dict[str, Any]) -> list[Any]:
    """Answers to judge for one query: right ones, wrong ones, graphs broken in each way."""
    _, view = ground_truth(truth["program"], truth["graph_key"])
    correct = _node_link(view.to_networkx())
    shipped = _node_link(query_graph(truth["graph_key"]))
    answers: list[Any] = [None, {"answer": None}, {"nothing": 1}]
    if truth["answer_kind"] == "graph":
        for graph in _variants(correct):
            answers.append({"answer": graph})
        answers.append({"answer": shipped})
        answers.append({"answer": correct, "updated_graph": correct})
        answers.append({"answer": shipped, "updated_graph": correct})
    else:
        answers.append({"answer": truth["expected"]})
        answers.append({"answer": "16"})
        for graph in _variants(correct) + [shipped]:
            answers.append({"answer": truth["expected"], "updated_graph": graph})
    return answers


def _verdicts(count: int, seed: int) -> list[Any]:
    out = []
    for query in APP.generate(count, seed=seed):
        for value in _answers(query.ground_truth):
            verdict = judge(query.ground_truth, value, 0.25)
            details = {k: v for k, v in verdict.details.items() if k != "judge_s"}
            out.append(
                [
                    query.index,
                    verdict.correct,
                    verdict.safe,
                    verdict.failure,
                    details,
                    verdict.changed_state,
                    verdict.blast_radius,
                    verdict.latency_s,
                ]
            )
    return out


def test_verdicts_are_identical_to_those_recorded_on_main() -> None:
    verdicts = _verdicts(15, 4)
    assert any(v[1] for v in verdicts) and any(not v[2] for v in verdicts)
    assert _digest(verdicts) == VERDICT_DIGEST


def _plain_port_capacities(key: str) -> dict[str, int]:
    """The capacity draw written with ``rng.choice``, as it was before it was inlined."""
    rng = seeded_rng("malt-capacity", key)
    ops = fabric.operands()
    capacities: dict[str, int] = {}
    for switch in ops.by_kind["EK_PACKET_SWITCH"]:
        line = rng.choice(SPEEDS_BPS[1:])
        for port in ops.children(switch):
            capacities[port] = line if rng.random() < 0.6 else rng.choice(SPEEDS_BPS)
    return capacities


@pytest.mark.parametrize("key", ["v2/0/0", "v2/5/77", "v2/123456789/14"])
def test_inlined_capacity_draws_are_those_of_random_choice(key: str) -> None:
    assert fabric.port_capacities(key) == _plain_port_capacities(key)


def _walk(ops: fabric.Operands, node: str) -> set[str]:
    seen: set[str] = set()
    stack = [node]
    while stack:
        for child in ops.children(stack.pop()):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


def test_the_topology_index_and_draft_capacities_match_a_walk_and_the_view() -> None:
    ops = fabric.Operands(load_graph())  # a fresh index: no cached sets to start from
    key = "v2/3/9"
    view = fabric.initial_view(key)
    ctx = Ctx(ops, fabric.port_capacities(key), random.Random(0), 1)
    for node in sorted(load_graph().nodes, reverse=True):  # leaves and containers mixed
        below = _walk(ops, node)
        assert ops.descendants(node) == below
        assert ops.kinds_below(node) == tuple(sorted({ops.kind(d) for d in below}))
        assert ctx.capacity(node) == capacity_bps(view, node)
    port = ops.by_kind["EK_PORT"][0]
    assert ctx.port_capacity(port) == view.attrs(port)["physical_capacity_bps"]


def _broken_views(truth: dict[str, Any]) -> list[Any]:
    """The expected view of ``truth`` and copies changed in one way each (safe or not)."""
    ops = fabric.operands()
    key = truth["graph_key"]
    rng = random.Random(key)

    def fresh() -> Any:
        _, view = ground_truth(truth["program"], key)
        return view

    switch = rng.choice(ops.by_kind["EK_PACKET_SWITCH"])
    other = rng.choice(ops.by_kind["EK_PACKET_SWITCH"])
    port = ops.children(switch)[0]
    changes = [
        lambda v: None,
        lambda v: v.set_attr(port, "physical_capacity_bps", 500_000_000),
        lambda v: v.set_attr(port, "physical_capacity_bps", 1.5e9),
        lambda v: v.set_attr(port, "physical_capacity_bps", 2_000_000_000),
        lambda v: v.set_attr(port, "name", ""),
        lambda v: v.set_attr(switch, "type", "EK_SWITCH"),
        lambda v: v.set_attr(switch, "switch_loc", {"stage": 0}),
        lambda v: v.add_node("EK_RACK:lonely", {"name": "lonely", "type": "EK_RACK"}),
        lambda v: v.add_node("EK_PORT:dup", dict(v.attrs(port))),
        lambda v: v.add_edge(other, port, {"type": "RK_CONTAINS"}),
        lambda v: v.add_edge(port, switch, {"type": "RK_CONTAINS"}),
        lambda v: v.add_edge(switch, switch, {"type": "RK_CONTAINS"}),
        lambda v: v.add_edge(switch, port, {"type": "RK_CONTAINS"}),
        lambda v: v.add_edge(switch, port, {"type": "RK_OWNS"}),
        lambda v: [v.remove(p) for p in ops.children(switch)],
        lambda v: [v.remove(p) for p in ops.children(switch)[1:]],
        lambda v: v.remove(switch),
        lambda v: v.remove(rng.choice(ops.by_kind["EK_CHASSIS"])),
        lambda v: v.remove(rng.choice(ops.by_kind["EK_CONTROL_POINT"])),
        lambda v: v.remove(rng.choice(ops.by_kind["EK_RACK"])),
        lambda v: v.remove(rng.choice(ops.by_kind["EK_AGG_BLOCK"])),
    ]
    views = []
    for change in changes:
        view = fresh()
        try:
            change(view)
        except (KeyError, ValueError):
            continue  # that change does not apply to this view
        views.append(view)
    return views


def test_a_view_proved_safe_passes_the_full_safety_pass() -> None:
    """view_plainly_safe is one-sided: True only where check_safety finds nothing; and it
    does prove every ground truth and unchanged query graph safe (so the judge uses it)."""
    proved, unsafe = 0, 0
    for query in APP.generate(2 * BLOCK, seed=13):
        truth = query.ground_truth
        key = truth["graph_key"]
        trusted = fabric.initial_port_attrs(key)
        assert safe_views.trusted_port_attrs(trusted, load_graph())
        _, expected = ground_truth(truth["program"], key)
        assert safe_views.view_plainly_safe(expected, trusted)
        assert safe_views.view_plainly_safe(fabric.initial_view(key), trusted)
        for view in _broken_views(truth):
            full = check_safety(NormalizedGraph.from_view(view))
            if safe_views.view_plainly_safe(view, trusted):
                assert full.safe, full.to_dict()
                proved += 1
            unsafe += not full.safe
    assert proved >= 2 * BLOCK and unsafe >= 10 * BLOCK
