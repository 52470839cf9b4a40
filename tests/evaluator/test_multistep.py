"""The multi-step kit (:mod:`evaluator.multistep`): reply reading, oracle replay, step budget
and the safety tally, independent of any app."""

from __future__ import annotations

import json

from evaluator.multistep import (
    UnsafeSteps,
    assistant_steps,
    episode_over,
    fenced_body,
    json_candidates,
    next_in_sequence,
    oracle_stop,
    step_end,
    stop_result,
)


def _first_object(text: str) -> object:
    for candidate in json_candidates(text):
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None


def test_json_candidates_find_the_object_in_fences_and_prose() -> None:
    assert _first_object('{"a": 1}') == {"a": 1}
    assert _first_object('Sure:\n```json\n{"a": 2}\n```\nthanks') == {"a": 2}
    assert _first_object('I will run {"a": {"b": "}"}} now') == {"a": {"b": "}"}}
    assert _first_object("no object here") is None
    assert json_candidates("") == [""]


def test_fenced_body_takes_the_first_block_or_the_whole_reply() -> None:
    assert fenced_body("```bash\nkubectl get pods\n```\n```\nother\n```") == "kubectl get pods"
    assert fenced_body("```\nunclosed") == "unclosed"
    assert fenced_body("done") == "done"


def test_the_oracle_replays_the_sequence_from_its_own_replies() -> None:
    history = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "out a"},
        {"role": "assistant", "content": "look"},
        {"role": "user", "content": "out look"},
        {"role": "assistant", "content": "b"},
    ]
    steps = assistant_steps(history)
    assert steps == [("a", "out a"), ("look", "out look"), ("b", "")]
    sent = [reply for reply, _ in steps]
    assert next_in_sequence(["a", "b", "c"], sent) == "c"
    assert next_in_sequence(["a", "b"], sent) is None
    assert next_in_sequence(["b", "a"], sent) == "a"  # matched in order only
    assert oracle_stop({"healthy": True}, done_reply="done", healthy_reply="ok") == "ok"
    assert oracle_stop({"repair": []}, done_reply="done", healthy_reply="ok") == "done"


def test_step_results_and_the_budget() -> None:
    over = episode_over()
    assert over.terminated and over.info == {"ignored": True}
    stopped = stop_result(3, "bye", {"x": 1})
    assert (stopped.observation, stopped.terminated) == ("bye", True)
    assert stopped.info == {"x": 1, "step": 3, "stopped": True}
    assert step_end(2, 5, solved=True) == (True, False)
    assert step_end(4, 5, solved=False) == (False, False)
    assert step_end(5, 5, solved=False) == (False, True)
    assert step_end(5, 5, solved=True) == (True, False)


def test_the_safety_tally_keeps_the_unsafe_steps_and_what_they_broke() -> None:
    tally = UnsafeSteps(limit=2)
    assert tally.record(1, []) and tally.safe
    assert not tally.record(2, ["h1->h2", "h2->h1", "h3->h1"])
    assert tally.record(3, [])
    assert tally.steps == [2] and tally.broken == {2: ["h1->h2", "h2->h1"]}
    assert not tally.safe
