"""The rules of ``submissions.services``, whoever calls: ``agent_register`` (the registration
page and ``POST /api/v1/agents/`` both go through it), the queries-per-app caps, and one error
root for the team services too."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from accounts import services as team_services
from evaluator.testing import GuessApp, registered_app
from submissions.errors import InvalidInputError, NotTeamMemberError, ServiceError
from submissions.models import Agent, AgentPreflight, Round, Submission, Team
from submissions.services import agents as agent_services
from submissions.services import rounds as round_services
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db

PUBLIC_URL = "https://93.184.215.14/v1"


@pytest.fixture
def member() -> User:
    return User.objects.create_user("ines", "ines@example.org", "pw-ines-12345")


@pytest.fixture
def team(member: User) -> Team:
    return team_services.team_create(user=member, name="ines-team")


def _register(team: Team, actor: object, **fields: object) -> tuple[Agent, AgentPreflight]:
    values: dict[str, object] = {
        "name": "probe",
        "endpoint_url": PUBLIC_URL,
        "protocol": "openai-chat",
    }
    values.update(fields)
    return agent_services.agent_register(team=team, actor=actor, **values)  # type: ignore[arg-type]


def test_register_stores_the_agent_its_header_and_a_queued_preflight(
    team, member, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        agent, preflight = _register(team, member, auth_header=" X-API-Key ", apps=["malt"])
    assert (agent.auth_header, agent.apps) == ("X-API-Key", ["malt"])
    assert preflight.agent == agent and preflight.status == AgentPreflight.Status.RUNNING
    assert preflight.requested_by == member
    assert len(callbacks) == 1  # the pre-flight task is sent once the transaction commits


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "-starts-with-a-dash"}, "an agent name is a letter or digit"),
        ({"name": "a" * 101}, "an agent name is a letter or digit"),
        ({"name": "line\n"}, "an agent name is a letter or digit"),
        ({"model_name": "m" * 201}, "the model name is longer than 200 characters"),
        ({"api_key": "k" * 4097}, "the API key is longer than 4096 characters"),
        ({"auth_header": "Content-Type"}, "Content-Type cannot carry the key"),
        ({"protocol": "smtp"}, "unknown protocol 'smtp'"),
    ],
)
def test_register_refuses_a_broken_rule_and_stores_nothing(team, member, fields, message):
    with pytest.raises(InvalidInputError, match=message):
        _register(team, member, **fields)
    assert not Agent.objects.exists() and not AgentPreflight.objects.exists()


def test_register_refuses_a_user_outside_the_team(team):
    outsider = User.objects.create_user("olaf", "olaf@example.org", "pw-olaf-12345")
    with pytest.raises(NotTeamMemberError):
        _register(team, outsider)
    assert not Agent.objects.exists()


def test_the_api_and_the_page_register_through_the_same_service(client, team, member, monkeypatch):
    calls: list[dict[str, object]] = []
    real = agent_services.agent_register

    def spy(**kwargs: object) -> tuple[Agent, AgentPreflight]:
        calls.append(kwargs)
        return real(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("submissions.apis.agent_register", spy)
    monkeypatch.setattr("accounts.views.agent_register", spy)
    client.force_login(member)
    api = client.post(
        "/api/v1/agents/",
        {"team": team.name, "name": "by-api", "endpoint_url": PUBLIC_URL, "protocol": "a2a"},
        content_type="application/json",
    )
    assert api.status_code == 201
    page = client.post(
        reverse("accounts:agent-new"),
        {"team": team.pk, "name": "by-page", "endpoint_url": PUBLIC_URL, "protocol": "a2a"},
    )
    assert page.status_code == 302
    assert [c["name"] for c in calls] == ["by-api", "by-page"]
    assert AgentPreflight.objects.filter(agent__name__in=["by-api", "by-page"]).count() == 2


def test_team_submissions_are_capped_at_200_queries_per_app_by_the_service(team, member):
    agent = Agent.objects.create(
        team=team, name="a", endpoint_url=PUBLIC_URL, protocol="http-json"
    )
    with registered_app({"guess": GuessApp}), pytest.raises(
        InvalidInputError, match="between 1 and 200"
    ):
        submission_services.submission_create(agent=agent, apps=["guess"], queries_per_app=201)
    assert not Submission.objects.exists()


def test_rounds_may_ask_up_to_1000_queries_per_app(team, django_capture_on_commit_callbacks):
    Agent.objects.create(team=team, name="a", endpoint_url=PUBLIC_URL, protocol="http-json")
    with registered_app({"guess": GuessApp}):
        with django_capture_on_commit_callbacks(execute=False):
            evaluation_round = round_services.round_create(apps=["guess"], queries_per_app=201)
        assert evaluation_round.submissions.get().queries_per_app == 201
        with pytest.raises(InvalidInputError, match="between 1 and 1000"):
            round_services.round_create(apps=["guess"], queries_per_app=1001)
    assert Round.objects.count() == 1


def test_team_errors_share_the_service_error_root(team, member):
    with pytest.raises(ServiceError) as taken:
        team_services.team_create(user=member, name="INES-team")
    assert isinstance(taken.value, team_services.TeamNameTakenError)
    with pytest.raises(ServiceError) as last:
        team_services.member_remove(team=team, by=member, member=member)
    assert (last.value.code, last.value.http_status) == ("last_owner", 409)
