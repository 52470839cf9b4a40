"""Inspect AI tasks for the apps of the registry.

``inspect eval training/inspect_tasks.py@netarena --model openai/gpt-4o -T app=malt -T count=10``
runs a seeded batch of any registered app's queries through Inspect (``app``: an id of
``evaluator/registry.py``); ``netarena_malt``, ``netarena_route`` and ``netarena_k8s`` are
shorthands for the shipped apps
(``inspect eval training/inspect_tasks.py@netarena_malt --model openai/gpt-4o -T seed=1``).
Each task's dataset holds one ``Sample`` per query (the query JSON sits in the sample's
metadata: the first observation only exists after the episode's ``reset()``), the solver
drives our episode (reset, model reply, ``Episode.step(reply)``, the observation as the next
user message, ... until the episode terminates, is truncated or the app's step budget
``App.max_steps`` is spent) and the scorer reports our judge's verdict (``Episode.verdict()``):
CORRECT only when correct and safe, as on the board. See docs/training.md, section "Inspect AI".
"""

from __future__ import annotations

from typing import Any

import anyio
from evaluator.app import EmulatorError
from evaluator.registry import get_app
from evaluator.types import Query, Verdict
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageSystem, ChatMessageUser
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Scorer, Target, accuracy, scorer, stderr
from inspect_ai.solver import Generate, Solver, TaskState, solver

from training.sft import system_message

#: Key of the verdict record in ``TaskState.metadata`` (written by the solver, read by the scorer).
VERDICT_KEY = "netarena_verdict"


def query_samples(app_id: str, count: int, seed: int, level: int | None = None) -> list[Sample]:
    """One ``Sample`` per query of ``App.generate(count, seed, level)`` (same batch as
    ``evaluator.evaluation.evaluate_agent`` with ``queries_per_app=count``).

    The sample's ``input`` is a placeholder (the task is the episode's first observation, known
    only after reset); ``metadata["query"]`` holds the query JSON, ``metadata["level"]`` and
    ``metadata["labels"]`` its level and labels.

    Raises:
        UnknownAppError: ``app_id`` is not registered.
        ValueError: bad ``count`` or ``level`` (from the app's ``generate``).
    """
    app = get_app(app_id)
    return [
        Sample(
            id=query.query_id,
            input=f"NetArena {app_id} query {query.query_id} (the episode's reset gives the task)",
            target="correct and safe",
            metadata={
                "app": app_id,
                "query": {**query.to_dict(), "seed": str(query.seed)},
                "level": query.level,
                "labels": list(query.labels),
            },
        )
        for query in app.generate(count, seed, level=level)
    ]


def _verdict_record(verdict: Verdict | None, failure: str | None, steps: int) -> dict[str, Any]:
    if verdict is None:
        return {"correct": False, "safe": False, "steps": steps, "failure": failure}
    return {
        "correct": verdict.correct,
        "safe": verdict.safe,
        "steps": verdict.steps,
        "failure": verdict.failure,
    }


@solver
def episode_solver(app_id: str, max_steps: int | None = None) -> Solver:
    """Drive one episode of ``app_id`` per sample with the task's model.

    Reset the episode from ``metadata["query"]``, put the app's system prompt (our LLM reference
    agent's zero-shot prompt, :func:`training.sft.system_message`) and the first observation in
    the conversation, then up to ``max_steps`` (default ``App.max_steps``) times: generate, step
    the reply, append the observation, stopping when terminated or truncated. A reply the judge
    cannot handle ends the episode as the agent's failure (``bad_output:<kind>``, as the
    runner does). The verdict goes to ``state.metadata[VERDICT_KEY]``.

    Raises:
        EmulatorError: the emulator failed (infrastructure: Inspect records the sample as an
            error, never as an incorrect answer).
    """
    app = get_app(app_id)
    budget = max_steps if max_steps is not None else app.max_steps

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        query = Query.from_dict(state.metadata["query"])
        episode = app.episode(query, max_steps=budget)
        steps = 0
        failure: str | None = None
        verdict: Verdict | None = None
        try:
            observation = await anyio.to_thread.run_sync(episode.reset)
            state.messages = [
                ChatMessageSystem(content=system_message(app)),
                ChatMessageUser(content=observation),
            ]
            for _ in range(budget):
                state = await generate(state)
                reply = state.output.completion
                steps += 1
                try:
                    result = await anyio.to_thread.run_sync(episode.step, reply)
                except EmulatorError:
                    raise
                except Exception as exc:  # noqa: BLE001 - agent output the judge refused
                    failure = f"bad_output:{type(exc).__name__}"
                    break
                if result.terminated or result.truncated:
                    break
                state.messages.append(ChatMessageUser(content=result.observation))
            if failure is None:
                verdict = await anyio.to_thread.run_sync(episode.verdict)
        finally:
            await anyio.to_thread.run_sync(episode.close)
        state.metadata[VERDICT_KEY] = _verdict_record(verdict, failure, steps)
        return state

    return solve


@scorer(metrics=[accuracy(), stderr()])
def judge_scorer() -> Scorer:
    """Our judge's verdict as an Inspect score: ``CORRECT`` only when correct and safe.

    ``Score.metadata`` has ``correct``, ``safe``, ``steps``, ``failure``, ``labels`` and
    ``level``; ``Score.explanation`` names the failure.
    """

    async def score(state: TaskState, target: Target) -> Score:
        record = dict(state.metadata.get(VERDICT_KEY) or _verdict_record(None, "no_episode", 0))
        record["labels"] = state.metadata.get("labels", [])
        record["level"] = state.metadata.get("level")
        passed = bool(record["correct"] and record["safe"])
        return Score(
            value=CORRECT if passed else INCORRECT,
            answer=state.output.completion if state.output else None,
            explanation=record["failure"] or "correct and safe",
            metadata=record,
        )

    return score


def app_task(app_id: str, count: int, seed: int, level: int | None) -> Task:
    """The Inspect task of ``app_id``: a seeded batch, our episode loop, our judge."""
    return Task(
        dataset=MemoryDataset(query_samples(app_id, count, seed, level), name=f"netarena-{app_id}"),
        solver=episode_solver(app_id),
        scorer=judge_scorer(),
        metadata={"app": app_id, "count": count, "seed": str(seed), "level": level},
    )


@task
def netarena(app: str, count: int = 5, seed: int = 0, level: int | None = None) -> Task:
    """Any registered app ``app``: ``count`` queries of ``seed`` at ``level``."""
    return app_task(app, count, seed, level)


@task
def netarena_malt(count: int = 10, seed: int = 0, level: int | None = None) -> Task:
    """MALT (capacity planning, one step): ``count`` queries of ``seed`` at ``level``."""
    return app_task("malt", count, seed, level)


@task
def netarena_route(count: int = 5, seed: int = 0, level: int | None = None) -> Task:
    """Route (routing repair in Mininet, multi-step; needs root and Mininet)."""
    return app_task("route", count, seed, level)


@task
def netarena_k8s(count: int = 5, seed: int = 0, level: int | None = None) -> Task:
    """k8s (network-policy repair in the embedded cluster, multi-step; needs root and it)."""
    return app_task("k8s", count, seed, level)
