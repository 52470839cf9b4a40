"""Team API: membership, guard on endpoints, quotas, CSRF, no secret in responses."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from submissions.models import Agent, AgentPreflight, Submission, Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def member():
    user = User.objects.create_user("alice", password="pw-alice-123")
    team = Team.objects.create(name="Blue")
    team.members.add(user)
    Team.objects.create(name="Red")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def _agent_body(**overrides):
    body = {
        "team": "Blue",
        "name": "bot-1",
        "endpoint_url": "https://93.184.215.14/v1",
        "protocol": "openai-chat",
        "api_key": "sk-secret",
    }
    body.update(overrides)
    return body


def _preflight_passed(agent_id):
    """What a worker's pre-flight would store (tests/accounts/test_preflight.py runs real ones)."""
    assert AgentPreflight.objects.filter(agent_id=agent_id).update(status="passed") == 1


def test_register_agent_and_submit(member, django_capture_on_commit_callbacks):
    created = member.post("/api/v1/agents/", _agent_body(), format="json")
    assert created.status_code == 201, created.content
    _preflight_passed(created.json()["id"])
    assert "sk-secret" not in created.content.decode()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        submitted = member.post(
            "/api/v1/submissions/",
            {"agent": created.json()["id"], "apps": ["malt"], "queries_per_app": 5},
            format="json",
        )
    assert submitted.status_code == 202, submitted.content
    assert len(callbacks) == 1
    detail = member.get(f"/api/v1/submissions/{submitted.json()['id']}/").json()
    assert detail["status"] == "queued" and detail["apps"] == ["malt"]
    # one open submission per agent
    again = member.post(
        "/api/v1/submissions/", {"agent": created.json()["id"], "apps": ["malt"]}, format="json"
    )
    assert again.status_code == 429 and again.json()["code"] == "in_progress"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/",
        "http://169.254.169.254/latest",
        "http://10.1.2.3/",
        "ftp://example.org/",
    ],
)
def test_private_or_odd_endpoints_are_refused(member, url):
    response = member.post("/api/v1/agents/", _agent_body(endpoint_url=url), format="json")
    assert response.status_code == 400
    assert not Agent.objects.exists()


def test_other_teams_and_strangers_are_refused(member):
    assert member.post("/api/v1/agents/", _agent_body(team="Red"), format="json").status_code == 403
    stranger = APIClient()
    assert stranger.post("/api/v1/agents/", _agent_body(), format="json").status_code in (401, 403)
    red_agent = Agent.objects.create(
        team=Team.objects.get(name="Red"),
        name="r",
        endpoint_url="https://a.example",
        protocol="http-json",
    )
    response = member.post(
        "/api/v1/submissions/", {"agent": red_agent.pk, "apps": ["malt"]}, format="json"
    )
    assert response.status_code == 403 and not Submission.objects.exists()


def test_daily_quota(member, settings, django_capture_on_commit_callbacks):
    settings.NETARENA = {**settings.NETARENA, "SUBMISSIONS_PER_TEAM_PER_DAY": 1}
    agent_id = member.post("/api/v1/agents/", _agent_body(), format="json").json()["id"]
    _preflight_passed(agent_id)
    with django_capture_on_commit_callbacks(execute=False):
        assert (
            member.post(
                "/api/v1/submissions/", {"agent": agent_id, "apps": ["malt"]}, format="json"
            ).status_code
            == 202
        )
    Submission.objects.update(status="finished")
    over = member.post("/api/v1/submissions/", {"agent": agent_id, "apps": ["malt"]}, format="json")
    assert over.status_code == 429 and over.json()["code"] == "quota"


def test_session_auth_requires_csrf():
    User.objects.create_user("bob", password="pw-bob-123")
    client = APIClient(enforce_csrf_checks=True)
    client.login(username="bob", password="pw-bob-123")
    response = client.post("/api/v1/agents/", _agent_body(), format="json")
    assert response.status_code == 403 and "CSRF" in response.content.decode()
