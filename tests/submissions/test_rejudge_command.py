"""``manage.py rejudge`` replays stored episodes and reports every verdict it cannot reproduce."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from evaluator.testing import ScriptedClient
from evaluator.types import JSON
from submissions.models import EpisodeRecord, Team
from submissions.services import agents as agent_services
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services
from tests.submissions.test_services import run_everything, toy_app  # noqa: F401


def _three_guesses() -> ScriptedClient:
    """Guesses 3, then 7, then 5: episodes of one to three steps, some solved, most not."""

    def reply(messages: list[JSON], episode_id: str) -> str:
        return ["3", "7", "5"][sum(m["role"] == "assistant" for m in messages)]

    return ScriptedClient(reply)

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(toy_app, monkeypatch, django_capture_on_commit_callbacks):  # noqa: F811
    monkeypatch.setattr(episode_services, "agent_client_build", lambda agent: _three_guesses())
    team = Team.objects.create(name="replayers")
    agent = agent_services.agent_create(
        team=team, name="seven", endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=12
        )
    run_everything(django_capture_on_commit_callbacks, submission)
    return submission


def test_every_stored_verdict_of_a_submission_is_reproduced(finished, capsys):
    episodes = EpisodeRecord.objects.filter(submission=finished)
    assert all(e.replay and e.replay["replies"] for e in episodes)
    assert max(e.steps or 0 for e in episodes) > 1  # multi-step replays (P(not) = 0.1**12)
    call_command("rejudge", submission=finished.pk)
    out = capsys.readouterr().out
    assert f"{episodes.count()} reproduced, 0 different, 0 not replayable" in out


def test_a_tampered_verdict_and_a_missing_replay_are_reported(finished, capsys):
    first, second, *_ = EpisodeRecord.objects.filter(submission=finished).order_by("index")
    EpisodeRecord.objects.filter(pk=first.pk).update(correct=not first.correct)
    EpisodeRecord.objects.filter(pk=second.pk).update(replay=None)
    with pytest.raises(CommandError) as raised:
        call_command("rejudge", first.pk, second.pk)
    assert raised.value.returncode == 1
    out = capsys.readouterr().out
    assert f"DIFFERENT episode {first.pk}" in out and "correct: stored" in out
    assert f"NOT REPLAYABLE episode {second.pk}" in out
    assert "0 reproduced, 1 different, 1 not replayable" in out


def test_rejudge_needs_a_selection():
    with pytest.raises(CommandError):
        call_command("rejudge")
