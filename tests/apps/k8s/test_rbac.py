"""Namespace-scoped credentials: each reaches its own namespace and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from apps.k8s.cluster.control_plane import Cluster
from tests.apps.k8s.conftest import kubectl

pytestmark = [pytest.mark.k8s, pytest.mark.root]

POLICY = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all}
spec: {podSelector: {}, policyTypes: [Ingress]}
"""


@pytest.fixture(scope="module")
def teams(cluster: Cluster) -> Iterator[dict[str, Path]]:
    """Namespaces team-a and team-b, each with its own minted kubeconfig."""
    admin = cluster.config.admin_kubeconfig
    configs = {}
    for ns in ("team-a", "team-b"):
        cluster.ensure_namespace(ns)
        kubectl("run", "app", "-n", ns, "--image=example/app", "--port=80", kubeconfig=admin)
        configs[ns] = cluster.mint_namespace_kubeconfig(ns)
    yield configs
    for ns in configs:
        kubectl("delete", "namespace", ns, "--wait=false", kubeconfig=admin)


def test_own_namespace_is_writable(teams: dict[str, Path]) -> None:
    kc = teams["team-a"]
    assert "app" in kubectl("get", "pods", kubeconfig=kc).stdout  # default namespace set
    kubectl("apply", "-f", "-", kubeconfig=kc, stdin=POLICY)
    assert "deny-all" in kubectl("get", "networkpolicies", "-n", "team-a", kubeconfig=kc).stdout
    kubectl("label", "pod", "app", "role=web", kubeconfig=kc)
    kubectl("delete", "networkpolicy", "deny-all", kubeconfig=kc)


def test_other_namespace_is_forbidden(teams: dict[str, Path]) -> None:
    kc = teams["team-a"]
    for args in (
        ("get", "pods", "-n", "team-b"),
        ("delete", "pod", "app", "-n", "team-b"),
        ("apply", "-n", "team-b", "-f", "-"),
    ):
        out = kubectl(*args, kubeconfig=kc, stdin=POLICY, check=False)
        assert out.returncode != 0
        assert "forbidden" in out.stderr.lower(), out.stderr
    assert kubectl("auth", "can-i", "create", "networkpolicies", "-n", "team-b",
                   kubeconfig=kc, check=False).stdout.strip() == "no"
    assert kubectl("auth", "can-i", "create", "networkpolicies", "-n", "team-a",
                   kubeconfig=kc).stdout.strip() == "yes"


def test_cluster_scope_and_rbac_are_forbidden(teams: dict[str, Path]) -> None:
    kc = teams["team-b"]
    for args in (("get", "nodes"), ("get", "namespaces"), ("get", "pods", "-A"),
                 ("create", "namespace", "escape"), ("get", "roles")):
        out = kubectl(*args, kubeconfig=kc, check=False)
        assert out.returncode != 0 and "forbidden" in out.stderr.lower(), (args, out.stderr)
