"""Seeded choices shared by the apps' query generators."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence


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
