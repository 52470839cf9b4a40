"""One person, bounded exposure: the daily quota per user across all their teams
and the endpoint a submission's episodes are sent to."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from accounts import services as team_services
from evaluator.testing import GuessApp, registered_app
from submissions.errors import QuotaExceededError, UserQuotaExceededError
from submissions.models import Agent, Round, Submission, Team
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def toy_app():
    with registered_app({"guess": GuessApp}):
        yield


@pytest.fixture
def ada() -> User:
    return User.objects.create(username="ada")  # no password: no slow hashing


@pytest.fixture
def quotas(settings):
    settings.NETARENA = {
        **settings.NETARENA,
        "SUBMISSIONS_PER_TEAM_PER_DAY": 5,
        "SUBMISSIONS_PER_USER_PER_DAY": 3,
        "TEAMS_PER_USER": 3,
    }


def _agent(team: Team, name: str = "bot") -> Agent:
    return Agent.objects.create(
        team=team, name=name, endpoint_url="https://agent.example.org/v1", protocol="openai-chat"
    )


def _submit(agent: Agent, actor: User | None) -> Submission:
    return submission_services.submission_create(
        agent=agent, apps=["guess"], queries_per_app=1, actor=actor
    )


def _close(submission: Submission) -> None:
    """Finish it (frees the agent's open-submission slot; still charged to the quotas)."""
    Submission.objects.filter(pk=submission.pk).update(status=Submission.Status.FINISHED)


def test_a_new_team_does_not_reset_the_users_quota(ada, quotas):
    first = team_services.team_create(user=ada, name="first")
    agent = _agent(first)
    for _ in range(3):
        _close(_submit(agent, ada))
    assert Submission.objects.filter(created_by=ada).count() == 3
    fresh = _agent(team_services.team_create(user=ada, name="fresh"))
    with pytest.raises(UserQuotaExceededError, match="personal daily quota of 3") as refused:
        _submit(fresh, ada)
    assert refused.value.code == "user_quota" and refused.value.http_status == 429
    assert isinstance(refused.value, QuotaExceededError)
    assert not Submission.objects.filter(agent=fresh).exists()


def test_submissions_made_elsewhere_stay_charged_after_leaving_the_team(ada, quotas):
    boss = User.objects.create(username="boss")
    shared = team_services.team_create(user=boss, name="shared")
    shared.members.add(ada)
    agent = _agent(shared)
    for _ in range(3):
        _close(_submit(agent, ada))
    team_services.member_remove(team=shared, by=boss, member=ada)
    own = _agent(team_services.team_create(user=ada, name="own"))
    with pytest.raises(UserQuotaExceededError):
        _submit(own, ada)
    # the team's owner has the team's submissions charged too (they saw the results)
    other = _agent(team_services.team_create(user=boss, name="other"))
    with pytest.raises(UserQuotaExceededError):
        _submit(other, boss)


def test_old_failed_and_round_submissions_are_free(ada, quotas):
    agent = _agent(team_services.team_create(user=ada, name="t"))
    old = _submit(agent, ada)
    _close(old)
    Submission.objects.filter(pk=old.pk).update(created_at=old.created_at - timedelta(days=1))
    failed = _submit(agent, ada)
    Submission.objects.filter(pk=failed.pk).update(
        status=Submission.Status.FAILED, platform_failed=True
    )
    round_ = Round.objects.create(number=1, seed=1, apps=["guess"], queries_per_app=1)
    for _ in range(3):
        _close(
            submission_services.submission_create(
                agent=agent, apps=["guess"], queries_per_app=1, round=round_
            )
        )
    for _ in range(3):
        _close(_submit(agent, ada))
    with pytest.raises(UserQuotaExceededError):
        _submit(agent, ada)


def test_the_api_and_the_page_say_why(ada, quotas, settings):
    # a registered app (the API's app choices are fixed when its module is imported)
    settings.NETARENA = {**settings.NETARENA, "SUBMISSIONS_PER_USER_PER_DAY": 0}
    agent = _agent(team_services.team_create(user=ada, name="t"))
    client = Client()
    client.force_login(ada)
    api = client.post(
        "/api/v1/submissions/",
        {"agent": agent.pk, "apps": ["malt"], "queries_per_app": 1},
        content_type="application/json",
    )
    assert api.status_code == 429
    assert api.json()["code"] == "user_quota" and "personal daily quota" in api.json()["detail"]
    page = client.post(
        reverse("accounts:submit") + f"?agent={agent.pk}",
        {"agent": agent.pk, "apps": ["malt"], "queries_per_app": 1},
        follow=True,
    )
    assert "personal daily quota" in page.content.decode()
    assert not Submission.objects.exists()


A_URL = "https://93.184.216.34/v1"  # literal public addresses: the guard resolves nothing
B_URL = "https://93.184.216.35/v1"


def test_episodes_call_the_endpoint_the_preflight_passed_not_a_later_edit(
    ada, quotas, monkeypatch, django_capture_on_commit_callbacks
):
    from evaluator.testing import ScriptedClient
    from submissions.errors import PreflightNotPassedError
    from submissions.models import AgentPreflight
    from submissions.services import agents as agent_services
    from submissions.services import episodes as episode_services

    agent = _agent(team_services.team_create(user=ada, name="t"))
    Agent.objects.filter(pk=agent.pk).update(endpoint_url=A_URL)
    agent.refresh_from_db()
    passed = AgentPreflight.objects.create(
        agent=agent, status="passed", endpoint_url=A_URL, protocol="openai-chat"
    )
    submission = _submit(agent, ada)
    assert (submission.endpoint_url, submission.protocol) == (A_URL, "openai-chat")
    assert submission.preflight == passed

    # the team moves the agent: a new pre-flight starts, the accepted submission stays put
    agent_services.agent_update(agent=agent, actor=ada, endpoint_url=B_URL, model_name="")
    called: list[tuple[str, str]] = []

    def client_of(agent: Agent) -> ScriptedClient:
        called.append((agent.endpoint_url, agent.protocol))
        return ScriptedClient(["7"])

    monkeypatch.setattr(episode_services, "agent_client_build", client_of)
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_prepare(submission_id=submission.pk)
    for episode in submission.episodes.all():
        episode_services.episode_execute(episode_id=episode.pk)
    assert called == [(A_URL, "openai-chat")]
    assert Agent.objects.get(pk=agent.pk).endpoint_url == B_URL

    # the new URL is not submittable before its own pre-flight passed
    _close(submission)
    with pytest.raises(PreflightNotPassedError, match="still running"):
        _submit(agent, ada)
    AgentPreflight.objects.filter(endpoint_url=B_URL).update(status="passed")
    # a URL changed without a pre-flight (the admin, the database) is not submittable either
    Agent.objects.filter(pk=agent.pk).update(endpoint_url=A_URL)
    agent.refresh_from_db()
    with pytest.raises(PreflightNotPassedError, match="endpoint changed"):
        _submit(agent, ada)
    assert Submission.objects.filter(agent=agent).count() == 1
