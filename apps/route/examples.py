"""Worked examples for few-shot prompting of the route app, drawn from the public generator.

One example per level: the query ``generate(1, FEW_SHOT_SEED, level)`` of the app
(:data:`evaluator.types.FEW_SHOT_SEED`, negative: every assessment seed is non-negative, so no
example is an assessed query). Its situation is the query's opening paragraph and what
inspecting the machines shows, written from the query's ground truth (each fault's machine,
catalogue name and injected commands; the harmless distractors); its answer is the oracle's
first reply (:func:`apps.route.reference.oracle_reply` with no history): the first step of
the hidden repair, or the healthy reply for a healthy control. Nothing touches Mininet:
generation and the oracle are pure Python, so the examples are the same on every host. Node
names carry no episode prefix in the examples (the oracle's commands have none either).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from evaluator.types import FEW_SHOT_SEED, Query

from apps.route.faults import with_prefix
from apps.route.reference import oracle_reply

#: ``RouteApp.generate``'s shape: (count, seed, level) -> queries.
Generate = Callable[[int, int, int | None], list[Query]]

HEALTHY_FINDING = (
    "Inspecting the machines showed no change from the intended configuration, and pingall "
    "reports every pair reachable."
)


def few_shot_queries(generate: Generate, levels: Sequence[int]) -> list[Query]:
    """The example queries: the first query of each level on :data:`FEW_SHOT_SEED`."""
    return [generate(1, FEW_SHOT_SEED, level)[0] for level in levels]


def _commands(commands: Sequence[Any]) -> str:
    return "; ".join(with_prefix(str(command), "") for command in commands)


def situation(query: Query) -> str:
    """The example's situation text for ``query`` (module docstring): its opening paragraph,
    then each fault as ``- on <machine> (<type>, <name>): <commands that made it>`` and each
    distractor as harmless, or :data:`HEALTHY_FINDING` for a healthy control."""
    truth = query.ground_truth
    opening = query.prompt.split("\n\n", 1)[0]
    if truth.get("healthy") or not truth.get("faults"):
        return f"{opening}\n\n{HEALTHY_FINDING}"
    lines = [
        opening,
        "",
        "(Node names in this example carry no prefix.) Inspecting the machines showed these "
        "changes from the intended configuration:",
    ]
    for fault in truth["faults"]:
        kind = str(fault["type"]).replace("_", " ")
        lines.append(
            f"- on {fault['machine']} ({kind}, {fault['name']}): {_commands(fault['inject'])}"
        )
    extras = truth.get("distractors") or []
    if extras:
        lines.append("Also changed, harmless to connectivity (leave these as they are):")
        lines += [f"- on {d['machine']}: {_commands([d['command']])}" for d in extras]
    return "\n".join(lines)


def few_shot_examples(generate: Generate, levels: Sequence[int]) -> list[tuple[str, str]]:
    """(situation, oracle's first reply) for each of :func:`few_shot_queries`; deterministic."""
    return [
        (situation(query), oracle_reply(query.ground_truth, []))
        for query in few_shot_queries(generate, levels)
    ]
