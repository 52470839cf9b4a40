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
