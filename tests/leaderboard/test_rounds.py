"""Rounds on the site: staff start and close them, the commitment is shown from the start and
the seed only once closed, standings are paired on the shared queries."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from evaluator.commitment import round_commitment
from evaluator.testing import GuessApp, ScriptedClient, registered_app
from evaluator.types import JSON, Query
from submissions.models import EpisodeRecord, Round, Submission, Team
from submissions.services import agents as agent_services
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db


def _client_for(agent) -> ScriptedClient:
    """ "good" guesses 0-2 (right 30% of the time), "bad" always guesses -1 (never right), so
    the order of the two does not depend on the round's random seed."""

    def reply(messages: list[JSON], episode_id: str) -> str:
        if agent.name == "bad":
            return "-1"
        return str(sum(m["role"] == "assistant" for m in messages))

    return ScriptedClient(reply)


@pytest.fixture
def staff(client):
    user = User.objects.create_user("root", "root@example.org", "pw-Staff-123", is_staff=True)
    client.force_login(user)
    return user


@pytest.fixture
def agents(monkeypatch):
    monkeypatch.setattr(episode_services, "agent_client_build", lambda agent: _client_for(agent))
    team = Team.objects.create(name="roundsmen")
    with registered_app({"guess": GuessApp}):
        for name in ("good", "bad"):
            agent_services.agent_create(
                team=team,
                name=name,
                endpoint_url="https://93.184.215.14/a",
                protocol="http-json",
                apps=["guess"],
            )
        yield


def _run_round(evaluation_round: Round, django_capture_on_commit_callbacks) -> None:
    for submission in Submission.objects.filter(round=evaluation_round):
        with django_capture_on_commit_callbacks(execute=False):
            submission_services.submission_prepare(submission_id=submission.pk)
        for episode in EpisodeRecord.objects.filter(submission=submission):
            episode_services.episode_execute(episode_id=episode.pk)


def test_a_round_commits_runs_closes_and_reveals(
    client, staff, agents, django_capture_on_commit_callbacks, capsys
):
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post("/rounds/new/", {"apps": ["guess"], "queries_per_app": 30})
    evaluation_round = Round.objects.get()
    assert (
        response.status_code == 302
        and response["Location"] == f"/rounds/{evaluation_round.number}/"
    )
    assert evaluation_round.commitment == round_commitment(
        evaluation_round.seed, {"guess": 1}, evaluation_round.salt
    )
    assert Submission.objects.filter(round=evaluation_round).count() == 2
    page = client.get(f"/rounds/{evaluation_round.number}/").content.decode()
    assert evaluation_round.commitment in page
    assert str(evaluation_round.seed) not in page and evaluation_round.salt not in page
    # closing an unfinished round is refused
    client.post(f"/rounds/{evaluation_round.number}/close/")
    assert not Round.objects.get().is_closed

    _run_round(evaluation_round, django_capture_on_commit_callbacks)
    progress = client.get(f"/rounds/{evaluation_round.number}/progress.json").json()
    assert progress["done"] == progress["total"] == 60 and progress["open_submissions"] == 0
    client.post(f"/rounds/{evaluation_round.number}/close/")
    evaluation_round.refresh_from_db()
    assert evaluation_round.is_closed
    page = client.get(f"/rounds/{evaluation_round.number}/").content.decode()
    assert str(evaluation_round.seed) in page and evaluation_round.salt in page
    # paired standings: "good" (numbers 0-2) ranks above "bad" (never right) on the shared queries
    assert page.index(">good<") < page.index(">bad<")

    # anyone can check the commitment and regenerate the exact queries
    call_command(
        "generate_queries",
        "--app",
        "guess",
        "--seed",
        str(evaluation_round.seed),
        "--count",
        "30",
        "--salt",
        evaluation_round.salt,
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[-1]["commitment"] == evaluation_round.commitment
    for submission in Submission.objects.filter(round=evaluation_round):
        stored = [
            Query.from_dict(e.query).fingerprint()
            for e in EpisodeRecord.objects.filter(submission=submission).order_by("index")
        ]
        assert stored == [row["fingerprint"] for row in lines[:-1]]


def test_only_staff_start_and_close_rounds(client, agents):
    user = User.objects.create_user("mia", "mia@example.org", "pw-Mia-12345")
    client.force_login(user)
    assert client.get("/rounds/new/").status_code == 302  # to the admin login
    assert client.post("/rounds/new/", {"apps": ["guess"], "queries_per_app": 3}).status_code == 302
    assert not Round.objects.exists()
    assert client.get("/rounds/").status_code == 200
    assert client.get("/rounds/99/").status_code == 404
