"""The judge's cross-check: expected connectivity from the policies vs the measured matrix.

After every step the ``k8s`` application measures the matrix by probing
(:func:`apps.k8s.cluster.prober.measure_matrix`) and calls :func:`cross_check`. The expected
matrix comes from :class:`apps.k8s.cluster.policy_model.PolicyModel` over the Pods, Namespaces
and NetworkPolicies read from the API. A disagreement means the dataplane does not enforce
Kubernetes semantics as modelled (a stale or foreign enforcer, e.g. an existing cluster whose
CNI treats ipBlocks or named ports differently): an infrastructure failure, never the agent's.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from apps.k8s.cluster.config import ClusterConfig
from apps.k8s.cluster.policy_model import Pod, PolicyModel, pod_from_api
from apps.k8s.cluster.prober import ConnectivityMatrix, PodEndpoint, list_pod_endpoints
from apps.k8s.cluster.rest import KubeRest, resource_path


@dataclass(frozen=True)
class Disagreement:
    """One cell where expectation and measurement differ.

    ``src``/``dst``: ``namespace/name``; ``port``: ``"TCP/80"``; ``expected``/``measured``:
    allowed or not, ``None`` when the cell is missing on that side.
    """

    src: str
    dst: str
    port: str
    expected: bool | None
    measured: bool | None

    def describe(self) -> str:
        """``src -> dst:port (expected allowed, measured blocked)``."""
        def word(v: bool | None) -> str:
            return "missing" if v is None else ("allowed" if v else "blocked")
        return (f"{self.src} -> {self.dst}:{self.port} "
                f"(expected {word(self.expected)}, measured {word(self.measured)})")


@dataclass(frozen=True)
class CrossCheckResult:
    """Both matrices and the cells where they disagree (sorted by src, dst, port)."""

    expected: ConnectivityMatrix
    measured: ConnectivityMatrix
    disagreements: tuple[Disagreement, ...]

    @property
    def agrees(self) -> bool:
        """True when every cell agrees."""
        return not self.disagreements

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form for an infrastructure failure's details."""
        return {
            "agrees": self.agrees,
            "expected": self.expected,
            "measured": self.measured,
            "disagreements": [
                {"src": d.src, "dst": d.dst, "port": d.port, "expected": d.expected,
                 "measured": d.measured}
                for d in self.disagreements
            ],
        }


def _as_list(namespaces: str | Sequence[str]) -> list[str]:
    return [namespaces] if isinstance(namespaces, str) else list(namespaces)


def load_model(api: client.ApiClient, pod_cidr: str | None = None,
               config: ClusterConfig | None = None) -> PolicyModel:
    """A :class:`PolicyModel` of the whole cluster as the API server sees it now.

    Every namespace and pod is read, because a peer's ``namespaceSelector`` may select pods
    outside the episode's namespace. Raises ``kubernetes.client.rest.ApiException``.
    """
    cfg = config or ClusterConfig()
    rest = KubeRest(api)
    paths = (resource_path("namespaces"), "/api/v1/pods",
             "/apis/networking.k8s.io/v1/networkpolicies")
    with ThreadPoolExecutor(len(paths)) as pool:  # three independent consistent LISTs
        ns_items, pod_items, policies = (r["items"] for r in pool.map(rest.get, paths))
    namespaces = {ns["metadata"]["name"]: dict(ns["metadata"].get("labels") or {})
                  for ns in ns_items}
    pods = [p for p in (pod_from_api(item) for item in pod_items) if p]
    return PolicyModel(pods, namespaces, policies, pod_cidr or cfg.pod_cidr)


def _to_model(endpoints: Sequence[PodEndpoint]) -> list[Pod]:
    return [Pod(e.namespace, e.name, e.ip, dict(e.labels), e.ports) for e in endpoints]


def expected_matrix(
    api: client.ApiClient,
    namespaces: str | Sequence[str],
    *,
    endpoints: Sequence[PodEndpoint] | None = None,
    config: ClusterConfig | None = None,
    include_self: bool = False,
) -> ConnectivityMatrix:
    """Expected ``{src: {dst: {"PROTO/port": bool}}}`` among the pods of ``namespaces``.

    Args:
        endpoints: the pods that were probed (default: the running pods of ``namespaces``).
        include_self: also list a pod to itself (always allowed).

    Raises:
        kubernetes.client.rest.ApiException: the API server refused a list.
    """
    cfg = config or ClusterConfig()
    if endpoints is None:
        endpoints = list_pod_endpoints(api, _as_list(namespaces), cfg)
    model = load_model(api, config=cfg)
    pods = _to_model(endpoints)
    return model.matrix(pods, pods, include_self=include_self)


def compare(expected: ConnectivityMatrix, measured: ConnectivityMatrix) -> CrossCheckResult:
    """Cell-by-cell comparison over the union of both matrices' cells."""
    def cells(m: ConnectivityMatrix) -> dict[tuple[str, str, str], bool]:
        return {(s, d, p): v for s, row in m.items() for d, ports in row.items()
                for p, v in ports.items()}

    exp, got = cells(expected), cells(measured)
    diffs = tuple(
        Disagreement(s, d, p, exp.get((s, d, p)), got.get((s, d, p)))
        for s, d, p in sorted(set(exp) | set(got))
        if exp.get((s, d, p)) != got.get((s, d, p))
    )
    return CrossCheckResult(expected, measured, diffs)


def cross_check(
    api: client.ApiClient,
    namespaces: str | Sequence[str],
    measured: ConnectivityMatrix,
    *,
    endpoints: Sequence[PodEndpoint] | None = None,
    config: ClusterConfig | None = None,
) -> CrossCheckResult:
    """Compare ``measured`` with :func:`expected_matrix` of the same pods.

    Pass the ``endpoints`` that were probed so both sides cover the same pods; the expected
    matrix then has exactly the cells a :func:`measure_matrix` of them has.

    Raises:
        kubernetes.client.rest.ApiException: the API server refused a list.
    """
    expected = expected_matrix(api, namespaces, endpoints=endpoints, config=config)
    return compare(expected, measured)
