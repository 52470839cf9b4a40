"""Inspect AI tasks: one task run end to end with Inspect's scripted mock
model answering the oracle's replies, scored by our judge, compared with the runner's verdicts
on the same queries."""

from __future__ import annotations

from pathlib import Path

import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.log import EvalSample
from inspect_ai.model import (
    ChatMessage,
    GenerateConfig,
    Model,
    ModelOutput,
    get_model,
)
from inspect_ai.tool import ToolChoice, ToolInfo

from evaluator.registry import get_app
from evaluator.runner import run_episode
from evaluator.testing import ScriptedClient
from evaluator.types import JSON, Query
from training.inspect_tasks import app_task, netarena_malt, query_samples
from training.sft import play_oracle


@pytest.fixture(autouse=True)
def offline_token_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inspect's mock model counts input tokens with tiktoken, which downloads its encoding on
    first use; this machine (and CI) is offline, so count four characters as one token."""
    from inspect_ai.model._providers.mockllm import MockLLM

    async def count_text_tokens(self: MockLLM, text: str) -> int:
        return max(1, len(text) // 4)

    monkeypatch.setattr(MockLLM, "count_text_tokens", count_text_tokens)


def _oracle_client(app_id: str, query: Query) -> ScriptedClient:
    app = get_app(app_id)

    def reply(messages: list[JSON], episode_id: str) -> str:
        return app.oracle_reply(query.ground_truth, messages)

    return ScriptedClient(reply)


def test_query_samples_carry_the_seeded_batch() -> None:
    samples = query_samples("malt", 3, 7, level=2)
    queries = get_app("malt").generate(3, 7, level=2)
    assert [s.id for s in samples] == [q.query_id for q in queries]
    for sample, query in zip(samples, queries, strict=True):
        assert sample.metadata is not None
        assert Query.from_dict(sample.metadata["query"]) == query
        assert sample.metadata["level"] == 2
        assert query.prompt not in str(sample.input)


def test_malt_task_scores_match_the_runner(malt_sandbox: None, tmp_path: Path) -> None:
    app = get_app("malt")
    seed, count = 11, 3
    queries = app.generate(count, seed, level=1)
    replies = [
        message["content"]
        for query in queries
        for message in play_oracle(app, query).messages
        if message["role"] == "assistant"
    ]
    # one wrong answer among the oracle's, so that INCORRECT is exercised too
    replies[-1] = "```python\ndef process_graph(graph_data):\n    return 'no'\n```"
    model = get_model(
        "mockllm/model",
        custom_outputs=[ModelOutput.from_content("mockllm/model", text) for text in replies],
    )
    logs = inspect_eval(
        netarena_malt(count=count, seed=seed, level=1),
        model=model,
        max_samples=1,
        log_dir=str(tmp_path),
        display="none",
    )
    assert logs[0].status == "success", logs[0].error
    samples = {sample.id: sample for sample in logs[0].samples or []}
    assert set(samples) == {q.query_id for q in queries}
    for query, reply in zip(queries, replies, strict=True):
        expected = run_episode(app, query, ScriptedClient([reply]))
        score = samples[query.query_id].scores["judge_scorer"]  # type: ignore[index]
        assert score.metadata is not None
        assert (score.metadata["correct"], score.metadata["safe"]) == (
            expected.correct,
            expected.safe,
        )
        assert score.value == ("C" if expected.correct and expected.safe else "I")
        assert score.metadata["labels"] == list(query.labels)
        assert score.metadata["level"] == 1
    outcomes = [samples[q.query_id].scores["judge_scorer"].value for q in queries]  # type: ignore[index]
    assert outcomes[:-1] == ["C"] * (count - 1) and outcomes[-1] == "I"


def _oracle_model(app_id: str, queries: list[Query]) -> Model:
    """Inspect's mock model answering as the oracle: each reply is ``App.oracle_reply`` of the
    current query's ground truth and the conversation so far (samples run one at a time, in
    dataset order; a conversation of one user turn starts the next query)."""
    app = get_app(app_id)
    position = {"index": -1}

    def reply(
        messages: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> ModelOutput:
        history: list[JSON] = [
            {"role": m.role, "content": m.text} for m in messages if m.role != "system"
        ]
        if len(history) == 1:
            position["index"] += 1
        query = queries[position["index"]]
        return ModelOutput.from_content(
            "mockllm/model", app.oracle_reply(query.ground_truth, history)
        )

    return get_model("mockllm/model", custom_outputs=reply)


def _inspect_vs_runner(app_id: str, count: int, seed: int, tmp_path: Path) -> list[EvalSample]:
    """Run the app's Inspect task with the oracle mock model and the runner with the oracle
    client on the same queries; assert equal verdicts; return Inspect's samples."""
    app = get_app(app_id)
    queries = app.generate(count, seed, level=1)
    logs = inspect_eval(
        app_task(app_id, count, seed, 1),
        model=_oracle_model(app_id, queries),
        max_samples=1,
        log_dir=str(tmp_path),
        display="none",
    )
    assert logs[0].status == "success", logs[0].error
    samples = {sample.id: sample for sample in logs[0].samples or []}
    assert set(samples) == {q.query_id for q in queries}
    for query in queries:
        expected = run_episode(app, query, _oracle_client(app_id, query))
        assert not expected.infrastructure
        score = samples[query.query_id].scores["judge_scorer"]  # type: ignore[index]
        assert score.metadata is not None
        assert (score.metadata["correct"], score.metadata["safe"]) == (
            expected.correct,
            expected.safe,
        )
        assert score.value == ("C" if expected.correct and expected.safe else "I")
        assert score.metadata["steps"] == expected.steps
        assert score.metadata["labels"] == list(query.labels)
    return [samples[q.query_id] for q in queries]


def test_malt_oracle_model_matches_the_runner(malt_sandbox: None, tmp_path: Path) -> None:
    samples = _inspect_vs_runner("malt", 2, 5, tmp_path)
    assert [s.scores["judge_scorer"].value for s in samples] == ["C", "C"]  # type: ignore[index]


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_route_task_matches_the_runner(route_emulator: None, tmp_path: Path) -> None:
    samples = _inspect_vs_runner("route", 2, 3, tmp_path)
    assert [s.scores["judge_scorer"].value for s in samples] == ["C", "C"]  # type: ignore[index]
    # one model turn per episode step, each after the observation it answered
    for sample in samples:
        roles = [m.role for m in sample.messages if m.role != "system"]
        steps = sample.scores["judge_scorer"].metadata["steps"]  # type: ignore[index]
        assert roles.count("assistant") == steps
        assert roles[0] == "user" and "assistant, assistant" not in ", ".join(roles)


@pytest.mark.root
@pytest.mark.k8s
@pytest.mark.slow
def test_k8s_task_matches_the_runner(k8s_cluster: None, tmp_path: Path) -> None:
    samples = _inspect_vs_runner("k8s", 1, 3, tmp_path)
    assert [s.scores["judge_scorer"].value for s in samples] == ["C"]  # type: ignore[index]
