"""Cluster lifecycle: idempotent up, status, node-agent restart, and a down that leaves nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from apps.k8s.cluster import netns, processes
from apps.k8s.cluster.control_plane import COMPONENTS, REPO_ROOT, Cluster
from apps.k8s.cluster.prober import Probe, list_pod_endpoints, probe_once
from apps.k8s.cluster.sync import wait_pods_ready
from tests.apps.k8s.conftest import SessionCluster, host_firewall_snapshot, kubectl
from tests.conftest import require

pytestmark = [pytest.mark.k8s, pytest.mark.root]


def test_status_lists_every_component(cluster: Cluster) -> None:
    status = cluster.status()
    assert status.running and status.node_ready
    assert set(status.components) == set(COMPONENTS)
    assert all(status.components.values())
    assert all(status.rss_bytes[name] > 0 for name in COMPONENTS)


def test_up_is_idempotent(cluster: Cluster) -> None:
    before = cluster.status().components
    after = cluster.up().components
    assert after == before


def test_k8s_cluster_command_status_json(cluster: Cluster) -> None:
    out = subprocess.run(
        [sys.executable, "manage.py", "k8s_cluster", "status", "--json"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True,
    )
    data = json.loads(out.stdout)
    assert data["running"] is True
    assert data["server"] == cluster.config.server_url


def test_node_agent_restart_reconciles(cluster: Cluster) -> None:
    ns = "restart-test"
    kc = cluster.config.admin_kubeconfig
    cluster.ensure_namespace(ns)
    for name, port in (("a", "80"), ("b", "81")):
        kubectl("run", name, "-n", ns, "--image=example/x", f"--port={port}", kubeconfig=kc)
    wait_pods_ready(cluster.api_client(), [ns], timeout_s=60)
    before = {e.name: e for e in list_pod_endpoints(cluster.api_client(), [ns], cluster.config)}
    pid = cluster.status().components["node-agent"]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert processes.wait_gone(pid, 10)
    # the listeners die with the agent (its last threads may still be exiting); namespaces stay
    deadline = time.monotonic() + 10
    while probe_once(Probe(before["a"].netns, before["b"].ip, 81)):
        assert time.monotonic() < deadline, "listener survived the node agent"
        time.sleep(0.05)
    assert netns.netns_exists(before["b"].netns)

    status = cluster.up()
    assert status.components["node-agent"] not in (None, pid)
    assert status.components["kube-apiserver"] is not None
    after = {e.name: e for e in list_pod_endpoints(cluster.api_client(), [ns], cluster.config)}
    assert {n: e.ip for n, e in after.items()} == {n: e.ip for n, e in before.items()}
    wait_pods_ready(cluster.api_client(), [ns], timeout_s=30)
    deadline = time.monotonic() + 30  # the agent re-adopts pods one by one after its restart
    while not probe_once(Probe(before["a"].netns, before["b"].ip, 81)):
        assert time.monotonic() < deadline, "listener of pod b not reopened after restart"
        time.sleep(0.05)
    kubectl("run", "c", "-n", ns, "--image=example/x", "--port=82", kubeconfig=kc)
    wait_pods_ready(cluster.api_client(), [ns], timeout_s=60)
    kubectl("delete", "namespace", ns, "--wait=false", kubeconfig=kc)


def test_down_leaves_nothing_behind_and_up_again(
    run_cluster: SessionCluster, host_firewall_before: str
) -> None:
    require(run_cluster.started_here,
            "the cluster was running before this run began: taking it down would disturb its "
            "users, and the host's firewall before it is unknown")
    cluster = run_cluster.cluster
    cfg = cluster.config
    pids = [p for p in cluster.status().components.values() if p]
    assert netns.list_netns(cfg.pod_netns_prefix)
    cluster.down()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or processes.wait_gone(pid, 5)
    assert netns.list_netns(cfg.pod_netns_prefix) == []
    assert not netns.netns_exists(cfg.netns)
    assert not Path(f"/sys/class/net/{cfg.host_veth}").exists()
    assert not cfg.state_dir.exists()
    assert host_firewall_snapshot() == host_firewall_before
    leftovers = subprocess.run(["pgrep", "-f", str(cfg.state_dir)], capture_output=True,
                               text=True, check=False).stdout.split()
    assert leftovers == []
    assert not cluster.status().running
    # and the session goes on with a fresh cluster
    assert cluster.up().running
