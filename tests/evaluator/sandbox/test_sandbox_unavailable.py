"""The sandbox refuses to run, with a clear reason, when its tools are missing (no bwrap needed)."""

from __future__ import annotations

import pytest

from evaluator.sandbox import SandboxUnavailableError, _bwrap, run_function


@pytest.fixture()
def no_tools(monkeypatch: pytest.MonkeyPatch):
    _bwrap.plan.cache_clear()
    monkeypatch.setattr(_bwrap.shutil, "which", lambda name: None)
    monkeypatch.setattr(_bwrap.os, "geteuid", lambda: 0)
    yield
    _bwrap.plan.cache_clear()


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
    _bwrap.plan.cache_clear()
    monkeypatch.setattr(_bwrap.os, "geteuid", lambda: 1000)
    try:
        with pytest.raises(SandboxUnavailableError, match="root"):
            run_function("def f(x):\n    return 1\n", "f", None)
    finally:
        _bwrap.plan.cache_clear()
