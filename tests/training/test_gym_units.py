"""Environment mechanics on in-process toy apps (no emulator): truncation by the step budget,
a reply that breaks the judge, infrastructure errors, custom rewards, rendering, closing."""

from __future__ import annotations

from typing import Any

import pytest

from evaluator.app import EmulatorError, Episode
from evaluator.testing import ToyApp, ToyEpisode
from evaluator.types import Query, StepResult
from training.gym_envs import NetArenaEnv, RewardScheme


class _FragileEpisode(ToyEpisode):
    def step(self, agent_text: str) -> StepResult:
        if agent_text == "crash":
            raise RecursionError("the judge gave up on this reply")
        if agent_text == "emulator":
            raise EmulatorError("emulator down (test)")
        return super().step(agent_text)


class _FragileToy(ToyApp):
    def episode(self, query: Query, **options: Any) -> Episode:
        return _FragileEpisode(query, options.get("max_steps", self.max_steps))


def _env(**kwargs: Any) -> NetArenaEnv:
    return NetArenaEnv("toy", app=_FragileToy(), **kwargs)


def test_the_step_budget_truncates_and_a_correct_answer_terminates() -> None:
    env = _env(max_steps=2, render_mode="ansi")
    observation, info = env.reset(seed=1)
    assert env.render() == observation and info["labels"] == ["look"]
    text, reward, terminated, truncated, step = env.step('{"action": "look"}')
    assert "secret word is" in text and (terminated, truncated) == (False, False)
    assert (reward, step["reward_kind"]) == (10.0, "diagnostic")
    word = text.rsplit(" ", 1)[1].rstrip(".")
    _, _, terminated, truncated, step = env.step('{"action": "look"}')
    assert (terminated, truncated) == (False, True) and step["verdict"]["correct"] is False
    with pytest.raises(RuntimeError):
        env.step('{"action": "look"}')
    env.reset(seed=1)
    _, _, terminated, truncated, step = env.step(f'{{"action": "say", "word": "{word}"}}')
    assert (terminated, truncated, step["verdict"]["correct"]) == (True, False, True)


def test_a_reply_that_breaks_the_judge_ends_the_episode_as_invalid() -> None:
    env = _env(rewards=RewardScheme(invalid=-7.0))
    env.reset(seed=2)
    text, reward, terminated, truncated, info = env.step("crash")
    assert (reward, terminated, truncated) == (-7.0, True, False)
    assert info["verdict"]["failure"] == "bad_output:RecursionError"
    assert "could not be handled" in text


def test_infrastructure_errors_propagate_and_close_is_idempotent() -> None:
    env = _env()
    env.reset(seed=3)
    with pytest.raises(EmulatorError):
        env.step("emulator")
    env.close()
    env.close()
    with pytest.raises(RuntimeError):
        env.step('{"action": "look"}')


def test_reset_runs_a_given_query_and_rejects_unknown_levels() -> None:
    app = _FragileToy()
    query = app.generate(3, 99)[2]
    env = NetArenaEnv("toy", app=app)
    _, info = env.reset(options={"query": query})
    assert info["query_id"] == query.query_id
    with pytest.raises(ValueError):
        NetArenaEnv("toy", app=app, level=2)


def test_canonical_names_in_actions_become_live_names_only_at_word_starts() -> None:
    env = _env()
    env._renames = [("nq7x_", "ep_")]
    action = '{"machine": "ep_r0", "command": "iptables -N keep_out -i ep_r0-eth1"}'
    assert env._to_live(action) == (
        '{"machine": "nq7x_r0", "command": "iptables -N keep_out -i nq7x_r0-eth1"}'
    )
    assert env._to_canonical("nq7x_h1 -> nq7x_r0") == "ep_h1 -> ep_r0"
