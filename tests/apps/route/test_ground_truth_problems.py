"""Static checks of route ground truths (apps.route.queries.ground_truth_problems), as
``manage.py check_pack`` runs them: public queries pass, a repair outside the allow-list,
a fault without repair and two faults on one machine are named by their rule."""

from __future__ import annotations

import copy

from apps.route.app import RouteApp
from apps.route.queries import ground_truth_problems

APP = RouteApp()


def test_public_ground_truths_have_no_problem() -> None:
    queries = APP.generate(30, seed=7)
    assert [APP.ground_truth_problems(q) for q in queries] == [[]] * 30


def test_each_broken_ground_truth_is_named_by_its_rule() -> None:
    query = next(q for q in APP.generate(30, seed=7) if len(q.ground_truth["faults"]) == 2)
    truth = copy.deepcopy(query.ground_truth)
    truth["repair"][0]["command"] = "rm -rf /"
    assert [rule for rule, _ in ground_truth_problems(truth)] == ["allowlist"]
    truth = copy.deepcopy(query.ground_truth)
    dropped = truth["repair"].pop()
    found = ground_truth_problems(truth)
    assert found == [("repair", f"the fault on {dropped['machine']} gets no repair step")]
    truth = copy.deepcopy(query.ground_truth)
    truth["faults"][1]["machine"] = truth["faults"][0]["machine"]
    assert "one-fault-per-machine" in [rule for rule, _ in ground_truth_problems(truth)]
