"""Code extraction from agent replies."""

from __future__ import annotations

import ast

from apps.malt.replies import MAX_REPLY_CHARS, extract_code

ENTRY = "def process_graph(graph_data):\n    return {'answer': 1}"


def _defines(code: str | None, *names: str) -> bool:
    assert code is not None
    tree = ast.parse(code)
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    return set(names) <= defined


def test_fenced_python_block() -> None:
    reply = f"Sure! Here it is:\n\n```python\n{ENTRY}\n```\n\nThis returns one."
    result = extract_code(reply)
    assert result.method == "fenced" and result.code == ENTRY


def test_untagged_and_py_tags_and_tilde_fences() -> None:
    for fence in ("```", "```py", "```Python3", "~~~python"):
        close = fence[:3]
        result = extract_code(f"text\n{fence}\n{ENTRY}\n{close}\n")
        assert result.code == ENTRY, fence


def test_helpers_before_process_graph_are_kept() -> None:
    code = "import math\n\ndef _cap(g, n):\n    return 1\n\n" + ENTRY
    assert _defines(extract_code(f"```python\n{code}\n```").code, "_cap", "process_graph")


def test_helpers_in_an_earlier_block_are_kept_usage_blocks_are_not() -> None:
    reply = (
        "Helper:\n```python\ndef _children(g, n):\n    return list(g.successors(n))\n```\n"
        "Usage:\n```python\nprint(process_graph(G))\n```\n"
        f"Main:\n```python\n{ENTRY}\n```\n"
    )
    code = extract_code(reply).code
    assert _defines(code, "_children", "process_graph")
    assert code is not None and "print(" not in code


def test_last_definition_wins_and_other_languages_are_ignored() -> None:
    reply = (
        "```python\ndef process_graph(graph_data):\n    return {'answer': 'draft'}\n```\n"
        "```bash\npip install networkx\n```\n"
        f"Final:\n```python\n{ENTRY}\n```"
    )
    code = extract_code(reply).code
    assert code is not None and "draft" not in code and "pip" not in code


def test_example_usage_and_main_guard_are_dropped() -> None:
    usage = "result = process_graph(G)\nprint(result)\nif __name__ == '__main__':\n    main()\n"
    code = f"{ENTRY}\n\n{usage}"
    extracted = extract_code(f"```python\n{code}```").code
    assert extracted is not None
    assert "result =" not in extracted and "__main__" not in extracted
    assert "print(result)" in extracted  # not a call of process_graph: kept (harmless)
    assert _defines(extracted, "process_graph")


def test_bare_code_with_prose_around_it() -> None:
    reply = f"Answer:\nThe function below does it.\n{ENTRY}\n\nHope this helps!"
    result = extract_code(reply)
    assert result.method == "bare" and result.code == ENTRY


def test_unterminated_fence_runs_to_the_end() -> None:
    assert extract_code(f"```python\n{ENTRY}\n").code == ENTRY


def test_no_code_and_hostile_inputs() -> None:
    assert extract_code("").code is None
    assert extract_code("   \n").code is None
    assert extract_code(None).code is None
    assert extract_code(12).code is None
    assert extract_code("I cannot help with that.").code is None
    assert extract_code("x" * (MAX_REPLY_CHARS + 1)).code is None
    deep = "```python\nx = " + "(" * 5000 + ")" * 5000 + "\n" + ENTRY + "\n```"
    assert extract_code(deep).code is not None  # parser recursion limit: no crash
    broken = "```python\ndef process_graph(graph_data)\n    return 1\n```"
    assert extract_code(broken).code is not None  # the sandbox reports the syntax error
