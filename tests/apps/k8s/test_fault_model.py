"""The judge's model equals network-config-analyzer on every Table 6 fault combination.

The episodes cross-check the measured matrix against the model after set-up and after every
step (test_app_episodes: the oracle over all 15 labels with zero disagreements), so measured ==
model there; this test closes the triangle with the independent analyser: for three seeded
queries of every label combination (and the healthy set), nca 2.1.0 and
:class:`apps.k8s.cluster.policy_model.PolicyModel` allow exactly the same cells of the probe
plan, and the query's recorded ``initial_allowed`` is that answer. No cluster needed.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from apps.k8s import manifests
from apps.k8s.cluster.nca_oracle import ensure_nca_venv, nca_allowed_ports
from apps.k8s.queries import LEVEL_LABELS, model_matrix, sample_ground_truth
from tests.conftest import require

pytestmark = [pytest.mark.slow]

NAMESPACE = "ob"
SEEDS_PER_COMBINATION = 3


def _world(world_id: str, policies: dict[str, Any]) -> dict[str, Any]:
    """Online Boutique (one pod per service, made-up pod IPs) with ``policies``, in nca's
    input shape."""
    pods = []
    for i, service in enumerate(manifests.SERVICES):
        tmpl = manifests.deployment(service)["spec"]["template"]
        pods.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": service, "namespace": NAMESPACE,
                         "labels": tmpl["metadata"]["labels"]},
            "spec": {"containers": tmpl["spec"]["containers"]},
            "status": {"podIP": f"10.244.9.{i + 1}", "hostIP": "10.250.0.2",
                       "phase": "Running"},
        })
    return {
        "id": world_id,
        "pods": {"apiVersion": "v1", "kind": "PodList", "items": pods},
        "namespaces": {"apiVersion": "v1", "kind": "NamespaceList", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {
                "name": NAMESPACE, "labels": {"kubernetes.io/metadata.name": NAMESPACE}}}]},
        "policies": {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicyList",
                     "items": [{**p, "metadata": {**p["metadata"], "namespace": NAMESPACE}}
                               for p in policies.values()]},
    }  # fmt: skip


def _nca_cells(result: dict[str, dict[str, list[str]]]) -> set[tuple[str, str, str]]:
    """nca's allowed cells restricted to the probe plan, keyed by service."""
    plan = set(manifests.probe_plan())
    cells = set()
    for src, row in result.items():
        for dst, ports in row.items():
            for port in ports:
                cell = (src.split("/", 1)[1], dst.split("/", 1)[1], port)
                if cell in plan:
                    cells.add(cell)
    return cells


def test_model_equals_nca_on_every_fault_combination() -> None:
    try:
        nca_python = ensure_nca_venv()
    except Exception as exc:  # noqa: BLE001 - reported through require (fails under CI)
        require(False, f"network-config-analyzer not installable: {exc}")
        raise
    cases: dict[str, tuple[dict[str, Any], set[tuple[str, str, str]]]] = {
        "healthy": (manifests.healthy_policies(), manifests.expected_edges()),
    }
    combinations = [c for combos in LEVEL_LABELS.values() for c in combos]
    assert len(combinations) == 15
    for labels in combinations:
        for seed in range(SEEDS_PER_COMBINATION):
            truth = sample_ground_truth(labels, random.Random(f"{'+'.join(labels)}/{seed}"))
            initial = {tuple(c) for c in truth["initial_allowed"]}
            assert initial != manifests.expected_edges()  # every query starts with a mismatch
            cases[f"{'-'.join(labels).lower()}-{seed}"] = (truth["policies"], initial)
    answers = nca_allowed_ports([_world(k, p) for k, (p, _) in cases.items()], python=nca_python)
    wrong = []
    for key, (policies, recorded) in cases.items():
        nca = _nca_cells(answers[key])
        model = model_matrix(policies)
        if not (nca == model == recorded):
            wrong.append((key, sorted(nca ^ model), sorted(model ^ recorded)))
    assert not wrong, wrong[:5]
