"""Capability fixtures of the training tests: the MALT sandbox, Mininet for route,
the embedded cluster for k8s. Missing tools skip locally and fail under ``CI=true``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.apps.route.helpers import require_emulator
from tests.conftest import require_root, require_tool, session_cluster


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
    """The embedded cluster, up for the session (:func:`tests.conftest.session_cluster`)."""
    with session_cluster():
        yield
