"""Round pages: the list, one round (commitment, progress, paired standings) and, for staff,
starting and closing rounds. Thin: data from ``submissions.round_selectors``, changes through
``submissions.services.rounds``."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from evaluator.registry import get_app
from leaderboard.forms import RoundForm
from submissions.errors import ServiceError
from submissions.models import Round
from submissions.round_selectors import (
    pack_archive,
    packs_list,
    round_get,
    round_progress,
    round_standings,
    rounds_list,
    spent_pack_by_digest,
)
from submissions.services import rounds
from submissions.view_helpers import flash_service_call


def _round_or_404(number: int) -> Round:
    evaluation_round = round_get(number=number)
    if evaluation_round is None:
        raise Http404("no such round")
    return evaluation_round


def rounds_page(request: HttpRequest) -> HttpResponse:
    """Every round with its status and commitment."""
    return render(request, "leaderboard/rounds.html", {"rounds": rounds_list()})


def round_page(request: HttpRequest, number: int) -> HttpResponse:
    """One round: commitment (seed and salt once closed), progress and, once it is closed,
    paired standings per app (before, a finished agent's figures would tell the agents still
    answering about the shared queries: ``submissions.disclosure``)."""
    evaluation_round = _round_or_404(number)
    sections = [
        {
            "app_id": app_id,
            "title": get_app(app_id).title,
            "rows": round_standings(evaluation_round=evaluation_round, app_id=app_id)
            if evaluation_round.is_closed
            else [],
        }
        for app_id in evaluation_round.apps
    ]
    return render(
        request,
        "leaderboard/round.html",
        {
            "round": evaluation_round,
            "progress": round_progress(evaluation_round=evaluation_round),
            "sections": sections,
            "apps_csv": ",".join(evaluation_round.apps),
        },
    )


def _archive_response(app_id: str, name: str, digest: str, archive: bytes) -> HttpResponse:
    response = HttpResponse(archive, content_type="application/gzip")
    response["Content-Disposition"] = f'attachment; filename="{app_id}-{name}-{digest[:12]}.tar.gz"'
    return response


def round_pack_archive(request: HttpRequest, number: int, app_id: str, name: str) -> HttpResponse:
    """A held-out pack of a closed round as a ``.tar.gz`` (404 while the round is open, for a
    pack the round did not use, or while the pack is sealed)."""
    evaluation_round = _round_or_404(number)
    digest = (evaluation_round.packs.get(app_id) or {}).get(name)
    if not evaluation_round.is_closed or digest is None:
        raise Http404("no such published pack")
    archive = pack_archive(app_id=app_id, name=name, sha256=digest)
    if archive is None:
        raise Http404("no such published pack")
    return _archive_response(app_id, name, digest, archive)


def pack_archive_by_digest(request: HttpRequest, sha256: str) -> HttpResponse:
    """``/packs/<sha256>.tar.gz``: a spent pack's archive, named by its content digest
    (``evaluator.variants.pack_digest``), so anyone can regenerate and rejudge the rounds
    that drew from it. A sealed or unknown digest is the same 404."""
    pack = spent_pack_by_digest(sha256=sha256.lower())
    if pack is None:
        raise Http404("no such published pack")
    return _archive_response(pack.app_id, pack.name, pack.sha256, bytes(pack.archive))


def packs_page(request: HttpRequest) -> HttpResponse:
    """Every held-out pack the site recorded: sealed ones by name and digest only, spent ones
    with the round that spent them and their archive."""
    return render(request, "leaderboard/packs.html", {"packs": packs_list()})


def round_progress_json(request: HttpRequest, number: int) -> JsonResponse:
    """``{"done", "total", "percent", "by_app": {app: [done, total]}, "open_submissions",
    "closed"}`` for the round page's live progress."""
    evaluation_round = _round_or_404(number)
    progress = round_progress(evaluation_round=evaluation_round)
    return JsonResponse(
        {
            "done": progress.done,
            "total": progress.total,
            "percent": round(progress.percent, 1),
            "by_app": {app: list(counts) for app, counts in progress.by_app.items()},
            "open_submissions": progress.open_submissions,
            "closed": evaluation_round.is_closed,
        }
    )


@staff_member_required
def round_new_page(request: HttpRequest) -> HttpResponse:
    """Staff: start a round (every active agent gets a submission on one fresh seed)."""
    form = RoundForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            evaluation_round = rounds.round_create(
                apps=form.cleaned_data["apps"],
                queries_per_app=form.cleaned_data["queries_per_app"],
                created_by=request.user,
                force_spent=form.cleaned_data["force_spent"],
            )
        except ServiceError as error:
            form.add_error(None, str(error))
        else:
            messages.success(request, f"Started {evaluation_round}.")
            return redirect("leaderboard:round", number=evaluation_round.number)
    return render(request, "leaderboard/round_new.html", {"form": form})


@staff_member_required
@require_POST
def round_close_view(request: HttpRequest, number: int) -> HttpResponse:
    """Staff: close a finished round; its seed and salt become public."""
    evaluation_round = _round_or_404(number)
    flash_service_call(
        request,
        lambda: rounds.round_close(round_id=evaluation_round.pk),
        success=f"Closed {evaluation_round}: seed, salt and its held-out packs are public.",
    )
    return redirect("leaderboard:round", number=number)
