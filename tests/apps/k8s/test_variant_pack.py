"""The k8s test pack (tests/variant_packs/k8s/heldout-architecture): NetworkPolicy faults, Table 6
kinds and two beyond it, on architecture variants of Online Boutique (a call added, a call
retired). Without a cluster: determinism, shape, and the pack hook's arithmetic in the policy
model. On the cluster (root, slow): the oracle solves every pack query, the null agent none, and
the scripted agent, which restores the public healthy set, at most a fifth of levels 2 and 3."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.k8s import manifests
from apps.k8s.app import K8sApp
from apps.k8s.cluster.control_plane import Cluster
from apps.k8s.queries import LEVEL_LABELS as PUBLIC_LEVEL_LABELS
from apps.k8s.queries import model_matrix
from evaluator.testing import play_reference
from evaluator.types import Query
from evaluator.variants import VariantPack, load_pack

APP = K8sApp(healthy_share=0.0)
PACK_DIR = Path(__file__).resolve().parents[2] / "variant_packs" / "k8s" / "heldout-architecture"
SEED, COUNT = 2026, 30
#: Scripted agent's ceiling on the pack's levels 2 and 3.
HELD_OUT_CEILING = 0.20


@pytest.fixture(scope="module")
def pack() -> VariantPack:
    return load_pack(PACK_DIR)


@pytest.fixture(scope="module")
def pack_queries(pack: VariantPack) -> list[Query]:
    return pack.generate(APP, SEED, list(range(COUNT)), None)


def _edges(truth: dict) -> set[tuple[str, str, str]]:
    return {(s, d, p) for s, d, p in truth["expected"]}


def test_pack_queries_name_their_pack_and_are_deterministic(
    pack: VariantPack, pack_queries: list[Query]
) -> None:
    assert pack.app_id == "k8s" and pack.levels == (1, 2, 3)
    assert {q.pack for q in pack_queries} == {"heldout-architecture"}
    assert all(q.ground_truth["variant_pack"] == pack.identity() for q in pack_queries)
    again = load_pack(PACK_DIR).generate(APP, SEED, list(range(COUNT)), None)
    assert [q.fingerprint() for q in again] == [q.fingerprint() for q in pack_queries]
    other = pack.generate(APP, SEED + 1, list(range(COUNT)), None)
    assert [q.fingerprint() for q in other] != [q.fingerprint() for q in pack_queries]
    assert {q.level for q in pack_queries} == {1, 2, 3}
    for level in (1, 2, 3):
        batch = pack.generate(APP, SEED, [0, 1, 2], level)
        assert [q.level for q in batch] == [level] * 3 and [q.index for q in batch] == [0, 1, 2]
        assert all(len(q.labels) == (1 if level == 1 else 2) for q in batch)


def test_pack_queries_differ_from_the_public_generator(pack_queries: list[Query]) -> None:
    public_prompt = APP.generate(1, 0)[0].prompt
    public_labels = {c for combos in PUBLIC_LEVEL_LABELS.values() for c in combos}
    beyond = [q for q in pack_queries if q.labels not in public_labels]
    assert beyond and any({"SEL", "NSP"} & set(q.labels) for q in beyond)
    shapes = {q.ground_truth["variant"]["shape"] for q in pack_queries}
    assert shapes == {"retire", "add", "add+retire", "add-separate+retire"}
    for query in pack_queries:
        assert query.prompt != public_prompt and "kubectl" in query.prompt
        assert _edges(query.ground_truth) != manifests.expected_edges()


def test_the_episode_writes_the_injected_set_and_the_oracle_restores_the_variant(
    pack_queries: list[Query],
) -> None:
    """What K8sEpisode.reset writes over the public set (repair names' injected versions plus
    the baseline) is the whole injected set; the oracle's apply restores the variant; restoring
    the public set (the scripted agent) never does."""
    public = manifests.healthy_policies()
    for query in pack_queries:
        truth = query.ground_truth
        expected = _edges(truth)
        start = dict(public)
        start.update({n: truth["policies"][n] for n in truth["repair"]})
        start.update(truth["baseline"])
        assert start == truth["policies"], query.label
        assert model_matrix(start) != expected
        assert sorted(map(list, model_matrix(start))) == truth["initial_allowed"]
        for fault in truth["faults"]:  # each fault visible on its own against the variant
            alone = dict(start, **truth["repair"])
            alone[fault["policy"]] = truth["policies"][fault["policy"]]
            assert model_matrix(alone) != expected, (query.label, fault)
        assert model_matrix(dict(start, **truth["repair"])) == expected
        scripted = dict(start, **public)
        assert model_matrix(scripted) != expected
        assert model_matrix(public) != expected


@pytest.fixture(scope="module")
def cluster_app(cluster: Cluster) -> K8sApp:
    return K8sApp(cluster_config=cluster.config, healthy_share=0.0)


@pytest.mark.k8s
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_oracle_solves_the_pack_and_the_null_agent_does_not(
    cluster_app: K8sApp, pack: VariantPack
) -> None:
    queries = [q for level in (1, 2, 3) for q in pack.generate(cluster_app, SEED, [0, 1, 2], level)]
    for query in queries:
        oracle = play_reference(cluster_app, query, "oracle")
        assert oracle.correct and oracle.safe, (query.label, query.ground_truth["variant"],
                                                oracle.failure, oracle.details)
        null = play_reference(cluster_app, query, "null")
        assert not null.correct and null.safe, query.label


@pytest.mark.k8s
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_scripted_agent_does_not_carry_over_to_architecture_variants(
    cluster_app: K8sApp, pack: VariantPack
) -> None:
    hard = [q for level in (2, 3) for q in pack.generate(cluster_app, SEED + 1, [0, 1, 2], level)]
    verdicts = [play_reference(cluster_app, q, "scripted") for q in hard]
    solved = sum(bool(v.correct and v.safe) for v in verdicts)
    assert solved / len(hard) <= HELD_OUT_CEILING, [v.failure for v in verdicts]
