"""Capability fixtures of the training tests: the MALT sandbox, Mininet for route,
the embedded cluster for k8s. Missing tools skip locally and fail under ``CI=true``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.apps.route.helpers import require_emulator
from tests.conftest import require, require_root, require_tool


@pytest.fixture
def malt_sandbox() -> None:
    """Root, bubblewrap and setpriv (``evaluator.sandbox`` runs MALT agent code with them)."""
    require_root()
    require_tool("bwrap")
    require_tool("setpriv")


@pytest.fixture
def route_emulator() -> None:
    """Root, Mininet, bubblewrap and nsenter (route episodes)."""
    require_emulator()


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[None]:
    """The embedded cluster, up for the session; brought down at the end only when this
    fixture started it (another suite's or a developer's running cluster is left alone)."""
    require_root()
    require_tool("kubectl")
    require_tool("iptables")
    require_tool("ipset")
    from apps.k8s.cluster.config import ClusterConfig
    from apps.k8s.cluster.control_plane import Cluster

    config = ClusterConfig()
    missing = config.missing_binaries()
    require(not missing, f"cluster binaries missing: {missing}; run scripts/build_k8s.sh")
    cluster = Cluster(config)
    started_here = not cluster.status().running
    if started_here:
        cluster.up()
    yield
    if started_here:
        cluster.down()
