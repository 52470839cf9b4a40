"""The MALT scripted agent (apps/malt/scripted.py): written against the public generator, it must
solve nearly every public query (the benchmark's honesty check is only as good as its strongest
script), and it must never read the ground truth."""

from __future__ import annotations

import inspect
from collections import Counter

import pytest

from apps.malt import scripted
from apps.malt.app import MaltApp
from evaluator.testing import play_reference

APP = MaltApp()
#: A seed no other test uses; 15 labels x 6 queries.
SEED, COUNT = 777_001, 90
#: The target on public queries: at least 95% correct and safe.
PUBLIC_TARGET = 0.95


@pytest.mark.slow
def test_scripted_agent_solves_the_public_generator() -> None:
    queries = APP.generate(COUNT, seed=SEED)
    assert len({q.label for q in queries}) == 15  # every label of Table 4 is in the sample
    solved: Counter[str] = Counter()
    for query in queries:
        verdict = play_reference(APP, query, "scripted")
        solved[query.label] += bool(verdict.correct and verdict.safe)
    rate = sum(solved.values()) / len(queries)
    assert rate >= PUBLIC_TARGET, solved


def test_scripted_agent_reads_only_the_conversation() -> None:
    # the reply is a function of the chat history alone (no query, no ground truth)
    assert list(inspect.signature(scripted.scripted_reply).parameters) == ["history"]
    assert APP.has_scripted


def test_unreadable_requests_get_the_null_reply() -> None:
    request = "## Request\nPaint switch `x` blue.\n\n## Answer format"
    history = [{"role": "user", "content": request}]
    assert scripted.scripted_reply(history) == scripted.NULL_REPLY


def test_descriptions_are_read_recursively_and_that_refers_back() -> None:
    program = scripted.scripted_program(
        "Remove the slowest port of the busiest packet switch in aggregation block `ju1.a1.m1` "
        "from the graph. "
        "Then how many ports are there in that switch?"
    )
    switch = {"extreme": "max", "kind": "EK_PACKET_SWITCH",
              "scope": {"id": "EK_AGG_BLOCK:ju1.a1.m1"}}
    assert program == [
        {"op": "remove", "node": {"extreme": "min", "kind": "EK_PORT", "scope": switch}},
        {"op": "count", "node": switch, "kind": "EK_PORT"},
    ]
