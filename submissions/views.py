"""Site views of a submission's live state: progress as JSON (polled by the submission page),
the downloadable result file and the Cancel button's POST. The page itself is
``leaderboard.views.submission_page``."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from submissions.disclosure import disclosure_for
from submissions.models import Submission
from submissions.progress import submission_progress
from submissions.result_selectors import submission_result_document
from submissions.selectors import submission_get
from submissions.services import submissions
from submissions.view_helpers import flash_service_call


def _submission_or_404(submission_id: int) -> Submission:
    submission = submission_get(submission_id=submission_id)
    if submission is None:
        raise Http404("no such submission")
    return submission


def submission_progress_json(request: HttpRequest, submission_id: int) -> JsonResponse:
    """``SubmissionProgress.to_dict()`` of one submission (public, like the page): status,
    done/total/percent, per-app counts, queue position, elapsed and estimated seconds."""
    progress = submission_progress(submission=_submission_or_404(submission_id))
    response = JsonResponse(progress.to_dict())
    response["Cache-Control"] = "no-store"
    return response


def submission_result_file(request: HttpRequest, submission_id: int) -> JsonResponse:
    """The submission's result file (docs/result-format.md, "Submission result file") as a
    JSON download, public like the page; 409 while its answers are unspent (the submission
    runs, its round is open, or a pack it drew from is sealed: ``submissions.disclosure``)."""
    submission = _submission_or_404(submission_id)
    if not disclosure_for(request.user, submission).shows_verdicts:
        detail = (
            "the submission is still running; its result is not final"
            if submission.status in (Submission.Status.QUEUED, Submission.Status.RUNNING)
            else "its round is still open (or a pack it drew from is sealed): results are "
            "published when the round closes"
        )
        return JsonResponse({"detail": detail, "code": "open"}, status=409)
    response = JsonResponse(
        submission_result_document(submission=submission), json_dumps_params={"indent": 1}
    )
    response["Content-Disposition"] = (
        f'attachment; filename="netarena-submission-{submission.pk}.json"'
    )
    return response


@login_required
@require_POST
def submission_cancel_view(request: HttpRequest, submission_id: int) -> HttpResponse:
    """Cancel an open submission (team members; staff for rounds); back to its page."""
    submission = _submission_or_404(submission_id)
    flash_service_call(
        request,
        lambda: submissions.submission_cancel(submission=submission, actor=request.user),
        success=f"Submission {submission.pk} cancelled.",
    )
    return redirect("leaderboard:submission", submission_id=submission.pk)
