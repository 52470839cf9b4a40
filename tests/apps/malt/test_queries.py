"""Query generation: determinism, labels/levels, operands from the graph, safe ground truth."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from apps.malt.app import MaltApp
from apps.malt.checks import NormalizedGraph, check_safety
from apps.malt.fabric import initial_view
from apps.malt.operations import execute
from apps.malt.queries import ALL_LABELS, BLOCK, LEVEL_LABELS, ground_truth
from apps.malt.topology import load_graph
from evaluator.types import Query

APP = MaltApp()


def test_same_seed_same_queries_and_fingerprints() -> None:
    first = APP.generate(45, seed=11)
    second = APP.generate(45, seed=11)
    assert [q.fingerprint() for q in first] == [q.fingerprint() for q in second]
    assert [q.query_id for q in first] == [q.query_id for q in second]
    assert [q.index for q in first] == list(range(45))


def test_different_seeds_draw_different_operands() -> None:
    a = APP.generate(30, seed=1)
    b = APP.generate(30, seed=2)
    assert sum(x.fingerprint() != y.fingerprint() for x, y in zip(a, b, strict=True)) >= 25
    programs_a = {json.dumps(q.ground_truth["program"], sort_keys=True) for q in a}
    programs_b = {json.dumps(q.ground_truth["program"], sort_keys=True) for q in b}
    assert len(programs_a & programs_b) <= 5  # e.g. "list children of ju1" can repeat


def test_every_block_of_fifteen_has_every_label_once() -> None:
    queries = APP.generate(3 * BLOCK, seed=5)
    for block in range(3):
        labels = [q.labels for q in queries[block * BLOCK : (block + 1) * BLOCK]]
        assert sorted(labels) == sorted(labels_ for labels_, _ in ALL_LABELS)
    assert {q.level for q in queries} == {1, 2, 3}
    for q in queries:
        assert q.labels in LEVEL_LABELS[q.level]


def test_level_filter_keeps_stream_indices_and_content() -> None:
    everything = {q.index: q for q in APP.generate(60, seed=9)}
    for level in (1, 2, 3):
        filtered = APP.generate(8, seed=9, level=level)
        assert len(filtered) == 8 and all(q.level == level for q in filtered)
        for q in filtered:
            if q.index in everything:
                assert q.fingerprint() == everything[q.index].fingerprint()


def test_generate_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        APP.generate(-1, seed=0)
    with pytest.raises(ValueError):
        APP.generate(3, seed=0, level=4)
    assert APP.generate(0, seed=0) == []


def test_queries_round_trip_through_json() -> None:
    for q in APP.generate(BLOCK, seed=3):
        again = Query.from_dict(json.loads(json.dumps(q.to_dict())))
        assert again == q and again.ground_truth == q.ground_truth


def test_operands_come_from_the_live_graph_and_the_wording_is_terse() -> None:
    """Operands exist; the request never spells out node ids, only names."""
    graph = load_graph()
    for q in APP.generate(2 * BLOCK, seed=21):
        question = q.ground_truth["question"]
        assert question in q.prompt
        assert "EK_PORT:" not in question and "EK_PACKET_SWITCH:" not in question
        assert "physical_capacity_bps" not in question and "switch_loc" not in question
        for op in q.ground_truth["program"]:
            for key in ("node", "parent"):
                if key in op:
                    assert op[key] in graph, op


def test_ground_truth_is_executed_not_stored_blindly() -> None:
    """The stored expected answer equals a fresh execution of the stored program."""
    for q in APP.generate(2 * BLOCK, seed=4):
        view = initial_view(q.ground_truth["graph_key"])
        value = execute(view, q.ground_truth["program"])
        if q.ground_truth["answer_kind"] != "graph":
            assert value == q.ground_truth["expected"]
        else:
            assert q.ground_truth["expected"] is None
            assert q.ground_truth["changes_topology"]


def test_ground_truth_satisfies_every_safety_constraint_over_450_queries() -> None:
    base_nodes = load_graph().number_of_nodes()
    seen: Counter[str] = Counter()
    for seed in range(3):
        for q in APP.generate(150, seed=seed):
            truth, view = ground_truth(q.ground_truth["program"], q.ground_truth["graph_key"])
            report = check_safety(NormalizedGraph.from_view(view))
            assert report.safe, (q.label, q.ground_truth["question"], report.to_dict())
            seen[q.label] += 1
            if truth["changes_topology"] and q.labels[0] in ("add", "remove", "update"):
                changes = truth["final_topology"]
                assert changes["removed"] or changes["added"] or changes["updated"]
            if not truth["changes_topology"]:
                assert view.number_of_nodes() == base_nodes
    assert sum(seen.values()) == 450 and len(seen) == BLOCK
    assert load_graph().number_of_nodes() == base_nodes  # the shared graph was never touched


def test_generation_is_identical_across_processes_and_hash_seeds() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "from apps.malt.app import MaltApp\n"
        "print(','.join(q.fingerprint() for q in MaltApp().generate(30, seed=77)))\n"
    )
    root = Path(__file__).resolve().parents[2]
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(root)}
        run = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(run.stdout.strip())
    assert outputs == {",".join(q.fingerprint() for q in APP.generate(30, seed=77))}
