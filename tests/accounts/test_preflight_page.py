"""The agent page /agents/<id>/: public history with the model-change flag and the score chart;
pre-flight, re-run and editing for team members only; the secret is never rendered."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts import services as team_services
from submissions.aggregates import aggregates_rebuild
from submissions.crypto import decrypt_secret, encrypt_secret
from submissions.models import Agent, AgentPreflight, EpisodeRecord, Round, Submission

pytestmark = pytest.mark.django_db
SECRET = "sk-never-shown-7f3a"


@pytest.fixture
def member() -> User:
    return User.objects.create_user("mia", "mia@example.org", "pw-mia-12345")


@pytest.fixture
def agent(member: User) -> Agent:
    team = team_services.team_create(user=member, name="mia-team")
    return Agent.objects.create(
        team=team,
        name="probe",
        endpoint_url="https://93.184.215.14/v1",
        protocol="openai-chat",
        model_name="m-1",
        secret_encrypted=encrypt_secret(SECRET),
    )


def _submission(
    agent: Agent,
    *,
    days_ago: int,
    model: str,
    outcomes: list[tuple[bool, bool]],
    app_id: str = "malt",
    round_: Round | None = None,
) -> Submission:
    when = timezone.now() - timedelta(days=days_ago)
    submission = Submission.objects.create(
        agent=agent,
        seed=days_ago + 1,
        apps=[app_id],
        queries_per_app=len(outcomes),
        status="finished",
        round=round_,
        finished_at=when,
    )
    Submission.objects.filter(pk=submission.pk).update(created_at=when)
    for index, (correct, safe) in enumerate(outcomes):
        EpisodeRecord.objects.create(
            submission=submission,
            app_id=app_id,
            index=index,
            query_id=f"q{days_ago}-{index}",
            level=1,
            label="count",
            query={},
            status="done",
            correct=correct,
            safe=safe,
            served_model=model,
        )
    # an evaluator error is not scored (left out of n)
    EpisodeRecord.objects.create(
        submission=submission,
        app_id=app_id,
        index=len(outcomes),
        query_id=f"e{days_ago}",
        level=1,
        label="count",
        query={},
        status="error",
    )
    # episodes written directly, not through the service: refresh the board's aggregates
    aggregates_rebuild(submission_ids=[submission.pk])
    submission.refresh_from_db()
    return submission


def _history_rows(html: str) -> list[str]:
    table = html.split('data-testid="agent-history"', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr[^>]*>.*?</tr>", table.split("<tbody>", 1)[1], flags=re.S)


def test_history_rates_and_the_model_change_flag(client: Client, agent: Agent) -> None:
    evaluation_round = Round.objects.create(number=4, seed=9, apps=["malt"], queries_per_app=4,
                                           closed_at=timezone.now())
    outcomes = [(True, True)] * 3 + [(True, False)]
    first = _submission(agent, days_ago=3, model="m-1", outcomes=outcomes)
    second = _submission(
        agent,
        days_ago=2,
        model="m-1",
        outcomes=[(True, True), (False, True)],
        round_=evaluation_round,
    )
    third = _submission(agent, days_ago=1, model="m-2-distilled", outcomes=[(False, True)] * 2)
    html = client.get(reverse("agents:detail", args=[agent.pk])).content.decode()
    assert "probe" in html and "mia-team" in html and "OpenAI-compatible chat" in html
    rows = _history_rows(html)
    assert len(rows) == 3  # newest first
    assert f"#{third.pk}" in rows[0] and f"#{second.pk}" in rows[1] and f"#{first.pk}" in rows[2]
    assert ">75.0<" in rows[2] and ">4<" in rows[2]  # 3 of 4 correct and safe; the error not in n
    assert ">50.0<" in rows[1] and ">4</a>" in rows[1]  # round 4 linked
    assert ">0.0<" in rows[0]
    # the flag: only where the reported model changed from the previous submission's
    assert 'data-testid="model-changed"' in rows[0] and "was m-1" in rows[0]
    assert "model-changed" not in rows[1] and "model-changed" not in rows[2]
    assert html.count("⚑ model changed") == 1
    assert 'data-testid="model-change-note"' in html
    figure = json.loads(
        html.split('id="score-over-time-data" type="application/json">', 1)[1].split("</script>")[0]
    )
    (trace,) = figure["data"]
    assert trace["name"] == "malt" and trace["y"] == [75.0, 50.0, 0.0]
    assert trace["marker"]["symbol"] == ["circle", "circle", "diamond"]


def test_no_flag_when_the_model_stays_or_is_not_reported(client: Client, agent: Agent) -> None:
    _submission(agent, days_ago=3, model="m-1", outcomes=[(True, True)])
    _submission(agent, days_ago=2, model="", outcomes=[(True, True)])
    _submission(agent, days_ago=1, model="m-1", outcomes=[(True, True)])
    html = client.get(reverse("agents:detail", args=[agent.pk])).content.decode()
    assert "⚑ model changed" not in html and "model-change-note" not in html


def _as(client: Client, user: User | None) -> Client:
    if user is not None:
        client.force_login(user)
    return client


@pytest.mark.parametrize("who", ["anonymous", "stranger"])
def test_non_members_see_no_preflight_and_cannot_edit(
    client: Client, agent: Agent, who: str
) -> None:
    AgentPreflight.objects.create(
        agent=agent,
        endpoint_url=agent.endpoint_url,
        protocol=agent.protocol,
        status="failed",
        checks=[
            {
                "name": "guard",
                "title": "Outbound guard",
                "status": "failed",
                "message": "endpoint refused: internal-detail",
                "latency_s": None,
            }
        ],
    )
    stranger = User.objects.create_user("ola", "ola@example.org", "pw-ola-12345")
    _as(client, stranger if who == "stranger" else None)
    html = client.get(reverse("agents:detail", args=[agent.pk])).content.decode()
    assert "probe" in html
    assert 'data-testid="preflight"' not in html and "internal-detail" not in html
    assert 'data-testid="agent-edit"' not in html and "Run pre-flight again" not in html
    assert client.get(reverse("agents:preflight-json", args=[agent.pk])).status_code == 404
    edit = client.post(
        reverse("agents:edit", args=[agent.pk]),
        {"endpoint_url": "https://93.184.215.15/v1", "model_name": "evil"},
    )
    assert edit.status_code in (302, 404)
    rerun = client.post(reverse("agents:preflight", args=[agent.pk]))
    assert rerun.status_code == 302
    agent.refresh_from_db()
    assert agent.endpoint_url == "https://93.184.215.14/v1" and agent.model_name == "m-1"
    assert AgentPreflight.objects.filter(agent=agent).count() == 1


def test_member_sees_the_preflight_and_its_json(client: Client, agent: Agent, member: User) -> None:
    AgentPreflight.objects.create(
        agent=agent,
        endpoint_url=agent.endpoint_url,
        protocol=agent.protocol,
        status="passed",
        latency_s=0.25,
        checks=[
            {
                "name": "canary:malt",
                "title": "Canary prompt (malt)",
                "status": "passed",
                "message": "the malt reply parser accepted the answer",
                "latency_s": 0.25,
            }
        ],
    )
    client.force_login(member)
    html = client.get(reverse("agents:detail", args=[agent.pk])).content.decode()
    assert 'data-testid="preflight-status"' in html and "the malt reply parser accepted" in html
    assert "Run pre-flight again" in html and 'data-testid="agent-edit"' in html
    data = client.get(reverse("agents:preflight-json", args=[agent.pk])).json()
    assert data["status"] == "passed" and data["checks"][0]["name"] == "canary:malt"
    assert data["latency_s"] == 0.25


def test_secret_is_never_rendered_and_replace_only(
    client: Client, agent: Agent, member: User, django_capture_on_commit_callbacks: Any
) -> None:
    client.force_login(member)
    html = client.get(reverse("agents:detail", args=[agent.pk])).content.decode()
    assert SECRET not in html
    assert re.search(r'<input type="password" name="api_key"(?![^>]*value=)', html)
    url = reverse("agents:edit", args=[agent.pk])
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        client.post(url, {"endpoint_url": "https://93.184.215.15/v2", "model_name": "m-2"})
    agent.refresh_from_db()
    assert (agent.endpoint_url, agent.model_name) == ("https://93.184.215.15/v2", "m-2")
    assert decrypt_secret(bytes(agent.secret_encrypted)) == SECRET  # empty field: key kept
    assert len(callbacks) == 1  # a new pre-flight is queued
    latest = AgentPreflight.objects.filter(agent=agent).first()
    assert latest is not None and latest.status == "running"
    assert latest.endpoint_url == "https://93.184.215.15/v2"
    with django_capture_on_commit_callbacks(execute=False):
        client.post(
            url,
            {"endpoint_url": agent.endpoint_url, "model_name": "m-2", "api_key": "sk-replaced-9"},
        )
    agent.refresh_from_db()
    assert decrypt_secret(bytes(agent.secret_encrypted)) == "sk-replaced-9"
    page = client.get(reverse("agents:detail", args=[agent.pk])).content.decode()
    assert "sk-replaced-9" not in page and SECRET not in page


def test_edit_refuses_a_private_endpoint(client: Client, agent: Agent, member: User) -> None:
    client.force_login(member)
    response = client.post(
        reverse("agents:edit", args=[agent.pk]),
        {"endpoint_url": "http://10.0.0.5/", "model_name": "m-1"},
        follow=True,
    )
    assert "endpoint refused" in response.content.decode()
    agent.refresh_from_db()
    assert agent.endpoint_url == "https://93.184.215.14/v1"
    assert not AgentPreflight.objects.filter(agent=agent).exists()


def test_rerun_button_starts_a_new_preflight(
    client: Client, agent: Agent, member: User, django_capture_on_commit_callbacks: Any
) -> None:
    client.force_login(member)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(reverse("agents:preflight", args=[agent.pk]))
    assert response.status_code == 302 and len(callbacks) == 1
    run = AgentPreflight.objects.get(agent=agent)
    assert run.status == "running" and run.requested_by == member


def test_registering_in_the_browser_form_opens_the_agent_page_with_a_preflight(
    client: Client, agent: Agent, member: User, django_capture_on_commit_callbacks: Any
) -> None:
    client.force_login(member)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(
            reverse("accounts:agent-new"),
            {
                "team": agent.team.pk,
                "name": "second",
                "endpoint_url": "https://93.184.215.14/",
                "protocol": "http-json",
            },
        )
    second = Agent.objects.get(name="second")
    assert response["Location"] == reverse("agents:detail", args=[second.pk])
    assert AgentPreflight.objects.get(agent=second).status == "running"
    assert len(callbacks) == 1


def test_team_page_and_leaderboard_link_the_agent_page(
    client: Client, agent: Agent, member: User
) -> None:
    _submission(agent, days_ago=1, model="m-1", outcomes=[(True, True)] * 3)
    link = f'href="{reverse("agents:detail", args=[agent.pk])}"'
    assert link in client.get(reverse("leaderboard:index")).content.decode()
    client.force_login(member)
    team_page = client.get(reverse("accounts:team")).content.decode()
    assert link in team_page
    assert re.search(r'data-testid="preflight-probe">—<', team_page)  # none yet
    AgentPreflight.objects.create(
        agent=agent, endpoint_url=agent.endpoint_url, protocol=agent.protocol, status="failed"
    )
    AgentPreflight.objects.create(
        agent=agent, endpoint_url=agent.endpoint_url, protocol=agent.protocol, status="passed"
    )
    team_page = client.get(reverse("accounts:team")).content.decode()
    assert re.search(r'data-testid="preflight-probe">passed<', team_page)  # the newest


def test_unknown_agent_is_404(client: Client) -> None:
    assert client.get(reverse("agents:detail", args=[999])).status_code == 404


def test_member_sets_the_auth_header_and_a_bad_one_is_refused(
    client: Client, agent: Agent, member: User, django_capture_on_commit_callbacks: Any
) -> None:
    client.force_login(member)
    url = reverse("agents:edit", args=[agent.pk])
    body = {"endpoint_url": agent.endpoint_url, "model_name": "m-1"}
    with django_capture_on_commit_callbacks(execute=False):
        client.post(url, {**body, "auth_header": "X-API-Key"})
    agent.refresh_from_db()
    assert agent.auth_header == "X-API-Key"
    page = client.get(reverse("agents:detail", args=[agent.pk])).content.decode()
    assert "X-API-Key: &lt;key&gt;" in page and SECRET not in page
    refused = client.post(url, {**body, "auth_header": "Host"}, follow=True).content.decode()
    assert "cannot carry the key" in refused
    agent.refresh_from_db()
    assert agent.auth_header == "X-API-Key"
