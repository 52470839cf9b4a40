"""Differential test: measured connectivity (our enforcer) == network-config-analyzer's, and the
judge's model (apps/k8s/cluster/policy_model.py, which the enforcer is compiled from) == nca too.

The generator (policygen) no longer avoids kube-router's old divergences 2-4: egress rules with
``to`` on pods that ingress rules admit, one port name with different numbers on different
pods, named ports in egress rules without ``to``. Its ipBlocks cover pod IPs; nca is asked with
ipBlocks translated into pod peers (:func:`apps.k8s.cluster.nca_oracle.ipblocks_as_pod_peers`),
the one documented difference between nca and the Kubernetes reading (docs/k8s.md, "ipBlock").

100 random policy sets in CI (2 rounds x 50 worlds applied side by side; see policygen;
NETARENA_DIFF_ROUNDS and NETARENA_DIFF_WORLDS run more). Worlds are
independent for the pairs we compare: a policy only selects pods of its own namespace, and a
pair's connectivity depends only on policies selecting its two pods and on their labels, so
other worlds matching a namespaceSelector cannot change it.
"""

from __future__ import annotations

import json
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from apps.k8s.cluster.control_plane import Cluster
from apps.k8s.cluster.nca_oracle import ensure_nca_venv, nca_allowed_ports
from apps.k8s.cluster.policy_model import PolicyModel, pod_from_api
from apps.k8s.cluster.prober import PodEndpoint, list_pod_endpoints, measure_matrix
from apps.k8s.cluster.rest import KubeRest, resource_path
from apps.k8s.cluster.sync import wait_pods_ready
from tests.apps.k8s.policygen import (
    NS_LABELS,
    POD_LABELS,
    pod_manifests,
    random_ns_labels,
    random_pod_labels,
    random_policies,
    world_namespaces,
)

pytestmark = [pytest.mark.k8s, pytest.mark.root, pytest.mark.slow]

WORLDS = int(os.environ.get("NETARENA_DIFF_WORLDS", "50"))
ROUNDS = int(os.environ.get("NETARENA_DIFF_ROUNDS", "2"))
SEED = int(os.environ.get("NETARENA_DIFF_SEED", "20261121"))


def _world_ids() -> list[str]:
    return [f"diff{i:02d}" for i in range(WORLDS)]


def _setup_worlds(cluster: Cluster, rest: KubeRest, rng: random.Random) -> None:
    def create_world(world: str) -> None:
        for ns in world_namespaces(world):
            cluster.ensure_namespace(ns, timeout_s=60)
        for pod in pods_by_world[world]:
            rest.create_or_keep(resource_path("pods", pod["metadata"]["namespace"]), pod)

    pods_by_world = {w: pod_manifests(w, rng) for w in _world_ids()}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create_world, _world_ids()))


def _apply_round(rest: KubeRest, rng: random.Random) -> None:
    """Relabel pods and namespaces and replace every world's policies."""
    plan = []
    for world in _world_ids():
        ns_labels = {ns: random_ns_labels(rng) for ns in world_namespaces(world)}
        pod_labels = {
            (ns, f"p{i}"): random_pod_labels(rng) for ns in world_namespaces(world)
            for i in range(3)
        }
        plan.append((world, ns_labels, pod_labels, random_policies(world, rng)))

    def apply(item: tuple[str, Any, Any, list[dict[str, Any]]]) -> None:
        world, ns_labels, pod_labels, policies = item
        for ns, labels in ns_labels.items():
            patch = {k: labels.get(k) for k in NS_LABELS}
            rest.patch(resource_path("namespaces", name=ns), {"metadata": {"labels": patch}})
        for (ns, name), labels in pod_labels.items():
            patch = {k: labels.get(k) for k in POD_LABELS}
            rest.patch(resource_path("pods", ns, name), {"metadata": {"labels": patch}})
        for ns in world_namespaces(world):
            rest.delete(resource_path("networkpolicies", ns))
        for policy in policies:
            rest.create(resource_path("networkpolicies", policy["metadata"]["namespace"]), policy)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(apply, plan))


def _nca_world(rest: KubeRest, world: str) -> dict[str, Any]:
    """The world as stored by the API server (defaulted policyTypes, real pod IPs)."""
    pods, namespaces, policies = [], [], []
    for ns in world_namespaces(world):
        ns_obj = rest.get(resource_path("namespaces", name=ns))
        namespaces.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": ns, "labels": ns_obj["metadata"].get("labels", {})}})
        for pod in rest.get(resource_path("pods", ns))["items"]:
            pods.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {k: pod["metadata"][k] for k in ("name", "namespace", "labels")
                             if k in pod["metadata"]},
                "spec": {"containers": pod["spec"]["containers"]},
                "status": {k: pod["status"][k] for k in ("podIP", "hostIP", "phase")},
            })
        for pol in rest.get(resource_path("networkpolicies", ns))["items"]:
            policies.append({
                "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": pol["metadata"]["name"], "namespace": ns},
                "spec": pol["spec"],
            })
    return {
        "id": world,
        "pods": {"apiVersion": "v1", "kind": "PodList", "items": pods},
        "namespaces": {"apiVersion": "v1", "kind": "NamespaceList", "items": namespaces},
        "policies": {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicyList",
                     "items": policies},
    }


def _describe(world: dict[str, Any]) -> str:
    """One line per pod, namespace and policy: enough to replay a mismatch by hand."""
    lines = [""]
    for ns in world["namespaces"]["items"]:
        lines.append(f"  ns {ns['metadata']['name']} {ns['metadata'].get('labels')}")
    for pod in world["pods"]["items"]:
        ports = {p["name"]: f"{p['protocol']}/{p['containerPort']}"
                 for p in pod["spec"]["containers"][0]["ports"]}
        lines.append(f"  pod {pod['metadata']['namespace']}/{pod['metadata']['name']} "
                     f"{pod['metadata'].get('labels')} {ports} {pod['status']['podIP']}")
    for pol in world["policies"]["items"]:
        lines.append(f"  policy {pol['metadata']['namespace']}/{pol['metadata']['name']} "
                     f"{pol['spec']}")
    return "\n".join(lines)


def _measure(cluster: Cluster, rest: KubeRest) -> dict[str, dict[str, dict[str, list[str]]]]:
    endpoints = list_pod_endpoints(
        cluster.api_client(),
        [ns for w in _world_ids() for ns in world_namespaces(w)],
        cluster.config,
    )
    by_world: dict[str, list[PodEndpoint]] = {}
    for ep in endpoints:
        by_world.setdefault(ep.namespace.rsplit("-", 1)[0], []).append(ep)
    result = {}
    for world, eps in by_world.items():
        assert len(eps) == 6, f"{world}: expected 6 running pods, got {[e.key for e in eps]}"
        matrix = measure_matrix(eps, timeout_s=1.0, workers=96)
        result[world] = {
            src: {dst: sorted(p for p, ok in ports.items() if ok) for dst, ports in row.items()}
            for src, row in matrix.items()
        }
    return result


def _dump(worlds: list[dict[str, Any]], round_no: int) -> None:
    """Write the worlds of a round with a mismatch as JSON into ``NETARENA_DIFF_DUMP`` (if
    set): the exact input of nca, for replay."""
    target = os.environ.get("NETARENA_DIFF_DUMP")
    if target:
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, f"round{round_no}.json"), "w") as out:
            json.dump(worlds, out, indent=1)


def _model(world: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """Allowed ports per pod pair according to the judge's model, from nca's own input."""
    pods = [p for p in map(pod_from_api, world["pods"]["items"]) if p is not None]
    ns_labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {}
                 for n in world["namespaces"]["items"]}
    matrix = PolicyModel(pods, ns_labels, world["policies"]["items"]).matrix()
    return {src: {dst: sorted(p for p, ok in ports.items() if ok) for dst, ports in row.items()}
            for src, row in matrix.items()}


def test_measured_connectivity_equals_nca(cluster: Cluster) -> None:
    nca_python = ensure_nca_venv()
    rest = KubeRest(cluster.api_client())
    rng = random.Random(SEED)
    namespaces = [ns for w in _world_ids() for ns in world_namespaces(w)]
    started = time.monotonic()
    _setup_worlds(cluster, rest, rng)
    wait_pods_ready(cluster.api_client(), namespaces, timeout_s=180)
    mismatches: list[str] = []
    checked_sets = 0
    checked_pairs = 0
    allowed_total = 0
    try:
        for round_no in range(ROUNDS):
            _apply_round(rest, rng)
            cluster.wait_dataplane(timeout_s=120)
            measured = _measure(cluster, rest)
            worlds = [_nca_world(rest, w) for w in _world_ids()]
            expected = nca_allowed_ports(worlds, python=nca_python)
            by_id = {w["id"]: w for w in worlds}
            for world in _world_ids():
                checked_sets += 1
                model = _model(by_id[world])
                for src, row in expected[world].items():
                    for dst, want in row.items():
                        got = measured[world][src][dst]
                        modelled = model[src][dst]
                        checked_pairs += 1
                        allowed_total += len(got)
                        if got != want or modelled != want:
                            _dump(worlds, round_no)
                            mismatches.append(
                                f"round {round_no} {src} -> {dst}: measured {got}, "
                                f"model {modelled}, nca {want}; world {_describe(by_id[world])}"
                            )
    finally:
        if mismatches and os.environ.get("NETARENA_DIFF_KEEP"):
            namespaces = []  # leave them for inspection
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda ns: rest.delete(resource_path("namespaces", name=ns)),
                          namespaces))
        # Wait until the node agent has torn the 300 pods down, so that the tests after this
        # one do not queue their pods behind that work.
        deadline = time.monotonic() + 300
        while namespaces and time.monotonic() < deadline:
            alive = {n["metadata"]["namespace"]
                     for n in rest.get("/api/v1/pods")["items"]} & set(namespaces)
            if not alive:
                break
            time.sleep(0.5)
    elapsed = time.monotonic() - started
    print(f"differential: {checked_sets} policy sets, {checked_pairs} pod pairs, "
          f"{allowed_total} allowed ports, {len(mismatches)} mismatches, {elapsed:.1f} s")
    assert checked_sets >= WORLDS * ROUNDS
    # the generator must produce both outcomes, or equality would prove little
    assert 0 < allowed_total < checked_pairs * 3
    assert not mismatches, "\n".join(mismatches[:20])
