"""Read-side queries of the leaderboard: per-app standings with intervals and tie ranks.

An agent's standing in an app comes from its most recent finished submission that covered the
app (so a new round replaces older numbers). Episodes the evaluator could not run (status
``error``) are left out of every figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q, Sum

from evaluator.registry import app_ids
from evaluator.stats import Interval, mean_interval, tie_ranks, wilson_interval
from submissions.models import Agent, Episode, Submission


@dataclass
class Standing:
    """One leaderboard row: an agent's figures in one app (rates in [0, 1], latency in s)."""

    agent: Agent
    submission: Submission
    n: int
    correctness: Interval
    safety: Interval
    latency_s: Interval
    steps_mean: float
    levels: dict[int, Interval] = field(default_factory=dict)
    labels: dict[str, Interval] = field(default_factory=dict)
    rank: int = 0

    @property
    def finished_at(self) -> datetime | None:
        """When the underlying submission finished."""
        return self.submission.finished_at


def latest_submissions(*, app_id: str) -> list[Submission]:
    """The most recent finished submission of every active agent that covered ``app_id``."""
    latest: dict[int, Submission] = {}
    candidates = (
        Submission.objects.filter(status=Submission.Status.FINISHED, agent__is_active=True)
        .select_related("agent__team", "round")
        .order_by("-finished_at", "-pk")
    )
    for submission in candidates:
        if app_id in submission.apps and submission.agent_id not in latest:
            latest[submission.agent_id] = submission
    return list(latest.values())


def standings(*, app_id: str) -> list[Standing]:
    """Per-app standings ordered by tie rank, then correctness, then safety."""
    rows: list[Standing] = []
    for submission in latest_submissions(app_id=app_id):
        done = Episode.objects.filter(submission=submission, app=app_id, status=Episode.Status.DONE)
        totals = done.aggregate(
            n=Count("pk"),
            correct=Count("pk", filter=Q(correct=True)),
            safe=Count("pk", filter=Q(safe=True)),
            steps=Sum("steps"),
        )
        n = totals["n"]
        if not n:
            continue
        latencies = [v for v in done.values_list("latency_s", flat=True) if v is not None]
        levels = {
            row["level"]: wilson_interval(row["correct"], row["n"])
            for row in done.values("level").annotate(
                n=Count("pk"), correct=Count("pk", filter=Q(correct=True))
            )
        }
        labels = {
            row["label"]: wilson_interval(row["correct"], row["n"])
            for row in done.values("label").annotate(
                n=Count("pk"), correct=Count("pk", filter=Q(correct=True))
            )
        }
        rows.append(
            Standing(
                agent=submission.agent,
                submission=submission,
                n=n,
                correctness=wilson_interval(totals["correct"], n),
                safety=wilson_interval(totals["safe"], n),
                latency_s=mean_interval(latencies),
                steps_mean=(totals["steps"] or 0) / n,
                levels=dict(sorted(levels.items())),
                labels=dict(sorted(labels.items())),
            )
        )
    for row, rank in zip(rows, tie_ranks([r.correctness for r in rows]), strict=True):
        row.rank = rank
    rows.sort(key=lambda r: (r.rank, -r.correctness.value, -r.safety.value, r.agent.name))
    return rows


def all_standings() -> dict[str, list[Standing]]:
    """Standings of every registered app (apps without results map to an empty list)."""
    return {app_id: standings(app_id=app_id) for app_id in app_ids()}
