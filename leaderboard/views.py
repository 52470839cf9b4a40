"""Leaderboard pages (thin: data from selectors, figures from plots)."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from evaluator.registry import get_app
from leaderboard.plots import ci_overlap_figure, spider_figure
from submissions.progress import submission_infrastructure_failures, submission_progress
from submissions.selectors import all_standings, submission_episode_rows, submission_get


def leaderboard_page(request: HttpRequest) -> HttpResponse:
    """The leaderboard: per app, a ranked table with 95% intervals and the CI-overlap chart."""
    sections = []
    for app_id, rows in all_standings().items():
        sections.append(
            {
                "app_id": app_id,
                "title": get_app(app_id).title,
                "rows": rows,
                "ci_figure": ci_overlap_figure(app_id=app_id, rows=rows) if rows else None,
                "spider_figure": spider_figure(app_id=app_id, rows=rows) if rows else None,
            }
        )
    return render(request, "leaderboard/index.html", {"sections": sections})


def submission_page(request: HttpRequest, submission_id: int) -> HttpResponse:
    """One submission: live progress (polled by static/js/submission_progress.js), a Cancel
    button for its team's members while it is open, its infrastructure failures with their
    cause, and its episodes' verdicts (never the hidden ground truth)."""
    submission = submission_get(submission_id=submission_id)
    if submission is None:
        raise Http404("no such submission")
    progress = submission_progress(submission=submission)
    user = request.user
    can_cancel = progress.open and (
        user.is_staff
        or (
            user.is_authenticated
            and submission.round_id is None
            and submission.agent.team.members.filter(pk=user.pk).exists()
        )
    )
    return render(
        request,
        "leaderboard/submission.html",
        {
            "submission": submission,
            "progress": progress,
            "can_cancel": can_cancel,
            "infra_failures": submission_infrastructure_failures(submission=submission),
            "episodes": submission_episode_rows(submission=submission),
        },
    )
