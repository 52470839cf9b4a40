"""MALT's action as an OpenAI function tool (the ``openai-tools`` protocol).

One tool, ``submit_code(code)``: the Python code defining ``process_graph(graph_data)``. It
becomes a fenced ```` ```python ```` block (code that already holds a fence line is passed as
written) and :func:`apps.malt.replies.extract_code` reads it as it reads any reply.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from evaluator.app import function_tool
from evaluator.types import JSON

from apps.malt.replies import extract_code

SUBMIT_CODE = "submit_code"
_FENCE_LINE = re.compile(r"^ {0,3}(```|~~~)", re.MULTILINE)


def tools() -> list[JSON]:
    """The MALT tool (an OpenAI function tool definition with a JSON Schema parameter)."""
    return [
        function_tool(
            SUBMIT_CODE,
            "Submit your answer: Python code defining process_graph(graph_data) as the task "
            "describes. It is run once, in a sandbox; there is no second submission.",
            {
                "code": {
                    "type": "string",
                    "description": "The complete Python source, without Markdown fences.",
                }
            },
            ["code"],
        )
    ]


def reply_from_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """The MALT reply text of a ``submit_code`` call: the code in a python fence (as written
    when it holds a fence line already; ``""`` when the call carried no code)."""
    code = arguments.get("code")
    if not isinstance(code, str) or not code.strip():
        return ""
    if _FENCE_LINE.search(code):
        return code
    return f"```python\n{code.rstrip()}\n```\n"


def tool_call_from_reply(reply: str) -> tuple[str, JSON]:
    """The ``submit_code`` call carrying a MALT reply text: the code the extractor finds in
    it, or the whole reply when it finds none."""
    code = extract_code(reply).code
    return SUBMIT_CODE, {"code": code if code is not None else reply}
