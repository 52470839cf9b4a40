"""Query generation: seeded determinism, Table 5 levels/labels, operand rules (no emulator)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from apps.route.app import RouteApp
from apps.route.faults import FAULT_TYPES, METHOD_COUNTS, METHODS, make_fault
from apps.route.queries import DISTRACTORS_PER_LEVEL, LEVEL_LABELS, LEVEL_SHAPES, level_of
from apps.route.topology import RouteTopology
from evaluator.registry import get_app

APP = RouteApp()
#: Without healthy controls: every query carries faults (the Table 5 coverage tests).
FAULTY = RouteApp(healthy_share=0.0)


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
    # the paper's methods (4, 3, 4, 4, 4) plus the other ways ip/iptables/sysctl inject them
    assert METHOD_COUNTS == {"DR": 7, "DI": 4, "RI": 4, "DT": 4, "WR": 10}


def test_a_mixed_batch_covers_all_fifteen_labels_evenly_with_right_levels() -> None:
    queries = FAULTY.generate(150, seed=11)
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
    queries = FAULTY.generate(12, seed=5, level=level)
    assert {q.level for q in queries} == {level}
    assert {q.labels for q in queries} == set(LEVEL_LABELS[level])


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError):
        APP.generate(1, seed=0, level=4)
    with pytest.raises(ValueError):
        APP.generate(-1, seed=0)
    assert APP.generate(0, seed=0) == []


def test_operands_avoid_no_op_faults_and_pairs_use_different_machines() -> None:
    methods_seen: set[tuple[str, int]] = set()
    kinds_seen: set[tuple[str, str]] = set()
    for query in APP.generate(900, seed=99):
        truth = query.ground_truth
        shape = truth["topology"]
        routers, (lo_s, hi_s), (lo_h, hi_h) = LEVEL_SHAPES[query.level]
        assert shape["num_routers"] == routers
        assert lo_h <= shape["hosts_per_switch"] <= hi_h
        assert max(lo_s, routers) <= shape["num_switches"] <= hi_s
        topo = RouteTopology.from_dict(shape)
        machines = [f["machine"] for f in truth["faults"]]
        assert len(set(machines)) == len(machines), truth  # two faults, two machines
        for fault in truth["faults"]:
            methods_seen.add((fault["label"], fault["method"]))
            kinds_seen.add((fault["label"], fault["machine"][0]))
            assert fault["machine"][0].upper() in METHODS[fault["label"]][fault["method"]][1]
            assert f"{{p}}{fault['machine']}" in topo.with_prefix("{p}").machines()
            params = fault["params"]
            if fault["label"] == "RI" and fault["method"] == 3:
                assert params["mask"] in (30, 31, 32)
            if fault["label"] == "WR" and fault["method"] in (2, 8):
                assert "10.255.255.254" in str(params)
            if fault["label"] == "DT" and fault["method"] == 4:
                assert 1000 <= params["delay_ms"] <= 5000
        lo_d, hi_d = DISTRACTORS_PER_LEVEL[query.level]
        assert lo_d <= len(truth["distractors"]) <= hi_d
        for extra in truth["distractors"]:
            assert "192.168." not in extra["command"].split("via")[0]  # unused prefixes only
        expected = [
            {"machine": f["machine"], "command": c}
            for f in reversed(truth["faults"])
            for c in f["repair"]
        ]
        assert truth["repair"] == expected
    assert methods_seen == {(lab, m) for lab, n in METHOD_COUNTS.items() for m in range(1, n + 1)}
    # every category lands on routers and, except disable_routing, on hosts too
    assert kinds_seen == {(lab, k) for lab in METHODS for k in "rh"} - {("DR", "h")}


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
        assert f"connect {shape['num_switches']} subnets" in prompt or (
            f"connects {shape['num_switches']} subnets" in prompt
        )


def test_make_fault_rejects_unknown_methods_and_wrong_machines() -> None:
    import random

    topo = RouteTopology(3, 2, prefix="{p}")
    with pytest.raises(ValueError):
        make_fault("DI", 5, "r0", topo, random.Random(0))
    with pytest.raises(ValueError):
        make_fault("XX", 1, "r0", topo, random.Random(0))
    with pytest.raises(ValueError):
        make_fault("DR", 1, "h1", topo, random.Random(0))  # hosts do not route
    with pytest.raises(ValueError):
        make_fault("WR", 7, "r0", topo, random.Random(0))  # a host's default route


def test_topologies_grow_with_the_level() -> None:
    sizes = {}
    for level in (1, 2, 3):
        shapes = [q.ground_truth["topology"] for q in APP.generate(60, seed=4, level=level)]
        sizes[level] = (
            max(s["num_routers"] for s in shapes),
            sum(s["num_switches"] for s in shapes) / len(shapes),
        )
    assert sizes[1][0] == 1 < sizes[2][0] == 2 < sizes[3][0] == 3
    assert sizes[1][1] < sizes[2][1] < sizes[3][1]


def test_multi_router_plan() -> None:
    topo = RouteTopology(5, 2, 3, prefix="nab1_")
    assert topo.routers() == ["nab1_r0", "nab1_r1", "nab1_r2"]
    assert [topo.owner(k) for k in range(1, 6)] == [0, 1, 2, 0, 1]
    assert topo.router_intf(2) == "nab1_r1-eth2" and topo.router_intf(4) == "nab1_r0-eth4"
    assert topo.transit_intfs(2) == ("nab1_r0-eth102", "nab1_r2-eth100")
    assert topo.static_routes("nab1_r0") == [
        "192.168.2.0/24 via 10.0.1.2 dev nab1_r0-eth101",
        "192.168.5.0/24 via 10.0.1.2 dev nab1_r0-eth101",
        "192.168.3.0/24 via 10.0.2.2 dev nab1_r0-eth102",
    ]
    assert topo.static_routes("nab1_r1") == ["default via 10.0.1.1 dev nab1_r1-eth100"]
    assert topo.static_routes("nab1_h3") == ["default via 192.168.2.1"]
    assert topo.probe_ip("nab1_r2") == "192.168.3.1"
    text = topo.describe()
    assert "nab1_r2-eth3 192.168.3.1/24 -> switch nab1_s3" in text
    assert "nab1_r0-eth102 10.0.2.1/30 -> router nab1_r2" in text
    assert RouteTopology.from_dict(topo.to_dict(), "nab1_") == topo


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
