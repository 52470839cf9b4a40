"""Agent pre-flight of ``openai-tools`` endpoints over real HTTP: the canary must come back as
one call of the app's tools.

Good endpoints are the project's reference agents served on ``openai-tools``; the bad one is a
real OpenAI-compatible server that answers text (the null agent served on ``openai-chat``),
registered as ``openai-tools``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evaluator.reference.agents import make_served_agent
from evaluator.reference.server import RunningServer, build_asgi_app, serve_in_thread
from evaluator.registry import app_ids
from submissions.models import Agent, AgentPreflight, Team
from submissions.preflight_tasks import agent_preflight
from submissions.services import preflight

pytestmark = pytest.mark.django_db


@pytest.fixture
def serve(tmp_path: Path, settings: Any) -> Iterator[Callable[[str, str], RunningServer]]:
    """Start reference agents for every app in this process; stop them afterwards."""
    vault = tmp_path / "vault"
    settings.NETARENA = {**settings.NETARENA, "ORACLE_VAULT_DIR": str(vault)}
    started: list[RunningServer] = []

    def start(kind: str, protocol: str) -> RunningServer:
        server = serve_in_thread(
            build_asgi_app(make_served_agent(kind, "all", vault_dir=vault), protocol)
        )
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def _preflight(url: str, kind: str) -> AgentPreflight:
    agent = Agent.objects.create(
        team=Team.objects.create(name="ref"),
        name=f"{kind}-tools",
        endpoint_url=url,
        protocol="openai-tools",
        reference_kind=kind,
    )
    run = preflight.preflight_start(agent=agent)
    agent_preflight(run.pk)
    run.refresh_from_db()
    return run


@pytest.mark.parametrize("kind", ["null", "oracle"])
def test_tool_calling_reference_agents_pass_every_check(serve, kind: str) -> None:
    run = _preflight(serve(kind, "openai-tools").url, kind)
    checks = {c["name"]: c for c in run.checks}
    assert run.status == "passed", run.checks
    assert "openai-tools: /v1/models lists 1 model(s)" in checks["protocol"]["message"]
    for app_id in app_ids():
        message = checks[f"canary:{app_id}"]["message"]
        assert "accepted" in message and "tool call" in message, message
    assert "tool call submit_code" in checks["canary:malt"]["message"]


def test_a_text_answer_fails_every_canary_of_an_openai_tools_agent(serve) -> None:
    run = _preflight(serve("null", "openai-chat").url, "null")
    checks = {c["name"]: c for c in run.checks}
    assert run.status == "failed"
    assert checks["protocol"]["status"] == "passed"  # it is an OpenAI-compatible server
    for app_id in app_ids():
        canary = checks[f"canary:{app_id}"]
        assert canary["status"] == "failed"
        assert "bad_response" in canary["message"] and "no tool call" in canary["message"]


def test_the_api_and_the_registration_form_take_openai_tools(django_capture_on_commit_callbacks):
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from accounts import services as team_services
    from accounts.forms_agents import AgentForm

    user = User.objects.create_user("tia", "tia@example.org", "pw-tia-12345")
    team = team_services.team_create(user=user, name="tia-team")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user)}")
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            "/api/v1/agents/",
            {
                "team": team.name,
                "name": "tool-bot",
                "endpoint_url": "https://93.184.215.14/v1",
                "protocol": "openai-tools",
                "model_name": "qwen2.5:7b",
            },
            format="json",
        )
    assert response.status_code == 201, response.content
    agent = Agent.objects.get(pk=response.json()["id"])
    assert agent.protocol == "openai-tools"
    assert AgentPreflight.objects.filter(agent=agent, protocol="openai-tools").exists()
    choices = dict(AgentForm.base_fields["protocol"].choices)  # type: ignore[attr-defined]
    assert choices["openai-tools"] == "OpenAI-compatible tool calling"
