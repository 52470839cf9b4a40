"""k8s few-shot examples: drawn from the public generator on the reserved seed, deterministic,
never an assessed query; the situation is the report the episode would show (from the ground
truth, no cluster) and the answer the oracle's first reply, one well-formed kubectl apply of
the faulted policies' healthy versions."""

from __future__ import annotations

import pytest
import yaml

from apps.k8s import examples
from apps.k8s.app import K8sApp
from apps.k8s.reference import oracle_reply
from apps.k8s.replies import parse_reply
from evaluator.types import FEW_SHOT_SEED


@pytest.fixture(scope="module")
def app() -> K8sApp:
    return K8sApp()


def test_one_example_per_level_from_the_reserved_seed_answered_by_the_oracle(app) -> None:
    queries = examples.few_shot_queries(app.generate, app.levels)
    pairs = app.few_shot_examples()
    assert [q.level for q in queries] == list(app.levels) and len(pairs) == len(queries)
    assert {q.seed for q in queries} == {FEW_SHOT_SEED}
    for query, (situation, answer) in zip(queries, pairs, strict=True):
        assert answer == oracle_reply(query.ground_truth, [])
        parsed = parse_reply(answer)
        assert parsed.error is None, (answer, parsed)
        if query.ground_truth.get("healthy"):
            continue
        assert situation.startswith("Connectivity report before your first step (")
        manifest = answer.split("<<EOF\n", 1)[1].rsplit("\nEOF", 1)[0]
        names = sorted(doc["metadata"]["name"] for doc in yaml.safe_load_all(manifest))
        assert names == sorted(query.ground_truth["repair"])
        for fault in query.ground_truth["faults"]:
            assert f"- policy {fault['policy']}: {fault['detail']}" in situation


def test_the_report_is_the_ground_truths_difference() -> None:
    from evaluator.types import Query

    query = Query(
        "k8s", 2, FEW_SHOT_SEED, 0, 1, ("AI",), "prompt",
        {"expected": [["a", "b", "TCP/80"], ["c", "d", "TCP/53"]],
         "initial_allowed": [["a", "b", "TCP/80"], ["e", "b", "TCP/80"]]},
    )
    report = examples.initial_report(query)
    assert report.splitlines() == [
        "Connectivity report before your first step (2 mismatches):",
        "c -> d:53/TCP (expected allowed, measured blocked)",
        "e -> b:80/TCP (expected blocked, measured allowed)",
    ]


def test_examples_are_deterministic(app) -> None:
    assert K8sApp().few_shot_examples() == app.few_shot_examples() == app.few_shot_examples()


def test_no_example_is_a_query_of_an_assessment_batch(app) -> None:
    shown = {q.fingerprint() for q in examples.few_shot_queries(app.generate, app.levels)}
    situations = {situation for situation, _ in app.few_shot_examples()}
    for seed in (0, 2**127):
        batch = app.generate(15, seed)
        assert not shown & {q.fingerprint() for q in batch}
        assert not situations & {q.prompt for q in batch}


def test_the_reserved_seed_is_no_assessment_seed() -> None:
    from evaluator.green.request import RequestError, parse_config

    assert FEW_SHOT_SEED < 0  # assessment seeds are in [0, 2**SEED_BITS)
    with pytest.raises(RequestError, match="integer from 0"):
        parse_config("k8s", {"seed": FEW_SHOT_SEED})
