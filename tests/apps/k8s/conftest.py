"""Session fixture: one embedded cluster for the whole k8s test run, torn down at the end when
the cluster was not running as the run began (one that was, a developer's or another run's, is
used and left running).

Missing binaries or root skip the tests locally and fail them under ``CI=true``
(see :func:`tests.conftest.require`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from apps.k8s.cluster.config import ClusterConfig
from apps.k8s.cluster.control_plane import Cluster
from tests.conftest import CLUSTER_RUNNING_AT_START, require, require_root, require_tool


def kubectl(
    *args: str, kubeconfig: Path, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the real ``kubectl`` with ``kubeconfig``; raise with its stderr if ``check`` fails."""
    proc = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", "--request-timeout=30s", *args],
        input=stdin, capture_output=True, text=True, timeout=120, check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
    return proc


def host_firewall_snapshot() -> str:
    """iptables rules and ipset names of the root network namespace."""
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False)
    sets = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=False)
    lines = [ln for ln in rules.stdout.splitlines() if not ln.startswith(("#", ":"))]
    return "\n".join(lines) + "\n--ipsets--\n" + sets.stdout


@pytest.fixture(scope="session")
def host_firewall_before() -> str:
    """The host's firewall before the cluster first came up."""
    require_root()
    return host_firewall_snapshot()


@dataclass(frozen=True)
class SessionCluster:
    """The run's cluster and whether it is this run's (not running when the run began,
    :data:`tests.conftest.CLUSTER_RUNNING_AT_START`), so that the run may take it down."""

    cluster: Cluster
    started_here: bool


@pytest.fixture(scope="session")
def run_cluster(
    request: pytest.FixtureRequest, host_firewall_before: str
) -> Iterator[SessionCluster]:
    """The running cluster, brought up if it is not; taken down at the end when it is this
    run's."""
    require_root()
    require_tool("kubectl")
    require_tool("iptables")
    require_tool("ipset")
    config = ClusterConfig()
    missing = config.missing_binaries()
    require(not missing, f"cluster binaries missing: {missing}; run scripts/build_k8s.sh")
    instance = Cluster(config)
    started_here = not request.config.stash[CLUSTER_RUNNING_AT_START]
    instance.up()
    yield SessionCluster(instance, started_here)
    if started_here:
        instance.down()


@pytest.fixture(scope="session")
def cluster(run_cluster: SessionCluster) -> Cluster:
    """The running cluster, shared by every k8s test."""
    return run_cluster.cluster
