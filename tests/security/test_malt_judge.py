"""Hostile output on the MALT app: deep and hash-colliding node ids, oversized graphs,
long unfenced replies and a slow judge end as the agent's failure, quickly; the run goes on.
Full episodes use the real sandbox; the pure judge is timed directly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from unittest import mock

import pytest

from apps.malt import episode as malt_episode
from apps.malt import replies as replies_module
from apps.malt.app import MaltApp
from apps.malt.checks import MAX_GRAPH_NODES
from apps.malt.queries import BLOCK
from apps.malt.replies import extract_code
from apps.malt.scoring import judge
from evaluator.runner import run_episode_guarded
from evaluator.testing import ScriptedClient
from evaluator.types import JSON
from tests.conftest import require_root, require_tool

APP = MaltApp()
QUERIES = APP.generate(BLOCK, seed=41)
GRAPH_QUERY = next(q for q in QUERIES if q.label == "remove")
#: 2**61 - 1 is the modulus of CPython's int hash: multiples of it all hash to 0.
HASH_MODULUS = 2**61 - 1


@pytest.fixture()
def sandbox() -> None:
    require_root()
    require_tool("bwrap")
    require_tool("setpriv")


def _graph(ids: Sequence[object]) -> JSON:
    return {
        "__networkx__": {
            "directed": True,
            "multigraph": False,
            "nodes": [{"id": i, "type": "EK_PORT", "name": str(n)} for n, i in enumerate(ids)],
            "links": [],
        }
    }


def _nested(depth: int) -> object:
    value: object = "EK_PORT:x"
    for _ in range(depth):
        value = [value]
    return value


def test_a_600_deep_node_id_is_a_wrong_unsafe_answer_not_a_crash() -> None:
    value = {"answer": 1, "updated_graph": _graph([_nested(600)])}
    verdict = judge(GRAPH_QUERY.ground_truth, value, 0.0)
    assert not verdict.correct and not verdict.safe
    assert "strings" in str(verdict.details["safety"])


@pytest.mark.usefixtures("sandbox")
def test_a_600_deep_node_id_through_the_sandbox_is_the_agents_failure() -> None:
    reply = (
        "```python\n"
        "def process_graph(graph_data):\n"
        "    node = 'EK_PORT:x'\n"
        "    for _ in range(600):\n"
        "        node = [node]\n"
        "    return {'answer': {'__networkx__': {'directed': True, 'nodes': [{'id': node}],\n"
        "            'links': []}}}\n"
        "```\n"
    )
    result = run_episode_guarded(APP, GRAPH_QUERY, ScriptedClient([reply]))
    assert result.scored and not result.correct
    assert result.failure is not None and result.failure.startswith("sandbox:bad_result")


def test_hash_colliding_integer_ids_are_refused_in_linear_time() -> None:
    # Before: 20,000 such ids made graph parsing quadratic (31 s instead of 0.2 s).
    ids = [k * HASH_MODULUS for k in range(1, 20_001)]
    started = time.process_time()  # CPU time: other processes' load does not count
    verdict = judge(GRAPH_QUERY.ground_truth, {"answer": _graph(ids)}, 0.0)
    assert time.process_time() - started < 2.0
    assert not verdict.correct and verdict.failure == "wrong_answer"


def test_node_counts_are_capped_before_parsing() -> None:
    ids = [f"EK_PORT:p{i}" for i in range(MAX_GRAPH_NODES + 1)]
    started = time.process_time()  # CPU time: other processes' load does not count
    verdict = judge(GRAPH_QUERY.ground_truth, {"answer": _graph(ids)}, 0.0)
    assert time.process_time() - started < 2.0
    assert not verdict.correct and "at most" in str(verdict.details)


def test_a_256_kib_unfenced_reply_costs_a_bounded_number_of_parses() -> None:
    # Before: one 256 KiB reply of unfenced code cost 93 s (up to 400 ast.parse retries).
    code = "def process_graph(graph_data):\n    return {'answer': 0}\n" + "x = 1\n" * 34_000
    prose = "and this line is an explanation of the code above.\n" * 1_000
    reply = code + prose
    assert 200 * 1024 < len(reply) <= 256 * 1024
    parses: list[int] = []
    real_parse = replies_module.ast.parse

    def counting_parse(source, *args, **kwargs):
        parses.append(len(source))
        return real_parse(source, *args, **kwargs)

    with mock.patch.object(replies_module.ast, "parse", counting_parse):
        extraction = extract_code(reply)
    # the cost is counted, not timed (a loaded machine must not fail this): each parse is
    # linear in the reply, and there are at most MAX_PARSE_ATTEMPTS + 1 of them
    assert 0 < len(parses) <= replies_module.MAX_PARSE_ATTEMPTS + 1
    assert extraction.method == "bare" and extraction.code is not None
    assert "explanation" not in extraction.code


@pytest.mark.usefixtures("sandbox")
def test_a_judge_overrun_is_the_agents_failure(monkeypatch) -> None:
    monkeypatch.setattr(malt_episode, "JUDGE_BUDGET_S", 1e-6)
    oracle = APP.oracle_reply(GRAPH_QUERY.ground_truth, [])
    result = run_episode_guarded(APP, GRAPH_QUERY, ScriptedClient([oracle]))
    assert result.scored and not result.correct
    assert result.failure == "bad_output:judge_timeout"
