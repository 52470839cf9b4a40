"""Worked examples for few-shot prompting of the k8s app, drawn from the public generator.

One example per level: the query ``generate(1, FEW_SHOT_SEED, level)`` of the app
(:data:`evaluator.types.FEW_SHOT_SEED`, negative: every assessment seed is non-negative, so no
example is an assessed query). Its situation is the connectivity report the episode would show
before the first step, computed from the query's ground truth without a cluster (the intended
triples ``expected`` against the policy model's ``initial_allowed``, rendered by
:func:`apps.k8s.prompt.render_report`), and what inspecting the policies shows (each fault's
policy and the change, as the generator records it). Its answer is the oracle's first reply
(:func:`apps.k8s.reference.oracle_reply` with no history): the healthy versions of the faulted
policies in one ``kubectl apply``, or ``healthy`` for a healthy control.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from evaluator.types import FEW_SHOT_SEED, Query

from apps.k8s.prompt import render_report
from apps.k8s.reference import oracle_reply

#: ``K8sApp.generate``'s shape: (count, seed, level) -> queries.
Generate = Callable[[int, int, int | None], list[Query]]


def few_shot_queries(generate: Generate, levels: Sequence[int]) -> list[Query]:
    """The example queries: the first query of each level on :data:`FEW_SHOT_SEED`."""
    return [generate(1, FEW_SHOT_SEED, level)[0] for level in levels]


def initial_report(query: Query) -> str:
    """The report before the first step, from the ground truth alone: every intended triple
    the faults block and every other triple they allow (``(src, dst, "TCP/port")``)."""
    truth = query.ground_truth
    expected = {tuple(t) for t in truth.get("expected") or []}
    initial = truth.get("initial_allowed")  # absent: nothing differs (a healthy control)
    allowed = expected if initial is None else {tuple(t) for t in initial}
    mismatches = [(*t, True, False) for t in expected - allowed]
    mismatches += [(*t, False, True) for t in allowed - expected]
    return render_report(mismatches, "before your first step")


def situation(query: Query) -> str:
    """The example's situation text for ``query`` (module docstring): the report, then each
    fault as ``- policy <name>: <change>``."""
    lines = [initial_report(query)]
    faults = query.ground_truth.get("faults") or []
    if faults:
        lines.append("Inspecting the policies showed these changes from the intended ones:")
        lines += [f"- policy {fault['policy']}: {fault['detail']}" for fault in faults]
    return "\n".join(lines)


def few_shot_examples(generate: Generate, levels: Sequence[int]) -> list[tuple[str, str]]:
    """(situation, oracle's first reply) for each of :func:`few_shot_queries`; deterministic."""
    return [
        (situation(query), oracle_reply(query.ground_truth, []))
        for query in few_shot_queries(generate, levels)
    ]
