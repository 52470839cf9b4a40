"""Known kube-router v2.10.0 divergences from Kubernetes semantics (docs/k8s-cluster.md).

Each test states the correct Kubernetes behaviour and is marked ``xfail(strict=True)``: it fails
today because of the upstream bug, and the suite turns red the day a kube-router upgrade fixes
it, so the exclusions in ``tests/apps/k8s/policygen.py`` can be lifted.
"""

from __future__ import annotations

import json

import pytest

from apps.k8s.cluster.control_plane import Cluster
from apps.k8s.cluster.prober import list_pod_endpoints, measure_matrix
from apps.k8s.cluster.sync import wait_pods_ready
from tests.apps.k8s.conftest import kubectl

pytestmark = [pytest.mark.k8s, pytest.mark.root]


@pytest.mark.xfail(strict=True, reason="kube-router runs ingress and egress rules of a pod's "
                   "policies in one chain for both directions (k3s-io/k3s#2390 class)")
def test_ingress_rule_does_not_open_egress_of_the_same_pods(cluster: Cluster) -> None:
    ns = "divergence-crosstalk"
    kc = cluster.config.admin_kubeconfig
    cluster.ensure_namespace(ns)
    try:
        for name in ("c0", "c1"):
            kubectl("run", name, "-n", ns, "--image=example/x", "--port=80", "--labels=app=c",
                    kubeconfig=kc)
        policy = {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "p"},
            "spec": {"podSelector": {"matchLabels": {"app": "c"}},
                     "policyTypes": ["Ingress", "Egress"],
                     "ingress": [{}],
                     "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "b"}}}]}]},
        }
        kubectl("apply", "-n", ns, "-f", "-", kubeconfig=kc, stdin=json.dumps(policy))
        wait_pods_ready(cluster.api_client(), [ns], timeout_s=60)
        cluster.wait_dataplane([ns], timeout_s=30)
        pods = list_pod_endpoints(cluster.api_client(), [ns], cluster.config)
        matrix = measure_matrix(pods)
        # Kubernetes: c0's egress only reaches app=b pods, so c0 -> c1 is blocked.
        assert matrix[f"{ns}/c0"][f"{ns}/c1"] == {"TCP/80": False}
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", kubeconfig=kc)
