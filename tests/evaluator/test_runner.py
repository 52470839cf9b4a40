"""The episode runner: step loop, agent failures, budget, vault hygiene."""

from __future__ import annotations

import pytest

from evaluator import runner
from evaluator.agents.base import AgentClient, AgentError, AgentReply
from evaluator.app import EmulatorError
from evaluator.oracle_vault import OracleVault
from evaluator.runner import INFRASTRUCTURE_ATTEMPTS, run_episode, run_episode_guarded
from evaluator.testing import GuessApp, GuessEpisode, ScriptedClient
from evaluator.types import EpisodeResult


def test_multi_step_episode_until_correct():
    app = GuessApp()
    query = app.generate(1, seed=3)[0]
    answer = str(query.ground_truth["number"])
    client = ScriptedClient(["x", answer, "never-asked"])
    result = run_episode(app, query, client)
    assert result.correct and result.safe and result.failure is None
    assert result.steps == 2
    assert [e["role"] for e in result.transcript] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    # the second request carries the whole conversation so far
    assert [m["content"] for m in client.seen[1][0]] == [query.prompt, "x", "no"]


def test_budget_ends_the_episode_as_incorrect():
    app = GuessApp()
    query = app.generate(1, seed=3)[0]
    result = run_episode(app, query, ScriptedClient(["a", "b", "c", "d"]))
    assert not result.correct and result.steps == 3 and result.failure == "wrong_answer"


def test_agent_failure_is_a_failed_episode_not_a_skip():
    app = GuessApp()
    query = app.generate(1, seed=3)[0]
    result = run_episode(app, query, ScriptedClient([AgentError("timeout", "no reply in 60 s")]))
    assert not result.correct
    assert result.failure == "agent:timeout"
    assert result.transcript[-1]["role"] == "error"


def test_failure_after_a_correct_state_still_counts_as_failed():
    app = GuessApp()
    query = app.generate(1, seed=3)[0]
    # unsafe step recorded, then the agent dies
    result = run_episode(app, query, ScriptedClient(["boom", AgentError("transport", "reset")]))
    assert not result.safe and not result.correct and result.failure == "agent:transport"


def test_vault_entry_exists_only_during_the_episode(tmp_path):
    app = GuessApp()
    query = app.generate(1, seed=5)[0]
    vault = OracleVault(tmp_path)

    class VaultReadingClient(AgentClient):
        def complete(self, messages, *, episode_id):
            stored = vault.get(episode_id)
            assert stored is not None and stored.query_id == query.query_id
            return AgentReply(app.oracle_reply(stored.ground_truth, messages), 0.0)

    with vault.deposit(query) as episode_id:
        result = run_episode(app, query, VaultReadingClient(), episode_id=episode_id)
    assert result.correct
    assert list(tmp_path.glob("*.json")) == []


def test_result_round_trips_through_json_dict():
    app = GuessApp()
    query = app.generate(1, seed=1)[0]
    result = run_episode(app, query, ScriptedClient(["1", "2", "3"]))
    assert EpisodeResult.from_dict(result.to_dict()) == result


def test_generation_is_seeded():
    app = GuessApp()
    assert [q.fingerprint() for q in app.generate(5, 9)] == [
        q.fingerprint() for q in app.generate(5, 9)
    ]
    assert app.generate(1, 9)[0].query_id != app.generate(1, 10)[0].query_id


class BrokenEmulatorApp(GuessApp):
    """GuessApp whose emulator fails on reset: every attempt raises ``EmulatorError``."""

    def __init__(self) -> None:
        self.attempts = 0

    def episode(self, query, **options):
        app = self

        class Broken(GuessEpisode):
            def reset(self) -> str:
                app.attempts += 1
                raise EmulatorError("bridge could not be created")

        return Broken(query)


def test_emulator_failure_is_a_typed_infrastructure_result_after_retries(monkeypatch):
    app = BrokenEmulatorApp()
    query = app.generate(1, seed=2)[0]
    waits: list[float] = []
    monkeypatch.setattr(runner.time, "sleep", waits.append)
    result = run_episode_guarded(app, query, ScriptedClient([]), backoff_s=(0.5, 2.0))
    assert app.attempts == INFRASTRUCTURE_ATTEMPTS
    assert waits == [0.5, 2.0][: INFRASTRUCTURE_ATTEMPTS - 1]  # back-off between attempts
    assert result.infrastructure is not None and not result.scored
    assert result.infrastructure.attempts == INFRASTRUCTURE_ATTEMPTS
    assert "bridge could not be created" in result.infrastructure.error
    assert not result.correct and result.failure == "infrastructure"
    assert EpisodeResult.from_dict(result.to_dict()) == result


def test_agent_failure_is_not_an_infrastructure_failure():
    app = GuessApp()
    query = app.generate(1, seed=3)[0]
    result = run_episode_guarded(app, query, ScriptedClient([AgentError("timeout", "slow")]))
    assert result.infrastructure is None and result.scored
    assert result.failure == "agent:timeout"


def test_vault_deposit_is_removed_even_when_the_episode_raises(tmp_path):
    app = BrokenEmulatorApp()
    query = app.generate(1, seed=4)[0]
    vault = OracleVault(tmp_path)
    with pytest.raises(EmulatorError), vault.deposit(query) as episode_id:
        assert vault.get(episode_id) == query
        run_episode(app, query, ScriptedClient([]), episode_id=episode_id)
    assert list(tmp_path.glob("*.json")) == []


def test_result_labels_and_label():
    app = GuessApp()
    query = app.generate(1, seed=1)[0]
    result = run_episode(app, query, ScriptedClient(["1", "2", "3"]))
    assert result.app_id == "guess" and result.labels == ["guess"] and result.label == query.label


class _ReportingClient(AgentClient):
    """Answers from a list of AgentReply objects (tokens and model as an endpoint reports)."""

    def __init__(self, replies: list[AgentReply]) -> None:
        self.replies = list(replies)

    def complete(self, messages, *, episode_id):
        return self.replies.pop(0)


def test_tokens_are_summed_over_the_replies_that_report_them_and_the_last_model_kept():
    app = GuessApp()
    query = app.generate(1, seed=3)[0]
    answer = str(query.ground_truth["number"])
    client = _ReportingClient(
        [
            AgentReply("x", 0.1, input_tokens=100, output_tokens=5, model="m-1"),
            AgentReply("y", 0.1),  # this call reported nothing
            AgentReply(answer, 0.2, input_tokens=150, output_tokens=7, model="m-2"),
        ]
    )
    result = run_episode(app, query, client)
    assert result.correct and result.steps == 3
    assert (result.input_tokens, result.output_tokens) == (250, 12)
    assert result.served_model == "m-2"
    assert result.agent_s == pytest.approx(0.4)
    silent = run_episode(app, query, ScriptedClient([answer]))
    assert (silent.input_tokens, silent.output_tokens, silent.served_model) == (None, None, None)
