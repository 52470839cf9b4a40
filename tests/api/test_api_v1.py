"""The team API over HTTP (DRF test client): lists with pagination, progress, cancel,
episodes without ground truth, rounds, permissions across teams and throttling (429)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from evaluator.testing import GuessApp, registered_app
from submissions.models import Agent, EpisodeRecord, Submission, Team
from submissions.services import episodes as episode_services
from submissions.services import rounds as round_services
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db


@pytest.fixture
def toy_app():
    with registered_app({"guess": GuessApp}):
        yield


def _client_for(name: str, team: str) -> tuple[APIClient, User, Team]:
    user = User.objects.create_user(name, password=f"pw-{name}-12345")
    team_row = Team.objects.create(name=team)
    team_row.members.add(user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client, user, team_row


@pytest.fixture
def blue():
    return _client_for("alice", "Blue")


@pytest.fixture
def red():
    return _client_for("eve", "Red")


def _agent(team: Team, name: str) -> Agent:
    return Agent.objects.create(
        team=team, name=name, endpoint_url="https://93.184.215.14/v1", protocol="http-json"
    )


def _open_submission(agent: Agent, captured, count: int = 3) -> Submission:
    with captured(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=count
        )
        submission_services.submission_prepare(submission_id=submission.pk)
    submission.refresh_from_db()
    return submission


def test_agent_list_is_paginated_and_only_the_callers_teams(blue, red, monkeypatch):
    # DRF reads PAGE_SIZE once, when the pagination class is first imported: patch the class
    from rest_framework.pagination import PageNumberPagination

    monkeypatch.setattr(PageNumberPagination, "page_size", 2)
    client, _, team = blue
    for i in range(3):
        _agent(team, f"bot-{i}")
    _agent(red[2], "red-bot")
    first = client.get("/api/v1/agents/").json()
    assert first["count"] == 3 and len(first["results"]) == 2 and first["next"]
    second = client.get(first["next"]).json()
    names = {a["name"] for a in first["results"] + second["results"]}
    assert names == {"bot-0", "bot-1", "bot-2"} and second["next"] is None
    assert all(a["team"] == "Blue" for a in first["results"])
    assert "secret_encrypted" not in str(first)
    assert APIClient().get("/api/v1/agents/").status_code in (401, 403)


def test_submission_list_progress_episodes_and_cancel(
    toy_app, blue, red, django_capture_on_commit_callbacks
):
    client, _, team = blue
    agent = _agent(team, "bot")
    submission = _open_submission(agent, django_capture_on_commit_callbacks)
    _open_submission(_agent(red[2], "red-bot"), django_capture_on_commit_callbacks)

    listed = client.get("/api/v1/submissions/").json()
    assert [s["id"] for s in listed["results"]] == [submission.pk]
    assert listed["results"][0]["status"] == "running"

    progress = client.get(f"/api/v1/submissions/{submission.pk}/progress/").json()
    assert progress["open"] and progress["done"] == 0 and progress["total"] == 3
    assert progress["by_app"]["guess"]["total"] == 3 and progress["queue_position"] == 0

    episodes = client.get(f"/api/v1/submissions/{submission.pk}/episodes/").json()
    assert episodes["count"] == 3
    text = str(episodes)
    assert "ground_truth" not in text and "query'" not in text and "prompt" not in text
    # open: progress columns only (submissions.disclosure), no label, level or verdict
    assert set(episodes["results"][0]) == {"id", "app_id", "index", "query_id", "status"}

    # other teams may read (public) but never cancel
    other = red[0]
    refused = other.post(f"/api/v1/submissions/{submission.pk}/cancel/")
    assert refused.status_code == 403 and refused.json()["code"] == "not_your_submission"
    assert APIClient().post(f"/api/v1/submissions/{submission.pk}/cancel/").status_code in (
        401,
        403,
    )
    with django_capture_on_commit_callbacks(execute=False):
        cancelled = client.post(f"/api/v1/submissions/{submission.pk}/cancel/")
    assert cancelled.status_code == 200, cancelled.content
    body = cancelled.json()
    assert body["status"] == "cancelled" and body["open"] is False
    assert body["by_app"]["guess"]["cancelled"] == 3
    again = client.post(f"/api/v1/submissions/{submission.pk}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "submission_closed"
    detail = client.get(f"/api/v1/submissions/{submission.pk}/").json()
    assert detail["status"] == "cancelled" and detail["progress"]["status"] == "cancelled"
    assert client.get("/api/v1/submissions/999999/progress/").status_code == 404
    assert client.get("/api/v1/submissions/999999/episodes/").status_code == 404
    assert client.post("/api/v1/submissions/999999/cancel/").status_code == 404


def test_detail_lists_infrastructure_failures(toy_app, blue, django_capture_on_commit_callbacks):
    client, _, team = blue
    submission = _open_submission(_agent(team, "bot"), django_capture_on_commit_callbacks, 2)
    episode = submission.episodes.order_by("index").first()
    assert episode is not None
    claimed = episode_services._episode_claim(episode.pk)
    assert claimed is not None
    episode_services._episode_close_error(claimed, "EmulatorError: k8s apiserver down")
    detail = client.get(f"/api/v1/submissions/{submission.pk}/").json()
    assert detail["infrastructure_failures"] == [
        {
            "episode": episode.pk,
            "app_id": "guess",
            "index": episode.index,
            "kind": "EmulatorError",
            "message": "EmulatorError: k8s apiserver down",
            "attempts": 1,
        }
    ]
    assert detail["progress"]["by_app"]["guess"]["errors"] == 1


def test_rounds_list_and_detail_hide_the_seed_until_closed(
    toy_app, blue, django_capture_on_commit_callbacks
):
    client, _, team = blue
    _agent(team, "bot")
    with django_capture_on_commit_callbacks(execute=False):
        evaluation_round = round_services.round_create(apps=["guess"], queries_per_app=2)
    rounds = APIClient().get("/api/v1/rounds/").json()
    assert rounds["count"] == 1
    row = rounds["results"][0]
    assert row["number"] == evaluation_round.number and row["seed"] is None
    assert row["commitment"] == evaluation_round.commitment
    detail = client.get(f"/api/v1/rounds/{evaluation_round.number}/").json()
    assert detail["progress"]["open_submissions"] == 1 and detail["standings"] == {}
    assert str(evaluation_round.seed) not in str(detail)
    assert client.get("/api/v1/rounds/9999/").status_code == 404


def test_throttling_answers_429_with_retry_after(blue, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"anon": "3/min", "user": "5/min"},
    }
    anonymous = APIClient()
    codes = [anonymous.get("/api/v1/rounds/").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    client = blue[0]
    codes = [client.get("/api/v1/agents/").status_code for _ in range(6)]
    assert codes == [200] * 5 + [429]
    limited = client.get("/api/v1/agents/")
    assert limited.status_code == 429 and int(limited["Retry-After"]) > 0


def test_episode_statuses_in_the_api_match_the_database(
    toy_app, blue, django_capture_on_commit_callbacks
):
    client, _, team = blue
    submission = _open_submission(_agent(team, "bot"), django_capture_on_commit_callbacks, 2)
    rows = client.get(f"/api/v1/submissions/{submission.pk}/episodes/").json()["results"]
    stored = dict(EpisodeRecord.objects.filter(submission=submission).values_list("pk", "status"))
    assert {r["id"]: r["status"] for r in rows} == stored


def test_token_from_username_and_password_is_throttled(settings):
    User.objects.create_user("tess", password="pw-tess-12345")
    client = APIClient()
    got = client.post("/api/v1/token/", {"username": "tess", "password": "pw-tess-12345"})
    assert got.status_code == 200
    assert got.json()["token"] == Token.objects.get(user__username="tess").key
    wrong = client.post("/api/v1/token/", {"username": "tess", "password": "nope"})
    assert wrong.status_code == 400 and "token" not in wrong.json()
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"anon": "2/min", "user": "2/min"},
    }
    codes = [
        client.post("/api/v1/token/", {"username": "tess", "password": "guess"}).status_code
        for _ in range(3)
    ]
    assert codes[-1] == 429  # guessing passwords is rate-limited


def test_bad_unicode_and_text_the_database_refuses_are_400_with_a_message(blue, client):
    """A lone surrogate (``"\\ud800"``) in ``apps`` crashed the JSON renderer (500) quoting
    it back; a team name over 100 characters or with NUL is a field error, not a database
    error (PostgreSQL refuses both). Runs on SQLite and on PostgreSQL."""
    api, user, team = blue
    agent = _agent(team, "bot")
    for body in (
        f'{{"agent": {agent.pk}, "apps": ["\\ud800"]}}',
        f'{{"agent": {agent.pk}, "apps": ["malt"], "\\udfff": 1}}',
    ):
        answer = api.post("/api/v1/submissions/", data=body, content_type="application/json")
        assert answer.status_code == 400, answer.content
        assert "lone UTF-16 surrogate" in answer.json()["detail"]
    registration = {"name": "bot2", "endpoint_url": "https://93.184.215.14/v1",
                    "protocol": "http-json"}
    for team_name, message in (("B" * 101, "no more than 100"), ("Bl\x00ue", "Null")):
        answer = api.post("/api/v1/agents/", {**registration, "team": team_name}, format="json")
        assert answer.status_code == 400 and message in answer.json()["team"][0], answer.json()
    assert not Submission.objects.exists() and Agent.objects.count() == 1
    # the HTML form decodes what is not UTF-8 to U+FFFD: a field error, never a crash
    client.force_login(user)
    page = client.post("/accounts/submit/", data=f"agent={agent.pk}&apps=%ED%A0%80",
                       content_type="application/x-www-form-urlencoded")
    assert page.status_code == 200 and "Select a valid choice" in page.content.decode()
