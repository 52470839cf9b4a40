"""Leaderboard pages (thin: data from selectors, figures from plots)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from evaluator.registry import get_app
from leaderboard.plots import ci_overlap_figure, spider_figure
from leaderboard.selectors import all_standings, submission_episode_rows
from submissions.models import Submission


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
    """One submission: status and its episodes' verdicts (never the hidden ground truth)."""
    submission = get_object_or_404(
        Submission.objects.select_related("agent__team", "round"), pk=submission_id
    )
    episodes = submission_episode_rows(submission=submission)
    return render(
        request, "leaderboard/submission.html", {"submission": submission, "episodes": episodes}
    )
