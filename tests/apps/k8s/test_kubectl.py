"""The real kubectl against the embedded cluster: read, write, three patch types, validation."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator

import pytest

from apps.k8s.cluster.control_plane import Cluster
from apps.k8s.cluster.sync import wait_pods_ready
from tests.apps.k8s.conftest import kubectl

pytestmark = [pytest.mark.k8s, pytest.mark.root]

NS = "kubectl-test"

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: main
        image: example/web:1
        ports: [{containerPort: 8080, name: http}]
      - name: sidecar
        image: example/sidecar:1
        ports: [{containerPort: 9090, name: metrics}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: http}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-ingress}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {role: client}}}]
    ports: [{port: 8080}]
"""


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster with namespace ``kubectl-test`` holding a Deployment, Service, policy."""
    kc = cluster.config.admin_kubeconfig
    cluster.ensure_namespace(NS)
    kubectl("apply", "-n", NS, "-f", "-", kubeconfig=kc, stdin=DEPLOYMENT)
    wait_pods_ready(cluster.api_client(), [NS], timeout_s=60)
    yield cluster
    kubectl("delete", "namespace", NS, "--wait=false", kubeconfig=kc)


def _get(cluster: Cluster, *args: str) -> dict:
    out = kubectl("get", "-n", NS, *args, "-o", "json", kubeconfig=cluster.config.admin_kubeconfig)
    return json.loads(out.stdout)


def test_version_reports_the_pinned_server(admin: Cluster) -> None:
    out = kubectl("version", "-o", "json", kubeconfig=admin.config.admin_kubeconfig)
    assert json.loads(out.stdout)["serverVersion"]["gitVersion"] == "v1.33.13"


def test_get_shows_deployment_ready_and_pods_running(admin: Cluster) -> None:
    kc = admin.config.admin_kubeconfig
    table = kubectl("get", "deployments", "-n", NS, kubeconfig=kc).stdout
    assert "web" in table and "2/2" in table
    pods = _get(admin, "pods", "-l", "app=web")["items"]
    assert len(pods) == 2
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        pod_net = ipaddress.ip_network(admin.config.pod_cidr)
        assert ipaddress.ip_address(pod["status"]["podIP"]) in pod_net
        assert pod["status"]["hostIP"] == admin.config.node_ip
        assert pod["spec"]["nodeName"] == admin.config.node_name
    wide = kubectl("get", "pods", "-n", NS, "-o", "wide", kubeconfig=kc).stdout
    assert "Running" in wide and admin.config.node_name in wide


def test_service_gets_cluster_ip_and_endpoints_from_controller_manager(admin: Cluster) -> None:
    svc = _get(admin, "service", "web")
    assert svc["spec"]["clusterIP"].startswith("10.96.")
    pod_ips = sorted(p["status"]["podIP"] for p in _get(admin, "pods", "-l", "app=web")["items"])
    slices = _get(admin, "endpointslices", "-l", "kubernetes.io/service-name=web")["items"]
    addresses = sorted(a for s in slices for e in s["endpoints"] for a in e["addresses"])
    assert addresses == pod_ips
    assert {p["port"] for s in slices for p in s["ports"]} == {8080}


def test_describe_networkpolicy(admin: Cluster) -> None:
    out = kubectl("describe", "networkpolicy", "web-ingress", "-n", NS,
                  kubeconfig=admin.config.admin_kubeconfig).stdout
    assert "PodSelector:" in out and "app=web" in out
    assert "role=client" in out and "8080/TCP" in out


def test_create_label_delete(admin: Cluster) -> None:
    kc = admin.config.admin_kubeconfig
    kubectl("create", "configmap", "settings", "-n", NS, "--from-literal=mode=strict",
            kubeconfig=kc)
    assert _get(admin, "configmap", "settings")["data"] == {"mode": "strict"}
    kubectl("label", "configmap", "settings", "-n", NS, "tier=backend", kubeconfig=kc)
    assert _get(admin, "configmap", "settings")["metadata"]["labels"] == {"tier": "backend"}
    kubectl("delete", "configmap", "settings", "-n", NS, kubeconfig=kc)
    missing = kubectl("get", "configmap", "settings", "-n", NS, kubeconfig=kc, check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_patch_json_merge_and_strategic(admin: Cluster) -> None:
    kc = admin.config.admin_kubeconfig
    kubectl("patch", "networkpolicy", "web-ingress", "-n", NS, "--type", "json", "-p",
            '[{"op": "replace", "path": "/spec/ingress/0/ports/0/port", "value": 9090}]',
            kubeconfig=kc)
    policy = _get(admin, "networkpolicy", "web-ingress")
    assert policy["spec"]["ingress"][0]["ports"][0]["port"] == 9090

    kubectl("patch", "networkpolicy", "web-ingress", "-n", NS, "--type", "merge", "-p",
            '{"metadata": {"labels": {"owner": "team-a"}}}', kubeconfig=kc)
    assert _get(admin, "networkpolicy", "web-ingress")["metadata"]["labels"] == {
        "owner": "team-a"}

    # Strategic merge keys containers by name: only "main" changes, "sidecar" stays.
    kubectl("patch", "deployment", "web", "-n", NS, "--type", "strategic", "-p",
            '{"spec": {"template": {"spec": {"containers": '
            '[{"name": "main", "image": "example/web:2"}]}}}}', kubeconfig=kc)
    containers = _get(admin, "deployment", "web")["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [
        ("main", "example/web:2"), ("sidecar", "example/sidecar:1")]
    # A merge patch replaces the list wholesale: the difference strategic merge exists for.
    kubectl("patch", "deployment", "web", "-n", NS, "--type", "merge", "-p",
            '{"spec": {"template": {"spec": {"containers": '
            '[{"name": "main", "image": "example/web:3"}]}}}}', kubeconfig=kc)
    containers = _get(admin, "deployment", "web")["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [("main", "example/web:3")]
    # The rollout converges through the controller-manager and the node agent.
    wait_pods_ready(admin.api_client(), [NS], timeout_s=60)
    images = {p["spec"]["containers"][0]["image"]
              for p in _get(admin, "pods", "-l", "app=web")["items"]}
    assert images == {"example/web:3"}


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        ({"spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 70000}]}]}},
         "must be between 1 and 65535"),
        ({"spec": {"podSelector": {}, "policyTypes": ["Ingres"]}}, "Unsupported value"),
        ({"spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 100, "endPort": 10}]}]}},
         "must be greater than or equal to `port`"),
        ({"spec": {"podSelector": {}, "ingress": [{"from": [{
            "ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]}},
         "may not specify both ipBlock and another peer"),
        ({"metadata": {"name": "Bad_Name"}, "spec": {"podSelector": {}}}, "RFC 1123"),
        ({"spec": {"podSelector": {}, "ingres": []}}, 'unknown field "spec.ingres"'),
    ],
    ids=["port-range", "policy-type", "end-port", "two-peer-types", "name", "unknown-field"],
)
def test_server_side_validation_errors(admin: Cluster, manifest: dict, expected: str) -> None:
    doc = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": "invalid"}} | {k: v for k, v in manifest.items()
                                                 if k != "metadata"}
    doc["metadata"] = manifest.get("metadata", doc["metadata"])
    out = kubectl("apply", "-n", NS, "--validate=strict", "-f", "-",
                  kubeconfig=admin.config.admin_kubeconfig, stdin=json.dumps(doc), check=False)
    assert out.returncode != 0
    assert expected in out.stderr, out.stderr
