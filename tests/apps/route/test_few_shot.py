"""Route few-shot examples: drawn from the public generator on the reserved seed, deterministic,
never an assessed query, and each answer the oracle's first reply, a command the sandbox
accepts."""

from __future__ import annotations

import pytest

from apps.route import examples
from apps.route.app import RouteApp
from apps.route.commands import check_command
from apps.route.reference import oracle_reply
from apps.route.replies import parse_reply
from evaluator.types import FEW_SHOT_SEED


def test_one_example_per_level_from_the_reserved_seed_answered_by_the_oracle():
    app = RouteApp()
    queries = examples.few_shot_queries(app.generate, app.levels)
    pairs = app.few_shot_examples()
    assert [q.level for q in queries] == list(app.levels) and len(pairs) == len(queries)
    assert {q.seed for q in queries} == {FEW_SHOT_SEED}
    for query, (situation, answer) in zip(queries, pairs, strict=True):
        assert answer == oracle_reply(query.ground_truth, [])
        assert situation.startswith(query.prompt.split("\n\n", 1)[0])
        for fault in query.ground_truth.get("faults", []):
            assert f"on {fault['machine']} (" in situation  # the diagnosis the answer acts on


def test_every_example_answer_is_one_allowed_command():
    for situation, answer in RouteApp().few_shot_examples():
        parsed = parse_reply(answer)
        assert parsed.error is None, (answer, parsed)
        if parsed.done:  # a healthy control's example
            continue
        assert parsed.machine and parsed.command is not None
        argv, refusal = check_command(parsed.command)
        assert refusal is None and argv, (parsed.command, refusal)
        assert "{p}" not in answer and "ping" not in answer and situation


def test_examples_are_deterministic():
    assert RouteApp().few_shot_examples() == RouteApp().few_shot_examples()


def test_no_example_is_a_query_of_an_assessment_batch():
    app = RouteApp()
    shown = {q.fingerprint() for q in examples.few_shot_queries(app.generate, app.levels)}
    situations = {situation for situation, _ in app.few_shot_examples()}
    for seed in (0, 1, 2**127):
        batch = app.generate(45, seed)
        assert not shown & {q.fingerprint() for q in batch}
        assert not situations & {q.prompt for q in batch}


def test_the_reserved_seed_is_no_assessment_seed():
    from evaluator.green.request import RequestError, parse_config

    assert FEW_SHOT_SEED < 0  # assessment seeds are in [0, 2**SEED_BITS)
    with pytest.raises(RequestError, match="integer from 0"):
        parse_config("route", {"seed": FEW_SHOT_SEED})
