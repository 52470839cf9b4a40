"""Pods as network namespaces, real listeners, NetworkPolicy enforcement, the barrier, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from apps.k8s.cluster import netns
from apps.k8s.cluster.control_plane import REPO_ROOT, Cluster
from apps.k8s.cluster.prober import (
    PodEndpoint,
    Probe,
    list_pod_endpoints,
    measure_matrix,
    probe_once,
)
from apps.k8s.cluster.rest import KubeRest, resource_path
from apps.k8s.cluster.sync import wait_pods_ready
from tests.apps.k8s.conftest import kubectl

pytestmark = [pytest.mark.k8s, pytest.mark.root]

NS = "dataplane-test"
Pods = dict[str, PodEndpoint]
PODS = """
apiVersion: v1
kind: Pod
metadata: {name: client, labels: {role: client}}
spec: {containers: [{name: c, image: example/client}]}
---
apiVersion: v1
kind: Pod
metadata: {name: other, labels: {role: other}}
spec: {containers: [{name: c, image: example/other}]}
---
apiVersion: v1
kind: Pod
metadata: {name: server, labels: {role: server}}
spec:
  containers:
  - name: c
    image: example/server
    ports:
    - {containerPort: 8080, protocol: TCP}
    - {containerPort: 5353, protocol: UDP}
"""


@pytest.fixture(scope="module")
def pods(cluster: Cluster) -> Iterator[Pods]:
    """Namespace with client, other and server pods; returns endpoints by name."""
    cluster.ensure_namespace(NS)
    kubectl("apply", "-n", NS, "-f", "-", kubeconfig=cluster.config.admin_kubeconfig,
            stdin=PODS)
    wait_pods_ready(cluster.api_client(), [NS], timeout_s=60)
    endpoints = {e.name: e for e in list_pod_endpoints(cluster.api_client(), [NS],
                                                      cluster.config)}
    yield endpoints
    kubectl("delete", "namespace", NS, "--wait=false",
            kubeconfig=cluster.config.admin_kubeconfig)


def _allowed(cluster: Cluster, src: str, port: str) -> bool:
    eps = list_pod_endpoints(cluster.api_client(), [NS], cluster.config)
    by_name = {e.name: e for e in eps}
    matrix = measure_matrix([by_name["server"]], sources=[by_name[src]])
    return matrix[f"{NS}/{src}"][f"{NS}/server"][port]


def test_pod_is_a_network_namespace_with_its_ip(cluster: Cluster, pods: Pods) -> None:
    server = pods["server"]
    assert netns.netns_exists(server.netns)
    addr = netns.run_ip("-4", "-o", "addr", "show", "dev", "eth0", netns=server.netns)
    assert f"{server.ip}/32" in addr
    assert len({e.ip for e in pods.values()}) == len(pods)


def test_listeners_answer_tcp_and_udp_without_policy(cluster: Cluster, pods: Pods) -> None:
    client, server = pods["client"], pods["server"]
    assert probe_once(Probe(client.netns, server.ip, 8080, "TCP"))
    assert probe_once(Probe(client.netns, server.ip, 5353, "UDP"))
    # an undeclared port has no listener: refused, so a probe can fail
    assert not probe_once(Probe(client.netns, server.ip, 8081, "TCP"))


def test_policy_is_enforced_and_barrier_waits_for_it(cluster: Cluster, pods: Pods) -> None:
    kc = cluster.config.admin_kubeconfig
    policy = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "server-from-client"},
        "spec": {"podSelector": {"matchLabels": {"role": "server"}},
                 "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                              "ports": [{"protocol": "TCP", "port": 8080}]}]},
    }
    kubectl("apply", "-n", NS, "-f", "-", kubeconfig=kc, stdin=json.dumps(policy))
    waited_s = cluster.wait_dataplane([NS], timeout_s=30)
    assert waited_s < 30
    assert _allowed(cluster, "client", "TCP/8080")
    assert not _allowed(cluster, "client", "UDP/5353")
    assert not _allowed(cluster, "other", "TCP/8080")
    # relabelling a pod moves it in or out of the policy once the dataplane caught up
    kubectl("label", "pod", "other", "-n", NS, "role=client", "--overwrite", kubeconfig=kc)
    cluster.wait_dataplane([NS], timeout_s=30)
    assert _allowed(cluster, "other", "TCP/8080")
    kubectl("delete", "networkpolicy", "server-from-client", "-n", NS, kubeconfig=kc)
    cluster.wait_dataplane([NS], timeout_s=30)
    assert _allowed(cluster, "client", "UDP/5353")


def test_k8s_connectivity_command_prints_the_matrix(cluster: Cluster, pods: Pods) -> None:
    out = subprocess.run(
        [sys.executable, "manage.py", "k8s_connectivity", "--namespace", NS, "--json"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True,
    )
    data = json.loads(out.stdout)
    assert data["namespace"] == NS
    assert set(data["pods"]) == {"client", "other", "server"}
    assert data["matrix"]["client"]["server"] == {"TCP/8080": True, "UDP/5353": True}
    assert set(data["matrix"]["client"]) == {"server"}  # pods without ports are no targets
    assert data["probes"] == 4  # two sources (client, other) x two server ports


def test_deployment_scaling_and_deletion_finish(cluster: Cluster, pods: Pods) -> None:
    kc = cluster.config.admin_kubeconfig
    rest = KubeRest(cluster.api_client())
    kubectl("create", "deployment", "scale", "-n", NS, "--image=example/x", "--replicas=3",
            "--port=80", kubeconfig=kc)
    wait_pods_ready(cluster.api_client(), [NS], timeout_s=60)
    pods_now = rest.get(resource_path("pods", NS), labelSelector="app=scale")["items"]
    assert len(pods_now) == 3
    namespaces = {cluster.config.pod_netns_prefix + p["metadata"]["uid"] for p in pods_now}
    assert all(netns.netns_exists(n) for n in namespaces)
    kubectl("scale", "deployment", "scale", "-n", NS, "--replicas=1", kubeconfig=kc)
    wait_pods_ready(cluster.api_client(), [NS], timeout_s=60)
    # graceful deletion is finished by the node agent, so kubectl delete returns
    kubectl("delete", "deployment", "scale", "-n", NS, "--wait=true", "--timeout=60s",
            kubeconfig=kc)
    deadline = time.monotonic() + 60
    while rest.get(resource_path("pods", NS), labelSelector="app=scale")["items"] or any(
        netns.netns_exists(n) for n in namespaces
    ):
        assert time.monotonic() < deadline, "pods or their namespaces were not removed"
        time.sleep(0.1)
