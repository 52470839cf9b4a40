"""Seeded choices shared by the apps' query generators.

The route and k8s generators build their batches alike: the labels of each index cycle through
a seeded order of the app's level table (the paper's Tables 5 and 6), a stratified share of the
indices are healthy controls, and each query draws its ground truth from its own seeded stream.
:func:`seeded_queries` does all of that; an app supplies its table and the function that turns
one draw into a prompt and a ground truth. Mixing in held-out variant packs happens one layer
up (:func:`evaluator.variants.generate_batch`).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from evaluator.types import JSON, Query


def labels_at(
    table: Mapping[int, Sequence[tuple[str, ...]]],
    *,
    app_id: str,
    version: int,
    seed: int,
    index: int,
    level: int | None,
    levels: Sequence[int],
) -> tuple[str, ...]:
    """Return the labels of query ``index`` of a batch.

    ``table`` maps each level to its label combinations (the paper's Tables 5 and 6). The
    combinations of ``level`` (of every level in ``levels`` when ``level`` is None) are put in
    an order drawn from ``(app_id, version, seed, level)`` and taken in turn, so a batch covers
    them evenly and the same arguments always give the same labels.
    """
    combos = list(table[level]) if level is not None else [c for lv in levels for c in table[lv]]
    order = random.Random(f"{app_id}/v{version}/order/{seed}/{level}").sample(combos, len(combos))
    return order[index % len(order)]


#: Share of each batch that is a healthy control (NIKA and ITBench keep such
#: no-fault cases so that an agent that always "fixes" something is not rewarded).
HEALTHY_SHARE = 0.1

#: The label of a healthy control query (shown in the by-label breakdown).
HEALTHY_LABEL = "HEALTHY"


def is_healthy_control(
    *, app_id: str, version: int, seed: int, index: int, share: float = HEALTHY_SHARE
) -> bool:
    """True when query ``index`` of the batch of ``seed`` is a healthy control.

    Stratified so that every run of consecutive indices holds ``share`` of controls to within
    one (``n * share`` rounded up or down among the first ``n``), with a phase drawn from
    ``(app_id, version, seed)``; the answer for an index never depends on the batch size.

    Raises:
        ValueError: ``share`` outside [0, 1].
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"healthy share must be in [0, 1], not {share}")
    if share == 0.0:
        return False
    phase = random.Random(f"{app_id}/v{version}/controls/{seed}").random()
    return math.floor((index + 1) * share + phase) > math.floor(index * share + phase)


class LabelDraw(NamedTuple):
    """The labels and level of one query of a batch, as :func:`draw_labels` chose them.

    Attributes:
        labels: the query's fault labels, or ``(HEALTHY_LABEL,)`` for a healthy control.
        level: the query's level (a key of the app's label table).
        control: True for a healthy control (no fault is injected).
    """

    labels: tuple[str, ...]
    level: int
    control: bool


def draw_labels(
    table: Mapping[int, Sequence[tuple[str, ...]]],
    *,
    level_of: Callable[[tuple[str, ...]], int],
    app_id: str,
    version: int,
    seed: int,
    count: int,
    level: int | None,
    levels: Sequence[int],
    healthy_share: float,
) -> list[LabelDraw]:
    """Return the labels and level of queries ``0 .. count-1`` of the batch of ``seed``,
    healthy controls included; element ``i`` is query ``i``.

    The fault labels of each index come from :func:`labels_at` and their level from
    ``level_of`` (the app's lookup in ``table``: the paper's Table 5 for route, Table 6 for
    k8s). When :func:`is_healthy_control` picks an index (``healthy_share`` of the batch), its
    labels become ``(HEALTHY_LABEL,)``; its level is that of the labels it replaces (``level``
    itself when one was asked for), and otherwise (``level`` None) is drawn from ``levels`` on
    its own stream ``(app_id, version, seed, index)``, because controls sit at fixed strides
    and would else inherit the label order's levels. An index's draw never depends on
    ``count``; same arguments, same draws.

    Raises:
        ValueError: negative ``count``, ``level`` not in ``levels``, or ``healthy_share``
            outside [0, 1].
        KeyError: ``level_of`` does not know the drawn labels.
    """
    if count < 0:
        raise ValueError("count must be >= 0")
    if level is not None and level not in levels:
        raise ValueError(f"{app_id} has levels {levels}, not {level}")
    draws = []
    for index in range(count):
        labels = labels_at(
            table,
            app_id=app_id,
            version=version,
            seed=seed,
            index=index,
            level=level,
            levels=levels,
        )
        drawn_level = level_of(labels)
        control = is_healthy_control(
            app_id=app_id, version=version, seed=seed, index=index, share=healthy_share
        )
        if control:
            labels = (HEALTHY_LABEL,)
            if level is None:
                stream = random.Random(f"{app_id}/v{version}/control/{seed}/{index}")
                drawn_level = stream.choice(levels)
        draws.append(LabelDraw(labels, drawn_level, control))
    return draws


def level_in(table: Mapping[int, Sequence[tuple[str, ...]]], labels: tuple[str, ...]) -> int:
    """The level whose combinations in ``table`` (the paper's Table 5 or 6) hold ``labels``.

    Raises:
        KeyError: ``labels`` is no combination of ``table`` (message: the labels joined by +).
    """
    for level, combos in table.items():
        if labels in combos:
            return level
    raise KeyError("+".join(labels))


def seeded_rng(*parts: object) -> random.Random:
    """A ``random.Random`` seeded from the SHA-256 of ``parts`` joined by ``/`` (stable across
    processes and Python versions, unlike ``hash``): MALT's fabric variants and the variant
    packs derive their per-query streams with it."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def query_rng(
    *, app_id: str, version: int, seed: int, index: int, labels: tuple[str, ...]
) -> random.Random:
    """The seeded stream query ``index`` of the batch of ``seed`` draws its ground truth from,
    keyed ``"<app_id>/v<version>/<seed>/<index>/<labels joined by +>"`` (controls: ``HEALTHY``).
    A query's ground truth depends on nothing else, so it never depends on the batch size."""
    return random.Random(f"{app_id}/v{version}/{seed}/{index}/{'+'.join(labels)}")


#: Builds one query's ``(prompt, ground truth)`` from its draw and its :func:`query_rng`.
QueryBuilder = Callable[[LabelDraw, random.Random], tuple[str, JSON]]


def seeded_queries(
    table: Mapping[int, Sequence[tuple[str, ...]]],
    build: QueryBuilder,
    *,
    app_id: str,
    version: int,
    seed: int,
    count: int,
    level: int | None,
    levels: Sequence[int],
    healthy_share: float,
) -> list[Query]:
    """Queries ``0 .. count-1`` of the batch of ``seed``: the labels, level and healthy-control
    placement of each index from :func:`draw_labels` (levels looked up with :func:`level_in`),
    its prompt and ground truth from ``build(draw, query_rng(...))``. Same arguments, same
    queries; query ``i`` never depends on ``count``.

    Raises:
        ValueError: as :func:`draw_labels` (negative count, unknown level, bad share).
    """
    draws = draw_labels(
        table,
        level_of=lambda labels: level_in(table, labels),
        app_id=app_id,
        version=version,
        seed=seed,
        count=count,
        level=level,
        levels=levels,
        healthy_share=healthy_share,
    )
    queries = []
    for index, draw in enumerate(draws):
        rng = query_rng(app_id=app_id, version=version, seed=seed, index=index, labels=draw.labels)
        prompt, truth = build(draw, rng)
        queries.append(
            Query(
                app_id=app_id,
                app_version=version,
                seed=seed,
                index=index,
                level=draw.level,
                labels=draw.labels,
                prompt=prompt,
                ground_truth=truth,
            )
        )
    return queries
