"""Rejudging replays stored replies and reproduces verdicts; differences are reported."""

from __future__ import annotations

import pytest

from evaluator import runner
from evaluator.agents.base import AgentError
from evaluator.rejudge import NotReplayableError, ReplayClient, rejudge
from evaluator.testing import GuessApp, ScriptedClient
from evaluator.types import EpisodeResult


def _run(replies):
    app = GuessApp()
    query = app.generate(1, seed=11)[0]
    return app, query, runner.run_episode(app, query, ScriptedClient(replies))


def test_a_replayed_episode_gives_the_stored_verdict() -> None:
    app = GuessApp()
    query = app.generate(1, seed=11)[0]
    answer = str(query.ground_truth["number"])
    stored = runner.run_episode(app, query, ScriptedClient(["1", "x", answer]))
    assert stored.replay is not None and stored.replay["replies"] == ["1", "x", answer]
    outcome = rejudge(app, query, stored.to_dict())
    assert outcome.reproduced and outcome.differences == {}
    assert outcome.replayed is not None and outcome.replayed.correct and outcome.replayed.steps == 3


def test_a_stored_verdict_that_the_replay_contradicts_is_reported() -> None:
    app, query, stored = _run(["1"])
    tampered = stored.to_dict() | {"correct": True, "failure": None}
    outcome = rejudge(app, query, tampered)
    assert not outcome.reproduced
    assert outcome.differences["correct"] == (True, False)
    assert outcome.differences["failure"][0] is None


def test_an_agent_failure_is_replayed_after_the_stored_replies() -> None:
    app, query, stored = _run(["1", AgentError("timeout", "no answer in 30 s")])
    assert stored.failure == "agent:timeout"
    assert stored.replay is not None and stored.replay["agent_failure"] == "agent:timeout"
    outcome = rejudge(app, query, EpisodeResult.from_dict(stored.to_dict()).to_dict())
    assert outcome.reproduced, outcome.differences


def test_replies_over_the_cap_are_not_kept_and_cannot_be_replayed(monkeypatch) -> None:
    monkeypatch.setattr(runner, "REPLAY_MAX_CHARS", 10)
    app, query, stored = _run(["12345", "678901"])
    assert stored.replay is None
    with pytest.raises(NotReplayableError):
        rejudge(app, query, stored.to_dict())


def test_the_replay_client_never_invents_replies() -> None:
    client = ReplayClient(["a"])
    assert client.complete([], episode_id="e").text == "a"
    with pytest.raises(AgentError) as raised:
        client.complete([], episode_id="e")
    assert raised.value.category == "replay_exhausted"
