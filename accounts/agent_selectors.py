"""Reads for the agent page: an agent's submissions across time, per app, with the models its
endpoint reported (a change of model is flagged).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q

from evaluator.registry import app_ids
from submissions.models import Agent, EpisodeRecord, Submission


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
    correct-and-safe counts over its scored (``done``) episodes and the reported models.

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
    for item in counts:
        row = rows.get(item["submission_id"])
        if row is not None:
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
