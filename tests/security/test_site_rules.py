"""Site rules under concurrency and faults, on the configured database.

The race tests need PostgreSQL (row locks; SQLite serialises every writer anyway). They carry the
``postgres`` marker: ``make test`` leaves them out of its SQLite pass and runs them in its
PostgreSQL pass (``DATABASE_URL=postgres://...``); run alone without PostgreSQL they skip locally
and fail under ``CI=true``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import pytest
from django.contrib.auth.models import User
from django.db import connection, connections
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from evaluator.testing import GuessApp, ScriptedClient, registered_app
from submissions.models import Agent, EpisodeRecord, Submission, Team
from submissions.selectors import standings
from submissions.services import dispatch
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services
from tests.conftest import require


def _require_postgres() -> None:
    require(connection.vendor == "postgresql", "PostgreSQL (DATABASE_URL) is not configured")


def _parallel_posts(token: str, path: str, bodies: Sequence[Mapping[str, object]]) -> list[int]:
    """POST every body at once from its own thread (and database connection)."""
    barrier = threading.Barrier(len(bodies))
    statuses: list[int] = [0] * len(bodies)

    def post(i: int) -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        try:
            barrier.wait(timeout=30)
            statuses[i] = client.post(path, bodies[i], format="json").status_code
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return statuses


@pytest.fixture
def member_token(db):
    user = User.objects.create_user("alice", password="pw-alice-123")
    team = Team.objects.create(name="Blue")
    team.members.add(user)
    return Token.objects.create(user=user).key, team


def _agent(team: Team, name: str) -> Agent:
    return Agent.objects.create(
        team=team, name=name, endpoint_url="https://93.184.215.14/v1", protocol="http-json"
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_parallel_submissions_open_one_per_agent(member_token, monkeypatch):
    _require_postgres()
    monkeypatch.setattr(dispatch, "task_send", lambda *a, **k: None)
    token, team = member_token
    agent = _agent(team, "bot")
    statuses = _parallel_posts(
        token, "/api/v1/submissions/", [{"agent": agent.pk, "apps": ["malt"]}] * 12
    )
    assert sorted(statuses) == [202] + [429] * 11
    assert Submission.objects.filter(agent=agent).count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_parallel_submissions_respect_the_team_quota(member_token, monkeypatch, settings):
    _require_postgres()
    monkeypatch.setattr(dispatch, "task_send", lambda *a, **k: None)
    settings.NETARENA = {**settings.NETARENA, "SUBMISSIONS_PER_TEAM_PER_DAY": 5}
    token, team = member_token
    agents = [_agent(team, f"bot-{i}") for i in range(8)]
    statuses = _parallel_posts(
        token, "/api/v1/submissions/", [{"agent": a.pk, "apps": ["malt"]} for a in agents]
    )
    assert sorted(statuses) == [202] * 5 + [429] * 3
    assert Submission.objects.filter(agent__team=team).count() == 5


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_parallel_submissions_to_several_teams_respect_the_users_quota(
    member_token, monkeypatch, settings
):
    _require_postgres()
    monkeypatch.setattr(dispatch, "task_send", lambda *a, **k: None)
    settings.NETARENA = {**settings.NETARENA, "SUBMISSIONS_PER_USER_PER_DAY": 4}
    token, team = member_token
    teams = [team, Team.objects.create(name="Green"), Team.objects.create(name="Red")]
    for other in teams[1:]:
        other.members.add(team.members.get())
    agents = [_agent(teams[i % 3], f"bot-{i}") for i in range(8)]
    statuses = _parallel_posts(
        token, "/api/v1/submissions/", [{"agent": a.pk, "apps": ["malt"]} for a in agents]
    )
    assert sorted(statuses) == [202] * 4 + [429] * 4
    assert Submission.objects.filter(created_by__username="alice").count() == 4


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_parallel_registrations_respect_the_agent_cap(member_token, settings):
    _require_postgres()
    settings.NETARENA = {**settings.NETARENA, "AGENTS_PER_TEAM": 3}
    token, team = member_token
    bodies = [
        {
            "team": "Blue",
            "name": f"bot-{i}",
            "endpoint_url": "https://93.184.215.14/v1",
            "protocol": "http-json",
        }
        for i in range(8)
    ]
    statuses = _parallel_posts(token, "/api/v1/agents/", bodies)
    assert sorted(statuses) == [201] * 3 + [400] * 5
    assert Agent.objects.filter(team=team).count() == 3


def _nul_client() -> ScriptedClient:
    """Replies with NUL bytes and lone surrogates, which PostgreSQL cannot store as text."""
    return ScriptedClient(["7\x00\ud800 nul"])


def _number_client() -> ScriptedClient:
    return ScriptedClient(["7"])


@pytest.fixture
def toy_app():
    with registered_app({"guess": GuessApp}):
        yield


def _run(django_capture_on_commit_callbacks, submission: Submission) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_prepare(submission_id=submission.pk)
    for episode in EpisodeRecord.objects.filter(submission=submission):
        episode_services.episode_execute(episode_id=episode.pk)
    submission.refresh_from_db()


@pytest.mark.django_db
def test_nul_in_a_reply_is_stored_sanitised(
    toy_app, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(episode_services, "agent_client_build", lambda agent: _nul_client())
    agent = _agent(Team.objects.create(name="t"), "nul")
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=2
        )
    _run(django_capture_on_commit_callbacks, submission)
    assert submission.status == Submission.Status.FINISHED
    episodes = list(submission.episodes.all())
    assert {e.status for e in episodes} == {EpisodeRecord.Status.DONE}
    stored = str([e.transcript for e in episodes])
    assert "\x00" not in stored and "\ufffd" in stored


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_storage_error_closes_the_episode_as_an_error(
    toy_app, monkeypatch, django_capture_on_commit_callbacks
):
    """With sanitising switched off, PostgreSQL refuses the NUL in the transcript: the episode
    closes as an evaluator error and the submission finishes (nothing left running)."""
    _require_postgres()
    monkeypatch.setattr(episode_services, "agent_client_build", lambda agent: _nul_client())
    monkeypatch.setattr(episode_services, "storable", lambda value, depth=0: value)
    agent = _agent(Team.objects.create(name="t"), "n")
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=2
        )
    _run(django_capture_on_commit_callbacks, submission)
    assert submission.status == Submission.Status.FINISHED
    failures = list(submission.episodes.values_list("status", "failure"))
    assert len(failures) == 2
    assert all(s == "error" and "storing the verdict failed" in f for s, f in failures), failures


@pytest.mark.django_db
def test_platform_failed_submission_is_free_and_keeps_the_last_score(
    toy_app, monkeypatch, settings, django_capture_on_commit_callbacks
):
    settings.NETARENA = {**settings.NETARENA, "SUBMISSIONS_PER_TEAM_PER_DAY": 1}
    agent = _agent(Team.objects.create(name="t"), "seven")
    monkeypatch.setattr(episode_services, "agent_client_build", lambda agent: _number_client())
    with django_capture_on_commit_callbacks(execute=False):
        scored = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=3
        )
    _run(django_capture_on_commit_callbacks, scored)
    Submission.objects.filter(pk=scored.pk).update(created_at="2000-01-01T00:00:00Z")

    def crash(*args, **kwargs):
        raise RuntimeError("emulator host lost")

    monkeypatch.setattr(episode_services, "run_episode_guarded", crash)
    with django_capture_on_commit_callbacks(execute=False):
        failed = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=3
        )
    _run(django_capture_on_commit_callbacks, failed)
    assert failed.status == Submission.Status.FINISHED and failed.platform_failed
    rows = standings(app_id="guess")
    assert [r.submission.pk for r in rows] == [scored.pk]
    # the platform's failure cost no quota: the next submission of the day is accepted
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_create(agent=agent, apps=["guess"], queries_per_app=1)


def test_deeply_nested_json_body_is_a_400(db):
    user = User.objects.create_user("bob", password="pw-bob-123")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    body = "[" * 100_000 + "]" * 100_000
    response = client.post("/api/v1/submissions/", body, content_type="application/json")
    assert response.status_code == 400
