"""The judge on hostile or malformed return values (no sandbox needed: pure function)."""

from __future__ import annotations

import json
import random
from typing import Any

import networkx as nx

from apps.malt.app import MaltApp
from apps.malt.queries import BLOCK
from apps.malt.scoring import expected_topology, judge

APP = MaltApp()
QUERIES = APP.generate(BLOCK, seed=41)


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(9 if depth < 4 else 5)
    if choice == 0:
        return None
    if choice == 1:
        return rng.choice([True, False, 0, -1, 2**70, 1e308, float("nan"), 16.0])
    if choice == 2:
        return rng.choice(["", "EK_PORT:x", "16", "graph", "é" * 3])
    if choice == 3:
        return rng.choice([[], {}, [[]], {"nodes": []}])
    if choice == 4:
        return {"__networkx__": rng.choice([None, [], {"nodes": [{"id": 1}], "links": [{}]}])}
    if choice in (5, 6):
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["answer", "updated_graph", "nodes", "links", "edges", "id", "source", "target", "type"]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_random_values_never_crash_the_judge() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        query = rng.choice(QUERIES)
        value = _random_json(rng)
        verdict = judge(query.ground_truth, value, 0.0)
        if verdict.correct:  # only possible by hitting the exact expected value
            assert value["answer"] == query.ground_truth["expected"] is not None
        else:
            assert verdict.failure is not None
        json.dumps(verdict.to_dict(), default=str)  # details stay serialisable


def _link(graph: nx.DiGraph) -> dict[str, Any]:
    return {"__networkx__": json.loads(json.dumps(nx.node_link_data(graph, edges="links")))}


def test_correct_graph_with_a_broken_node_is_wrong_and_unsafe() -> None:
    query = next(q for q in QUERIES if q.label == "remove")
    graph = expected_topology(query.ground_truth).to_networkx()
    value = _link(graph)
    assert judge(query.ground_truth, {"answer": value}, 0.0).correct
    graph.add_node("EK_PORT:orphan", name="orphan", type="EK_PORT", physical_capacity_bps=10**9)
    verdict = judge(query.ground_truth, {"answer": _link(graph)}, 0.0)
    assert not verdict.correct and not verdict.safe
    assert verdict.details["safety"]["violations"]["isolated_node"] == 1
    assert verdict.details["graph_diff"]["unexpected_nodes"]["count"] == 1


def test_latency_is_the_sandbox_exec_time() -> None:
    query = next(q for q in QUERIES if q.label == "count")
    verdict = judge(query.ground_truth, {"answer": query.ground_truth["expected"]}, 0.125)
    assert verdict.correct and verdict.safe and verdict.latency_s == 0.125
