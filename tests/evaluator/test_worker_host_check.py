"""Workers check, at start, that the apps of their queues can run on this host."""

from __future__ import annotations

import types

import pytest

from config.worker_host_check import host_check_queues, on_worker_setup
from evaluator.app import DependencyMissingError
from evaluator.registry import CONTROL_QUEUE
from evaluator.testing import GuessApp, registered_app
from tests.conftest import require_root


class BrokenHostApp(GuessApp):
    """An app whose host check fails, as MALT's does on a host without a memory cgroup."""

    def host_check(self) -> None:
        raise DependencyMissingError("no memory cgroup can be made")


def _worker(*queues: str) -> object:
    consume_from = {name: object() for name in queues}
    return types.SimpleNamespace(
        app=types.SimpleNamespace(
            amqp=types.SimpleNamespace(queues=types.SimpleNamespace(consume_from=consume_from))
        )
    )


def test_a_worker_for_an_app_that_cannot_run_here_exits_with_the_reason(caplog):
    with registered_app({"broken": BrokenHostApp, "guess": GuessApp}):
        assert host_check_queues([CONTROL_QUEUE, "guess"]) == ["guess"]
        with pytest.raises(DependencyMissingError, match="broken app cannot run"):
            host_check_queues(["guess", "broken"])
        with pytest.raises(SystemExit) as exited:
            on_worker_setup(instance=_worker(CONTROL_QUEUE, "broken"))
    assert exited.value.code == 78
    assert "no memory cgroup can be made" in caplog.text


def test_the_real_malt_and_route_checks_pass_on_this_host():
    require_root()
    assert host_check_queues(["malt", "route", CONTROL_QUEUE]) == ["malt", "route"]
    on_worker_setup(instance=_worker("malt", "route"))  # does not exit
