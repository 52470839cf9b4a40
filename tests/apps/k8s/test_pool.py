"""The k8s namespace pool: restore proved pristine, tampering replaced,
credentials revoked, no sharing between concurrent episodes, nothing left after shutdown."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException

from apps.k8s import manifests
from apps.k8s.app import K8sApp
from apps.k8s.cluster.control_plane import Cluster
from apps.k8s.cluster.rest import KubeRest, resource_path
from apps.k8s.manifests import SERVICE_PORTS
from apps.k8s.namespace import (
    AGENT_RULES,
    EpisodeNamespace,
    agent_writable_resources,
    service_matrix,
)
from apps.k8s.pool import RESTORERS, NamespacePool, namespace_pool, pool_enabled, shutdown_pools
from apps.k8s.queries import LEVEL_LABELS
from apps.k8s.scoring import mismatches
from evaluator.types import Query
from tests.apps.k8s.conftest import kubectl
from tests.apps.k8s.test_app_episodes import _leftovers, _wait_no_episode_namespaces


def test_every_resource_the_agent_may_write_is_restored() -> None:
    """Widening the agent's Role without teaching the restore fails here, not silently."""
    writable = agent_writable_resources()
    assert writable == {"networking.k8s.io/networkpolicies"}, AGENT_RULES
    assert writable <= RESTORERS


def test_pool_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NETARENA_K8S_POOL", raising=False)
    assert pool_enabled() is True
    for off in ("0", "off", "false", "no"):
        monkeypatch.setenv("NETARENA_K8S_POOL", off)
        assert pool_enabled() is False
        assert pool_enabled(True) is True
    monkeypatch.setenv("NETARENA_K8S_POOL", "1")
    assert pool_enabled() is True and pool_enabled(False) is False
    assert K8sApp(pool=False).episode(K8sApp().generate(1, 1)[0]).use_pool is False


@pytest.fixture()
def pool(cluster: Cluster) -> Iterator[NamespacePool]:
    """A private pool without a thread: release restores and verifies synchronously."""
    instance = NamespacePool(cluster, spare=0, background=False)
    yield instance
    instance.shutdown()


def _healthy_state(pool: NamespacePool, ns: EpisodeNamespace) -> None:
    """``ns`` is exactly its pristine record: objects, measured matrix, intended matrix."""
    record = pool.record(ns)
    assert record is not None
    snapshot = ns.snapshot()
    agent_keys = {k for k in snapshot if ns.agent_name and k.endswith("/" + ns.agent_name)}
    assert {k: v for k, v in snapshot.items() if k not in agent_keys} == record.snapshot
    ns.wait()
    matrix, apps = ns.measure()
    assert matrix == record.matrix
    assert mismatches(manifests.expected_edges(), service_matrix(matrix, apps)) == []
    policies = {p["metadata"]["name"]: p["spec"] for p in
                ns.rest.get(resource_path("networkpolicies", ns.name))["items"]}
    assert set(policies) == set(manifests.healthy_policies())


def _pods_left(admin: KubeRest, namespace: str) -> int:
    """Pods still in ``namespace`` (0 when it is gone)."""
    try:
        return len(admin.get(resource_path("pods", namespace))["items"])
    except ApiException as exc:
        assert exc.status == 404
        return 0


def _release_and_check_revoked(pool: NamespacePool, ns: EpisodeNamespace, tmp: Path) -> None:
    assert ns.kubeconfig is not None
    old = tmp / "old-agent.kubeconfig"
    shutil.copy(ns.kubeconfig, old)
    assert kubectl("get", "networkpolicies", kubeconfig=old).returncode == 0
    pool.release(ns)
    denied = kubectl("get", "networkpolicies", "-n", ns.name, kubeconfig=old, check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower() or "unauthorized" in denied.stderr.lower(), \
        denied.stderr


@pytest.mark.k8s
@pytest.mark.root
@pytest.mark.timeout(900)
def test_restore_after_every_fault_and_agent_change_is_pristine(
    pool: NamespacePool, cluster: Cluster, tmp_path: Path
) -> None:
    """Every Table 6 label's faults, then agent-like changes through the agent's own kubectl
    (a new policy, a deleted one, labels, annotations, a spec patch, a finalizer on a deleted
    policy): each release restores, the verification proves it pristine, the same namespace
    comes back in that state, and the old kubeconfig is refused."""
    app = K8sApp(cluster_config=cluster.config, healthy_share=0.0)
    ns = pool.acquire()
    name = ns.name
    _healthy_state(pool, ns)
    labels = [c for level in (1, 2, 3) for c in LEVEL_LABELS[level]]
    queries = {q.labels: q for level in (1, 2, 3)
               for q in app.generate(3 * len(LEVEL_LABELS[level]), 40 + level, level)}
    assert set(labels) <= set(queries)
    for label in labels:
        truth = queries[label].ground_truth
        ns.replace_policies({n: truth["policies"][n] for n in truth["repair"]})
        assert ns.snapshot() != pool.record(ns).snapshot  # type: ignore[union-attr]
        _release_and_check_revoked(pool, ns, tmp_path)
        assert pool.stats.rebuilds == 0, list(pool.stats.failures)
        ns = pool.acquire()
        assert ns.name == name, (label, list(pool.stats.failures))
        _healthy_state(pool, ns)

    kc = ns.kubeconfig
    assert kc is not None
    kubectl("apply", "-f", "-", kubeconfig=kc, stdin=(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: agent-extra}\n"
        "spec: {podSelector: {}, policyTypes: [Ingress], ingress: [{}]}\n"))
    kubectl("delete", "networkpolicy", "cartservice", kubeconfig=kc)
    kubectl("label", "networkpolicy", "frontend", "touched=yes", kubeconfig=kc)
    kubectl("annotate", "networkpolicy", "default-deny", "note=agent", kubeconfig=kc)
    kubectl("patch", "networkpolicy", "adservice", "--type=merge",
            "-p", '{"spec":{"ingress":[]}}', kubeconfig=kc)
    kubectl("patch", "networkpolicy", "redis-cart", "--type=merge",
            "-p", '{"metadata":{"finalizers":["example.com/keep"]}}', kubeconfig=kc)
    kubectl("delete", "networkpolicy", "redis-cart", "--wait=false", kubeconfig=kc)
    stuck = ns.rest.get(resource_path("networkpolicies", ns.name, "redis-cart"))
    assert stuck["metadata"].get("deletionTimestamp")
    _release_and_check_revoked(pool, ns, tmp_path)
    assert pool.stats.rebuilds == 0, list(pool.stats.failures)
    ns = pool.acquire()
    assert ns.name == name
    _healthy_state(pool, ns)
    assert pool.stats.built == 1 and pool.stats.reused == len(labels) + 1
    pool.release(ns)


@pytest.mark.k8s
@pytest.mark.root
@pytest.mark.timeout(600)
def test_an_unverifiable_restore_replaces_the_namespace(
    pool: NamespacePool, cluster: Cluster
) -> None:
    """Admin changes the restore does not undo -- an extra object (a ConfigMap), a relabelled
    pod (the objects differ), and a foreign firewall rule (only the measured matrix
    differs) -- make verification fail: the namespace is deleted and a fresh one prepared."""
    admin = KubeRest(cluster.api_client())
    mangle = ["ip", "netns", "exec", cluster.config.netns, "iptables", "-w", "5", "-t", "mangle"]
    rule = ["FORWARD", "-p", "tcp", "--dport", str(SERVICE_PORTS["cartservice"]), "--syn",
            "-j", "DROP"]

    def add_configmap(ns: EpisodeNamespace) -> None:
        admin.create(f"/api/v1/namespaces/{ns.name}/configmaps",
                     {"metadata": {"name": "left-behind"}, "data": {"k": "v"}})

    def relabel_pod(ns: EpisodeNamespace) -> None:
        pod = next(p for p in admin.get(resource_path("pods", ns.name))["items"]
                   if p["metadata"]["labels"].get("app") == "emailservice")
        admin.patch(resource_path("pods", ns.name, pod["metadata"]["name"]),
                    {"metadata": {"labels": {"tier": "web"}}})

    def firewall(ns: EpisodeNamespace) -> None:
        subprocess.run([*mangle, "-I", *rule], check=True)

    seen: set[str] = set()
    try:
        for replaced, tamper in enumerate((add_configmap, relabel_pod, firewall), start=1):
            ns = pool.acquire()
            assert ns.name not in seen
            seen.add(ns.name)
            tamper(ns)
            pool.release(ns)
            subprocess.run([*mangle, "-D", *rule], check=False, capture_output=True)
            assert pool.stats.rebuilds == replaced, list(pool.stats.failures)
            assert pool.idle_count() == 0
            assert _pods_left(admin, ns.name) == 0
        reasons = list(pool.stats.failures)
        assert any("configmaps/left-behind" in r for r in reasons), reasons
        assert any("pods/" in r for r in reasons), reasons
        assert any("matrix differs" in r for r in reasons), reasons
        fresh = pool.acquire()
        assert fresh.name not in seen and pool.stats.built == 4
        _healthy_state(pool, fresh)
        pool.release(fresh)
    finally:
        subprocess.run([*mangle, "-D", *rule], check=False, capture_output=True)


@pytest.mark.k8s
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_concurrent_episodes_never_share_a_namespace_and_shutdown_leaves_nothing(
    cluster: Cluster,
) -> None:
    """Oracle episodes two at a time through the app's (process) pool: all correct and safe,
    namespaces reused, no two overlapping episodes in one namespace; shutting the pools down
    leaves no namespace, pod netns, veth, ipset member or iptables rule."""
    _wait_no_episode_namespaces(cluster)
    before = _leftovers(cluster)
    app = K8sApp(cluster_config=cluster.config, healthy_share=0.0, pool=True)
    intervals: list[tuple[str, float, float]] = []
    guard = threading.Lock()

    def one(query: Query) -> bool:
        t0 = time.monotonic()
        episode = app.episode(query)
        with episode:
            history = [{"role": "user", "content": episode.reset()}]
            assert episode.ns is not None
            name = episode.ns.name
            for _ in range(app.max_steps):
                reply = app.oracle_reply(query.ground_truth, history)
                history.append({"role": "assistant", "content": reply})
                result = episode.step(reply)
                history.append({"role": "user", "content": result.observation})
                if result.terminated or result.truncated:
                    break
            verdict = episode.verdict()
        with guard:
            intervals.append((name, t0, time.monotonic()))
        return verdict.correct and verdict.safe

    queries = app.generate(16, 515)
    with ThreadPoolExecutor(max_workers=2) as executor:
        assert all(executor.map(one, queries))
    pool = namespace_pool(cluster)
    assert pool.stats.reused > 0 and pool.stats.rebuilds == 0, list(pool.stats.failures)
    assert pool.stats.built < len(queries)
    for i, (name_a, start_a, end_a) in enumerate(intervals):
        for name_b, start_b, end_b in intervals[i + 1:]:
            if name_a == name_b:
                assert end_a <= start_b or end_b <= start_a, (name_a, intervals)
    # two acquisitions at once get two namespaces
    with ThreadPoolExecutor(max_workers=2) as executor:
        pair = list(executor.map(lambda _: pool.acquire(), range(2)))
    assert pair[0].name != pair[1].name
    for ns in pair:
        pool.release(ns)
    shutdown_pools()
    assert pool.owned() == []
    _wait_no_episode_namespaces(cluster)
    assert _leftovers(cluster) == before


@pytest.mark.k8s
@pytest.mark.root
@pytest.mark.timeout(300)
def test_idle_namespaces_are_drained_without_demand(cluster: Cluster) -> None:
    """With no acquire for ``idle_s`` the pool deletes its idle namespaces (and its thread
    prepares no spares without demand)."""
    pool = NamespacePool(cluster, spare=1, idle_s=2.0)
    try:
        ns = pool.acquire()
        pool.release(ns)
        deadline = time.monotonic() + 120
        while pool.owned() or pool.stats.drained == 0:
            assert time.monotonic() < deadline, (pool.owned(), pool.stats)
            time.sleep(0.2)
        time.sleep(3)
        assert pool.owned() == []
        assert _pods_left(KubeRest(cluster.api_client()), ns.name) == 0
    finally:
        pool.shutdown()
