"""Static checks of k8s ground truths (apps.k8s.queries.ground_truth_problems), as
``manage.py check_pack`` runs them, on the generation-time policy model: public queries pass;
a repair that does not heal, a fault nothing shows and a fault that adds a policy are named
by their rule."""

from __future__ import annotations

import copy

from apps.k8s.app import K8sApp
from apps.k8s.queries import ground_truth_problems

APP = K8sApp()


def test_public_ground_truths_have_no_problem() -> None:
    queries = APP.generate(20, seed=7)
    assert [APP.ground_truth_problems(q) for q in queries] == [[]] * 20


def test_each_broken_ground_truth_is_named_by_its_rule() -> None:
    query = next(q for q in APP.generate(20, seed=7) if q.ground_truth["faults"])
    truth = copy.deepcopy(query.ground_truth)
    # the "repair" puts the faulted policies back as they were injected: nothing heals
    truth["repair"] = {name: truth["policies"][name] for name in truth["repair"]}
    rules = [rule for rule, _ in ground_truth_problems(truth)]
    assert rules == ["healthy-set"]
    truth = copy.deepcopy(query.ground_truth)
    truth["policies"] = {**truth["policies"], **truth["repair"]}  # nothing injected
    assert [rule for rule, _ in ground_truth_problems(truth)] == ["fault-visible"]
    truth = copy.deepcopy(query.ground_truth)
    extra = copy.deepcopy(next(iter(truth["policies"].values())))
    extra["metadata"]["name"] = "added-by-fault"
    truth["policies"]["added-by-fault"] = extra
    assert "adds-policy" in [rule for rule, _ in ground_truth_problems(truth)]
