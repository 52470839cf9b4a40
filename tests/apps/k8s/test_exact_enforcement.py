"""The cases where kube-router v2.10.0 diverged from Kubernetes semantics are now exact.

Divergences 2-4 of docs/k8s-cluster.md (history) each get a world built for them; every test
asserts the Kubernetes answer on real probes *and* that the judge's cross-check
(:mod:`apps.k8s.crosscheck`) agrees with the measurement. A last test shows the
cross-check reporting a dataplane that enforces differently.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from apps.k8s.cluster.control_plane import Cluster
from apps.k8s.cluster.prober import Probe, list_pod_endpoints, measure_matrix, probe_once
from apps.k8s.cluster.rest import KubeRest, resource_path
from apps.k8s.cluster.sync import wait_pods_ready
from apps.k8s.crosscheck import cross_check

pytestmark = [pytest.mark.k8s, pytest.mark.root]

Obj = dict[str, Any]


def _pod(name: str, labels: dict[str, str], ports: list[tuple[str, int, str]]) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "netarena/none", "ports": [
            {"containerPort": n, "protocol": proto, **({"name": pn} if pn else {})}
            for proto, n, pn in ports]}]},
    }


def _policy(name: str, spec: Obj) -> Obj:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def world(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[tuple[str, KubeRest]]:
    ns = "exact-" + request.node.name.removeprefix("test_").replace("_", "-")[:40]
    cluster.ensure_namespace(ns)
    rest = KubeRest(cluster.api_client())
    yield ns, rest
    rest.delete(resource_path("namespaces", name=ns))


def _apply(cluster: Cluster, rest: KubeRest, ns: str, pods: list[Obj],
           policies: list[Obj]) -> dict[str, dict[str, dict[str, bool]]]:
    for pod in pods:
        rest.create_or_keep(resource_path("pods", ns), pod)
    for pol in policies:
        path = resource_path("networkpolicies", ns)
        if not rest.create_or_keep(path, pol):
            name = pol["metadata"]["name"]
            current = rest.get(resource_path("networkpolicies", ns, name))
            rest.replace(resource_path("networkpolicies", ns, name), {
                **pol, "metadata": {**pol["metadata"],
                                    "resourceVersion": current["metadata"]["resourceVersion"]}})
    wait_pods_ready(cluster.api_client(), [ns], timeout_s=60)
    cluster.wait_dataplane([ns], timeout_s=30)
    endpoints = list_pod_endpoints(cluster.api_client(), [ns], cluster.config)
    measured = measure_matrix(endpoints)
    check = cross_check(cluster.api_client(), ns, measured, endpoints=endpoints,
                        config=cluster.config)
    assert check.agrees, [d.describe() for d in check.disagreements]
    return measured


def test_ingress_rule_does_not_open_egress_of_the_same_pods(
        cluster: Cluster, world: tuple[str, KubeRest]) -> None:
    ns, rest = world
    pods = [_pod(n, {"app": "c"}, [("TCP", 80, "")]) for n in ("c0", "c1")]
    pods.append(_pod("b0", {"app": "b"}, [("TCP", 80, "")]))
    policy = _policy("p", {"podSelector": {"matchLabels": {"app": "c"}},
                           "policyTypes": ["Ingress", "Egress"], "ingress": [{}],
                           "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "b"}}}]}]})
    m = _apply(cluster, rest, ns, pods, [policy])
    # c0's egress reaches only app=b, although c1's ingress admits everyone.
    assert m[f"{ns}/c0"][f"{ns}/c1"] == {"TCP/80": False}
    assert m[f"{ns}/c0"][f"{ns}/b0"] == {"TCP/80": True}
    assert m[f"{ns}/b0"][f"{ns}/c1"] == {"TCP/80": True}


def test_one_port_name_with_different_numbers_stays_exact_over_updates(
        cluster: Cluster, world: tuple[str, KubeRest]) -> None:
    ns, rest = world
    pods = [
        _pod("s", {"app": "s"}, [("TCP", 80, "")]),
        _pod("d1", {"app": "d"}, [("TCP", 8080, "web"), ("TCP", 9090, "alt")]),
        _pod("d2", {"app": "d"}, [("TCP", 9090, "web"), ("TCP", 8080, "alt")]),
    ]
    for round_no in range(4):
        name = "web" if round_no % 2 == 0 else "alt"
        policy = _policy("p", {"podSelector": {"matchLabels": {"app": "d"}},
                               "ingress": [{"ports": [{"port": name}]}]})
        m = _apply(cluster, rest, ns, pods, [policy])
        web_is_8080 = name == "web"
        assert m[f"{ns}/s"][f"{ns}/d1"] == {"TCP/8080": web_is_8080, "TCP/9090": not web_is_8080}
        assert m[f"{ns}/s"][f"{ns}/d2"] == {"TCP/8080": not web_is_8080, "TCP/9090": web_is_8080}


def test_named_port_in_egress_rule_without_to_resolves_per_destination(
        cluster: Cluster, world: tuple[str, KubeRest]) -> None:
    ns, rest = world
    pods = [
        _pod("s", {"app": "s"}, [("TCP", 80, "")]),
        _pod("d1", {"app": "d"}, [("TCP", 8080, "web"), ("TCP", 9090, "")]),
        _pod("d2", {"app": "d"}, [("TCP", 9090, "web"), ("TCP", 8080, "")]),
    ]
    policy = _policy("p", {"podSelector": {"matchLabels": {"app": "s"}},
                           "policyTypes": ["Egress"], "egress": [{"ports": [{"port": "web"}]}]})
    m = _apply(cluster, rest, ns, pods, [policy])
    assert m[f"{ns}/s"][f"{ns}/d1"] == {"TCP/8080": True, "TCP/9090": False}
    assert m[f"{ns}/s"][f"{ns}/d2"] == {"TCP/8080": False, "TCP/9090": True}


def test_denied_connections_are_rejected_not_dropped(
        cluster: Cluster, world: tuple[str, KubeRest]) -> None:
    ns, rest = world
    pods = [_pod("a", {"app": "a"}, [("TCP", 80, ""), ("UDP", 53, "")]),
            _pod("b", {"app": "b"}, [("TCP", 80, ""), ("UDP", 53, "")])]
    m = _apply(cluster, rest, ns, pods, [_policy("deny", {"podSelector": {}})])
    assert m[f"{ns}/a"][f"{ns}/b"] == {"TCP/80": False, "UDP/53": False}
    endpoints = {e.name: e for e in list_pod_endpoints(cluster.api_client(), [ns],
                                                       cluster.config)}
    for proto, port in (("TCP", 80), ("UDP", 53)):
        start = time.monotonic()
        assert not probe_once(Probe(endpoints["a"].netns, endpoints["b"].ip, port, proto),
                              timeout_s=2.0)
        assert time.monotonic() - start < 1.0  # an ICMP reject, not the 2 s timeout


def test_cross_check_reports_a_dataplane_that_enforces_differently(
        cluster: Cluster, world: tuple[str, KubeRest]) -> None:
    ns, rest = world
    pods = [_pod("a", {"app": "a"}, [("TCP", 80, "")]), _pod("b", {"app": "b"}, [("TCP", 80, "")])]
    _apply(cluster, rest, ns, pods, [_policy("deny", {"podSelector": {}})])
    bypass = ["ip", "netns", "exec", cluster.config.netns, "iptables", "-w", "5"]
    # The enforcer replaces the whole filter table whenever anything in the cluster changes
    # (e.g. an earlier test's namespace going away), which also removes the foreign rule: a
    # measurement counts only if the rule was still there after it.
    for _attempt in range(5):
        subprocess.run([*bypass, "-I", "FORWARD", "1", "-j", "ACCEPT"], check=True)
        try:
            endpoints = list_pod_endpoints(cluster.api_client(), [ns], cluster.config)
            measured = measure_matrix(endpoints)
            check = cross_check(cluster.api_client(), ns, measured, endpoints=endpoints,
                                config=cluster.config)
        finally:
            removed = subprocess.run([*bypass, "-D", "FORWARD", "-j", "ACCEPT"], check=False)
        if removed.returncode == 0:
            break
        time.sleep(1.0)
    assert not check.agrees
    assert {(d.src, d.dst, d.port, d.expected, d.measured) for d in check.disagreements} == {
        (f"{ns}/a", f"{ns}/b", "TCP/80", False, True),
        (f"{ns}/b", f"{ns}/a", "TCP/80", False, True)}
    assert check.to_dict()["disagreements"][0]["expected"] is False
