"""Pages and the JSON API render standings and never leak hidden data."""

from __future__ import annotations

import pytest

from evaluator.testing import GuessApp, registered_app
from submissions import services
from submissions.models import EpisodeRecord, Team
from tests.submissions.test_services import OracleClient, run_everything

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(monkeypatch, django_capture_on_commit_callbacks):
    with registered_app({"guess": GuessApp}):
        yield _finished(monkeypatch, django_capture_on_commit_callbacks)


def _finished(monkeypatch, django_capture_on_commit_callbacks):
    monkeypatch.setattr(services, "agent_client_build", lambda agent: OracleClient(agent.name))
    team = Team.objects.create(name="Team Seven")
    agent = services.agent_create(
        team=team,
        name="seven",
        endpoint_url="https://93.184.215.14/a",
        protocol="http-json",
        api_key="sk-hidden-key",
    )
    with django_capture_on_commit_callbacks(execute=False):
        submission = services.submission_create(agent=agent, apps=["guess"], queries_per_app=20)
    run_everything(django_capture_on_commit_callbacks, submission)
    return submission


def test_leaderboard_page_lists_agent_with_interval(client, finished):
    page = client.get("/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "seven" in body and "Team Seven" in body
    assert 'id="ci-data-guess"' in body and 'id="spider-data-guess"' in body
    assert "sk-hidden-key" not in body


def test_api_returns_intervals_and_rejects_unknown_app(client, finished):
    data = client.get("/api/v1/leaderboard/?app_id=guess").json()
    row = data["apps"]["guess"][0]
    assert row["agent"] == "seven" and row["n"] == 20 and row["rank"] == 1
    low, value, high = (row["correctness"][k] for k in ("low", "value", "high"))
    assert 0.0 <= low <= value <= high <= 1.0
    assert client.get("/api/v1/leaderboard/?app_id=nope").status_code == 400


def test_submission_page_shows_verdicts_not_ground_truth(client, finished):
    episodes = EpisodeRecord.objects.filter(submission=finished)
    page = client.get(f"/submissions/{finished.pk}/").content.decode()
    assert page.count("<tr>") == 1 + episodes.count()
    assert "wrong_answer" in page or all(e.correct for e in episodes)
    assert "ground_truth" not in page and "number" not in page
    assert client.get("/submissions/999999/").status_code == 404
