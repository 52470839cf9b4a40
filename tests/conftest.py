"""Shared pytest fixtures and the capability policy.

Locally, a test whose tool is missing (mininet, bwrap, chromium, cluster binaries, redis) is
skipped with the reason; under ``CI=true`` the same absence is a failure, so CI never hides a
missing install step.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

#: Whether the embedded cluster was running when this pytest run began. A cluster that was not
#: is this run's to take down at the end, whoever in the run brought it up (a k8s test, or a
#: worker of a full round); one that was belongs to someone else (a developer, another run).
CLUSTER_RUNNING_AT_START = pytest.StashKey[bool]()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Record :data:`CLUSTER_RUNNING_AT_START`: true when any daemon of the cluster is alive
    (its pid files, as :func:`apps.k8s.cluster.processes.daemon_pid` reads them; the
    ``kubernetes`` client is not imported)."""
    from apps.k8s.cluster import processes
    from apps.k8s.cluster.config import ClusterConfig

    config = ClusterConfig()
    marker = str(config.state_dir)
    session.config.stash[CLUSTER_RUNNING_AT_START] = any(
        processes.daemon_pid(pid_file.stem, config.run_dir, marker) is not None
        for pid_file in sorted(config.run_dir.glob("*.pid")))


def require(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (under ``CI=true``) when ``condition`` is false."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"missing in CI: {reason}")
    pytest.skip(reason)


def require_tool(name: str) -> str:
    """Return the path of executable ``name``; skip/fail as :func:`require` when absent."""
    path = shutil.which(name)
    require(path is not None, f"{name} is not installed")
    assert path is not None
    return path


def require_root() -> None:
    """Skip/fail unless running as root."""
    require(os.geteuid() == 0, "needs root")


@contextlib.contextmanager
def session_cluster(*, kubectl: bool = True) -> Iterator[Any]:
    """The embedded cluster, up while the context lasts; brought down at the end only when
    this context started it (another suite's, a worker's or a developer's running cluster is
    left alone). Yields its :class:`apps.k8s.cluster.config.ClusterConfig`. Skips/fails
    (:func:`require`) without root, iptables, ipset, the cluster binaries, or ``kubectl``
    when asked for."""
    from apps.k8s.cluster.config import ClusterConfig
    from apps.k8s.cluster.control_plane import Cluster

    require_root()
    if kubectl:
        require_tool("kubectl")
    require_tool("iptables")
    require_tool("ipset")
    config = ClusterConfig()
    missing = config.missing_binaries()
    require(not missing, f"cluster binaries missing: {missing}; run scripts/build_k8s.sh")
    cluster = Cluster(config)
    started_here = not cluster.status().running
    if started_here:
        cluster.up()
    try:
        yield config
    finally:
        if started_here:
            cluster.down()


@pytest.fixture(autouse=True)
def _fresh_api_throttles() -> None:
    """Start every test with empty API throttle counters (they live in Django's cache, which
    outlives a test): one test's requests never make another's answer 429."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True, scope="session")
def _private_celery_broker() -> Iterator[None]:
    """The whole run on a Redis database of its own (``tests.submissions.celery_worker``): tasks
    sent by this run's code and taken by this run's workers never meet another run's, even
    when runs share the Redis server. Workers still running at the end are killed."""
    from tests.submissions import celery_worker

    celery_worker.private_broker()
    try:
        yield
    finally:
        celery_worker.private_broker_release()
