"""The judge's cross-check for ``k8s`` episodes.

After set-up and after every step that changed pods or policies, the episode compares the
matrix it measured by probing with the matrix the exact NetworkPolicy model implies for the
same pods (:func:`apps.k8s.cluster.crosscheck.cross_check`, over
:class:`apps.k8s.cluster.policy_model.PolicyModel` — the model the cluster's enforcer is
compiled from). A disagreement means the dataplane does not enforce the policies the API
server holds (an enforcer bug, a foreign firewall rule, or an existing cluster whose CNI
enforces differently): the episode ends as an infrastructure failure
(:class:`CrossCheckError`, an :class:`~evaluator.app.EmulatorError`) carrying both matrices —
never as the agent's fault. The runner retries such an episode and then records it under the
run's ``infrastructure_failures`` (:mod:`evaluator.evaluation`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evaluator.app import EmulatorError
from kubernetes import client

from apps.k8s.cluster.config import ClusterConfig
from apps.k8s.cluster.crosscheck import CrossCheckResult, cross_check
from apps.k8s.cluster.prober import ConnectivityMatrix, PodEndpoint

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


def _word(value: bool | None) -> str:
    return "missing" if value is None else ("allowed" if value else "blocked")


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
