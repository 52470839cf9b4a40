"""Adversarial query search: ``training.adversarial_search`` and ``manage.py adversarial_search``.

The fast tests use a toy app (no emulator) with one arm the scripted agent always fails; the
route test plays the real floor agent in Mininet.
"""

from __future__ import annotations

import json
import math
import random
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from evaluator.registry import get_app
from evaluator.runner import run_episode_guarded
from evaluator.testing import WORDS, GuessApp, ScriptedClient, ToyApp, _queries, registered_app
from evaluator.types import JSON, Query
from training import adversarial_search as search_module
from training.adversarial_search import (
    ArmStats,
    QueryPool,
    adversarial_search,
    arm_of,
    ratio_interval,
    read_batch,
    reference_clients,
    thompson_choice,
    write_batch,
)

LABELS = ("alpha", "beta", "gamma", "delta")
SIDES = ("left", "right")
#: The arm the scripted agent always fails: label ``beta`` with operand feature ``left``.
HARD_ARM = "beta|left"


class ArmsApp(ToyApp):
    """The toy secret-word app with four labels and a ``side`` operand in the ground truth;
    the prompt names both, so the scripted agent can fail one arm on purpose."""

    app_id = "toyarms"
    title = "Toy: secret word with arms"

    def generate(self, count: int, seed: int, level: int | None = None) -> list[Query]:
        """Labels drawn from :data:`LABELS`, side from :data:`SIDES`, word from ``WORDS``."""

        def make(rng: random.Random) -> tuple[tuple[str, ...], str, JSON]:
            label, side = rng.choice(LABELS), rng.choice(SIDES)
            prompt = (
                f"Find the secret word ({label}, {side}). Reply with JSON "
                '{"action": "look"}, then {"action": "say", "word": <the word>}.'
            )
            return (label,), prompt, {"word": rng.choice(WORDS), "side": side}

        return _queries(self, count, seed, level, make)


def _agent_reply(messages: list[JSON], episode_id: str) -> str:
    """Look, then say the word seen -- except on the hard arm, where it says a wrong word."""
    task = str(messages[0]["content"])
    last = str(messages[-1]["content"])
    if "The secret word is" not in last:
        return json.dumps({"action": "look"})
    word = last.rsplit(" ", 1)[-1].rstrip(".")
    if "(beta, left)" in task:
        word = "not-" + word
    return json.dumps({"action": "say", "word": word})


@pytest.fixture
def arms_feature(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give the toy app an operand feature (its ``side``), as route and k8s have."""
    monkeypatch.setattr(
        ArmsApp, "operand_feature", lambda self, query: query.ground_truth["side"], raising=False
    )


def _run(seed: int = 7, budget: int = 40) -> search_module.SearchResult:
    client = ScriptedClient(_agent_reply)
    return adversarial_search(
        ArmsApp(), lambda query: client, budget=budget, seed=seed, pool_queries=64
    )


def test_bandit_concentrates_on_the_failing_arm_and_reports_the_lift(arms_feature: None) -> None:
    result = _run()
    bandit = result.phase("bandit")
    uniform = result.phase("uniform")
    assert len(bandit) == len(uniform) == 40
    assert len(result.arms) == len(LABELS) * len(SIDES)
    # every failure is the hard arm's, and the agent fails it every time
    assert all((p.arm == HARD_ARM) == p.failed for p in result.pulls)
    hard_pulls = sum(p.arm == HARD_ARM for p in bandit)
    assert hard_pulls > len(bandit) / 2
    assert hard_pulls > 3 * max(
        sum(p.arm == a for p in bandit) for a in result.arms if a != HARD_ARM
    )

    report = result.report()
    bandit_rate, uniform_rate = report["bandit"]["failure_rate"], report["uniform"]["failure_rate"]
    assert report["bandit"]["failures"] == hard_pulls
    assert report["uniform"]["failures"] == sum(p.arm == HARD_ARM for p in uniform)
    assert bandit_rate["low"] <= bandit_rate["value"] <= bandit_rate["high"]
    assert uniform_rate["low"] <= uniform_rate["value"] <= uniform_rate["high"]
    assert bandit_rate["low"] > uniform_rate["high"]  # the intervals separate
    lift = report["lift"]
    assert lift["value"] == pytest.approx(bandit_rate["value"] / uniform_rate["value"])
    assert 1 < lift["low"] < lift["value"] < lift["high"]
    top = report["arms"][0]
    assert top["arm"] == HARD_ARM and top["failures"] == top["pulls"] == hard_pulls
    text = search_module.format_report(report)
    assert "lift" in text and HARD_ARM in text and "Wilson" in text


def test_hardest_queries_are_the_failed_ones_and_replay(arms_feature: None, tmp_path: Path) -> None:
    result = _run()
    hardest = result.hardest()
    failed = {p.query.fingerprint() for p in result.pulls if p.failed}
    assert {q.fingerprint() for q in hardest} == failed
    assert all(arm_of(q, app=ArmsApp()) == HARD_ARM for q in hardest)
    path = tmp_path / "hard.jsonl"
    assert write_batch(path, hardest) == len(hardest)
    replayed = read_batch(path, verify_with=ArmsApp())
    assert [q.fingerprint() for q in replayed] == [q.fingerprint() for q in hardest]
    # replaying the batch with the same agent fails every query again
    client = ScriptedClient(_agent_reply)
    assert not any(run_episode_guarded(ArmsApp(), q, client).correct for q in replayed)


def test_a_tampered_batch_line_does_not_verify(arms_feature: None, tmp_path: Path) -> None:
    query = _run(budget=10).hardest()[0]
    data = query.to_dict()
    data["ground_truth"]["word"] = "other"
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(data) + "\n")
    assert read_batch(path)[0].ground_truth["word"] == "other"  # readable without checking
    with pytest.raises(ValueError, match="does not regenerate"):
        read_batch(path, verify_with=ArmsApp())
    path.write_text('{"app_id": "toyarms"}\n')
    with pytest.raises(ValueError, match="not a query"):
        read_batch(path)


def test_same_seed_same_pulls(arms_feature: None) -> None:
    first, again, other = _run(seed=3, budget=15), _run(seed=3, budget=15), _run(seed=4, budget=15)
    ids = [p.query.query_id for p in first.pulls]
    assert ids == [p.query.query_id for p in again.pulls]
    assert ids != [p.query.query_id for p in other.pulls]


def test_pool_retires_an_arm_it_cannot_supply() -> None:
    pool = QueryPool(ArmsApp(), 1, chunk=8, pool_queries=8, max_generated=16)
    arm = pool.arms[0]
    taken = [pool.take(arm) for _ in range(17)]
    assert taken[-1] is None and pool.generated == 16
    assert all(arm_of(q, app=ArmsApp()) == arm for q in taken if q is not None)


def test_thompson_prefers_the_arm_with_more_failures() -> None:
    rng = random.Random(0)
    good, bad = ArmStats("good", pulls=20, failures=1), ArmStats("bad", pulls=20, failures=19)
    picks = [thompson_choice([good, bad], rng).key for _ in range(200)]
    assert picks.count("bad") > 190
    with pytest.raises(ValueError):
        thompson_choice([], rng)


def test_ratio_interval() -> None:
    interval = ratio_interval(30, 40, 10, 40)
    assert interval.value == pytest.approx(3.0)
    assert 1 < interval.low < 3 < interval.high
    assert math.isnan(ratio_interval(3, 10, 0, 10).value)
    assert math.isnan(ratio_interval(0, 10, 4, 10).low)


def test_reference_clients() -> None:
    app = ArmsApp()
    query = app.generate(1, 0)[0]
    oracle = reference_clients("oracle", app)(query)
    said = json.loads(
        oracle.complete([{"role": "user", "content": query.prompt}], episode_id="x").text
    )
    assert said == {"action": "say", "word": query.ground_truth["word"]}
    assert run_episode_guarded(app, query, reference_clients("null", app)(query)).correct is False
    with pytest.raises(ValueError, match="unknown reference agent"):
        reference_clients("nobody", app)
    with pytest.raises(ValueError, match="no heuristic"):
        reference_clients("heuristic", GuessApp())


def test_command_writes_batch_and_report(arms_feature: None, tmp_path: Path) -> None:
    out = tmp_path / "hard.jsonl"
    stdout = StringIO()
    with registered_app({"toyarms": ArmsApp}):
        call_command(
            "adversarial_search", "--agent", "heuristic", "--app", "toyarms", "--budget", "12",
            "--seed", "2",
            "--out", str(out), stdout=stdout,
        )  # fmt: skip
        text = stdout.getvalue()
        assert "bandit  failure rate" in text and "uniform failure rate" in text
        report = json.loads(out.with_name(out.name + ".report.json").read_text())
        assert report["budget"] == 12 and report["bandit"]["scored"] == 12
        # the toy heuristic solves every query: nothing failed, nothing written, no lift
        assert report["bandit"]["failures"] == 0 and report["lift"]["value"] is None
        assert out.read_text() == ""
        with pytest.raises(CommandError, match="budget"):
            call_command("adversarial_search", "--agent", "null", "--app", "toyarms",
                         "--budget", "0", "--seed", "1")  # fmt: skip
        with pytest.raises(CommandError):
            call_command("adversarial_search", "--agent", "null", "--app", "nope", "--budget", "1",
                         "--seed", "1")  # fmt: skip


def test_command_refuses_an_agent_url_the_guard_refuses(tmp_path: Path) -> None:
    with registered_app({"toyarms": ArmsApp}), pytest.raises(CommandError):
        call_command("adversarial_search", "--agent-url", "file:///etc/passwd",
                     "--protocol", "http-json", "--app", "toyarms", "--budget", "1",
                     "--seed", "1")  # fmt: skip


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_route_heuristic_search_writes_a_replayable_batch(
    route_emulator: None, tmp_path: Path
) -> None:
    out = tmp_path / "route-hard.jsonl"
    stdout = StringIO()
    call_command(
        "adversarial_search", "--agent", "heuristic", "--app", "route", "--budget", "3",
        "--seed", "5",
        "--out", str(out), stdout=stdout,
    )  # fmt: skip
    report: dict[str, Any] = json.loads(out.with_name(out.name + ".report.json").read_text())
    assert report["bandit"]["scored"] + report["bandit"]["infrastructure"] == 3
    assert report["uniform"]["scored"] + report["uniform"]["infrastructure"] == 3
    for phase in ("bandit", "uniform"):
        rate = report[phase]["failure_rate"]
        assert rate["low"] <= rate["value"] <= rate["high"]
    app = get_app("route")
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == report["hardest_queries"] >= 1  # the floor agent fails most queries
    for data in lines:
        query = Query.from_dict(data)
        fresh = app.generate(query.index + 1, query.seed)[query.index]
        assert fresh.fingerprint() == query.fingerprint()
        assert arm_of(query).split("|")[0] == query.label
    assert len(read_batch(out, verify_with=app)) == len(lines)
    # the hardest query is hard: the floor agent fails it again when it is replayed
    first = Query.from_dict(lines[0])
    replay = run_episode_guarded(app, first, reference_clients("heuristic", app)(first))
    assert replay.scored and not replay.correct
