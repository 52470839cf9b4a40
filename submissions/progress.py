"""Live progress of one submission and its infrastructure failures (reads only).

The submission page polls ``/submissions/<id>/progress.json`` and the API serves the same
figures at ``/api/v1/submissions/<id>/progress/``; both come from :func:`submission_progress`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.db.models import Count, Q
from django.utils import timezone

from submissions.models import EpisodeRecord, Submission
from submissions.services.episodes import infrastructure_error_kind

_OPEN = (Submission.Status.QUEUED, Submission.Status.RUNNING)
_UNFINISHED = (EpisodeRecord.Status.PENDING, EpisodeRecord.Status.RUNNING)


@dataclass
class AppProgress:
    """Episode counts of one app in a submission: ``done`` = scored + errors (finished)."""

    done: int
    total: int
    running: int
    errors: int
    cancelled: int


@dataclass
class SubmissionProgress:
    """Progress of a submission.

    Attributes:
        status: the submission's status (queued, running, finished, failed, cancelled).
        open: queued or running (the page keeps polling while True).
        incomplete: finished with too many infrastructure failures (not ranked).
        done, total: finished episodes (scored or infrastructure errors) / all episodes
            (before generation, ``total`` is apps x queries per app).
        percent: ``100 * done / total`` (100 for an empty submission).
        by_app: per app id, :class:`AppProgress`.
        queue_position: open submissions created earlier that still have unfinished work in
            one of this submission's apps (0 = nothing ahead); None once closed.
        elapsed_s: seconds since it started (until it finished); None before it started.
        eta_s: estimated seconds left = episodes left x ``elapsed_s / done`` (the mean
            observed time per finished episode, workers' parallelism included); None while
            nothing is done or once closed.
    """

    status: str
    open: bool
    incomplete: bool
    done: int
    total: int
    percent: float
    by_app: dict[str, AppProgress]
    queue_position: int | None
    elapsed_s: float | None
    eta_s: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``by_app`` values as dicts)."""
        return asdict(self)


def _queue_position(submission: Submission) -> int:
    """Open submissions ahead of ``submission`` in its apps' queues (created earlier, still
    queued, or with pending/running episodes in one of its apps)."""
    earlier = Submission.objects.filter(status__in=_OPEN, created_at__lt=submission.created_at)
    busy = Q(status=Submission.Status.QUEUED) | Q(
        episodes__status__in=_UNFINISHED, episodes__app_id__in=list(submission.apps)
    )
    return earlier.filter(busy).distinct().count()


def submission_progress(*, submission: Submission) -> SubmissionProgress:
    """Count a submission's episodes by app and state (one aggregate query, plus one for the
    queue position while it is open)."""
    rows = (
        EpisodeRecord.objects.filter(submission=submission)
        .values("app_id")
        .annotate(
            total=Count("pk"),
            done=Count(
                "pk", filter=Q(status__in=[EpisodeRecord.Status.DONE, EpisodeRecord.Status.ERROR])
            ),
            running=Count("pk", filter=Q(status=EpisodeRecord.Status.RUNNING)),
            errors=Count("pk", filter=Q(status=EpisodeRecord.Status.ERROR)),
            cancelled=Count("pk", filter=Q(status=EpisodeRecord.Status.CANCELLED)),
        )
    )
    by_app = {
        row["app_id"]: AppProgress(
            done=row["done"],
            total=row["total"],
            running=row["running"],
            errors=row["errors"],
            cancelled=row["cancelled"],
        )
        for row in rows
    }
    for app_id in submission.apps:  # not generated yet
        by_app.setdefault(app_id, AppProgress(0, submission.queries_per_app, 0, 0, 0))
    is_open = submission.status in _OPEN
    done = sum(p.done for p in by_app.values())
    total = sum(p.total for p in by_app.values())
    left = sum(p.total - p.done - p.cancelled for p in by_app.values())
    elapsed_s = None
    if submission.started_at is not None:
        end = submission.finished_at if submission.finished_at and not is_open else timezone.now()
        elapsed_s = max(0.0, (end - submission.started_at).total_seconds())
    eta_s = None
    if is_open and done and elapsed_s is not None:
        eta_s = left * elapsed_s / done
    return SubmissionProgress(
        status=submission.status,
        open=is_open,
        incomplete=submission.incomplete,
        done=done,
        total=total,
        percent=round(100.0 * done / total, 1) if total else 100.0,
        by_app=dict(sorted(by_app.items())),
        queue_position=_queue_position(submission) if is_open else None,
        elapsed_s=None if elapsed_s is None else round(elapsed_s, 1),
        eta_s=None if eta_s is None else round(eta_s, 1),
    )


def submission_infrastructure_failures(*, submission: Submission) -> list[dict[str, Any]]:
    """The submission's infrastructure failures with their cause, in (app, index) order:
    ``{"episode", "app_id", "index", "kind", "message", "attempts"}`` (the emulator's evidence
    stays in the stored details; the message is the error text, never the ground truth)."""
    failures = []
    rows = submission.episodes.filter(status=EpisodeRecord.Status.ERROR).values_list(
        "pk", "app_id", "index", "failure", "details", "attempts"
    )
    for pk, app_id, index, failure, details, attempts in rows:
        details = details if isinstance(details, dict) else {}
        failures.append(
            {
                "episode": pk,
                "app_id": app_id,
                "index": index,
                "kind": str(details.get("error_kind") or infrastructure_error_kind(failure)),
                "message": str(details.get("error") or failure)[:2000],
                "attempts": attempts,
            }
        )
    return failures
