"""The "submission finished" e-mail: sent once per submission to the team's members who want
it, with the result and a link; also when the platform failed the submission; never for a
cancelled one. Django's test mail outbox stands in for the mail server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.utils import timezone

from accounts import notifications
from accounts import services as team_services
from evaluator.testing import GuessApp, registered_app
from submissions.models import Agent, EpisodeRecord, Round, Submission
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services
from submissions.signals import submission_closed
from tests.submissions.test_services import OracleClient

pytestmark = pytest.mark.django_db

PASSWORD = "pw-long-enough-42"


@pytest.fixture
def team_agent(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Any:
    """A team of three: ``ana`` (wants mail), ``ben`` (turned it off), ``cy`` (no address);
    its agent answers the toy app in-process."""
    settings.NETARENA = {**settings.NETARENA, "SITE_URL": "https://board.example.org/"}
    monkeypatch.setattr(episode_services, "agent_client_build", lambda agent: OracleClient("seven"))
    ana = User.objects.create_user("ana", "ana@example.org", PASSWORD)
    ben = User.objects.create_user("ben", "ben@example.org", PASSWORD)
    cy = User.objects.create_user("cy", "", PASSWORD)
    team = team_services.team_create(user=ana, name="ana-team")
    team.members.add(ben, cy)
    notifications.notification_settings_set(user=ben, submission_emails=False)
    agent = Agent.objects.create(
        team=team, name="bot", endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )
    with registered_app({"guess": GuessApp}):
        yield agent


def _submit(agent: Agent, capture: Any, queries: int = 3) -> Submission:
    with capture(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=queries
        )
    with capture(execute=False):
        submission_services.submission_prepare(submission_id=submission.pk)
    return submission


def test_sent_once_to_members_who_want_it(
    team_agent: Agent, django_capture_on_commit_callbacks: Any
) -> None:
    submission = _submit(team_agent, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        for episode in EpisodeRecord.objects.filter(submission=submission):
            episode_services.episode_execute(episode_id=episode.pk)
    submission.refresh_from_db()
    assert submission.status == "finished" and submission.notified_at is not None
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["ana@example.org"]
    assert f"submission {submission.pk} of bot finished" in message.subject
    body = message.body
    assert "guess:" in body and "correct and safe" in body and "of 3 episodes" in body
    assert "board rank now: 1 of 1" in body
    assert f"https://board.example.org/submissions/{submission.pk}/" in body
    assert f"https://board.example.org/submissions/{submission.pk}/result.json" in body
    assert "https://board.example.org/accounts/settings/" in body

    # closing again, the signal again, the service again: nothing more
    with django_capture_on_commit_callbacks(execute=True):
        submission_services.submission_close_if_complete(submission_id=submission.pk)
    submission_closed.send(sender=Submission, submission_id=submission.pk)
    assert notifications.submission_finished_notify(submission_id=submission.pk) == 0
    assert len(mail.outbox) == 1


def test_a_round_submission_mail_carries_no_figure_while_the_round_is_open(
    team_agent: Agent, django_capture_on_commit_callbacks: Any
) -> None:
    evaluation_round = Round.objects.create(number=1, seed=3, apps=["guess"], queries_per_app=3)
    submission = Submission.objects.create(
        agent=team_agent, round=evaluation_round, seed=3, apps=["guess"], queries_per_app=3
    )
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_prepare(submission_id=submission.pk)
    with django_capture_on_commit_callbacks(execute=True):
        for episode in EpisodeRecord.objects.filter(submission=submission):
            episode_services.episode_execute(episode_id=episode.pk)
    assert len(mail.outbox) == 1
    body, subject = mail.outbox[0].body, mail.outbox[0].subject
    assert "published when round 1 closes" in body
    assert "%" not in f"{body} {subject}" and "correct and safe" not in body
    assert "result.json" not in body


def test_the_next_submission_says_how_it_differs(
    team_agent: Agent, django_capture_on_commit_callbacks: Any
) -> None:
    for _ in range(2):
        submission = _submit(team_agent, django_capture_on_commit_callbacks)
        with django_capture_on_commit_callbacks(execute=True):
            for episode in EpisodeRecord.objects.filter(submission=submission):
                episode_services.episode_execute(episode_id=episode.pk)
    assert len(mail.outbox) == 2
    assert "vs submission" in mail.outbox[1].body and "unpaired" in mail.outbox[1].body


def test_a_failed_submission_is_announced_and_a_cancelled_one_is_not(
    team_agent: Agent, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        stale = submission_services.submission_create(
            agent=team_agent, apps=["guess"], queries_per_app=2
        )
    Submission.objects.filter(pk=stale.pk).update(created_at=timezone.now() - timedelta(days=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert submission_services.submissions_expire(max_wait_s=60) == 1
    assert len(mail.outbox) == 1
    assert "failed" in mail.outbox[0].subject and "no quota" in mail.outbox[0].body

    ana = User.objects.get(username="ana")
    with django_capture_on_commit_callbacks(execute=False):
        cancelled = submission_services.submission_create(
            agent=team_agent, apps=["guess"], queries_per_app=2
        )
    with django_capture_on_commit_callbacks(execute=True):
        submission_services.submission_cancel(submission=cancelled, actor=ana)
    submission_closed.send(sender=Submission, submission_id=cancelled.pk)
    assert len(mail.outbox) == 1


def test_a_mail_server_that_refuses_fails_nothing(
    team_agent: Agent, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 9  # discard: nothing listens
    submission = _submit(team_agent, django_capture_on_commit_callbacks, queries=1)
    with django_capture_on_commit_callbacks(execute=True):
        for episode in EpisodeRecord.objects.filter(submission=submission):
            episode_services.episode_execute(episode_id=episode.pk)
    submission.refresh_from_db()
    assert submission.status == "finished" and submission.notified_at is not None


def test_the_settings_page_turns_the_mail_off_and_on(client: Any) -> None:
    user = User.objects.create_user("dee", "dee@example.org", PASSWORD)
    client.force_login(user)
    page = client.get("/accounts/settings/")
    assert page.status_code == 200 and page.context["form"]["submission_emails"].initial is True
    assert client.post("/accounts/settings/", {}).status_code == 302
    assert notifications.notification_settings_get(user=user).submission_emails is False
    client.post("/accounts/settings/", {"submission_emails": "on"})
    assert notifications.notification_settings_get(user=user).submission_emails is True
    client.logout()
    assert client.get("/accounts/settings/").status_code == 302  # log in first
