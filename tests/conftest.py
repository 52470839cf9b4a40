"""Shared pytest fixtures and the capability policy.

Locally, a test whose tool is missing (mininet, bwrap, chromium, cluster binaries, redis) is
skipped with the reason; under ``CI=true`` the same absence is a failure, so CI never hides a
missing install step.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


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
