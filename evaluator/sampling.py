"""Seeded choices shared by the apps' query generators."""

from __future__ import annotations

import math
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


#: Share of each batch that is a healthy control (issue 14 item 2; NIKA and ITBench keep such
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
