"""SFT export: real oracle episodes, judged while exporting, re-scored from
the file in fresh episodes, disjoint train / held-out splits, the dataset card, the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from apps.malt.app import MaltApp
from apps.malt.episode import MaltEpisode
from evaluator.app import EmulatorError
from evaluator.registry import get_app
from evaluator.sampling import HEALTHY_LABEL, is_healthy_control
from evaluator.types import JSON, Query
from training.sft import (
    HELDOUT_SEEDS,
    TRAIN_SEEDS,
    export_sft,
    read_examples,
    rescore,
    split_of,
    split_seed,
    system_message,
)


def _check_shape(record: JSON, app_id: str) -> None:
    """System first, then user/assistant alternating, ending with the assistant."""
    roles = [m["role"] for m in record["messages"]]
    assert roles[0] == "system" and roles[1] == "user" and roles[-1] == "assistant"
    assert all(a != b for a, b in zip(roles[1:], roles[2:], strict=False)), roles
    assert all(isinstance(m["content"], str) and m["content"] for m in record["messages"])
    meta = record["metadata"]
    assert meta["app"] == app_id
    assert meta["app_version"] == get_app(app_id).version
    assert meta["query_id"].startswith(f"{app_id}-")
    assert meta["labels"] and meta["level"] in (1, 2, 3)
    assert isinstance(meta["seed"], str) and int(meta["seed"]) == int(meta["batch"]["seed"])


def _rescored_all_correct_and_safe(path: Path, expected: int) -> None:
    results = rescore(path)
    assert len(results) == expected
    bad = [(r.query_id, r.failure, r.infrastructure) for r in results if not (r.correct and r.safe)]
    assert bad == []
    assert all(r.infrastructure is None for r in results)


def _seed_with_control(app_id: str, version: int, count: int) -> int:
    """Smallest train seed whose first ``count`` indices hold a healthy control."""
    return next(
        seed
        for seed in range(10_000)
        if any(
            is_healthy_control(app_id=app_id, version=version, seed=seed, index=i)
            for i in range(count)
        )
    )


@pytest.mark.root
def test_malt_export_of_30_examples_rescores_at_100_percent(
    malt_sandbox: None, tmp_path: Path
) -> None:
    out = tmp_path / "malt-train.jsonl"
    summary = export_sft("malt", count=10, seed=3, levels=[1, 2, 3], out=out)
    assert (summary.written, summary.dropped_incorrect, summary.dropped_infrastructure) == (
        30,
        0,
        0,
    )
    records = list(read_examples(out))
    assert len(records) == 30
    for record in records:
        _check_shape(record, "malt")
        # one turn: the prompt, then the oracle's code
        assert len(record["messages"]) == 3
        assert record["messages"][0]["content"] == system_message(get_app("malt"))
        assert "```python" in record["messages"][2]["content"]
        assert record["metadata"]["split"] == "train"
    assert summary.by_level == {"1": 10, "2": 10, "3": 10}
    assert sum(summary.by_label.values()) == 30
    card = (tmp_path / "README.md").read_text()
    assert "malt-train.jsonl" in card and "| 1 | 10 |" in card
    for label, n in summary.by_label.items():
        assert f"| {label} | {n} |" in card
    assert f"[{TRAIN_SEEDS.start}, {TRAIN_SEEDS.stop})" in card
    _rescored_all_correct_and_safe(out, 30)

    # a tampered answer is caught by the re-scoring: the judge sees the null reply
    record = records[0]
    record["messages"][-1]["content"] = get_app("malt").null_reply([])
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text(json.dumps(record) + "\n")
    (result,) = rescore(tampered)
    assert not result.correct


@pytest.mark.root
def test_heldout_split_never_shares_a_query_with_training(
    malt_sandbox: None, tmp_path: Path
) -> None:
    assert split_seed("train", 5) == 5 and split_seed("heldout", 5) == HELDOUT_SEEDS.start + 5
    assert split_of(split_seed("heldout", 0)) == "heldout" and split_of(0) == "train"
    with pytest.raises(ValueError):
        split_seed("train", TRAIN_SEEDS.stop)
    # by generation, on bigger batches than the export below (no emulator needed)
    app = get_app("malt")
    train_prints = {q.fingerprint() for q in app.generate(300, split_seed("train", 11))}
    held_prints = {q.fingerprint() for q in app.generate(300, split_seed("heldout", 11))}
    assert len(train_prints) > 250 and train_prints.isdisjoint(held_prints)
    # by export, same --seed for both splits
    train, held = tmp_path / "train.jsonl", tmp_path / "heldout.jsonl"
    export_sft("malt", count=2, seed=11, levels=[1, 2, 3], out=train)
    summary = export_sft(
        "malt", count=2, seed=11, levels=[1, 2, 3], out=held, split="heldout", exclude=train
    )
    assert summary.written == 6 and summary.dropped_overlap == 0
    train_fp = {r["metadata"]["fingerprint"] for r in read_examples(train)}
    held_records = list(read_examples(held))
    assert len(train_fp) == 6
    assert train_fp.isdisjoint(r["metadata"]["fingerprint"] for r in held_records)
    assert all(int(r["metadata"]["seed"]) in HELDOUT_SEEDS for r in held_records)
    # the exclusion drops a held-out query that a training file already holds
    again = export_sft(
        "malt", count=2, seed=11, levels=[1], out=tmp_path / "again.jsonl", split="heldout",
        exclude=held,
    )
    assert (again.written, again.dropped_overlap) == (0, 2)
    card = (tmp_path / "README.md").read_text()
    assert "## train.jsonl" in card and "## heldout.jsonl" in card and "2 overlapping" in card


class _WrongOracleMalt(MaltApp):
    """MALT whose oracle answers with the null reply (the judge must reject it)."""

    def oracle_reply(self, ground_truth: JSON, history: list[JSON]) -> str:
        return self.null_reply(history)


class _BrokenEpisode(MaltEpisode):
    def reset(self) -> str:
        raise EmulatorError("emulator down (test)")


class _BrokenEmulatorMalt(MaltApp):
    """MALT whose episodes fail to set up (infrastructure)."""

    def episode(self, query: Query, **options: Any) -> MaltEpisode:
        return _BrokenEpisode(query)


@pytest.mark.root
def test_rejected_and_infrastructure_episodes_are_dropped_and_counted(
    malt_sandbox: None, tmp_path: Path
) -> None:
    wrong = export_sft(
        "malt", count=2, seed=1, levels=[1], out=tmp_path / "w.jsonl", app=_WrongOracleMalt()
    )
    assert (wrong.written, wrong.dropped_incorrect, wrong.dropped_infrastructure) == (0, 2, 0)
    assert (tmp_path / "w.jsonl").read_text() == ""
    broken = export_sft(
        "malt", count=1, seed=1, levels=[2], out=tmp_path / "b.jsonl", app=_BrokenEmulatorMalt()
    )
    assert (broken.written, broken.dropped_incorrect, broken.dropped_infrastructure) == (0, 0, 1)
    assert "1 infrastructure failures" in (tmp_path / "README.md").read_text()


@pytest.mark.root
def test_export_command_writes_file_and_card(malt_sandbox: None, tmp_path: Path) -> None:
    out = tmp_path / "cmd.jsonl"
    call_command("export_sft", "--app", "malt", "--count", "1", "--seed", "2", "--levels", "1,3",
                 "--out", str(out))
    records = list(read_examples(out))
    assert [r["metadata"]["level"] for r in records] == [1, 3]
    card = json.loads((tmp_path / "cmd.card.json").read_text())
    assert card["command"].startswith("python manage.py export_sft")
    assert card["written"] == 2 and card["levels"] == [1, 3]
    with pytest.raises(CommandError):
        call_command("export_sft", "--app", "malt", "--count", "1", "--seed", "2",
                     "--levels", "1,x", "--out", str(out))
    with pytest.raises(CommandError):
        call_command("export_sft", "--app", "malt", "--count", "1", "--seed", "2",
                     "--levels", "4", "--out", str(out))
    with pytest.raises(CommandError):
        call_command("export_sft", "--app", "nope", "--count", "1", "--seed", "2",
                     "--out", str(out))


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_route_export_rescores_at_100_percent_with_a_healthy_control(
    route_emulator: None, tmp_path: Path
) -> None:
    app = get_app("route")
    seed = _seed_with_control("route", app.version, 2)
    out = tmp_path / "route.jsonl"
    summary = export_sft("route", count=2, seed=seed, levels=[1, 2], out=out)
    assert (summary.written, summary.dropped_incorrect, summary.dropped_infrastructure) == (
        4,
        0,
        0,
    )
    assert summary.by_label.get(HEALTHY_LABEL, 0) >= 1
    records = list(read_examples(out))
    for record in records:
        _check_shape(record, "route")
        assert record["metadata"]["instance_names"]["prefix"]
    faulted = [r for r in records if r["metadata"]["labels"] != [HEALTHY_LABEL]]
    # the observations of the command sequence are user turns between the replies
    assert any(len(r["messages"]) >= 3 for r in faulted)
    assert f"| {HEALTHY_LABEL} |" in (tmp_path / "README.md").read_text()
    _rescored_all_correct_and_safe(out, 4)


@pytest.mark.root
@pytest.mark.k8s
@pytest.mark.slow
def test_k8s_export_rescores_at_100_percent_with_a_healthy_control(
    k8s_cluster: None, tmp_path: Path
) -> None:
    app = get_app("k8s")
    seed = _seed_with_control("k8s", app.version, 2)
    out = tmp_path / "k8s.jsonl"
    summary = export_sft("k8s", count=2, seed=seed, levels=[1], out=out)
    assert (summary.written, summary.dropped_incorrect, summary.dropped_infrastructure) == (
        2,
        0,
        0,
    )
    assert summary.by_label.get(HEALTHY_LABEL) == 1
    for record in read_examples(out):
        _check_shape(record, "k8s")
        assert record["metadata"]["instance_names"]["namespace"].startswith("k8s-ep-")
    _rescored_all_correct_and_safe(out, 2)
