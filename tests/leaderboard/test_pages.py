"""Pages and the JSON API render standings and never leak hidden data."""

from __future__ import annotations

import pytest

from evaluator.testing import GuessApp, registered_app
from submissions.aggregates import aggregates_rebuild
from submissions.models import EpisodeRecord, Team
from submissions.services import agents as agent_services
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services
from tests.submissions.test_services import OracleClient, run_everything

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(monkeypatch, django_capture_on_commit_callbacks):
    with registered_app({"guess": GuessApp}):
        yield _finished(monkeypatch, django_capture_on_commit_callbacks)


def _finished(monkeypatch, django_capture_on_commit_callbacks):
    monkeypatch.setattr(
        episode_services, "agent_client_build", lambda agent: OracleClient(agent.name)
    )
    team = Team.objects.create(name="Team Seven")
    agent = agent_services.agent_create(
        team=team,
        name="seven",
        endpoint_url="https://93.184.215.14/a",
        protocol="http-json",
        api_key="sk-hidden-key",
    )
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=20
        )
    run_everything(django_capture_on_commit_callbacks, submission)
    return submission


def test_leaderboard_page_lists_agent_with_interval(client, finished):
    page = client.get("/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "seven" in body and "Team Seven" in body
    assert 'id="ci-data-guess"' in body and 'id="spider-data-guess"' in body
    assert "sk-hidden-key" not in body
    # six secondary cells in the row behind "More columns", as cells (not escaped text)
    row = body[body.index('<tr data-agent="') :]
    row = row[: row.index("</tr>")]
    assert row.count("<td data-more") + row.count('<td class="num" data-more') == 5
    assert row.count('<td class="levels" data-more') == 1 and "&lt;" not in row


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


def _scored_submission(
    team: Team, name: str, verdicts: list[tuple[bool, bool]], *, changed: bool | None = None
) -> None:
    """An agent with one finished submission of ``guess`` episodes with these verdicts."""
    from django.utils import timezone

    from submissions.models import Agent, Submission

    agent = Agent.objects.create(
        team=team, name=name, endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )
    submission = Submission.objects.create(
        agent=agent,
        seed=1,
        apps=["guess"],
        queries_per_app=len(verdicts),
        status=Submission.Status.FINISHED,
        finished_at=timezone.now(),
    )
    EpisodeRecord.objects.bulk_create(
        EpisodeRecord(
            submission=submission,
            app_id="guess",
            index=i,
            query_id=f"guess-{name}-{i}",
            level=1 + i % 3,
            label="L",
            query={},
            status=EpisodeRecord.Status.DONE,
            correct=correct,
            safe=safe,
            latency_s=0.1,
            agent_s=0.5,
            steps=1,
            changed_state=correct if changed is None else changed,
            blast_radius=None if safe else 3,
            input_tokens=1000 if name == "careful" else None,
            output_tokens=200 if name == "careful" else None,
        )
        for i, (correct, safe) in enumerate(verdicts)
    )
    # stored without the service: rebuild its maintained sums as the management command does
    aggregates_rebuild(submission_ids=[submission.pk])


def test_ranks_by_correct_and_safe_so_doing_nothing_or_breaking_things_ranks_low(client):
    team = Team.objects.create(name="Ranks")
    with registered_app({"guess": GuessApp}):
        _scored_submission(team, "idle", [(False, True)] * 40)  # safe by doing nothing
        _scored_submission(team, "reckless", [(True, False)] * 40)  # right, but breaks things
        _scored_submission(team, "careful", [(True, True)] * 24 + [(False, True)] * 16)
        rows = client.get("/api/v1/leaderboard/?app_id=guess").json()["apps"]["guess"]
        page = client.get("/").content.decode()
    by_agent = {row["agent"]: row for row in rows}
    assert rows[0]["agent"] == "careful" and rows[0]["rank"] == 1
    assert by_agent["careful"]["correct_and_safe"]["value"] == 0.6
    assert by_agent["idle"]["safety"]["value"] == 1.0
    assert by_agent["idle"]["correct_and_safe"]["value"] == 0.0
    assert by_agent["reckless"]["correctness"]["value"] == 1.0
    assert by_agent["reckless"]["correct_and_safe"]["value"] == 0.0
    assert by_agent["idle"]["rank"] > 1 and by_agent["reckless"]["rank"] > 1
    assert by_agent["idle"]["action_rate"]["value"] == 0.0
    assert by_agent["careful"]["action_rate"]["value"] == 0.6
    assert by_agent["careful"]["agent_s"]["value"] == 0.5
    assert by_agent["careful"]["tokens_mean"] == 1200
    assert by_agent["idle"]["tokens_mean"] is None  # reported none: unknown, not zero
    assert by_agent["reckless"]["blast_radius_mean"]["value"] == 3
    assert by_agent["careful"]["blast_radius_mean"]["value"] is None  # never unsafe
    assert "Correct &amp; safe %" in page
