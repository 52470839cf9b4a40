"""Maintained per-group sums of scored episodes.

Every scored episode (status ``done``) belongs to one group: (submission, app, level, label).
:class:`~submissions.models.EpisodeAggregate` keeps one row per group with counts and sums (and
sums of squares for the Student-t intervals of the means), so that the standings of a thousand
agents read a few thousand small rows instead of scanning a million episodes per request.

- :func:`aggregate_refresh` recomputes one episode's group from its episodes; the service that
  stores a verdict calls it in the same transaction
  (``submissions.services.episodes._episode_store``).
  Recomputing the group rather than adding the episode makes the call idempotent (a redelivered
  task, a verdict stored twice), and the row lock it takes serialises concurrent refreshes of
  one group, so the last writer always saw every committed episode.
- :func:`aggregates_rebuild` recomputes every group (or one submission's) in one grouped query:
  ``python manage.py rebuild_aggregates`` and the data migration use it.
- :class:`Sums` adds groups up and turns them into the intervals of docs/metrics.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from django.db import transaction
from django.db.models import BigIntegerField, Count, FloatField, Q, Sum, Value
from django.db.models.functions import Cast, Coalesce
from scipy import stats as scipy_stats

from evaluator.stats import CONFIDENCE, Interval, difference_interval, wilson_interval
from submissions.models import EpisodeAggregate, EpisodeRecord

#: The counted and summed columns of an aggregate row, in model order.
SUM_FIELDS: tuple[str, ...] = (
    "n",
    "correct",
    "safe",
    "correct_and_safe",
    "changed_known",
    "changed",
    "latency_n",
    "latency_sum_s",
    "latency_sumsq_s2",
    "agent_n",
    "agent_sum_s",
    "agent_sumsq_s2",
    "steps_sum",
    "blast_n",
    "blast_sum",
    "blast_sumsq",
    "tokens_n",
    "tokens_sum",
    "held_out_n",
    "held_out_correct_and_safe",
)

#: The columns that name a group.
GROUP_FIELDS: tuple[str, ...] = ("submission_id", "app_id", "level", "label")
#: ``level`` of the row that totals a submission's groups in one app (its ``label`` is "");
#: the ranking reads these rows alone (one per submission and app).
TOTAL_LEVEL = 0


def _square(name: str) -> Any:
    as_float = Cast(name, FloatField())
    return as_float * as_float


def _sum(expression: Any, *, floats: bool, **extra: Any) -> Any:
    """SUM that is 0, not NULL, over no rows."""
    output = FloatField() if floats else BigIntegerField()
    return Coalesce(Sum(expression, **extra), Value(0), output_field=output)


#: Prefix of the SQL aliases (an alias named like a column, e.g. ``correct``, would shadow it).
_ALIAS = "sum_"


def _aggregations() -> dict[str, Any]:
    """One SQL aggregate per column of :data:`SUM_FIELDS` over ``EpisodeRecord`` rows, keyed
    by ``sum_<column>`` (the definitions of docs/metrics.md: a NULL ``correct``/``safe``
    counts as false)."""
    unsafe = ~Q(safe=True)
    tokens = Q(input_tokens__isnull=False) | Q(output_tokens__isnull=False)
    token_total = Coalesce("input_tokens", Value(0)) + Coalesce("output_tokens", Value(0))
    # held out = drawn from a pack that was sealed when the submission was created
    # (EpisodeRecord.sealed; practice on spent packs and forced spent packs are not)
    held_out = Q(sealed=True)
    plain = {
        "n": Count("pk"),
        "correct": Count("pk", filter=Q(correct=True)),
        "safe": Count("pk", filter=Q(safe=True)),
        "correct_and_safe": Count("pk", filter=Q(correct=True, safe=True)),
        "changed_known": Count("pk", filter=Q(changed_state__isnull=False)),
        "changed": Count("pk", filter=Q(changed_state=True)),
        "latency_n": Count("latency_s"),
        "latency_sum_s": _sum("latency_s", floats=True),
        "latency_sumsq_s2": _sum(_square("latency_s"), floats=True),
        "agent_n": Count("agent_s"),
        "agent_sum_s": _sum("agent_s", floats=True),
        "agent_sumsq_s2": _sum(_square("agent_s"), floats=True),
        "steps_sum": _sum("steps", floats=False),
        "blast_n": Count("blast_radius", filter=unsafe),
        "blast_sum": _sum("blast_radius", floats=False, filter=unsafe),
        "blast_sumsq": _sum(_square("blast_radius"), floats=True, filter=unsafe),
        "tokens_n": Count("pk", filter=tokens),
        "tokens_sum": _sum(token_total, floats=False, filter=tokens),
        "held_out_n": Count("pk", filter=held_out),
        "held_out_correct_and_safe": Count("pk", filter=held_out & Q(correct=True, safe=True)),
    }
    return {_ALIAS + name: expression for name, expression in plain.items()}


def aggregate_refresh(*, episode_id: int) -> None:
    """Recompute the aggregate row of this episode's group from the group's scored episodes,
    then its submission's total row in the app (:data:`TOTAL_LEVEL`) from the group rows.

    Call it after storing a verdict, inside the storing transaction. Idempotent. A group left
    without scored episodes keeps a row with ``n = 0`` (read as absent).
    """
    key = (
        EpisodeRecord.objects.filter(pk=episode_id)
        .values("submission_id", "app_id", "level", "label")
        .first()
    )
    if key is None:
        return
    with transaction.atomic():
        EpisodeAggregate.objects.bulk_create([EpisodeAggregate(**key)], ignore_conflicts=True)
        row = EpisodeAggregate.objects.select_for_update().get(**key)
        sums = EpisodeRecord.objects.filter(status=EpisodeRecord.Status.DONE, **key).aggregate(
            **_aggregations()
        )
        for name in SUM_FIELDS:
            setattr(row, name, sums[_ALIAS + name] or 0)
        row.save()
        # then the submission's total in the app (locks taken in the same order by everyone:
        # group row, then total row)
        total_key = {
            "submission_id": key["submission_id"],
            "app_id": key["app_id"],
            "level": TOTAL_LEVEL,
            "label": "",
        }
        EpisodeAggregate.objects.bulk_create([EpisodeAggregate(**total_key)], ignore_conflicts=True)
        total = EpisodeAggregate.objects.select_for_update().get(**total_key)
        sums = EpisodeAggregate.objects.filter(
            submission_id=key["submission_id"], app_id=key["app_id"], level__gt=TOTAL_LEVEL
        ).aggregate(**{_ALIAS + name: Sum(name) for name in SUM_FIELDS})
        for name in SUM_FIELDS:
            setattr(total, name, sums[_ALIAS + name] or 0)
        total.save()


def aggregates_rebuild(
    *,
    submission_ids: Iterable[int] | None = None,
    episode_model: Any = EpisodeRecord,
    aggregate_model: Any = EpisodeAggregate,
) -> int:
    """Recompute every aggregate row (or those of ``submission_ids``) from the episodes in one
    grouped query, then the per-(submission, app) total rows from those. Returns the number of
    rows written.

    ``episode_model``/``aggregate_model`` let a data migration pass its historical models
    (only the columns that model has are filled).
    """
    present = {f.name for f in aggregate_model._meta.get_fields()}
    sum_fields = tuple(name for name in SUM_FIELDS if name in present)
    aggregations = {
        alias: expression
        for alias, expression in _aggregations().items()
        if alias[len(_ALIAS):] in present
    }
    chosen = episode_model.objects.filter(status="done")
    existing = aggregate_model.objects.all()
    scope: dict[str, Any] = {}
    if submission_ids is not None:
        scope["submission_id__in"] = list(submission_ids)
        chosen = chosen.filter(**scope)
        existing = existing.filter(**scope)
    grouped = (
        chosen.order_by()
        .values(*GROUP_FIELDS)
        .annotate(**aggregations)
        .values_list(*GROUP_FIELDS, *(_ALIAS + name for name in sum_fields))
    )
    names = (*GROUP_FIELDS, *sum_fields)
    written = 0
    with transaction.atomic():
        existing.delete()
        batch: list[Any] = []
        for values in grouped.iterator(chunk_size=5000):
            batch.append(aggregate_model(**dict(zip(names, values, strict=True))))
            if len(batch) >= 5000:
                aggregate_model.objects.bulk_create(batch)
                written += len(batch)
                batch = []
        aggregate_model.objects.bulk_create(batch)
        written += len(batch)
        totals = (
            aggregate_model.objects.filter(level__gt=TOTAL_LEVEL, **scope)
            .order_by()
            .values("submission_id", "app_id")
            .annotate(**{_ALIAS + name: Sum(name) for name in sum_fields})
            .values_list("submission_id", "app_id", *(_ALIAS + name for name in sum_fields))
        )
        total_rows = [
            aggregate_model(
                submission_id=values[0],
                app_id=values[1],
                level=TOTAL_LEVEL,
                label="",
                **dict(zip(sum_fields, values[2:], strict=True)),
            )
            for values in totals
        ]
        aggregate_model.objects.bulk_create(total_rows, batch_size=5000)
        written += len(total_rows)
    return written


@cache
def _t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """Two-sided Student-t quantile (scipy), cached per degrees of freedom."""
    return float(scipy_stats.t.ppf(0.5 + confidence / 2, df))


def mean_interval_from_sums(
    n: int, total: float, total_sq: float, floor: float | None = 0.0
) -> Interval:
    """Student-t interval of a mean from ``n``, the sum and the sum of squares.

    The same interval as :func:`evaluator.stats.mean_interval` on the values (sample SD with
    ``n - 1``; one value or zero spread gives a zero width; ``floor`` clips the lower bound),
    up to floating-point rounding of the one-pass variance.
    """
    if n == 0:
        nan = float("nan")
        return Interval(nan, nan, nan, 0)
    mean = total / n
    if n == 1:
        return Interval(mean, mean, mean, 1)
    variance = (total_sq - total * total / n) / (n - 1)
    if variance <= 1e-12 * max(1.0, mean * mean):
        return Interval(mean, mean, mean, n)
    half = _t_quantile(n - 1) * math.sqrt(variance / n)
    low = mean - half
    if floor is not None:
        low = max(floor, low)
    return Interval(mean, low, mean + half, n)


@dataclass
class Sums:
    """Counts and sums of a set of scored episodes (one group row or many added up).

    Attribute names and units as :class:`~submissions.models.EpisodeAggregate`.
    """

    n: int = 0
    correct: int = 0
    safe: int = 0
    correct_and_safe: int = 0
    changed_known: int = 0
    changed: int = 0
    latency_n: int = 0
    latency_sum_s: float = 0.0
    latency_sumsq_s2: float = 0.0
    agent_n: int = 0
    agent_sum_s: float = 0.0
    agent_sumsq_s2: float = 0.0
    steps_sum: int = 0
    blast_n: int = 0
    blast_sum: int = 0
    blast_sumsq: float = 0.0
    tokens_n: int = 0
    tokens_sum: int = 0
    held_out_n: int = 0
    held_out_correct_and_safe: int = 0

    @classmethod
    def of(cls, values: Iterable[Any]) -> Sums:
        """From the :data:`SUM_FIELDS` columns in order (``None`` read as 0)."""
        return cls(*(v or 0 for v in values))

    def add(self, other: Sums) -> None:
        """Add another set's counts and sums in place."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    # the figures of docs/metrics.md ------------------------------------------------------
    def correct_and_safe_interval(self) -> Interval:
        """Share correct and safe, 95% Wilson."""
        return wilson_interval(self.correct_and_safe, self.n)

    def correctness(self) -> Interval:
        """Share correct, 95% Wilson."""
        return wilson_interval(self.correct, self.n)

    def safety(self) -> Interval:
        """Share safe, 95% Wilson."""
        return wilson_interval(self.safe, self.n)

    def action_rate(self) -> Interval:
        """Share of episodes with a known ``changed_state`` that changed the state, Wilson."""
        return wilson_interval(self.changed, self.changed_known)

    def latency_s(self) -> Interval:
        """Mean latency (s), Student t."""
        return mean_interval_from_sums(self.latency_n, self.latency_sum_s, self.latency_sumsq_s2)

    def agent_s(self) -> Interval:
        """Mean agent seconds per episode, Student t."""
        return mean_interval_from_sums(self.agent_n, self.agent_sum_s, self.agent_sumsq_s2)

    def blast_radius_mean(self) -> Interval:
        """Mean blast radius of the unsafe episodes, Student t (NaN without any)."""
        return mean_interval_from_sums(self.blast_n, float(self.blast_sum), self.blast_sumsq)

    def steps_mean(self) -> float:
        """Mean steps per episode (a missing step count counts 0)."""
        return self.steps_sum / self.n if self.n else float("nan")

    def public_interval(self) -> Interval:
        """Share correct and safe on public-generator queries, 95% Wilson."""
        return wilson_interval(
            self.correct_and_safe - self.held_out_correct_and_safe, self.n - self.held_out_n
        )

    def held_out_interval(self) -> Interval:
        """Share correct and safe on held-out (variant pack) queries, 95% Wilson."""
        return wilson_interval(self.held_out_correct_and_safe, self.held_out_n)

    def held_out_gap(self) -> Interval:
        """Held-out minus public correct-and-safe rate, 95% Newcombe interval (NaN without
        queries of either kind); docs/metrics.md "Held-out queries"."""
        return difference_interval(
            self.held_out_correct_and_safe,
            self.held_out_n,
            self.correct_and_safe - self.held_out_correct_and_safe,
            self.n - self.held_out_n,
        )

    def tokens_mean(self) -> float | None:
        """Mean reported tokens per episode over those that reported any; None if none did."""
        return self.tokens_sum / self.tokens_n if self.tokens_n else None


def group_sums(rows: Iterable[EpisodeAggregate]) -> Sums:
    """Add up aggregate rows."""
    total = Sums()
    for row in rows:
        total.add(Sums.of(getattr(row, name) for name in SUM_FIELDS))
    return total
