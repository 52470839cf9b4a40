"""The sandbox refuses to run, with a clear reason, when its tools are missing (no bwrap needed)."""

from __future__ import annotations

import pytest

from evaluator import sandbox
from evaluator.sandbox import SandboxUnavailableError, run_function


@pytest.fixture()
def no_tools(monkeypatch: pytest.MonkeyPatch):
    sandbox._plan.cache_clear()
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)
    yield
    sandbox._plan.cache_clear()


def test_missing_bwrap_raises(no_tools: None) -> None:
    with pytest.raises(SandboxUnavailableError, match="bwrap"):
        run_function("def f(x):\n    return 1\n", "f", None)


def test_missing_bwrap_can_be_reported_as_a_result(no_tools: None) -> None:
    result = run_function("def f(x):\n    return 1\n", "f", None, raise_unavailable=False)
    assert not result.ok and result.failure == "sandbox_unavailable"
    assert "bwrap" in (result.error or "")


def test_unavailable_is_an_emulator_error() -> None:
    from evaluator.app import DependencyMissingError, EmulatorError

    assert issubclass(SandboxUnavailableError, DependencyMissingError)
    assert issubclass(SandboxUnavailableError, EmulatorError)


def test_non_root_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox._plan.cache_clear()
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    try:
        with pytest.raises(SandboxUnavailableError, match="root"):
            run_function("def f(x):\n    return 1\n", "f", None)
    finally:
        sandbox._plan.cache_clear()
