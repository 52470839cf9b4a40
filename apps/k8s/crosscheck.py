"""The judge's cross-check for ``k8s`` episodes (issue 12 item 2).

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

from collections.abc import Sequence
from typing import Any

from evaluator.app import EmulatorError
from kubernetes import client

from apps.k8s.cluster.config import ClusterConfig
from apps.k8s.cluster.crosscheck import CrossCheckResult, cross_check
from apps.k8s.cluster.prober import ConnectivityMatrix, PodEndpoint

SHOWN_DISAGREEMENTS = 10
"""Disagreements written into the error message (all of them are in ``details``)."""


class CrossCheckError(EmulatorError):
    """Measured connectivity differs from what the policies imply (infrastructure failure).

    Attributes:
        details: :meth:`CrossCheckResult.to_dict` — ``{"agrees": False, "expected":
            matrix, "measured": matrix, "disagreements": [{"src", "dst", "port", "expected",
            "measured"}, ...]}`` with matrices ``{"ns/src": {"ns/dst": {"TCP/80": bool}}}``.
    """

    def __init__(self, message: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.details = details


def _allowed_cells(matrix: ConnectivityMatrix) -> list[str]:
    """``src>dst:PROTO/port`` for every allowed cell, pod names without the namespace."""
    def short(key: str) -> str:
        return key.rsplit("/", 1)[-1]

    return [f"{short(s)}>{short(d)}:{p}" for s, row in sorted(matrix.items())
            for d, ports in sorted(row.items()) for p, ok in sorted(ports.items()) if ok]


def describe(result: CrossCheckResult, namespace: str) -> str:
    """One message with the disagreements first, then both matrices as their allowed cells
    (the error text the run's report keeps, so the most telling part comes first)."""
    shown = [d.describe() for d in result.disagreements[:SHOWN_DISAGREEMENTS]]
    more = len(result.disagreements) - len(shown)
    return (
        f"cross-check failed in {namespace}: {len(result.disagreements)} cell(s) where the "
        f"dataplane disagrees with the policies: {'; '.join(shown)}"
        + (f"; and {more} more" if more > 0 else "")
        + f". Expected allowed: {_allowed_cells(result.expected)}."
        + f" Measured allowed: {_allowed_cells(result.measured)}."
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
        raise CrossCheckError(describe(result, namespace), result.to_dict())
    return result
