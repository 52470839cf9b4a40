"""Query generation: seeded determinism, Table 5 levels/labels, operand rules (no emulator)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from apps.route.app import RouteApp
from apps.route.faults import (
    FAULT_TYPES,
    LEVEL_LABELS,
    METHOD_COUNTS,
    RI_BAD_MASKS,
    level_of,
    make_fault,
    sample_ground_truth,
    subnets_needed,
)
from apps.route.topology import RouteTopology
from evaluator.registry import get_app

APP = RouteApp()


def test_registry_returns_route_app_with_its_class_attributes() -> None:
    app = get_app("route")
    assert isinstance(app, RouteApp)
    assert (app.app_id, app.needs_root, app.max_steps, app.levels) == ("route", True, 10, (1, 2, 3))


def test_same_seed_same_queries_and_different_seed_different_operands() -> None:
    first = APP.generate(40, seed=7)
    again = APP.generate(40, seed=7)
    other = APP.generate(40, seed=8)
    assert [q.fingerprint() for q in first] == [q.fingerprint() for q in again]
    assert [q.query_id for q in first] == [q.query_id for q in again]
    assert [q.fingerprint() for q in first] != [q.fingerprint() for q in other]
    assert len({q.query_id for q in first}) == 40


def test_generation_is_json_roundtrippable() -> None:
    for query in APP.generate(15, seed=3):
        data = json.loads(json.dumps(query.to_dict()))
        assert data["ground_truth"] == query.ground_truth
        assert data["labels"] == list(query.labels)


def test_table5_levels_and_labels() -> None:
    assert LEVEL_LABELS[1] == [("DR",), ("DI",), ("RI",), ("DT",), ("WR",)]
    level2 = {"+".join(c) for c in LEVEL_LABELS[2]}
    level3 = {"+".join(c) for c in LEVEL_LABELS[3]}
    assert level2 == {"DR+DI", "DR+RI", "DR+DT", "DR+WR", "RI+WR", "DT+WR"}
    assert level3 == {"DI+DT", "DI+WR", "RI+DT", "DI+RI"}
    pairs = {frozenset(c) for c in LEVEL_LABELS[2] + LEVEL_LABELS[3]}
    assert len(pairs) == 10  # every unordered pair of the five categories exactly once
    assert METHOD_COUNTS == {"DR": 4, "DI": 3, "RI": 4, "DT": 4, "WR": 4}


def test_a_mixed_batch_covers_all_fifteen_labels_evenly_with_right_levels() -> None:
    queries = APP.generate(150, seed=11)
    counts = Counter(q.label for q in queries)
    assert len(counts) == 15 and set(counts.values()) == {10}
    for query in queries:
        assert query.level == level_of(query.labels)
        assert [f["label"] for f in query.ground_truth["faults"]] == list(query.labels)
        assert [f["type"] for f in query.ground_truth["faults"]] == [
            FAULT_TYPES[label] for label in query.labels
        ]


@pytest.mark.parametrize("level", [1, 2, 3])
def test_level_filter(level: int) -> None:
    queries = APP.generate(12, seed=5, level=level)
    assert {q.level for q in queries} == {level}
    assert {q.labels for q in queries} == set(LEVEL_LABELS[level])


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError):
        APP.generate(1, seed=0, level=4)
    with pytest.raises(ValueError):
        APP.generate(-1, seed=0)
    assert APP.generate(0, seed=0) == []


def test_operands_avoid_no_op_faults_and_pairs_use_disjoint_subnets() -> None:
    methods_seen: set[tuple[str, int]] = set()
    for query in APP.generate(600, seed=99):
        truth = query.ground_truth
        shape = truth["topology"]
        assert 2 <= shape["hosts_per_switch"] <= 4
        assert 2 <= shape["num_switches"] <= 4
        used: list[int] = []
        for fault in truth["faults"]:
            methods_seen.add((fault["label"], fault["method"]))
            params = fault["params"]
            if fault["label"] == "RI" and fault["method"] == 3:
                assert params["mask"] in RI_BAD_MASKS and params["mask"] > 25
            if fault["label"] == "WR" and fault["method"] == 2:
                assert "onlink" in params["wrong_route"]
            if fault["label"] == "DT" and fault["method"] == 4:
                assert 1000 <= params["delay_ms"] <= 5000
            mine = [v for k, v in params.items() if k in ("subnet", "duplicate_of")]
            if fault["label"] == "WR":
                mine.append(int(params["wrong_interface"].rsplit("eth", 1)[1]))
            assert len(mine) == subnets_needed(fault["label"], fault["method"])
            assert all(1 <= s <= shape["num_switches"] for s in mine)
            used += mine
        assert len(used) == len(set(used)), truth
        expected = [c for f in reversed(truth["faults"]) for c in f["repair"]]
        assert truth["repair"] == expected
    assert methods_seen == {(lab, m) for lab, n in METHOD_COUNTS.items() for m in range(1, n + 1)}


def test_prompt_states_format_rules_without_leaking_ground_truth() -> None:
    for query in APP.generate(15, seed=1):
        prompt = query.prompt
        assert '"machine"' in prompt and '"command"' in prompt and '{"done": true}' in prompt
        assert "sudo" in prompt and "ping" in prompt and "prefix" in prompt
        assert APP.prompt_marker in prompt and "kubectl" not in prompt
        for fault in query.ground_truth["faults"]:
            for command in fault["inject"] + fault["repair"]:
                assert command not in prompt
        shape = query.ground_truth["topology"]
        assert f"h1..h{shape['num_switches'] * shape['hosts_per_switch']}" in prompt
        assert f"connects {shape['num_switches']} subnets" in prompt


def test_make_fault_rejects_unknown_methods_and_missing_subnets() -> None:
    import random

    with pytest.raises(ValueError):
        make_fault("DI", 4, [1], random.Random(0))
    with pytest.raises(ValueError):
        make_fault("XX", 1, [1], random.Random(0))
    with pytest.raises(ValueError):
        make_fault("WR", 1, [1], random.Random(0))


def test_topology_raises_subnet_count_when_a_pair_needs_more_subnets() -> None:
    import random

    truth = sample_ground_truth(
        ("RI", "WR"), random.Random(1), switches=(2, 2), hosts=(2, 2), methods=(4, 1)
    )
    assert truth["topology"]["num_switches"] == 4


def test_topology_naming_and_ip_plan() -> None:
    topo = RouteTopology(3, 2, prefix="nab1_")
    assert topo.machines() == [f"nab1_h{i}" for i in range(1, 7)] + ["nab1_r0"]
    assert topo.router_intf(3) == "nab1_r0-eth3"
    assert topo.host_ip(1) == "192.168.1.100" and topo.host_ip(4) == "192.168.2.101"
    assert topo.host_subnet(5) == 3 and topo.probe_ip("nab1_r0") == "192.168.1.1"
    assert "nab1_r0-eth2 192.168.2.1/24 -> switch nab1_s2" in topo.describe()
    with pytest.raises(ValueError):
        RouteTopology(0, 2)
    with pytest.raises(ValueError):
        RouteTopology(4, 4, prefix="a_very_long_prefix_")
