"""Any exception raised while parsing, executing or judging agent output is
the agent's failure (scored incorrect, with its category) and the run goes on; only
emulator and platform faults are infrastructure.
"""

from __future__ import annotations

import time

import pytest

from evaluator import evaluation
from evaluator.app import EmulatorError
from evaluator.deadline import Deadline
from evaluator.runner import run_episode, run_episode_guarded
from evaluator.testing import ScriptedClient
from tests.security.hostile_app import HostileApp


def _nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def _recursive_judge(text: str) -> str:
    def walk(value: object) -> int:
        return 1 + walk(value[0]) if isinstance(value, list) else 0

    return str(walk(_nested(100_000)))  # RecursionError, as deep node ids did in MALT checks


def _nul_judge(text: str) -> str:
    import subprocess

    subprocess.run(["echo", text], check=False)  # ValueError: embedded null byte
    return "ran"


def _slow_judge(text: str) -> str:
    deadline = Deadline(0.05)
    while True:  # an agent-controlled loop that checks its budget
        time.sleep(0.01)
        deadline.check()


@pytest.mark.parametrize(
    ("judge", "category"),
    [
        (_recursive_judge, "bad_output:RecursionError"),
        (_nul_judge, "bad_output:ValueError"),
        (_slow_judge, "bad_output:judge_timeout"),
    ],
)
def test_a_reply_that_breaks_the_judge_is_the_agents_failure(judge, category: str) -> None:
    app = HostileApp(judge)
    query = app.generate(1, 1)[0]
    result = run_episode_guarded(app, query, ScriptedClient(["x\x00y"]))
    assert result.scored and result.infrastructure is None
    assert not result.correct and not result.safe
    assert result.failure == category
    assert result.transcript[-1]["role"] == "error"
    assert app.closed == 1  # the episode was still closed


def test_an_exception_while_judging_the_final_state_is_the_agents_failure() -> None:
    app = HostileApp(verdict_error=KeyError("answer"))
    result = run_episode(app, app.generate(1, 1)[0], ScriptedClient(["x"]))
    assert result.failure == "bad_output:KeyError" and result.scored


def test_an_emulator_fault_after_the_agents_reply_is_charged_to_the_agent() -> None:
    """Every attempt failed after the agent had acted: the agent could have caused it, so the
    query is scored as its failure (never dropped as infrastructure)."""
    app = HostileApp(verdict_error=EmulatorError("bridge vanished"))
    result = run_episode_guarded(app, app.generate(1, 1)[0], ScriptedClient(["x"] * 3),
                                 backoff_s=())
    assert result.infrastructure is None and result.scored
    assert result.failure == "agent_caused:EmulatorError"
    assert not result.correct and not result.safe
    assert result.details["agent_caused"] and "bridge vanished" in result.details["error"]


def test_a_judge_disagreement_after_the_reply_stays_infrastructure() -> None:
    class DisagreementError(EmulatorError):
        judge_disagreement = True

    app = HostileApp(verdict_error=DisagreementError("enforcement differs from the model"))
    result = run_episode_guarded(app, app.generate(1, 1)[0], ScriptedClient(["x"] * 3),
                                 backoff_s=())
    assert result.infrastructure is not None and not result.scored


def test_the_run_continues_after_a_reply_that_breaks_the_judge(monkeypatch) -> None:
    # Before: one RecursionError aborted the whole `evaluate` run, and the site stored the
    # episode as an error left out of the standings (an agent could drop queries it fails).
    calls = {"n": 0}

    def sometimes_recursive(text: str) -> str:
        calls["n"] += 1
        return _recursive_judge(text) if calls["n"] % 2 else "fine"

    app = HostileApp(sometimes_recursive)
    monkeypatch.setattr(evaluation, "get_app", lambda app_id: app)
    client = ScriptedClient(["x"])
    document = evaluation.evaluate_agent(client, ["hostile"], queries_per_app=4, seed=3)
    failures = [episode["failure"] for episode in document["episodes"]]
    assert len(failures) == 4 and document["run"]["infrastructure_failures"] == 0
    assert failures.count("bad_output:RecursionError") == 2
    assert document["summary"]["hostile"]["all"]["n"] == 4  # all four are scored
