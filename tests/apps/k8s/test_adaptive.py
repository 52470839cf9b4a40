"""The k8s adaptive agent (apps/k8s/adaptive.py) learns a held-out pack's architecture statements
and policy layout from exposed ground truths, and the healthy set it builds for a fresh query of
that pack realises the query's intended connectivity (checked with the policy model, no
cluster); a statement it never saw (the public prompt, the other k8s test pack) leaves it to the
scripted agent. Both k8s test packs are learned in turn: ``heldout-architecture`` (statement by
receiving service, one policy per service) and ``heldout-layout`` (a table of calls, one
ingress policy per call). The measurement on the cluster is ``benchmarks/bench_difficulty.py
--apps k8s --agents oracle,scripted,adaptive --exposed-pack tests/variant_packs/k8s/<A>
--sealed-pack tests/variant_packs/k8s/<B>``."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.k8s.adaptive import (
    CALL_POLICY,
    EGRESS,
    INGRESS,
    SERVICE_POLICY,
    abstract_line,
    learner_from,
)
from apps.k8s.app import K8sApp
from apps.k8s.queries import model_matrix
from apps.k8s.scripted import scripted_reply
from evaluator.types import Query
from evaluator.variants import generate_batch, load_pack

APP = K8sApp()
PACKS = Path(__file__).resolve().parents[2] / "variant_packs" / "k8s"
PACK_DIR, LAYOUT_DIR = PACKS / "heldout-architecture", PACKS / "heldout-layout"
#: Targets of the module docstring of apps/k8s/adaptive.py.
EXPOSED_FLOOR, SEALED_CEILING = 0.80, 0.20


@pytest.fixture(scope="module")
def learner():
    pack = load_pack(PACK_DIR)
    return learner_from(generate_batch(APP, 60, 7, packs=[pack], share=1.0))


@pytest.fixture(scope="module")
def fresh_architecture() -> list[Query]:
    return generate_batch(APP, 12, 31, packs=[load_pack(PACK_DIR)], share=1.0)


@pytest.fixture(scope="module")
def fresh_layout() -> list[Query]:
    return generate_batch(APP, 12, 31, packs=[load_pack(LAYOUT_DIR)], share=1.0)


def test_the_healthy_set_it_builds_realises_a_fresh_querys_connectivity(
    learner, fresh_architecture: list[Query]
) -> None:
    fresh = fresh_architecture
    hits = 0
    for query in fresh:
        edges = learner.intended(query.prompt)
        if edges is None:
            continue
        expected = {(s, d, p) for s, d, p in query.ground_truth["expected"]}
        hits += model_matrix(learner.healthy_set(edges)) == expected
    assert hits >= EXPOSED_FLOOR * len(fresh), (hits, len(fresh))


def test_an_unseen_statement_is_left_to_the_scripted_agent(learner) -> None:
    for query in APP.generate(2, 5):
        history = [{"role": "user", "content": query.prompt}]
        assert learner.intended(query.prompt) is None
        assert learner.reply(history) == scripted_reply(history)


def test_lines_abstract_services_and_ports() -> None:
    assert abstract_line("- cartservice (7070/TCP) accepts connections from frontend.") == (
        "- <S> (<I>/TCP) accepts connections from <S>.", ["cartservice", 7070, "frontend"])


def _hits(learner, queries) -> int:
    """Queries whose statement the learner reads and whose healthy set it builds right."""
    hits = 0
    for query in queries:
        edges = learner.intended(query.prompt)
        if edges is not None:
            expected = {(s, d, p) for s, d, p in query.ground_truth["expected"]}
            hits += model_matrix(learner.healthy_set(edges)) == expected
    return hits


def test_learned_from_heldout_architecture_it_has_nothing_of_its_own_on_heldout_layout(
    learner, fresh_layout: list[Query]
) -> None:
    """The sealed pack: no statement line of it has a learned form, so every reply is the
    scripted agent's (which restores the public set: tests/apps/k8s/test_layout_pack.py)."""
    sealed = [q for q in fresh_layout if q.level in (2, 3)]
    assert sealed
    assert _hits(learner, sealed) <= SEALED_CEILING * len(sealed)
    for query in sealed:
        history = [{"role": "user", "content": query.prompt}]
        assert learner.intended(query.prompt) is None
        assert learner.reply(history) == scripted_reply(history)


def test_it_learns_the_call_per_policy_layout_and_only_that_pack(
    fresh_layout: list[Query], fresh_architecture: list[Query]
) -> None:
    """Exposed to heldout-layout it reads the table of calls, takes the ingress side for call
    policies and the egress side for service policies, and builds the pack's healthy set; on
    heldout-architecture, never seen, it plays the scripted agent."""
    learner = learner_from(generate_batch(APP, 8, 7, packs=[load_pack(LAYOUT_DIR)], share=1.0))
    assert learner.carrier(INGRESS) == CALL_POLICY and learner.carrier(EGRESS) == SERVICE_POLICY
    assert _hits(learner, fresh_layout) >= EXPOSED_FLOOR * len(fresh_layout)
    first = fresh_layout[0]
    names = set(learner.healthy_set(learner.intended(first.prompt) or set()))
    assert set(first.ground_truth["baseline"]) <= names
    sealed = [q for q in fresh_architecture if q.level in (2, 3)]
    assert sealed and _hits(learner, sealed) == 0
    for query in sealed:
        history = [{"role": "user", "content": query.prompt}]
        assert learner.reply(history) == scripted_reply(history)
