"""The judge's cross-check: the matrix the namespace's policies imply, from an independent
analyser, compared with the measured one after every step (issue 12 item 2).

Until the enforcement work publishes its own cross-check function, this module asks
network-config-analyzer (nca 2.1.0, :mod:`apps.k8s.cluster.nca_oracle`) directly; the one
function :func:`policy_matrix` is the seam to re-point.

A disagreement is never the agent's fault: it means the dataplane enforces differently from
the policies (a cluster bug or a divergence, docs/k8s-cluster.md) and ends the episode as an
infrastructure failure (:class:`CrossCheckError`).
"""

from __future__ import annotations

from typing import Any

from evaluator.app import EmulatorError

from apps.k8s.cluster.nca_oracle import nca_allowed_ports
from apps.k8s.cluster.rest import KubeRest, resource_path

PodMatrix = dict[str, dict[str, list[str]]]
"""``{"ns/src": {"ns/dst": ["TCP/80", ...allowed...]}}``."""


class CrossCheckError(EmulatorError):
    """Measured connectivity differs from what the policies imply (infrastructure failure).

    Attributes:
        details: ``{"measured": PodMatrix, "policies_imply": PodMatrix, "only_measured":
            [...], "only_policies": [...]}`` (pod keys ``ns/name``).
    """

    def __init__(self, message: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.details = details


def snapshot(rest: KubeRest, namespace: str) -> dict[str, Any]:
    """The namespace as stored by the API server, in the analyser's input shape."""
    ns_obj = rest.get(resource_path("namespaces", name=namespace))
    pods = []
    for pod in rest.get(resource_path("pods", namespace))["items"]:
        status = pod.get("status") or {}
        if status.get("phase") != "Running" or not status.get("podIP"):
            continue
        if pod["metadata"].get("deletionTimestamp"):
            continue
        pods.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {k: pod["metadata"][k] for k in ("name", "namespace", "labels")
                         if k in pod["metadata"]},
            "spec": {"containers": pod["spec"]["containers"]},
            "status": {k: status[k] for k in ("podIP", "hostIP", "phase") if k in status},
        })
    policies = [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": pol["metadata"]["name"], "namespace": namespace},
         "spec": pol["spec"]}
        for pol in rest.get(resource_path("networkpolicies", namespace))["items"]
    ]
    return {
        "id": namespace,
        "pods": {"apiVersion": "v1", "kind": "PodList", "items": pods},
        "namespaces": {"apiVersion": "v1", "kind": "NamespaceList", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {
                "name": namespace, "labels": ns_obj["metadata"].get("labels", {})}}]},
        "policies": {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicyList",
                     "items": policies},
    }  # fmt: skip


def policy_matrix(world: dict[str, Any]) -> PodMatrix:
    """Allowed probed ports per ordered pod pair that the policies of ``world`` imply.

    Raises:
        EmulatorError: the analyser failed.
    """
    try:
        result = nca_allowed_ports([world])
    except Exception as exc:  # noqa: BLE001 - any analyser failure is an infrastructure one
        raise EmulatorError(f"policy analyser failed: {exc}") from exc
    return result[world["id"]]


def compare(measured: dict[str, dict[str, dict[str, bool]]], world: dict[str, Any]) -> int:
    """Cross-check ``measured`` (the prober's matrix) against the policies of ``world``.

    Returns:
        Number of ordered pod pairs compared.

    Raises:
        CrossCheckError: the two disagree on some pod pair and port (both matrices attached).
    """
    implied = policy_matrix(world)
    measured_allowed: PodMatrix = {
        src: {dst: sorted(k for k, ok in ports.items() if ok) for dst, ports in row.items()}
        for src, row in measured.items()
    }
    only_measured, only_policies = [], []
    pairs = 0
    for src, row in measured.items():
        for dst, ports in row.items():
            pairs += 1
            want = set(implied.get(src, {}).get(dst, []))
            for key, ok in sorted(ports.items()):
                if ok and key not in want:
                    only_measured.append(f"{src} -> {dst}:{key}")
                if not ok and key in want:
                    only_policies.append(f"{src} -> {dst}:{key}")
    if only_measured or only_policies:
        details = {
            "measured": measured_allowed,
            "policies_imply": implied,
            "only_measured": only_measured,
            "only_policies": only_policies,
        }
        raise CrossCheckError(
            f"cross-check failed in {world['id']}: the dataplane allows "
            f"{len(only_measured)} connection(s) the policies deny and blocks "
            f"{len(only_policies)} they allow; first: "
            f"{(only_measured + only_policies)[:5]}; measured={measured_allowed}; "
            f"policies imply={implied}",
            details,
        )
    return pairs
