"""NetArena's four prompt types: what each sends, that evaluate and the green agent record
them, and that MALT's few-shot questions come from a seed no assessment uses."""

from __future__ import annotations

import pytest

from evaluator.evaluation import evaluate_agent
from evaluator.green.request import parse_config
from evaluator.prompting import (
    COT_INSTRUCTION,
    EXAMPLES_HEADING,
    PROMPT_TYPES,
    PromptTypeClient,
    apply_prompt_type,
    prompt_text,
)
from evaluator.testing import ScriptedClient, ToyApp, registered_app

EXAMPLES = [("Example question?", "example answer")]


@pytest.mark.parametrize("prompt_type", PROMPT_TYPES)
def test_each_prompt_type_sends_what_it_names(prompt_type: str) -> None:
    text = prompt_text("THE TASK", prompt_type, EXAMPLES)
    assert ("Example question?" in text) == prompt_type.startswith("fewshot")
    assert ("example answer" in text) == prompt_type.startswith("fewshot")
    assert (COT_INSTRUCTION in text) == prompt_type.endswith("_cot")
    if prompt_type == "zeroshot_base":
        assert text == "THE TASK"
    else:  # the task itself is sent whole, after the examples, before the instruction
        assert text.index("THE TASK") > (text.index(EXAMPLES_HEADING) if "fewshot" in
                                         prompt_type else -1)


def test_only_the_task_message_changes() -> None:
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"},
            {"role": "assistant", "content": "a"}, {"role": "user", "content": "observation"}]
    sent = apply_prompt_type(chat, "fewshot_cot", EXAMPLES)
    assert [m["content"] for m in sent][2:] == ["a", "observation"]
    assert sent[1]["content"].endswith(COT_INSTRUCTION) and chat[1]["content"] == "task"
    with pytest.raises(ValueError, match="worked examples"):
        apply_prompt_type(chat, "fewshot_base", [])
    with pytest.raises(ValueError, match="unknown prompt type"):
        prompt_text("t", "react", EXAMPLES)


def test_evaluate_sends_and_records_the_prompt_type() -> None:
    with registered_app({"toy": ToyApp}):
        agent = ScriptedClient(['{"action": "look"}'])
        document = evaluate_agent(agent, ["toy"], queries_per_app=1, seed=3,
                                  prompt_type="fewshot_cot")
    first_task = next(m for m in agent.seen[0][0] if m["role"] == "user")["content"]
    assert "Find the secret word of this example." in first_task  # ToyApp's example
    assert first_task.endswith(COT_INSTRUCTION)
    assert document["run"]["prompt_type"] == "fewshot_cot"
    assert [e["prompt_type"] for e in document["episodes"]] == ["fewshot_cot"]
    assert PromptTypeClient(agent, "zeroshot_cot").describe()["prompt_type"] == "zeroshot_cot"


def test_malt_few_shot_questions_come_from_a_seed_no_assessment_uses() -> None:
    from apps.malt.app import MaltApp
    from apps.malt.examples import EXAMPLES as MALT_EXAMPLES
    from apps.malt.examples import FEW_SHOT_SEED
    from evaluator.green.request import RequestError

    app = MaltApp()
    questions = [q for q, _ in app.few_shot_examples()]
    assert questions and FEW_SHOT_SEED < 0
    assert questions == [
        app._query(FEW_SHOT_SEED, index).ground_truth["question"] for index, _ in MALT_EXAMPLES
    ]
    with pytest.raises(RequestError, match="integer from 0"):  # assessment seeds are >= 0
        parse_config("malt", {"seed": FEW_SHOT_SEED})
