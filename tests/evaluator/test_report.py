"""Summaries: correct-and-safe is the joint rate, the action rate counts only known episodes."""

from __future__ import annotations

import pytest

from evaluator.report import format_summary_table, summarize
from evaluator.types import EpisodeResult, Query


def _result(index: int, *, correct: bool, safe: bool, changed: bool | None) -> EpisodeResult:
    query = Query("toy", 1, seed=7, index=index, level=1 + index % 3, labels=("L",), prompt="p")
    return EpisodeResult.for_query(
        query,
        correct=correct,
        safe=safe,
        latency_s=0.5,
        wall_s=1.0,
        agent_s=0.25,
        steps=1,
        failure=None if correct else "wrong_answer",
        changed_state=changed,
    )


def test_correct_and_safe_is_the_joint_rate_and_action_rate_skips_unknown() -> None:
    results = [
        _result(0, correct=True, safe=True, changed=True),
        _result(1, correct=True, safe=False, changed=True),  # correct but unsafe: not counted
        _result(2, correct=False, safe=True, changed=False),  # safe by doing nothing
        _result(3, correct=False, safe=True, changed=None),  # broke off: action unknown
    ]
    group = summarize(results)["toy"]["all"]
    assert group["n"] == 4
    assert group["correctness"]["value"] == pytest.approx(0.5)
    assert group["safety"]["value"] == pytest.approx(0.75)
    assert group["correct_and_safe"]["value"] == pytest.approx(0.25)
    assert group["correct_and_safe"]["low"] < 0.25 < group["correct_and_safe"]["high"]
    assert group["action_n"] == 3
    assert group["action_rate"]["value"] == pytest.approx(2 / 3)


def test_blast_radius_mean_is_over_unsafe_episodes_only() -> None:
    def radius(index: int, safe: bool, value: int) -> EpisodeResult:
        result = _result(index, correct=False, safe=safe, changed=True)
        return EpisodeResult.from_dict(result.to_dict() | {"blast_radius": value})

    group = summarize([radius(0, False, 1), radius(1, False, 9), radius(2, True, 0)])["toy"]["all"]
    assert group["blast_radius_mean"]["value"] == pytest.approx(5.0)
    assert group["blast_radius_mean"]["n"] == 2


def test_a_do_nothing_agent_is_safe_but_zero_on_the_headline() -> None:
    results = [_result(i, correct=False, safe=True, changed=False) for i in range(30)]
    group = summarize(results)["toy"]["all"]
    assert group["safety"]["value"] == 1.0
    assert group["correct_and_safe"]["value"] == 0.0
    assert group["action_rate"]["value"] == 0.0
    table = format_summary_table(summarize(results))
    assert "correct & safe" in table.splitlines()[0]
    assert "acted" in table.splitlines()[0]


def test_changed_state_survives_the_result_file_round_trip() -> None:
    result = _result(0, correct=True, safe=True, changed=True)
    assert EpisodeResult.from_dict(result.to_dict()).changed_state is True
    legacy = result.to_dict()
    del legacy["changed_state"]  # result files written before the field existed
    assert EpisodeResult.from_dict(legacy).changed_state is None


def _trial(query_index: int, trial: int, success: bool) -> EpisodeResult:
    result = _result(query_index, correct=success, safe=True, changed=success)
    return EpisodeResult.from_dict(result.to_dict() | {"trial": trial})


def test_pass_hat_k_and_per_query_variance_over_trials() -> None:
    # query 0 solved in all 3 trials, query 1 in 1 of 3
    results = [_trial(0, t, True) for t in range(3)] + [
        _trial(1, t, t == 0) for t in range(3)
    ]
    summary = summarize(results)["toy"]
    trials = summary["trials"]
    assert trials["queries"] == 2 and trials["trials_min"] == trials["trials_max"] == 3
    assert trials["pass_hat_k"]["1"] == pytest.approx((1 + 1 / 3) / 2)
    assert trials["pass_hat_k"]["1"] == pytest.approx(summary["all"]["correct_and_safe"]["value"])
    assert trials["pass_hat_k"]["2"] == pytest.approx(0.5)
    assert trials["pass_hat_k"]["3"] == pytest.approx(0.5)
    assert trials["variance_mean"] == pytest.approx((0 + (1 / 3) * (2 / 3)) / 2)
    assert "pass^3 50.0%" in format_summary_table(summarize(results))


def test_a_single_trial_run_has_no_trial_section() -> None:
    assert "trials" not in summarize([_result(0, correct=True, safe=True, changed=True)])["toy"]


def test_evaluate_agent_repeats_every_query_and_numbers_the_trials() -> None:
    from evaluator.evaluation import evaluate_agent
    from evaluator.testing import GuessApp, ScriptedClient, registered_app

    with registered_app({"guess": GuessApp}):
        document = evaluate_agent(
            ScriptedClient(["7"]), ["guess"], queries_per_app=4, seed=5, trials=3
        )
        with pytest.raises(ValueError):
            evaluate_agent(ScriptedClient(["7"]), ["guess"], queries_per_app=1, seed=5, trials=0)
    episodes = document["episodes"]
    assert len(episodes) == 12 and document["run"]["trials"] == 3
    by_query: dict[str, list[int]] = {}
    for episode in episodes:
        by_query.setdefault(episode["query_id"], []).append(episode["trial"])
    assert len(by_query) == 4 and all(sorted(t) == [0, 1, 2] for t in by_query.values())
    assert document["summary"]["guess"]["trials"]["trials_min"] == 3
