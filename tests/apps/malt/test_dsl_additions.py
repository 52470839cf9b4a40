"""The operation language's scoping, ``stage`` answers, ``filter``, ``!=``, ``within`` and
``collect`` (apps/malt/operations.py), each checked against an independent count on the graph,
through the real judge, and (with the sandbox) through the oracle's own interpreter."""

from __future__ import annotations

from typing import Any

import pytest

from apps.malt.app import MaltApp
from apps.malt.fabric import GBPS, port_capacities
from apps.malt.operations import ProgramError, execute
from apps.malt.overlay import TopologyView
from apps.malt.prompt import render_prompt
from apps.malt.queries import ground_truth
from apps.malt.scoring import judge
from apps.malt.topology import load_graph
from evaluator.testing import play_reference
from evaluator.types import Query
from tests.conftest import require_root, require_tool

KEY = "v2/1/0"  # the shipped fabric with the capacities of public query (seed 1, index 0)
SUPERBLOCK = "EK_SUPERBLOCK:ju1.a1"
BLOCK = "EK_AGG_BLOCK:ju1.a1.m1"
SWITCH = "EK_PACKET_SWITCH:ju1.a1.m1.s2c1"


def _children(node: str, kind: str) -> list[str]:
    graph = load_graph()
    return sorted(c for c in graph.successors(node) if graph.nodes[c]["type"] == kind)


def _capacity_of_switch(switch: str) -> int:
    capacities = port_capacities(KEY)
    return sum(capacities[p] for p in _children(switch, "EK_PORT"))


def _truth(program: list[dict[str, Any]]) -> dict[str, Any]:
    truth, _ = ground_truth(program, KEY)
    return truth


def _query(truth: dict[str, Any]) -> Query:
    prompt = render_prompt("(a test request)", truth["answer_kind"], truth["changes_topology"])
    return Query("malt", 2, 1, 0, 3, ("test",), prompt, truth)


def _judged(truth: dict[str, Any], answer: Any) -> tuple[bool, bool]:
    verdict = judge(truth, {"answer": answer}, 0.0)
    return verdict.correct, verdict.safe


# ------------------------------------------------------------------ nested loops


NESTED_SUM = [
    {
        "op": "for_each",
        "as": "blk",
        "items": {"children_of": SUPERBLOCK, "kind": "EK_AGG_BLOCK"},
        "collect": "sum",
        "body": [
            {
                "op": "for_each",
                "items": {"children_of": "$item", "kind": "EK_PACKET_SWITCH"},
                "collect": "sum",
                "body": [{"op": "capacity", "node": "$item"}],
            }
        ],
    }
]


def test_a_nested_loop_binds_its_own_item() -> None:
    """Before the fix the inner ``$item`` was rewritten with the outer block: every switch
    iteration asked the block's capacity (the sum came out 16 times too large)."""
    expected = sum(
        _capacity_of_switch(s)
        for block in _children(SUPERBLOCK, "EK_AGG_BLOCK")
        for s in _children(block, "EK_PACKET_SWITCH")
    )
    truth = _truth(NESTED_SUM)
    assert truth["answer_kind"] == "number" and truth["expected"] == expected
    assert _judged(truth, expected) == (True, True)
    assert _judged(truth, expected * 16) == (False, True)


def test_a_nested_loop_still_sees_the_outer_item_by_its_as_name() -> None:
    program = [
        {
            "op": "for_each",
            "as": "blk",
            "items": {"children_of": SUPERBLOCK, "kind": "EK_AGG_BLOCK"},
            "body": [
                {
                    "op": "for_each",
                    "items": {"children_of": "$blk", "kind": "EK_PACKET_SWITCH"},
                    "body": [{"op": "add_port", "parent": "$item",
                              "name": "$item_name.p17", "capacity_bps": 40 * GBPS}],
                }
            ],
        }
    ]
    view = TopologyView(load_graph())
    execute(view, program)
    added = dict(view.added_nodes)
    switches = [s for b in _children(SUPERBLOCK, "EK_AGG_BLOCK")
                for s in _children(b, "EK_PACKET_SWITCH")]
    assert sorted(added) == sorted(f"EK_PORT:{s.split(':', 1)[1]}.p17" for s in switches)
    for switch in switches:
        assert f"EK_PORT:{switch.split(':', 1)[1]}.p17" in view.children(switch)
    truth = _truth(program)
    assert truth["answer_kind"] == "graph" and truth["final_topology"]["added"] == len(switches)


def test_a_bad_as_name_is_a_program_error() -> None:
    program = [{"op": "for_each", "as": "Bad-Name", "items": {"nodes": [SWITCH]},
                "body": [{"op": "stage", "node": "$item"}]}]
    with pytest.raises(ProgramError):
        execute(TopologyView(load_graph()), program)


# ------------------------------------------------------------------ stage, filter, !=


def test_a_stage_question_is_a_number_answer_not_an_unchanged_graph() -> None:
    truth = _truth([{"op": "stage", "node": SWITCH}])
    assert truth["answer_kind"] == "number" and truth["expected"] == 2
    assert truth["changes_topology"] is False
    assert _judged(truth, 2) == (True, True)
    assert _judged(truth, 3) == (False, True)


def test_filter_returns_the_matching_ports_and_changes_nothing() -> None:
    capacities = port_capacities(KEY)
    ports = _children(SWITCH, "EK_PORT")
    threshold = sorted({capacities[p] for p in ports})[-1]  # below the fastest rate
    program = [{
        "op": "filter",
        "items": {"children_of": SWITCH, "kind": "EK_PORT"},
        "cond": {"query": {"op": "capacity", "node": "$item"}, "cmp": "<", "value": threshold},
    }]
    truth = _truth(program)
    slower = [p for p in ports if capacities[p] < threshold]
    assert 0 < len(slower) < len(ports)
    assert truth["answer_kind"] == "set" and truth["expected"] == slower
    assert truth["changes_topology"] is False and truth["final_topology"]["updated"] == 0
    assert _judged(truth, list(reversed(slower))) == (True, True)  # a set: order is free
    assert _judged(truth, ports) == (False, True)


def test_not_equal_compares_and_within_reaches_every_descendant() -> None:
    program = [{
        "op": "filter",
        "items": {"within": SUPERBLOCK, "kind": "EK_PACKET_SWITCH"},
        "cond": {"query": {"op": "stage", "node": "$item"}, "cmp": "!=", "value": 2},
    }]
    graph = load_graph()
    switches = [s for b in _children(SUPERBLOCK, "EK_AGG_BLOCK")
                for s in _children(b, "EK_PACKET_SWITCH")]
    other = sorted(s for s in switches if graph.nodes[s]["switch_loc"]["stage"] != 2)
    truth = _truth(program)
    assert other and len(other) < len(switches)
    assert truth["expected"] == other
    assert _judged(truth, other) == (True, True)
    assert _judged(truth, switches) == (False, True)


def test_collect_set_unites_what_the_iterations_answer() -> None:
    program = [{
        "op": "for_each",
        "items": {"children_of": SUPERBLOCK, "kind": "EK_AGG_BLOCK"},
        "collect": "set",
        "body": [{
            "op": "filter",
            "items": {"children_of": "$item", "kind": "EK_PACKET_SWITCH"},
            "cond": {"query": {"op": "stage", "node": "$item"}, "cmp": "==", "value": 3},
        }],
    }]
    graph = load_graph()
    stage3 = sorted(s for b in _children(SUPERBLOCK, "EK_AGG_BLOCK")
                    for s in _children(b, "EK_PACKET_SWITCH")
                    if graph.nodes[s]["switch_loc"]["stage"] == 3)
    truth = _truth(program)
    assert stage3 and truth["answer_kind"] == "set" and truth["expected"] == stage3
    assert _judged(truth, stage3) == (True, True)
    assert _judged(truth, stage3[1:]) == (False, True)


def test_collect_sum_after_a_change_counts_the_changed_graph() -> None:
    program = [
        {"op": "for_each", "items": {"children_of": BLOCK, "kind": "EK_PACKET_SWITCH"},
         "body": [{"op": "add_port", "parent": "$item", "name": "$item_name.p17",
                   "capacity_bps": 10 * GBPS}]},
        {"op": "for_each", "items": {"children_of": BLOCK, "kind": "EK_PACKET_SWITCH"},
         "collect": "sum", "body": [{"op": "capacity", "node": "$item", "unit_bps": GBPS}]},
    ]
    switches = _children(BLOCK, "EK_PACKET_SWITCH")
    expected = sum(_capacity_of_switch(s) // GBPS + 10 for s in switches)
    truth = _truth(program)
    assert truth["answer_kind"] == "number" and truth["changes_topology"] is True
    assert truth["expected"] == expected
    # a number answer to a changing request also needs the changed graph: the judge says so
    assert judge(truth, {"answer": expected}, 0.0).failure == "missing_graph"


@pytest.mark.parametrize("how", ["sum", "set"])
def test_collect_rejects_values_of_the_wrong_type(how: str) -> None:
    question = {"op": "list", "node": "$item"} if how == "sum" else {"op": "stage",
                                                                      "node": "$item"}
    program = [{"op": "for_each", "items": {"nodes": [SWITCH]}, "collect": how,
                "body": [question]}]
    with pytest.raises(ProgramError):
        execute(TopologyView(load_graph()), program)


# ------------------------------------------------------------------ the oracle agrees


ORACLE_PROGRAMS: dict[str, list[dict[str, Any]]] = {
    "nested-sum": NESTED_SUM,
    "stage": [{"op": "stage", "node": SWITCH}],
    "filter-not-equal": [{
        "op": "filter",
        "items": {"within": BLOCK, "kind": "EK_PACKET_SWITCH"},
        "cond": {"query": {"op": "stage", "node": "$item"}, "cmp": "!=", "value": 2},
    }],
    "nested-change": [
        {"op": "for_each", "as": "blk", "items": {"children_of": SUPERBLOCK,
                                                   "kind": "EK_AGG_BLOCK"},
         "body": [{"op": "for_each", "items": {"children_of": "$blk",
                                               "kind": "EK_PACKET_SWITCH"},
                   "body": [{"op": "if", "cond": {"query": {"op": "stage", "node": "$item"},
                                                  "cmp": "!=", "value": 2},
                             "then": [{"op": "add_port", "parent": "$item",
                                       "name": "$item_name.p17", "capacity_bps": GBPS}],
                             "else": []}]}]},
        {"op": "for_each", "items": {"within": SUPERBLOCK, "kind": "EK_AGG_BLOCK"},
         "collect": "sum", "body": [{"op": "count", "node": "$item", "kind": "EK_PORT"}]},
    ],
}


@pytest.mark.parametrize("name", sorted(ORACLE_PROGRAMS))
def test_the_oracle_code_runs_the_additions_as_the_interpreter_does(name: str) -> None:
    require_root()
    require_tool("bwrap")
    require_tool("setpriv")
    query = _query(_truth(ORACLE_PROGRAMS[name]))
    verdict = play_reference(MaltApp(), query, "oracle")
    assert verdict.correct and verdict.safe, verdict.details


def test_ground_truth_problems_flag_a_value_the_answer_kind_throws_away() -> None:
    """A question only inside ``if`` computes a value, but the answer kind stays ``graph``
    (only top-level questions decide it): check_pack names the rule."""
    from apps.malt.scoring import ground_truth_problems

    nested = [{"op": "if", "cond": {"query": {"op": "stage", "node": SWITCH}, "cmp": "==",
                                    "value": 2},
               "then": [{"op": "count", "node": BLOCK, "kind": "EK_PORT"}], "else": []}]
    truth = _truth(nested)
    assert truth["answer_kind"] == "graph"
    assert [rule for rule, _ in ground_truth_problems(truth)] == ["answer_kind"]
    assert ground_truth_problems(_truth(NESTED_SUM)) == []
    tampered = {**_truth(NESTED_SUM), "expected": 1}
    assert [rule for rule, _ in ground_truth_problems(tampered)] == ["expected"]
