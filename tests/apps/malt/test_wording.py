"""MALT queries need understanding: wording, properties, capacities.

The floor-bound test here is the fast one (seconds): it plays the ``template`` floor agent's
program with the reference interpreter and judges answer and final topology the way the judge
does, without the sandbox. ``benchmarks/bench_difficulty.py`` measures the same floor through
real sandboxed episodes on 300 queries.
"""

from __future__ import annotations

import re
from collections import Counter

from apps.malt import phrasing
from apps.malt.app import MaltApp
from apps.malt.checks import NormalizedGraph, compare_graphs
from apps.malt.fabric import SPEEDS_BPS, graph_key, initial_view, port_capacities, query_graph
from apps.malt.operations import ProgramError, execute
from apps.malt.overlay import TopologyView
from apps.malt.queries import BLOCK, ground_truth
from apps.malt.reference import template_program
from apps.malt.topology import load_graph

APP = MaltApp()
#: level -> highest share of queries the template floor may solve
FLOOR_TARGETS = {1: 0.5, 2: 0.2, 3: 0.2}


def _questions(count: int, seed: int) -> list[str]:
    return [x.ground_truth["question"] for x in APP.generate(count, seed=seed)]


def test_same_seed_gives_the_same_wording_twice() -> None:
    assert _questions(2 * BLOCK, 8) == _questions(2 * BLOCK, 8)


def test_two_seeds_give_different_wordings() -> None:
    a, b = _questions(2 * BLOCK, 1), _questions(2 * BLOCK, 2)
    assert sum(x != y for x, y in zip(a, b, strict=True)) >= 2 * BLOCK - 2
    assert len(set(a) & set(b)) <= 2


def _template_regex(template: str) -> re.Pattern[str]:
    parts = re.split(r"\{\w+\}", template)
    return re.compile(".+?".join(re.escape(p) for p in parts), re.IGNORECASE | re.DOTALL)


def test_every_sentence_kind_has_five_phrasings_and_the_seed_uses_them() -> None:
    families: dict[str, tuple[str, ...]] = {
        "list": phrasing.LIST,
        "count": phrasing.COUNT,
        "rank": phrasing.RANK,
        "remove": phrasing.REMOVE,
        "update": phrasing.UPDATE,
    }
    for name, pool in families.items():
        assert len(set(pool)) >= 5, name
    p = phrasing
    for pool in (p.CAPACITY, p.IF_ELSE, p.FOR_ADD, p.FOR_SET, p.FOR_IF, p.JOIN):
        assert len(set(pool)) >= 5
    assert len(phrasing.ADD_PORT_NAMED + phrasing.ADD_PORT_RULE) >= 5
    assert len(phrasing.ADD_SWITCH_NAMED + phrasing.ADD_SWITCH_RULE) >= 5
    used: dict[str, set[int]] = {name: set() for name in families}
    for query in APP.generate(20 * BLOCK, seed=3, level=1):
        if query.label not in families:
            continue
        pool = families[query.label]
        question = query.ground_truth["question"]
        matches = [i for i, t in enumerate(pool) if _template_regex(t).fullmatch(question)]
        assert matches, (query.label, question)
        used[query.label].add(matches[0])
    assert all(len(indices) >= 5 for indices in used.values()), used


def test_port_capacities_vary_per_query_and_reach_the_agent_graph() -> None:
    first = port_capacities(graph_key(0, 0, APP.version))
    second = port_capacities(graph_key(0, 1, APP.version))
    assert first != second and len(first) == 5120
    assert set(first.values()) <= set(SPEEDS_BPS) and len(set(first.values())) >= 5
    graph = query_graph(graph_key(0, 0, APP.version))
    assert all(graph.nodes[p]["physical_capacity_bps"] == c for p, c in first.items())
    assert all(  # the shared base graph keeps its own capacities
        load_graph().nodes[p]["physical_capacity_bps"] == 1_000_000_000 for p in first
    )


def test_rankings_depend_on_capacities_not_on_node_ids() -> None:
    rankings = [
        x.ground_truth["expected"]
        for x in APP.generate(10 * BLOCK, seed=6)
        if x.ground_truth["answer_kind"] == "ranking"
    ]
    assert len(rankings) >= 30
    all_tied = [r for r in rankings if len({value for _, value in r}) == 1]
    assert not all_tied
    # the order is not simply the id order in most rankings
    by_id = sum(r == sorted(r, key=lambda pair: pair[0]) for r in rankings)
    assert by_id <= len(rankings) // 5


_PORT_PROPERTY = re.compile(
    r"(?:the (?P<a>fastest|slowest) port of "
    r"|the port of )(?:packet switch |switch )`(?P<switch>[^`]+)`"
    r"(?: with the (?P<b>highest|lowest) capacity)?"
)


def test_a_port_given_by_a_property_is_the_unique_extreme_of_its_switch() -> None:
    checked = 0
    for query in APP.generate(20 * BLOCK, seed=12, level=1):
        if query.label not in ("remove", "update"):
            continue
        match = _PORT_PROPERTY.search(query.ground_truth["question"])
        if match is None or not (match["a"] or match["b"]):
            continue
        view = initial_view(query.ground_truth["graph_key"])
        switch = f"EK_PACKET_SWITCH:{match['switch']}"
        ports = {p: view.attrs(p)["physical_capacity_bps"] for p in view.children(switch)}
        highest = (match["a"] or match["b"]) in ("fastest", "highest")
        best = max(ports.values()) if highest else min(ports.values())
        winners = [p for p, value in ports.items() if value == best]
        assert winners == [query.ground_truth["program"][0]["node"]], query.ground_truth
        checked += 1
    assert checked >= 5


def _template_would_be_correct(query_truth: dict, program: list) -> bool:
    """Judge the template program the way the judge does: answer and final topology."""
    if not program:
        return False
    view = initial_view(query_truth["graph_key"])
    try:
        value = execute(view, program)
    except (ProgramError, KeyError, ValueError):
        return False
    if query_truth["answer_kind"] != "graph" and value != query_truth["expected"]:
        return False
    _, expected = ground_truth(query_truth["program"], query_truth["graph_key"])
    return compare_graphs(
        NormalizedGraph.from_view(view), NormalizedGraph.from_view(expected)
    ).equal


def test_template_floor_stays_under_the_targets_but_is_not_empty() -> None:
    """The floor solves what a pattern can (named operands) and no more than the targets."""
    solved: Counter[int] = Counter()
    total: Counter[int] = Counter()
    for query in APP.generate(8 * BLOCK, seed=2026):
        request = query.prompt.split("## Request\n", 1)[1].split("\n\n## Answer format", 1)[0]
        program = template_program(request)
        total[query.level] += 1
        solved[query.level] += _template_would_be_correct(query.ground_truth, program)
    for level, ceiling in FLOOR_TARGETS.items():
        assert solved[level] <= ceiling * total[level], (level, solved, total)
    assert solved[1] >= 0.15 * total[1], "the floor agent reads nothing: not an adversary"


def test_the_template_floor_reads_named_operands_exactly() -> None:
    """On a query whose operands are all named, the floor agent finds the exact program."""
    named = 0
    for query in APP.generate(6 * BLOCK, seed=77, level=1):
        question = query.ground_truth["question"]
        if query.label not in ("list", "count", "remove", "update"):
            continue
        if re.search(r"fastest|slowest|largest|smallest|busiest|least|most|highest|lowest",
                     question):
            continue
        named += 1
        assert template_program(question) == query.ground_truth["program"], question
    assert named >= 5


def test_initial_view_does_not_touch_the_shared_graph() -> None:
    base = load_graph()
    view = initial_view(graph_key(5, 5, APP.version))
    assert isinstance(view, TopologyView) and view.base is base
    port = next(iter(port_capacities(graph_key(5, 5, APP.version))))
    assert base.nodes[port]["physical_capacity_bps"] == 1_000_000_000


def test_the_query_graph_returned_unchanged_is_no_change_and_no_damage() -> None:
    """changed_state and blast_radius compare with the query's own graph, not the 1 Gbit/s one."""
    import networkx as nx

    from apps.malt.scoring import judge

    query = next(x for x in APP.generate(BLOCK, seed=31) if x.label == "count")
    graph = query_graph(query.ground_truth["graph_key"])
    unchanged = {"__networkx__": nx.node_link_data(graph, edges="links")}
    value = {"answer": query.ground_truth["expected"], "updated_graph": unchanged}
    verdict = judge(query.ground_truth, value, 0.0)
    assert verdict.correct and verdict.safe, verdict.details
    assert verdict.changed_state is False and verdict.blast_radius == 0
