"""Submissions take NetArena's prompt type: the form and the API accept the four and refuse
anything else, the worker sends the tasks with it, and the page, the API, the result file and
the e-mail record it; only ``zeroshot_base`` submissions are ranked (docs/metrics.md "Prompt
types")."""

from __future__ import annotations

from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.notifications import submission_email
from evaluator.prompting import (
    COT_INSTRUCTION,
    DEFAULT_PROMPT_TYPE,
    EXAMPLES_HEADING,
    PROMPT_TYPES,
    TASK_HEADING,
)
from evaluator.testing import GuessApp, ScriptedClient, ToyApp, registered_app
from evaluator.types import JSON
from submissions.errors import InvalidInputError
from submissions.models import Agent, EpisodeRecord, Submission, Team
from submissions.result_selectors import submission_result, submission_result_document
from submissions.selectors import standings
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db
PUBLIC_URL = "https://93.184.215.14/v1"  # a literal public address: no DNS needed


@pytest.fixture
def toy_app():
    with registered_app({"guess": GuessApp}):
        yield


@pytest.fixture
def user() -> User:
    return User.objects.create_user("pia", "pia@example.org", "pw-pia-12345")


@pytest.fixture
def agent(user: User) -> Agent:
    team = Team.objects.create(name="pia-team")
    team.members.add(user)
    return Agent.objects.create(team=team, name="probe", endpoint_url=PUBLIC_URL,
                                protocol="http-json")


def _api(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


@pytest.mark.parametrize("prompt_type", PROMPT_TYPES)
def test_the_api_accepts_each_prompt_type_and_reports_it(
    user: User, agent: Agent, prompt_type: str
) -> None:
    api = _api(user)
    with mock.patch("submissions.services.dispatch.task_send"):
        made = api.post("/api/v1/submissions/", {"agent": agent.pk, "apps": ["malt"],
                                                 "queries_per_app": 2,
                                                 "prompt_type": prompt_type}, format="json")
    assert made.status_code == 202, made.content
    assert Submission.objects.get(pk=made.json()["id"]).prompt_type == prompt_type
    assert api.get(f"/api/v1/submissions/{made.json()['id']}/").json()["prompt_type"] == (
        prompt_type
    )
    listed = api.get("/api/v1/submissions/").json()["results"]
    assert [row["prompt_type"] for row in listed] == [prompt_type]


def test_the_api_defaults_to_zeroshot_base_and_refuses_an_unknown_type(
    user: User, agent: Agent
) -> None:
    api = _api(user)
    refused = api.post("/api/v1/submissions/", {"agent": agent.pk, "apps": ["malt"],
                                                "prompt_type": "react"}, format="json")
    assert refused.status_code == 400
    assert "unknown prompt type 'react'" in refused.content.decode()
    assert not Submission.objects.exists()
    with mock.patch("submissions.services.dispatch.task_send"):
        made = api.post("/api/v1/submissions/", {"agent": agent.pk, "apps": ["malt"]},
                        format="json")
    assert made.status_code == 202, made.content
    assert Submission.objects.get().prompt_type == DEFAULT_PROMPT_TYPE


def test_the_submit_form_takes_a_prompt_type_and_refuses_an_unknown_one(
    client: Client, user: User, agent: Agent
) -> None:
    client.force_login(user)
    page = client.get(reverse("accounts:submit")).content.decode()
    assert all(f'value="{p}"' in page for p in PROMPT_TYPES)
    refused = client.post(reverse("accounts:submit"), {"agent": agent.pk, "apps": ["malt"],
                                                        "queries_per_app": 2,
                                                        "prompt_type": "react"})
    assert refused.status_code == 200 and "react is not one of the available" in (
        refused.content.decode()
    )
    assert not Submission.objects.exists()
    with mock.patch("submissions.services.dispatch.task_send"):
        made = client.post(reverse("accounts:submit"), {"agent": agent.pk, "apps": ["malt"],
                                                         "queries_per_app": 2,
                                                         "prompt_type": "fewshot_cot"})
    assert made.status_code == 302
    submission = Submission.objects.get()
    assert submission.prompt_type == "fewshot_cot"
    shown = client.get(reverse("leaderboard:submission", args=[submission.pk])).content.decode()
    assert 'data-testid="submission-prompt-type">fewshot_cot<' in shown
    history = client.get(reverse("agents:detail", args=[agent.pk])).content.decode()
    assert 'data-testid="history-prompt-type">fewshot_cot<' in history


def test_the_service_refuses_an_unknown_prompt_type(agent: Agent) -> None:
    with pytest.raises(InvalidInputError, match="unknown prompt type"):
        submission_services.submission_create(
            agent=agent, apps=["malt"], queries_per_app=1, prompt_type="zeroshot"
        )


def test_a_few_shot_type_needs_examples_of_every_app(toy_app, agent: Agent) -> None:
    assert GuessApp().few_shot_examples() == []
    with pytest.raises(InvalidInputError, match="guess has none"):
        submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=1, prompt_type="fewshot_base"
        )
    assert not Submission.objects.exists()


def _run(submission: Submission, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_prepare(submission_id=submission.pk)
    for episode in EpisodeRecord.objects.filter(submission=submission):
        episode_services.episode_execute(episode_id=episode.pk)
    submission.refresh_from_db()


def test_the_worker_sends_the_tasks_with_the_submissions_prompt_type(
    toy_app, agent: Agent, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    first_messages: list[str] = []

    def reply(messages: list[JSON], episode_id: str) -> str:
        first_messages.append(str(messages[0]["content"]) if len(messages) == 1 else "")
        return "7"

    monkeypatch.setattr(episode_services, "agent_client_build",
                        lambda agent: ScriptedClient(reply))
    plain = submission_services.submission_create(
        agent=agent, apps=["guess"], queries_per_app=2, seed=3
    )
    _run(plain, django_capture_on_commit_callbacks)
    sent_plain = [m for m in first_messages if m]
    assert sent_plain and all(COT_INSTRUCTION not in m for m in sent_plain)
    first_messages.clear()
    cot = submission_services.submission_create(
        agent=agent, apps=["guess"], queries_per_app=2, seed=3, prompt_type="zeroshot_cot"
    )
    _run(cot, django_capture_on_commit_callbacks)
    sent_cot = [m for m in first_messages if m]
    assert len(sent_cot) == 2
    assert all(m.startswith("Guess my number") and m.endswith(COT_INSTRUCTION) for m in sent_cot)
    # the stored transcript keeps the task as the app wrote it
    for episode in cot.episodes.all():
        assert COT_INSTRUCTION not in str(episode.transcript)

    # recorded with the result; only zeroshot_base is ranked
    assert cot.status == plain.status == Submission.Status.FINISHED
    document = submission_result_document(submission=cot)
    assert document["run"]["prompt_type"] == "zeroshot_cot"
    assert submission_result_document(submission=plain)["run"]["prompt_type"] == "zeroshot_base"
    result = submission_result(submission=cot)
    assert not result.ranked and "Prompt type zeroshot_cot" in result.note
    assert result.apps[0].board is None
    assert document["ranked"] is False
    assert submission_result(submission=plain).ranked
    rows = standings(app_id="guess")
    assert [row.submission.pk for row in rows] == [plain.pk]  # the newer cot one is not on it
    _, body = submission_email(submission=cot)
    assert "prompt type zeroshot_cot" in body and "not ranked" in body


def test_the_worker_sends_the_apps_examples_before_the_task_for_fewshot(
    agent: Agent, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    seen: list[str] = []

    def reply(messages: list[JSON], episode_id: str) -> str:
        seen.append(str(messages[0]["content"]))
        return "done"

    monkeypatch.setattr(episode_services, "agent_client_build",
                        lambda agent: ScriptedClient(reply))
    with registered_app({"toy": ToyApp}):
        submission = submission_services.submission_create(
            agent=agent, apps=["toy"], queries_per_app=1, prompt_type="fewshot_base"
        )
        _run(submission, django_capture_on_commit_callbacks)
    assert seen, "the agent was never called"
    first = seen[0]
    assert first.startswith(EXAMPLES_HEADING) and TASK_HEADING in first
    for question, answer in ToyApp().few_shot_examples():
        assert question in first and answer in first
    assert COT_INSTRUCTION not in first
