"""The k8s adaptive agent (apps/k8s/adaptive.py) learns the held-out pack's architecture
statements and policy templates from exposed ground truths, and the healthy set it builds for a
fresh query of that pack realises the query's intended connectivity (checked with the policy
model, no cluster); a statement it never saw (the public prompt) leaves it to the scripted
agent. The measurement on the cluster is ``benchmarks/bench_difficulty.py --apps k8s --agents
oracle,scripted,adaptive --exposed-pack tests/variant_packs/k8s/heldout-architecture``."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.k8s.adaptive import abstract_line, learner_from
from apps.k8s.app import K8sApp
from apps.k8s.queries import model_matrix
from apps.k8s.scripted import scripted_reply
from evaluator.variants import generate_batch, load_pack

APP = K8sApp()
PACK_DIR = Path(__file__).resolve().parents[2] / "variant_packs" / "k8s" / "heldout-architecture"
#: Target of the module docstring of apps/k8s/adaptive.py.
EXPOSED_FLOOR = 0.80


@pytest.fixture(scope="module")
def learner():
    pack = load_pack(PACK_DIR)
    return learner_from(generate_batch(APP, 60, 7, packs=[pack], share=1.0))


def test_the_healthy_set_it_builds_realises_a_fresh_querys_connectivity(learner) -> None:
    fresh = generate_batch(APP, 12, 31, packs=[load_pack(PACK_DIR)], share=1.0)
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
