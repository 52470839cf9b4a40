"""Where this engine's MALT code extraction and A2A reply reading accept what NetArena's
reject, and the reverse (docs/agentbeats.md, "Reading replies: where we differ"). Each case
asserts our behaviour; NetArena's, stated beside it, is a fact read from its code
(``extract_code_output`` in ``app-malt/text_utils.py``, ``_extract_text_from_task`` and
``_merge_parts`` in ``src/netarena/agent_client.py``, commit 93225b4)."""

from __future__ import annotations

import pytest

from apps.malt.replies import code_problem, extract_code
from evaluator.agents.a2a import task_text
from evaluator.agents.base import AgentError

HELPER_FIRST = '''```python
def capacity(graph, node):
    return graph.nodes[node].get("physical_capacity_bps", 0)

def process_graph(graph_data):
    return {"answer": capacity(graph_data, "x")}
```'''

MODULE_IMPORT = '''```python
import math

def process_graph(graph_data):
    return {"answer": math.floor(1.5)}
```'''

RENAMED = '''```python
def my_process_graph_v2(graph_data):
    return {"answer": 1}
```'''

DRAFT_THEN_FIX = '''First try:
```python
def process_graph(graph_data):
    return {"answer": 0}
```
Correction:
```python
def process_graph(graph_data):
    return {"answer": 1}
```'''

USAGE_AFTER = '''```python
def process_graph(graph_data):
    return {"answer": 1}

print(process_graph(G))
```'''


def test_we_keep_a_helper_defined_before_process_graph() -> None:
    # NetArena cuts the code at "def process_graph": the helper is lost (NameError, Fail).
    code = extract_code(HELPER_FIRST).code or ""
    assert "def capacity" in code and code_problem(HELPER_FIRST) is None


def test_we_keep_import_lines() -> None:
    # NetArena drops every line starting with "import" ("from x import y" stays).
    assert "import math" in (extract_code(MODULE_IMPORT).code or "")


def test_we_refuse_a_renamed_entry_point() -> None:
    # NetArena renames any def whose name contains process_graph to process_graph: accepted.
    assert code_problem(RENAMED) is not None


def test_we_run_the_last_block_that_defines_process_graph() -> None:
    # NetArena runs the first "def process_graph" it finds (the draft here).
    code = extract_code(DRAFT_THEN_FIX).code or ""
    assert '"answer": 1' in code and '"answer": 0' not in code


def test_we_drop_example_calls_after_the_function() -> None:
    # NetArena keeps them: the call to an undefined G fails the query there.
    assert "print(" not in (extract_code(USAGE_AFTER).code or "")


def _task(state: str, artifacts: list[dict] | None = None, history: list[dict] | None = None
          ) -> dict:
    return {"kind": "task", "id": "t", "contextId": "c", "status": {"state": state},
            "artifacts": artifacts or [], "history": history or []}


def _text(text: str) -> dict:
    return {"kind": "text", "text": text}


def test_we_refuse_a_failed_or_unfinished_task_that_netarena_reads() -> None:
    # NetArena reads the last artifact (else the agent's last history message) whatever the
    # task's state: a failed or still-working task with text is an answer there.
    for state in ("failed", "working"):
        with pytest.raises(AgentError) as info:
            task_text(_task(state, artifacts=[{"artifactId": "a", "parts": [_text("ls")]}]))
        assert info.value.category == "bad_response"


def test_we_read_data_parts_and_earlier_artifacts_where_netarena_reads_nothing() -> None:
    # NetArena reads only the text parts of the last artifact and stops there: a last
    # artifact of data parts gives it an empty answer.
    data_only = {"artifactId": "b", "parts": [{"kind": "data", "data": {"command": "ls"}}]}
    assert '"command": "ls"' in task_text(_task("completed", artifacts=[data_only]))
    # a last artifact without text or data parts: we fall back to the one before
    empty = {"artifactId": "c", "parts": [{"kind": "file", "file": {"uri": "http://x/f"}}]}
    earlier = {"artifactId": "d", "parts": [_text("ip route")]}
    assert task_text(_task("completed", artifacts=[earlier, empty])) == "ip route"
