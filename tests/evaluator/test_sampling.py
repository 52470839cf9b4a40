"""The seeded label and healthy-control draw shared by the route and k8s generators
(``evaluator.sampling.draw_labels``): its rules, and the byte-stability of both generators."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from evaluator.registry import get_app
from evaluator.sampling import (
    HEALTHY_LABEL,
    LabelDraw,
    draw_labels,
    is_healthy_control,
    labels_at,
    level_in,
    query_rng,
    seeded_queries,
)
from evaluator.types import JSON

TABLE: dict[int, list[tuple[str, ...]]] = {
    1: [("A",), ("B",)],
    2: [("A", "B"), ("B", "C"), ("A", "C")],
    3: [("A", "B", "C")],
}
LEVELS = (1, 2, 3)


def _level_of(labels: tuple[str, ...]) -> int:
    return next(level for level, combos in TABLE.items() if labels in combos)


def _draws(count: int, *, level: int | None, share: float, seed: int = 5) -> list[LabelDraw]:
    return draw_labels(
        TABLE,
        level_of=_level_of,
        app_id="toy",
        version=1,
        seed=seed,
        count=count,
        level=level,
        levels=LEVELS,
        healthy_share=share,
    )


@pytest.mark.parametrize("level", [None, 2])
def test_without_controls_the_draw_is_the_label_order(level: int | None) -> None:
    expected = []
    for index in range(30):
        labels = labels_at(
            TABLE, app_id="toy", version=1, seed=5, index=index, level=level, levels=LEVELS
        )
        expected.append((labels, _level_of(labels), False))
    assert _draws(30, level=level, share=0.0) == expected


def test_controls_carry_the_healthy_label_and_the_asked_level() -> None:
    draws = _draws(40, level=None, share=0.25)
    controls = [d for d in draws if d.control]
    assert len(controls) == 10
    assert {d.labels for d in controls} == {(HEALTHY_LABEL,)}
    assert {d.level for d in controls} <= set(LEVELS) and len({d.level for d in controls}) > 1
    assert [d.control for d in draws] == [
        is_healthy_control(app_id="toy", version=1, seed=5, index=i, share=0.25) for i in range(40)
    ]
    assert all(d.labels != (HEALTHY_LABEL,) for d in draws if not d.control)
    assert {d.level for d in _draws(20, level=3, share=1.0)} == {3}
    assert draws == _draws(40, level=None, share=0.25)
    assert draws[:15] == _draws(15, level=None, share=0.25)  # an index never sees the count
    assert _draws(0, level=None, share=0.25) == []


@pytest.mark.parametrize(
    ("count", "level", "share"), [(-1, None, 0.1), (3, 4, 0.1), (3, None, 1.5)]
)
def test_bad_arguments_are_refused(count: int, level: int | None, share: float) -> None:
    with pytest.raises(ValueError):
        _draws(count, level=level, share=share)


def test_level_in_finds_the_level_of_a_combination_and_refuses_others() -> None:
    assert [level_in(TABLE, c) for c in (("B",), ("B", "C"), ("A", "B", "C"))] == [1, 2, 3]
    with pytest.raises(KeyError, match="C\\+A"):
        level_in(TABLE, ("C", "A"))


def _toy_queries(count: int, share: float) -> list[tuple[str, JSON]]:
    def build(draw: LabelDraw, rng: random.Random) -> tuple[str, JSON]:
        truth: JSON = {"control": draw.control, "draw": rng.random()}
        return f"fix {'+'.join(draw.labels)} at level {draw.level}", truth

    queries = seeded_queries(
        TABLE,
        build,
        app_id="toy",
        version=1,
        seed=5,
        count=count,
        level=None,
        levels=LEVELS,
        healthy_share=share,
    )
    assert [q.index for q in queries] == list(range(count))
    assert {(q.app_id, q.app_version, q.seed, q.pack) for q in queries} == {("toy", 1, 5, "public")}
    draws = _draws(count, level=None, share=share)
    assert [(q.labels, q.level) for q in queries] == [(d.labels, d.level) for d in draws]
    return [(q.prompt, q.ground_truth) for q in queries]


def test_seeded_queries_build_each_draw_from_its_own_stream() -> None:
    built = _toy_queries(40, share=0.25)
    draws = _draws(40, level=None, share=0.25)
    for index, ((text, truth), draw) in enumerate(zip(built, draws, strict=True)):
        assert truth["control"] == draw.control
        assert text == f"fix {'+'.join(draw.labels)} at level {draw.level}"
        rng = query_rng(app_id="toy", version=1, seed=5, index=index, labels=draw.labels)
        assert truth["draw"] == rng.random()
    assert built[:12] == _toy_queries(12, share=0.25)  # an index never sees the count
    assert len({truth["draw"] for _text, truth in built}) == 40


#: Query fields outside the pins (the id is keyed per installation; the pack joined later).
UNPINNED = ("query_id", "pack")

#: SHA-256 of the JSON of ``generate(200, seed, level)`` (query ids left out: they are keyed
#: per process), computed from the generators before the control draw moved into
#: ``evaluator.sampling``; a change here changes every route or k8s query of a seed.
PINNED = {
    ("route", 0, None): "5e9dbcd888fae89747b0a99c10bc261f0f91bc699c5f60de4fbdeb792570982b",
    ("route", 7, None): "d90fd301ed4c0138f8009ec7a3adc19e37f455b5cfe4cd1321ade47d7654e154",
    ("route", 1, 2): "745028e1c6d6e63aa5bb3a8bee57c711c061331f37d6ad9522f0f93ef23b188f",
    ("k8s", 0, None): "58a0337c5c503908f2820aaf08559a06e7eb3282ecc98dce13b45e70200c04fb",
    ("k8s", 1, 2): "addddcc02c40d58772dd5d75a681d6a7856ef2c0ce748e5316060060b00fec77",
}


@pytest.mark.parametrize(("app_id", "seed", "level"), list(PINNED))
def test_generated_queries_are_byte_stable(app_id: str, seed: int, level: int | None) -> None:
    queries = get_app(app_id).generate(200, seed, level)
    assert sum(q.label == HEALTHY_LABEL for q in queries) == 20
    assert {q.pack for q in queries} == {"public"}
    # ``pack`` joined Query after these digests were pinned; public queries unchanged.
    rows = [{k: v for k, v in q.to_dict().items() if k not in UNPINNED}
            for q in queries]
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()
    assert digest == PINNED[(app_id, seed, level)]
