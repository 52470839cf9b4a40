"""A pre-flight that passes some apps and fails others: it says which, the submit page offers
exactly the apps that passed, and the gate refuses the others.

The endpoint is the README's walkthrough agent: the route-only ``heuristic`` reference agent
served over HTTP, registered as a team agent on loopback with no app ticked (so its pre-flight
sends every app's canary). The guard's allow-list for team agents is widened to loopback as
``NETARENA_TEAM_AGENT_NETWORKS=127.0.0.0/8`` does in the demo.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from accounts import services as team_services
from evaluator.reference.agents import make_served_agent
from evaluator.reference.server import build_asgi_app, serve_in_thread
from evaluator.registry import app_ids
from submissions.models import Agent, AgentPreflight, Submission
from submissions.preflight_tasks import agent_preflight
from submissions.services import agents as agent_services
from submissions.services import preflight
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db

PASSWORD = "pw-mia-12345"


@pytest.fixture
def route_only_url(tmp_path: Path, settings: Any) -> Iterator[str]:
    """The heuristic route agent on a loopback port that team agents may use here."""
    server = serve_in_thread(
        build_asgi_app(make_served_agent("heuristic", "route", vault_dir=tmp_path), "http-json")
    )
    port = server.port
    settings.NETARENA = {
        **settings.NETARENA,
        "TEAM_AGENT_NETWORKS": ["127.0.0.0/8"],
        "AGENT_PORTS": frozenset({*settings.NETARENA["AGENT_PORTS"], port}),
    }
    yield f"http://127.0.0.1:{port}/"
    server.stop()


def _agent(url: str, apps: list[str] | None = None) -> tuple[User, Agent]:
    user = User.objects.create_user("mia", "mia@example.org", PASSWORD)
    team = team_services.team_create(user=user, name="mia-team")
    agent = agent_services.agent_create(
        team=team,
        name="walk",
        endpoint_url=url,
        protocol="http-json",
        apps=apps or [],
        actor=user,
    )
    run = preflight.preflight_start(agent=agent)
    agent_preflight(run.pk)
    return user, agent


def test_partial_preflight_names_the_apps_and_clears_only_those(route_only_url: str) -> None:
    assert "route" in app_ids() and len(app_ids()) >= 2  # the registry ships all three apps
    _, agent = _agent(route_only_url)
    run = preflight.preflight_latest(agent=agent)
    assert run is not None
    assert run.status == AgentPreflight.Status.PARTIAL, run.checks
    others = [a for a in app_ids() if a != "route"]
    assert preflight.preflight_passed_apps(run) == ["route"]
    assert preflight.preflight_failed_apps(run) == others
    assert preflight.submittable_apps(agent=agent) == ["route"]
    checks = list(run.checks)
    guard = next(c for c in checks if c["name"] == "guard")
    assert "a loopback address" in guard["message"] and "public" not in guard["message"]

    submission = submission_services.submission_create(
        agent=agent, apps=["route"], queries_per_app=1
    )
    assert submission.apps == ["route"]
    submission.delete()
    with pytest.raises(preflight.PreflightNotPassedError) as refused:
        submission_services.submission_create(agent=agent, apps=app_ids(), queries_per_app=1)
    message = str(refused.value)
    assert "passed for route only" in message and all(a in message for a in others)


def test_the_pages_say_which_apps_passed_and_offer_only_those(
    client: Any, route_only_url: str
) -> None:
    assert "route" in app_ids() and len(app_ids()) >= 2  # the registry ships all three apps
    user, agent = _agent(route_only_url)
    client.force_login(user)
    page = client.get(f"/agents/{agent.pk}/").content.decode()
    assert "Passed for route; the canary prompt failed for" in page
    assert f'href="/accounts/submit/?agent={agent.pk}"' in page

    form = client.get("/accounts/submit/").context["form"]
    assert form.offered == {agent.pk: ["route"]}
    assert form["apps"].initial == ["route"] and form["agent"].initial == agent.pk

    other = next(a for a in app_ids() if a != "route")
    answer = client.post(
        "/accounts/submit/", {"agent": agent.pk, "apps": ["route", other], "queries_per_app": 1}
    )
    assert answer.status_code == 200 and not Submission.objects.exists()
    assert f"can be submitted to route only; its pre-flight did not clear {other}" in (
        answer.content.decode()
    )


def test_a_private_address_is_named_as_such(settings: Any) -> None:
    settings.NETARENA = {**settings.NETARENA, "TEAM_AGENT_NETWORKS": ["10.0.0.0/8"]}
    user = User.objects.create_user("kim", "kim@example.org", PASSWORD)
    team = team_services.team_create(user=user, name="kim-team")
    agent = Agent.objects.create(
        team=team, name="lab", endpoint_url="http://10.255.255.1:8080/", protocol="http-json"
    )
    check = preflight._check_guard(agent)
    assert check.status == "passed"
    assert "a private address" in check.message and "public" not in check.message


def test_agent_form_preselects_a_sole_team_and_explains_apps(client: Any) -> None:
    user = User.objects.create_user("ola", "ola@example.org", PASSWORD)
    team = team_services.team_create(user=user, name="ola-team")
    client.force_login(user)
    form = client.get("/accounts/agents/new/").context["form"]
    assert form["team"].initial == team.pk and form.fields["team"].empty_label is None
    assert "canary prompt per ticked app" in form.fields["apps"].help_text
    team_services.team_create(user=user, name="ola-second")
    form = client.get("/accounts/agents/new/").context["form"]
    assert form["team"].initial is None  # two teams: the user chooses
