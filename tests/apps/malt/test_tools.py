"""MALT's tool (``openai-tools``): ``submit_code`` becomes a python-fenced reply that the MALT
code extractor reads as any reply."""

from __future__ import annotations

from apps.malt.app import MaltApp
from apps.malt.replies import extract_code
from apps.malt.tools import SUBMIT_CODE
from evaluator.app import tool_names

APP = MaltApp()
CODE = "def process_graph(graph_data):\n    return {'answer': 1}"


def test_the_tool_and_its_schema() -> None:
    (tool,) = APP.tools()
    assert tool_names([tool]) == [SUBMIT_CODE]
    assert tool["function"]["parameters"]["required"] == ["code"]


def test_submitted_code_is_what_the_extractor_runs() -> None:
    text = APP.reply_from_tool_call(SUBMIT_CODE, {"code": CODE})
    assert text.startswith("```python\n")
    assert extract_code(text).code == CODE and APP.reply_problem(text) is None


def test_code_sent_with_its_own_fences_is_read_as_written() -> None:
    fenced = f"Here it is:\n```python\n{CODE}\n```\nDone."
    assert APP.reply_from_tool_call(SUBMIT_CODE, {"code": fenced}) == fenced
    assert extract_code(APP.reply_from_tool_call(SUBMIT_CODE, {"code": fenced})).code == CODE


def test_missing_or_broken_code_gets_the_extractors_reason() -> None:
    assert APP.reply_problem(APP.reply_from_tool_call(SUBMIT_CODE, {})) == "the reply is empty"
    assert APP.reply_problem(APP.reply_from_tool_call(SUBMIT_CODE, {"code": 5})) is not None
    broken = APP.reply_problem(APP.reply_from_tool_call(SUBMIT_CODE, {"code": "def f(:\n"}))
    assert broken is not None


def test_reference_replies_survive_the_round_trip() -> None:
    for query in APP.generate(15, seed=3):
        history = [{"role": "user", "content": query.prompt}]
        for reply in (
            APP.oracle_reply(query.ground_truth, history),
            APP.null_reply(history),
            APP.heuristic_reply(history),
            APP.scripted_reply(history),
        ):
            name, arguments = APP.tool_call_from_reply(reply)
            assert name == SUBMIT_CODE
            assert extract_code(APP.reply_from_tool_call(name, arguments)).code == (
                extract_code(reply).code
            )
