"""Leaderboard pages (thin: data from selectors, figures from plots)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from evaluator.registry import app_ids, get_app
from leaderboard.method import METHOD_DOCS, method_doc, render_doc
from leaderboard.plots import board_figures
from submissions.disclosure import Disclosure, disclosure_for, episode_rows
from submissions.episode_selectors import episode_replay
from submissions.models import Submission
from submissions.progress import submission_infrastructure_failures, submission_progress
from submissions.result_selectors import submission_result
from submissions.round_selectors import ranking_of_record, rounds_list
from submissions.selectors import standings_page, submission_get

#: ``?round=practice``: the practice standings (each agent's latest team submission).
PRACTICE = "practice"
#: Rows per app on the overall board (the top of each app) and per page of one app's board.
ROWS_OVERALL = 15
ROWS_PER_APP_PAGE = 50


def _int_param(request: HttpRequest, name: str, default: int | None) -> int | None:
    """A positive integer query parameter; anything else is the default."""
    raw = request.GET.get(name, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else default


def _agent_ids_param(request: HttpRequest) -> list[int]:
    """``?agents=3,7,12`` (or repeated ``agents``): the selected agent ids."""
    chosen: list[int] = []
    for value in request.GET.getlist("agents"):
        chosen += [int(part) for part in value.split(",") if part.strip().isdigit()]
    return sorted(set(chosen))


def leaderboard_page(request: HttpRequest) -> HttpResponse:
    """The leaderboard: overall (the top rows of every app) or one app (``?app=``, paged with
    ``?page=``), of the ranking of record (the latest closed round, by default), another
    round (``?round=N``) or the practice standings (``?round=practice``: each agent's latest
    team submission; also shown while no round has closed); ``?agents=1,2`` preselects
    agents to compare (docs/metrics.md, "The ranking of record").

    Each app's section: a ranked table (95% Wilson intervals, tie ranks; sortable in the
    browser) and four charts with a trace per listed agent; ticking agents (or ``?agents=``,
    whose agents are listed even when outside the page) shows only theirs
    (``static/js/board.js``).
    """
    known_apps = app_ids()
    app = request.GET.get("app") or None
    if app is not None and app not in known_apps:
        raise Http404("no such app")
    practice = request.GET.get("round") == PRACTICE
    round_number = None if practice else _int_param(request, "round", None)
    if round_number is None and not practice:
        round_number = ranking_of_record()
    practice = round_number is None
    selected = _agent_ids_param(request)
    page = _int_param(request, "page", 1) or 1
    per_page = ROWS_PER_APP_PAGE if app else ROWS_OVERALL
    sections: list[dict[str, Any]] = []
    for app_id in [app] if app else known_apps:
        result = standings_page(
            app_id=app_id,
            round_number=round_number,
            offset=(page - 1) * per_page if app else 0,
            limit=per_page,
            agent_ids=selected,
        )
        rows = result.rows
        sections.append(
            {
                "app_id": app_id,
                "title": get_app(app_id).title,
                "rows": rows,
                "total": result.total,
                "figures": board_figures(app_id=app_id, rows=rows) if rows else None,
            }
        )
    round_param = PRACTICE if practice else str(round_number)
    base: dict[str, Any] = {k: v for k, v in (("app", app), ("round", round_param)) if v}
    pages = None
    total = int(sections[0]["total"]) if sections else 0
    if app and total > per_page:
        last = (total + per_page - 1) // per_page
        pages = {
            "number": page,
            "last": last,
            "previous": f"?{urlencode({**base, 'page': page - 1})}" if page > 1 else None,
            "next": f"?{urlencode({**base, 'page': page + 1})}" if page < last else None,
        }
    return render(
        request,
        "leaderboard/index.html",
        {
            "sections": sections,
            "apps": known_apps,
            "app": app,
            "round_number": round_number,
            "round_param": round_param,
            "practice": practice,
            "record": ranking_of_record(),
            "rounds": rounds_list(),
            "selected": selected,
            "pages": pages,
            "base_query": urlencode(base),
        },
    )


def _submission_or_404(submission_id: int) -> Submission:
    submission = submission_get(submission_id=submission_id)
    if submission is None:
        raise Http404("no such submission")
    return submission


def _submission_sections(submission: Submission, disclosure: Disclosure) -> dict[str, Any]:
    """What the page's live part shows to this visitor (``submissions.disclosure``): the
    result once its answers are spent (``submissions.result_selectors``), infrastructure
    failures with their cause, and the episodes' columns the visitor may see (progress only
    while unspent; never the hidden ground truth)."""
    return {
        "submission": submission,
        "disclosure": disclosure,
        "result": submission_result(submission=submission) if disclosure.shows_verdicts else None,
        "infra_failures": submission_infrastructure_failures(submission=submission),
        "episodes": episode_rows(submission, disclosure),
    }


def submission_page(request: HttpRequest, submission_id: int) -> HttpResponse:
    """One submission: live progress (polled by static/js/submission_progress.js), a Cancel
    button for its team's members while it is open, and its live part
    (:func:`submission_sections_page`): the result per app once it is closed, its
    infrastructure failures with their cause, and its episodes' verdicts."""
    submission = _submission_or_404(submission_id)
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
            "progress": progress,
            "can_cancel": can_cancel,
            **_submission_sections(submission, disclosure_for(user, submission)),
        },
    )


def submission_sections_page(request: HttpRequest, submission_id: int) -> HttpResponse:
    """The live part of the submission page as an HTML fragment: the page's script swaps it
    in whenever more episodes are done, and once more when the submission closes (the
    result appears without a reload)."""
    submission = _submission_or_404(submission_id)
    response = render(
        request,
        "leaderboard/_submission_sections.html",
        _submission_sections(submission, disclosure_for(request.user, submission)),
    )
    response["Cache-Control"] = "no-store"
    return response


def episode_page(request: HttpRequest, episode_id: int) -> HttpResponse:
    """One episode replayed: prompt, each reply and its observation, the pingall/mismatch
    evolution, the verdict. What a visitor may see follows
    :func:`submissions.episode_selectors.episode_replay` (hidden ground truth rule)."""
    replay = episode_replay(episode_id=episode_id, user=request.user)
    if replay is None:
        raise Http404("no such episode")
    return render(request, "leaderboard/episode.html", {"replay": replay})


def method_index_page(request: HttpRequest) -> HttpResponse:
    """The method: a list of the documents rendered on the site (``leaderboard.method``)."""
    return render(request, "leaderboard/method_index.html", {"docs": METHOD_DOCS})


def method_doc_page(request: HttpRequest, slug: str) -> HttpResponse:
    """One document of the method, rendered from ``docs/`` (headings with anchors, links
    between documents pointing at their pages)."""
    doc = method_doc(slug)
    if doc is None:
        raise Http404("no such document")
    return render(
        request,
        "leaderboard/method.html",
        {"doc": doc, "rendered": render_doc(doc), "docs": METHOD_DOCS},
    )
