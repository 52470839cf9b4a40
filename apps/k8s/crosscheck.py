"""The judge's cross-check for ``k8s`` episodes: measured connectivity against the policies.

After set-up and after every step that changed pods or policies, the episode measures the
matrix by probing (:func:`apps.k8s.cluster.prober.measure_matrix`) and :func:`check` compares
it with the matrix the exact NetworkPolicy model implies for the same pods
(:func:`expected_matrix`: :class:`apps.k8s.cluster.policy_model.PolicyModel` over the Pods,
Namespaces and NetworkPolicies read from the API, :func:`apps.k8s.cluster.enforcer.load_model`
-- the same reading the cluster's enforcer compiles). A disagreement means the dataplane does
not enforce the policies the API server holds (an enforcer bug, a foreign firewall rule, or an
existing cluster whose CNI treats ipBlocks or named ports differently): the episode ends as an
infrastructure failure (:class:`CrossCheckError`, an :class:`~evaluator.app.EmulatorError`)
carrying both matrices -- never as the agent's fault. The runner retries such an episode and
then records it under the run's ``infrastructure_failures`` (:mod:`evaluator.evaluation`).

Two layers: :func:`cross_check` / :func:`expected_matrix` / :func:`compare` work on any cluster
(an existing one by kubeconfig too, docs/k8s-cluster.md) and return a
:class:`CrossCheckResult`; :func:`check` is the episode's call, which turns a disagreement into
:class:`CrossCheckError` with a message that names the pods by service.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evaluator.app import EmulatorError
from kubernetes import client

from apps.k8s.cluster.config import ClusterConfig
from apps.k8s.cluster.enforcer import load_model
from apps.k8s.cluster.policy_model import Pod
from apps.k8s.cluster.prober import ConnectivityMatrix, PodEndpoint, list_pod_endpoints


def _word(value: bool | None) -> str:
    return "missing" if value is None else ("allowed" if value else "blocked")


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
        return (f"{self.src} -> {self.dst}:{self.port} "
                f"(expected {_word(self.expected)}, measured {_word(self.measured)})")


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


SHOWN_DISAGREEMENTS = 5
"""Disagreements spelled out in the error message (all of them are in ``details``)."""


class CrossCheckError(EmulatorError):
    """Measured connectivity differs from what the policies imply (infrastructure failure).

    Attributes:
        details: :meth:`CrossCheckResult.to_dict` — ``{"agrees": False, "expected":
            matrix, "measured": matrix, "disagreements": [{"src", "dst", "port", "expected",
            "measured"}, ...]}`` with matrices ``{"ns/src": {"ns/dst": {"TCP/80": bool}}}``.
    """

    #: the enforcer and the reference reading disagree: the judge may be wrong, so this is
    #: infrastructure even after the agent's write (evaluator.runner.agent_could_cause)
    judge_disagreement = True

    def __init__(self, message: str, details: dict[str, Any]) -> None:
        super().__init__(message, details=details)


def _allowed_by_source(matrix: ConnectivityMatrix, name: Callable[[str], str]) -> str:
    """The allowed cells grouped by source: ``src>dst:PROTO/port,dst:PROTO/port; ...``."""
    groups = []
    for src, row in sorted(matrix.items(), key=lambda item: name(item[0])):
        cells = [f"{name(d)}:{p}" for d, ports in sorted(row.items(), key=lambda i: name(i[0]))
                 for p, ok in sorted(ports.items()) if ok]
        if cells:
            groups.append(f"{name(src)}>{','.join(cells)}")
    return "; ".join(groups) or "nothing"


def describe(
    result: CrossCheckResult, namespace: str, names: Mapping[str, str] | None = None
) -> str:
    """One message: the disagreements first, then both matrices as their allowed cells grouped
    by source. The run's report keeps this text (cut at
    :data:`evaluator.types.INFRASTRUCTURE_ERROR_MAX_CHARS` characters), so the most telling
    part comes first and pods are named by service; the complete matrices are in
    :attr:`CrossCheckError.details`.

    Args:
        names: pod key (``ns/name``) -> short name, e.g. the pod's ``app`` label (default and
            empty entries: the pod name).
    """
    given = names or {}

    def name(key: str) -> str:
        return given.get(key) or key.rsplit("/", 1)[-1]

    shown = [f"{name(d.src)} -> {name(d.dst)}:{d.port} (expected {_word(d.expected)}, "
             f"measured {_word(d.measured)})"
             for d in result.disagreements[:SHOWN_DISAGREEMENTS]]
    more = len(result.disagreements) - len(shown)
    return (
        f"cross-check failed in {namespace}: {len(result.disagreements)} cell(s) where the "
        f"dataplane disagrees with the policies: {'; '.join(shown)}"
        + (f"; and {more} more" if more > 0 else "")
        + f". Expected allowed: {_allowed_by_source(result.expected, name)}."
        + f" Measured allowed: {_allowed_by_source(result.measured, name)}."
    )


def check(
    api: client.ApiClient,
    namespace: str,
    measured: ConnectivityMatrix,
    endpoints: Sequence[PodEndpoint],
    config: ClusterConfig | None = None,
) -> CrossCheckResult:
    """Cross-check ``measured`` (probed among ``endpoints``) against the exact model.

    Returns:
        The agreeing :class:`CrossCheckResult`.

    Raises:
        CrossCheckError: some cell disagrees (both matrices in ``details``).
        EmulatorError: the API server could not be read.
    """
    try:
        result = cross_check(api, namespace, measured, endpoints=endpoints, config=config)
    except Exception as exc:  # noqa: BLE001 - any failure to read the cluster is infrastructure
        raise EmulatorError(f"cross-check of {namespace} could not read the cluster: {exc}") \
            from exc
    if not result.agrees:
        names = {e.key: e.labels.get("app", "") for e in endpoints}
        raise CrossCheckError(describe(result, namespace, names), result.to_dict())
    return result
