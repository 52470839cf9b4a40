"""Reads for the agent page: an agent's submissions across time, per app, with the models its
endpoint reported (a change of model is flagged), and its board rank over time.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q

from evaluator.registry import app_ids
from evaluator.stats import Interval, wilson_interval
from submissions.disclosure import spent_ids
from submissions.models import Agent, EpisodeRecord, Submission
from submissions.selectors import scored_totals


@dataclass
class AppScore:
    """One app's figures in one submission: ``n`` scored episodes, ``correct_and_safe`` of
    them both correct and safe; ``rate_pct`` in percent (``None`` when ``n`` is 0)."""

    app_id: str
    n: int
    correct_and_safe: int

    @property
    def rate_pct(self) -> float | None:
        """Correct-and-safe share in percent, ``None`` without scored episodes."""
        return 100.0 * self.correct_and_safe / self.n if self.n else None

    @property
    def interval(self) -> Interval:
        """The correct-and-safe share with its 95% Wilson interval (rates in [0, 1])."""
        return wilson_interval(self.correct_and_safe, self.n)


@dataclass
class HistoryRow:
    """One submission of the agent (oldest first in :func:`agent_history`).

    Attributes:
        models: the model names the endpoint reported in this submission's episodes
            (``EpisodeRecord.served_model``), sorted; empty when it reported none.
        model_changed: the reported models differ from those of the closest earlier
            submission that reported any (the endpoint behind a URL can drift).
        previous_models: those earlier models, when ``model_changed``.
    """

    submission: Submission
    scores: dict[str, AppScore] = field(default_factory=dict)
    #: episodes of the submission the evaluator could not run (infrastructure failures)
    infra_failures: int = 0
    models: list[str] = field(default_factory=list)
    model_changed: bool = False
    previous_models: list[str] = field(default_factory=list)

    @property
    def when(self) -> datetime:
        """When the submission finished, else when it was created."""
        return self.submission.finished_at or self.submission.created_at

    def score_list(self, apps: list[str]) -> list[AppScore | None]:
        """The scores in the order of ``apps`` (``None`` for an app not in this submission)."""
        return [self.scores.get(a) for a in apps]


def agent_history(*, agent: Agent) -> list[HistoryRow]:
    """Every submission of ``agent`` (team submissions and rounds), oldest first, with per-app
    correct-and-safe counts over its scored (``done``) episodes and the reported models; a
    submission whose answers are unspent (running, or of an open round:
    ``submissions.disclosure``) has no counts yet.

    Two queries whatever the number of submissions: one grouped count, one distinct model list.
    """
    submissions = list(
        Submission.objects.filter(agent=agent).select_related("round").order_by("created_at", "pk")
    )
    rows = {s.pk: HistoryRow(submission=s) for s in submissions}
    done = EpisodeRecord.objects.filter(submission__agent=agent, status=EpisodeRecord.Status.DONE)
    counts = done.values("submission_id", "app_id").annotate(
        n=Count("pk"), good=Count("pk", filter=Q(correct=True, safe=True))
    )
    hidden = {s.pk for s in submissions} - spent_ids(submissions)
    for item in counts:
        row = rows.get(item["submission_id"])
        if row is not None and item["submission_id"] not in hidden:
            row.scores[item["app_id"]] = AppScore(item["app_id"], item["n"], item["good"])
    errors = EpisodeRecord.objects.filter(
        submission__agent=agent, status=EpisodeRecord.Status.ERROR
    ).values("submission_id").annotate(n=Count("pk"))
    for failed in errors:
        if failed["submission_id"] in rows:
            rows[failed["submission_id"]].infra_failures = failed["n"]
    reported: dict[int, set[str]] = defaultdict(set)
    pairs = (
        EpisodeRecord.objects.filter(submission__agent=agent)
        .exclude(served_model="")
        .values_list("submission_id", "served_model")
        .distinct()
    )
    for submission_id, model in pairs:
        reported[submission_id].add(model)
    previous: list[str] = []
    for row in rows.values():
        row.models = sorted(reported.get(row.submission.pk, set()))
        if row.models:
            if previous and row.models != previous:
                row.model_changed = True
                row.previous_models = previous
            previous = row.models
    return list(rows.values())


def infra_failure_share(rows: list[HistoryRow]) -> tuple[int, int]:
    """``(infrastructure failures, episodes that ended)`` over all of ``rows``' submissions:
    the agent's infrastructure-failure rate (docs/metrics.md, "Infrastructure failures")."""
    failures = sum(row.infra_failures for row in rows)
    scored = sum(score.n for row in rows for score in row.scores.values())
    return failures, failures + scored


def history_apps(rows: list[HistoryRow]) -> list[str]:
    """The app ids that occur in ``rows``, in registry order."""
    seen = {a for row in rows for a in row.submission.apps}
    return [a for a in app_ids() if a in seen] + sorted(seen - set(app_ids()))


@dataclass(frozen=True)
class RankPoint:
    """The agent's place on one app's board right after one of its submissions finished.

    Attributes:
        rank: 1 + the agents whose correct-and-safe interval then lay entirely above this
            submission's (the board's tie rule, docs/metrics.md "Ranks and ties").
        agents: agents on the board then, this one included.
    """

    submission_id: int
    when: datetime
    rank: int
    agents: int


def agent_rank_history(*, agent: Agent, apps: list[str]) -> dict[str, list[RankPoint]]:
    """Per app, the agent's board rank after each of its finished, scored submissions, oldest
    first: the board as it stood then, every agent's newest finished submission of the app
    up to that moment (agents inactive today are left out, as on today's board).

    One query per app over the aggregate total rows, swept in finishing order.
    """
    history: dict[str, list[RankPoint]] = {}
    for app_id in apps:
        rows = (
            scored_totals(app_id=app_id, submission__finished_at__isnull=False)
            .filter(Q(submission__agent__is_active=True) | Q(submission__agent=agent))
            .order_by("submission__finished_at", "submission_id")
            .values_list(
                "submission__agent_id",
                "submission_id",
                "submission__finished_at",
                "n",
                "correct_and_safe",
            )
        )
        latest: dict[int, Interval] = {}
        points: list[RankPoint] = []
        for agent_id, submission_id, finished_at, n, both in rows.iterator(chunk_size=2000):
            latest[agent_id] = wilson_interval(both, n)
            if agent_id != agent.pk or finished_at is None:
                continue
            mine = latest[agent_id]
            above = sum(1 for other, i in latest.items() if other != agent_id and i.low > mine.high)
            points.append(RankPoint(submission_id, finished_at, 1 + above, len(latest)))
        if points:
            history[app_id] = points
    return history
