"""The hand-written few-shot examples answer their queries correctly and safely."""

from __future__ import annotations

import pytest

from apps.malt.app import MaltApp
from apps.malt.examples import EXAMPLES, FEW_SHOT_SEED
from evaluator.runner import run_episode
from evaluator.testing import ScriptedClient
from tests.conftest import require_root, require_tool


def test_one_example_per_level_with_its_question():
    app = MaltApp()
    examples = app.few_shot_examples()
    levels = [app._query(FEW_SHOT_SEED, index).level for index, _ in EXAMPLES]
    assert sorted(levels) == [1, 2, 3]
    for (question, answer), (index, reply) in zip(examples, EXAMPLES, strict=True):
        assert question == app._query(FEW_SHOT_SEED, index).ground_truth["question"]
        assert answer == reply and "def process_graph" in answer


@pytest.mark.parametrize(("index", "reply"), EXAMPLES, ids=[str(i) for i, _ in EXAMPLES])
def test_example_is_correct_and_safe_in_the_sandbox(index, reply):
    require_root()
    require_tool("bwrap")
    app = MaltApp()
    result = run_episode(app, app._query(FEW_SHOT_SEED, index), ScriptedClient([reply]))
    assert result.correct and result.safe, (result.failure, result.details)
