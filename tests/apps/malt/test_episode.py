"""MALT episodes through the real sandbox: oracle/null agents, hostile code, failure modes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from apps.malt.app import MaltApp
from apps.malt.oracle import oracle_code
from apps.malt.queries import BLOCK
from apps.malt.topology import load_graph
from evaluator.agents.base import AgentClient, AgentError, AgentReply
from evaluator.app import ResetNeededError
from evaluator.oracle_vault import OracleVault
from evaluator.runner import run_episode
from evaluator.types import JSON, EpisodeResult, Query
from tests.conftest import require_root, require_tool

APP = MaltApp()


@pytest.fixture(autouse=True)
def _sandbox_available() -> None:
    require_root()
    require_tool("bwrap")
    require_tool("setpriv")


class ScriptedClient(AgentClient):
    """In-process agent: ``reply(messages, episode_id)`` gives the text (or raises)."""

    def __init__(self, reply: Callable[[list[JSON], str], str]) -> None:
        self.reply = reply

    def complete(self, messages: list[JSON], *, episode_id: str) -> AgentReply:
        return AgentReply(text=self.reply(messages, episode_id), latency_s=0.0)


def _code(body: str) -> str:
    return f"```python\n{body}\n```"


def _run(query: Query, reply: str) -> EpisodeResult:
    return run_episode(APP, query, ScriptedClient(lambda m, e: reply))


def _query(label: str, seed: int = 17) -> Query:
    return next(q for q in APP.generate(BLOCK, seed=seed) if q.label == label)


def test_oracle_is_correct_and_safe_and_null_is_incorrect_on_every_label(tmp_path: Path) -> None:
    vault = OracleVault(tmp_path / "vault")

    def oracle(messages: list[JSON], episode_id: str) -> str:
        stored = vault.get(episode_id)  # the real lookup a served oracle does
        assert stored is not None
        return APP.oracle_reply(stored.ground_truth, messages)

    null = ScriptedClient(lambda m, e: APP.null_reply(m))
    labels = set()
    for query in APP.generate(BLOCK, seed=29):
        with vault.deposit(query) as episode_id:
            good = run_episode(APP, query, ScriptedClient(oracle), episode_id=episode_id)
        assert good.correct and good.safe and good.failure is None, (query.label, good.details)
        assert good.steps == 1 and good.latency_s > 0.0
        bad = run_episode(APP, query, null)
        assert not bad.correct and bad.safe, (query.label, bad.details)
        assert bad.failure == "wrong_answer"
        labels.add(query.label)
    assert len(labels) == BLOCK


def _add_query(kind: str) -> Query:
    for seed in range(50):
        query = _query("add", seed)
        if query.ground_truth["program"][0]["op"] == kind:
            return query
    raise AssertionError(f"no {kind} query in 50 seeds")


@pytest.mark.parametrize("kind", ["add_port", "add_switch"])
def test_natural_prompt_compliant_answer_passes(kind: str) -> None:
    """An answer written from the prompt alone (not the oracle's code) is judged correct."""
    query = _add_query(kind)
    op = query.ground_truth["program"][0]
    if op["op"] == "add_port":
        body = (
            "def process_graph(graph_data):\n"
            "    g = graph_data\n"
            f"    name = {op['name']!r}\n"
            "    g.add_node('EK_PORT:' + name, name=name, type='EK_PORT',\n"
            f"               physical_capacity_bps={op['capacity_bps']})\n"
            f"    g.add_edge({op['parent']!r}, 'EK_PORT:' + name, type='RK_CONTAINS')\n"
            "    return {'answer': g}\n"
        )
    else:
        body = (
            "def process_graph(graph_data):\n"
            "    g = graph_data\n"
            f"    name = {op['name']!r}\n"
            "    sw = 'EK_PACKET_SWITCH:' + name\n"
            "    g.add_node(sw, name=name, type='EK_PACKET_SWITCH',\n"
            f"               switch_loc={{'stage': {op['stage']}}})\n"
            f"    g.add_edge({op['parent']!r}, sw, type='RK_CONTAINS')\n"
            f"    for i in range(1, {op['ports']} + 1):\n"
            "        p = f'{name}.p{i}'\n"
            "        g.add_node('EK_PORT:' + p, name=p, type='EK_PORT',\n"
            f"                   physical_capacity_bps={op['port_capacity_bps']})\n"
            "        g.add_edge(sw, 'EK_PORT:' + p, type='RK_CONTAINS')\n"
            "    return {'answer': nx.node_link_data(g, edges='links')}\n"
        )
    result = _run(query, "Here you go:\n" + _code(body))
    assert result.correct and result.safe, result.details


def test_type_as_list_is_wrong_and_unsafe() -> None:
    """The prompt says type is a str; a list-typed new node fails both (no hidden convention)."""
    query = _add_query("add_port")
    code = oracle_code(query.ground_truth).replace('type="EK_PORT"', 'type=["EK_PORT"]')
    result = _run(query, _code(code))
    assert not result.correct and not result.safe
    assert "node_type" in result.details["safety"]["violations"]


def test_infinite_loop_times_out_as_a_failed_episode() -> None:
    from evaluator.sandbox import SandboxLimits

    query = _query("count")
    episode = APP.episode(query, limits=SandboxLimits(wall_timeout_s=1.0, cpu_time_s=1.0))
    with episode:
        episode.reset()
        step = episode.step(_code("def process_graph(graph_data):\n    while True:\n        pass"))
        verdict = episode.verdict()
    assert step.terminated
    assert not verdict.correct and verdict.safe
    assert verdict.failure in ("sandbox:timeout", "sandbox:cpu")


def test_exception_is_a_clean_failure_with_the_traceback() -> None:
    result = _run(_query("rank"), _code("def process_graph(graph_data):\n    return 1 / 0"))
    assert not result.correct and result.safe
    assert result.failure == "sandbox:exception"
    assert "ZeroDivisionError" in result.details["explanation"]


@pytest.mark.parametrize(
    ("returned", "failure", "safe"),
    [
        ("42", "bad_result", True),
        ("{'result': 3}", "bad_result", True),
        ("{'answer': nx.DiGraph(), 'updated_graph': nx.DiGraph()}", "wrong_answer", False),
        ("{'answer': 'done', 'updated_graph': 'the graph'}", "wrong_answer", False),
        ("{'answer': None, 'updated_graph': {'nodes': 5}}", "wrong_answer", False),
    ],
)
def test_malformed_results_fail_cleanly(returned: str, failure: str, safe: bool) -> None:
    query = _query("remove")
    result = _run(query, _code(f"def process_graph(graph_data):\n    return {returned}"))
    assert not result.correct
    assert result.failure == failure, result.details
    assert result.safe is safe, result.details


def test_agent_code_cannot_touch_the_evaluator_graph() -> None:
    base = load_graph()
    before = (base.number_of_nodes(), base.number_of_edges())
    query = _query("list")
    hostile = (
        "def process_graph(graph_data):\n"
        "    graph_data.clear()\n"
        "    import gc\n"
        "    for obj in gc.get_objects():\n"
        "        if isinstance(obj, nx.DiGraph):\n"
        "            obj.clear()\n"
        "    return {'answer': []}\n"
    )
    result = _run(query, _code(hostile))
    assert not result.correct
    assert (base.number_of_nodes(), base.number_of_edges()) == before
    again = _run(query, APP.oracle_reply(query.ground_truth, []))  # later GT unaffected
    assert again.correct and again.safe


def test_topology_must_be_returned_for_changes_and_unchanged_otherwise() -> None:
    changing = _query("remove+count")
    code = oracle_code(changing.ground_truth).replace(
        "CHANGES_TOPOLOGY = True", "CHANGES_TOPOLOGY = False"
    )
    result = _run(changing, _code(code))
    assert not result.correct and result.safe and result.failure == "missing_graph"

    reading = _query("count")
    code = oracle_code(reading.ground_truth).replace(
        "CHANGES_TOPOLOGY = False", "CHANGES_TOPOLOGY = True"
    )
    assert _run(reading, _code(code)).correct  # an unchanged updated_graph is fine
    tampered = code.replace(
        "def process_graph(graph_data):\n",
        "def process_graph(graph_data):\n"
        "    graph_data.nodes['EK_PORT:ju1.a1.m1.s2c1.p1']['physical_capacity_bps'] = 2 * 10**9\n",
    )
    result = _run(reading, _code(tampered))
    assert not result.correct and result.failure == "wrong_graph" and result.safe


def test_no_code_and_agent_failure_are_failed_episodes_not_skips() -> None:
    query = _query("rank")
    result = _run(query, "I would rank them by capacity.")
    assert not result.correct and result.failure == "no_code" and result.safe

    def broken(messages: list[JSON], episode_id: str) -> str:
        raise AgentError("timeout", "no answer within 60 s")

    result = run_episode(APP, query, ScriptedClient(broken))
    assert not result.correct and result.failure == "agent:timeout"
    assert result.steps == 0 and result.latency_s == 0.0


def test_episode_requires_reset() -> None:
    episode = APP.episode(_query("list"))
    with pytest.raises(ResetNeededError):
        episode.step("```python\ndef process_graph(g):\n    return {}\n```")
    with pytest.raises(ResetNeededError):
        episode.verdict()
