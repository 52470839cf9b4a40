"""Register an agent and submit it through the pages; the services' rules show as form errors."""

from __future__ import annotations

from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from accounts import services
from evaluator.registry import app_ids
from submissions.crypto import decrypt_secret
from submissions.models import Agent, Submission

pytestmark = pytest.mark.django_db
PUBLIC_URL = "https://93.184.215.14/v1"  # a literal public address: no DNS needed


@pytest.fixture
def member(client: Client) -> User:
    user = User.objects.create_user("mia", "mia@example.org", "pw-mia-12345")
    client.force_login(user)
    return user


def test_register_agent_stores_secret_encrypted_and_never_shows_it(
    client: Client, member: User
) -> None:
    team = services.team_create(user=member, name="mia-team")
    response = client.post(
        reverse("accounts:agent-new"),
        {"team": team.pk, "name": "probe", "endpoint_url": PUBLIC_URL, "protocol": "openai-chat",
         "model_name": "m-1", "api_key": "sk-very-secret", "apps": [app_ids()[0]]},
    )
    assert response.status_code == 302
    agent = Agent.objects.get(team=team, name="probe")
    assert agent.apps == [app_ids()[0]]
    assert b"sk-very-secret" not in bytes(agent.secret_encrypted)
    assert decrypt_secret(bytes(agent.secret_encrypted)) == "sk-very-secret"
    page = client.get(reverse("accounts:team")).content.decode()
    assert "probe" in page and "sk-very-secret" not in page


def test_register_agent_refuses_loopback_and_foreign_teams(client: Client, member: User) -> None:
    team = services.team_create(user=member, name="mia-team")
    other = services.team_create(
        user=User.objects.create_user("ola", "ola@example.org", "pw-ola-12345"), name="other"
    )
    refused = client.post(
        reverse("accounts:agent-new"),
        {"team": team.pk, "name": "local", "endpoint_url": "http://127.0.0.1:9/",
         "protocol": "http-json"},
    )
    assert refused.status_code == 200 and "endpoint refused" in refused.content.decode()
    foreign = client.post(
        reverse("accounts:agent-new"),
        {"team": other.pk, "name": "x", "endpoint_url": PUBLIC_URL, "protocol": "http-json"},
    )
    assert foreign.status_code == 200
    assert not Agent.objects.exists()


def test_submit_page_defaults_to_all_apps_and_creates_a_submission(
    client: Client, member: User
) -> None:
    team = services.team_create(user=member, name="mia-team")
    agent = Agent.objects.create(
        team=team, name="probe", endpoint_url=PUBLIC_URL, protocol="http-json"
    )
    form = client.get(reverse("accounts:submit")).content.decode()
    for app_id in app_ids():
        assert f'value="{app_id}"' in form and "checked" in form
    with mock.patch("submissions.services.dispatch.task_send"):
        response = client.post(
            reverse("accounts:submit"),
            {"agent": agent.pk, "apps": app_ids(), "queries_per_app": 3},
        )
    submission = Submission.objects.get(agent=agent)
    assert response["Location"] == reverse("leaderboard:submission", args=[submission.pk])
    assert submission.apps == app_ids() and submission.queries_per_app == 3
    assert submission.status == "queued"
    # One open submission per agent: the second is refused on the form.
    with mock.patch("submissions.services.dispatch.task_send"):
        again = client.post(
            reverse("accounts:submit"),
            {"agent": agent.pk, "apps": app_ids(), "queries_per_app": 3},
        )
    assert again.status_code == 200
    assert Submission.objects.filter(agent=agent).count() == 1
