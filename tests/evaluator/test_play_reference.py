"""``evaluator.testing.play_reference`` on the toy app: the oracle solves, the heuristic
solves by looking first, null never does, and the step budget ends an endless agent."""

from __future__ import annotations

from evaluator.testing import ToyApp, play_reference


def test_each_reference_agent_gets_its_verdict() -> None:
    app = ToyApp()
    for query in app.generate(5, seed=11):
        oracle = play_reference(app, query, "oracle")
        assert (oracle.correct, oracle.steps) == (True, 1)
        heuristic = play_reference(app, query, "heuristic")
        assert (heuristic.correct, heuristic.steps) == (True, 2)  # look, then say
        null = play_reference(app, query, "null")  # looks until the budget runs out
        assert not null.correct and null.steps == app.max_steps
