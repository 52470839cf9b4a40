"""Tell a team when its submission is done: one e-mail per member, once per submission.

:func:`submission_finished_notify` is connected to ``submissions.signals.submission_closed``
(``accounts.apps``), which the submission services send after the transaction that closed a
submission as finished or failed commits, in whichever process closed it (usually the worker
that stored the last verdict). The mail goes through Django's mail settings (``EMAIL_URL``;
the console by default, as in ``make demo``) and carries the result per app
(``submissions.result_selectors``) and a link to the submission page (``NETARENA_SITE_URL``).

Once per submission: the conditional update that sets ``Submission.notified_at`` claims the
notification, so a second close signal (or a redelivered task) sends nothing. Members who
turned submission e-mails off (:func:`notification_settings_set`, the page
``/accounts/settings/``) and members without an address get none.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.mail import EmailMessage, get_connection
from django.urls import reverse
from django.utils import timezone

from accounts.models import NotificationSetting
from submissions.disclosure import Audience, Disclosure, submission_is_spent
from submissions.models import Submission
from submissions.result_selectors import AppResult, rate_text, submission_result

logger = logging.getLogger(__name__)

#: Statuses that are announced (a cancelled submission was stopped by its team).
ANNOUNCED = (Submission.Status.FINISHED, Submission.Status.FAILED)


def notification_settings_get(*, user: User) -> NotificationSetting:
    """The user's e-mail preferences (the defaults, unsaved, when they never changed them)."""
    found = NotificationSetting.objects.filter(user=user).first()
    return found if found is not None else NotificationSetting(user=user)


def notification_settings_set(*, user: User, submission_emails: bool) -> NotificationSetting:
    """Turn the user's "submission finished" e-mails on or off."""
    setting, _ = NotificationSetting.objects.update_or_create(
        user=user, defaults={"submission_emails": submission_emails}
    )
    return setting


def _site_url(path: str) -> str:
    return str(settings.NETARENA["SITE_URL"]).rstrip("/") + path


def _recipients(submission: Submission) -> list[User]:
    """Members of the agent's team with an address who did not turn these e-mails off."""
    return list(
        submission.agent.team.members.filter(is_active=True)
        .exclude(email="")
        .exclude(notification_setting__submission_emails=False)
        .order_by("pk")
    )


def _app_lines(app: AppResult) -> list[str]:
    lines = [f"{app.app_id}:"]
    if app.all.n:
        lines.append(
            f"  correct and safe {rate_text(app.all.correct_and_safe)} "
            f"({app.all.correct_and_safe_count} of {app.all.n} episodes)"
        )
        lines.append(
            f"  correctness {rate_text(app.all.correctness)}, "
            f"safety {rate_text(app.all.safety)}"
        )
    else:
        lines.append("  no scored episode")
    if app.board is not None:
        place = f"{app.board.rank} of {app.board.agents}"
        if app.board.tied_with:
            place += f", shared with {app.board.tied_with} other agent(s)"
        lines.append(f"  board rank now: {place}")
    if app.previous is not None:
        d = app.previous.difference
        lines.append(
            f"  vs submission {app.previous.submission_id}: {100 * d.value:+.1f} points "
            f"[{100 * d.low:+.1f}, {100 * d.high:+.1f}] (unpaired: different queries)"
        )
    if app.infra_failures:
        kinds = ", ".join(f"{kind} x{count}" for kind, count in app.infra_by_kind.items())
        lines.append(
            f"  infrastructure failures: {len(app.infra_failures)} of {app.episodes_ended} "
            f"episodes ({kinds}; left out of the figures)"
        )
    return lines


def submission_email(*, submission: Submission) -> tuple[str, str]:
    """Subject and plain-text body of the "submission finished/failed" e-mail; while its
    answers are unspent (its round is open: ``submissions.disclosure``) it says so and
    carries no figure."""
    agent = submission.agent
    page = _site_url(reverse("leaderboard:submission", args=[submission.pk]))
    if not Disclosure(Audience.TEAM, submission_is_spent(submission)).shows_verdicts:
        where = f"round {submission.round.number}" if submission.round else "its held-out packs"
        body = (
            f"Submission {submission.pk} of agent {agent.name} (team {agent.team.name}) "
            f"{submission.status}. Its figures are published when {where} closes (other "
            f"agents may still be answering the same queries).\n\nThe submission: {page}\n"
        )
        return f"NetArena: submission {submission.pk} of {agent.name} {submission.status}", body
    result = submission_result(submission=submission)
    if submission.status == Submission.Status.FAILED:
        subject = f"NetArena: submission {submission.pk} of {agent.name} failed"
        opening = (
            f"Submission {submission.pk} of agent {agent.name} (team {agent.team.name}) could "
            f"not be evaluated: {submission.error or 'the platform failed'}. It cost no quota."
        )
    else:
        headline = ", ".join(
            f"{app.app_id} {rate_text(app.all.correct_and_safe)}" for app in result.apps
        )
        subject = f"NetArena: submission {submission.pk} of {agent.name} finished: {headline}"
        opening = (
            f"Submission {submission.pk} of agent {agent.name} (team {agent.team.name}) "
            "finished. Correct and safe, correctness and safety are shares of its scored "
            "episodes with 95% Wilson intervals."
        )
    lines = [opening, f"Its tasks were sent with prompt type {submission.prompt_type}.", ""]
    if result.note:
        lines += [result.note, ""]
    for app in result.apps:
        lines += [*_app_lines(app), ""]
    lines.append(f"The submission: {page}")
    if submission.status == Submission.Status.FINISHED:
        file_path = reverse("submissions:submission-result-file", args=[submission.pk])
        lines.append(f"Its result file: {_site_url(file_path)}")
    lines += [
        "",
        f"You get this e-mail as a member of team {agent.team.name}. To turn these e-mails "
        f"off: {_site_url(reverse('accounts:settings'))}",
    ]
    return subject[:200], "\n".join(lines) + "\n"


def submission_finished_notify(*, submission_id: int, **_: Any) -> int:
    """E-mail the team's members that the submission finished or failed, once.

    Returns the number of messages sent (0 when it was announced before, is not finished or
    failed, or nobody is to be told). A mail server that refuses is logged; the notification
    stays claimed (never sent twice).
    """
    claimed = Submission.objects.filter(
        pk=submission_id, status__in=ANNOUNCED, notified_at__isnull=True
    ).update(notified_at=timezone.now())
    if not claimed:
        return 0
    submission = Submission.objects.select_related("agent__team", "round").get(pk=submission_id)
    recipients = _recipients(submission)
    if not recipients:
        return 0
    subject, body = submission_email(submission=submission)
    messages = [EmailMessage(subject, body, to=[user.email]) for user in recipients]
    try:
        return int(get_connection().send_messages(messages) or 0)
    except Exception:  # noqa: BLE001 - a mail server's failure must not fail the worker
        logger.exception("the e-mail of submission %s could not be sent", submission_id)
        return 0
