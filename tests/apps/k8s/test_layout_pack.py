"""The second k8s test pack (tests/variant_packs/k8s/heldout-layout): reworked Online Boutique
graphs stated as a table of calls, a call-per-policy layout, Table 6 faults on that layout plus
``PT``. Without a cluster (seconds): determinism, labels per level, every graph differs from the
public one, the healthy set realises it, every fault is visible, the oracle's repair restores it
and the public scripted agent's play does not, all on the policy model. On the cluster (root,
slow): the oracle solves pack queries, the null agent none, the scripted agent at most a fifth
of levels 2 and 3."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.k8s import manifests
from apps.k8s.app import K8sApp
from apps.k8s.cluster.admission import MAX_POLICIES
from apps.k8s.cluster.control_plane import Cluster
from apps.k8s.queries import model_matrix
from evaluator.testing import play_reference
from evaluator.types import Query
from evaluator.variants import VariantPack, load_pack

APP = K8sApp(healthy_share=0.0)
PACK_DIR = Path(__file__).resolve().parents[2] / "variant_packs" / "k8s" / "heldout-layout"
SEED, COUNT = 2027, 30
PACK_LABELS: dict[int, set[tuple[str, ...]]] = {
    1: {("RI",), ("AI",), ("CP",), ("CPR",), ("AE",), ("PT",)},
    2: {("RI", "AI"), ("RI", "CP"), ("RI", "CPR"), ("AI", "CP"), ("AI", "CPR"), ("CP", "CPR"),
        ("PT", "RI"), ("PT", "CP")},
    3: {("CP", "AE"), ("CPR", "AE"), ("RI", "AE"), ("AI", "AE"), ("PT", "AE")},
}


@pytest.fixture(scope="module")
def pack() -> VariantPack:
    return load_pack(PACK_DIR)


@pytest.fixture(scope="module")
def pack_queries(pack: VariantPack) -> list[Query]:
    return pack.generate(APP, SEED, list(range(COUNT)), None)


def _edges(truth: dict) -> set[tuple[str, str, str]]:
    return {(s, d, p) for s, d, p in truth["expected"]}


def _start(truth: dict) -> dict:
    """What K8sEpisode.reset leaves in the namespace: the public set, then the injected
    version of every repair name and the baseline written over it."""
    return {**manifests.healthy_policies(), **manifests.starting_policies(truth)}


def test_queries_are_deterministic_and_labelled_per_level(
    pack: VariantPack, pack_queries: list[Query]
) -> None:
    assert pack.app_id == "k8s" and pack.levels == (1, 2, 3)
    assert {q.pack for q in pack_queries} == {"heldout-layout"}
    again = load_pack(PACK_DIR).generate(APP, SEED, list(range(COUNT)), None)
    assert [q.fingerprint() for q in again] == [q.fingerprint() for q in pack_queries]
    other = pack.generate(APP, SEED + 1, list(range(COUNT)), None)
    assert [q.fingerprint() for q in other] != [q.fingerprint() for q in pack_queries]
    assert {q.level for q in pack_queries} == {1, 2, 3}
    assert all(q.labels in PACK_LABELS[q.level] for q in pack_queries)
    for level in (1, 2, 3):
        batch = pack.generate(APP, SEED, [0, 1], level)
        assert [q.level for q in batch] == [level] * 2 and [q.index for q in batch] == [0, 1]
        assert all(q.labels in PACK_LABELS[level] for q in batch)
        assert all(len(q.ground_truth["faults"]) == len(q.labels) for q in batch)


def test_every_graph_differs_from_the_public_one_and_the_table_states_it(
    pack_queries: list[Query],
) -> None:
    public_prompt = APP.generate(1, 0)[0].prompt
    shapes = {q.ground_truth["variant"]["shape"] for q in pack_queries}
    assert shapes == {"retire-two", "add-two", "swap", "reroute"}
    for query in pack_queries:
        edges = _edges(query.ground_truth)
        assert edges != manifests.expected_edges()
        assert query.prompt != public_prompt and "Intended connectivity" not in query.prompt
        rows = {tuple(cell.strip() for cell in line.strip("|").split("|"))
                for line in query.prompt.splitlines() if line.startswith("| ")}
        assert rows - {("caller", "callee", "port")} == {
            (s, d, f"{p.split('/')[1]}/TCP") for s, d, p in edges}


def test_the_healthy_set_is_the_call_per_policy_layout_and_realises_the_graph(
    pack_queries: list[Query],
) -> None:
    public = manifests.healthy_policies()
    for query in pack_queries:
        truth = query.ground_truth
        healthy = {**public, **truth["baseline"], **truth["repair"]}
        assert model_matrix(healthy) == _edges(truth), query.label
        assert len(healthy) <= MAX_POLICIES
        # every public name but default-deny is rewritten; one call policy per intended call
        assert set(public) - set(truth["repair"]) == {manifests.DENY_ALL}
        calls = sorted(n for n in healthy if n.startswith("call-"))
        assert calls == sorted(f"call-{s}-to-{d}" for s, d, _ in _edges(truth))
        for service in manifests.SERVICES:
            assert healthy[service]["spec"]["policyTypes"] == ["Egress"]
            assert "ingress" not in healthy[service]["spec"]


def test_every_fault_is_visible_and_the_oracle_restores_what_the_scripted_agent_does_not(
    pack_queries: list[Query],
) -> None:
    public = manifests.healthy_policies()
    for query in pack_queries:
        truth = query.ground_truth
        expected = _edges(truth)
        start = _start(truth)
        assert start == truth["policies"], query.label
        assert sorted(map(list, model_matrix(start))) == truth["initial_allowed"]
        assert model_matrix(start) != expected
        healthy = dict(start, **truth["repair"])
        for fault in truth["faults"]:
            alone = dict(healthy, **{fault["policy"]: truth["policies"][fault["policy"]]})
            assert model_matrix(alone) != expected, (query.label, fault)
        assert model_matrix(healthy) == expected  # the oracle's one apply
        # the scripted agent: apply the public set, then delete every non-public policy
        assert model_matrix(dict(start, **public)) != expected
        assert model_matrix(public) != expected


@pytest.fixture(scope="module")
def cluster_app(cluster: Cluster) -> K8sApp:
    return K8sApp(cluster_config=cluster.config, healthy_share=0.0)


@pytest.mark.k8s
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_on_the_cluster_the_oracle_solves_the_pack_and_null_and_scripted_do_not(
    cluster_app: K8sApp, pack: VariantPack
) -> None:
    """One query per level: the oracle correct and safe, the null agent not correct (and
    safe); the scripted agent's public play solves no level-2 or level-3 query (the model-only
    test above covers every fault kind; check_pack runs the full sample)."""
    queries = [q for level in (1, 2, 3) for q in pack.generate(cluster_app, SEED, [0], level)]
    for query in queries:
        oracle = play_reference(cluster_app, query, "oracle")
        assert oracle.correct and oracle.safe, (query.label, query.ground_truth["variant"],
                                                oracle.failure, oracle.details)
        null = play_reference(cluster_app, query, "null")
        assert not null.correct and null.safe, query.label
    hard = [q for q in queries if q.level > 1]
    verdicts = [play_reference(cluster_app, q, "scripted") for q in hard]
    assert not any(v.correct and v.safe for v in verdicts), [v.failure for v in verdicts]
