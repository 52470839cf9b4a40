"""Submission pipeline services on the database, with the toy app and a scripted agent.

The Celery hop is replaced by calling the services the tasks call; the end-to-end test in
test_pipeline_e2e.py crosses the real Redis/Celery/HTTP boundaries.
"""

from __future__ import annotations

import pytest

from evaluator.agents.base import AgentError
from evaluator.testing import GuessApp, ScriptedClient, registered_app
from evaluator.types import JSON
from submissions.crypto import decrypt_secret
from submissions.errors import InvalidInputError
from submissions.models import Agent, EpisodeRecord, Submission, Team
from submissions.selectors import standings
from submissions.services import agents as agent_services
from submissions.services import episodes as episode_services
from submissions.services import rounds as round_services
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db


def OracleClient(mode: str = "oracle") -> ScriptedClient:  # noqa: N802 - reads as a client
    """A toy-app agent by mode: ``dead`` fails in transport, ``crash`` raises a bug, ``seven``
    answers 7, anything else answers -1."""

    def reply(messages: list[JSON], episode_id: str) -> str:
        if mode == "dead":
            raise AgentError("transport", "connection refused")
        if mode == "crash":
            raise RuntimeError("bug in a client")
        return "7" if mode == "seven" else "-1"

    return ScriptedClient(reply)


@pytest.fixture
def toy_app():
    with registered_app({"guess": GuessApp}):
        yield


@pytest.fixture
def team():
    return Team.objects.create(name="t")


def run_everything(django_capture_on_commit_callbacks, submission):
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_prepare(submission_id=submission.pk)
    for episode in EpisodeRecord.objects.filter(submission=submission):
        episode_services.episode_execute(episode_id=episode.pk)
    submission.refresh_from_db()


def test_agent_secret_is_encrypted_at_rest(team):
    agent = agent_services.agent_create(
        team=team,
        name="a",
        endpoint_url="https://93.184.215.14/v1",
        protocol="openai-chat",
        api_key="sk-very-secret",
    )
    stored = bytes(Agent.objects.get(pk=agent.pk).secret_encrypted)
    assert b"sk-very-secret" not in stored
    assert decrypt_secret(stored) == "sk-very-secret"


def test_rotate_agent_secrets_moves_every_secret_to_the_new_key(team, monkeypatch):
    from cryptography.fernet import Fernet
    from django.core.management import call_command

    old_key, new_key = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    monkeypatch.setenv("NETARENA_SECRET_ENCRYPTION_KEY", old_key)
    agent = agent_services.agent_create(team=team, name="a", endpoint_url="https://93.184.215.14/v1",
                                  protocol="openai-chat", api_key="sk-rotate-me")
    monkeypatch.setenv("NETARENA_SECRET_ENCRYPTION_KEY", new_key)
    assert decrypt_secret(Agent.objects.get(pk=agent.pk).secret_encrypted) is None
    monkeypatch.setenv("NETARENA_SECRET_ENCRYPTION_OLD_KEYS", old_key)
    call_command("rotate_agent_secrets")
    monkeypatch.delenv("NETARENA_SECRET_ENCRYPTION_OLD_KEYS")
    stored = bytes(Agent.objects.get(pk=agent.pk).secret_encrypted)
    assert decrypt_secret(stored) == "sk-rotate-me"  # under the new key alone


def test_submission_lifecycle_and_standings(
    team, toy_app, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(
        episode_services, "agent_client_build", lambda agent: OracleClient(agent.name)
    )
    seven = agent_services.agent_create(
        team=team, name="seven", endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )
    null = agent_services.agent_create(
        team=team, name="null", endpoint_url="https://93.184.215.14/b", protocol="http-json"
    )
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        round_ = round_services.round_create(apps=["guess"], queries_per_app=30)
    assert len(callbacks) == 2  # one preparation task per active agent, sent on commit
    subs = list(Submission.objects.filter(round=round_))
    assert {s.seed for s in subs} == {round_.seed}  # same queries for everyone in a round
    for submission in subs:
        run_everything(django_capture_on_commit_callbacks, submission)
        assert submission.status == Submission.Status.FINISHED
        assert submission.episodes.filter(status=EpisodeRecord.Status.DONE).count() == 30
    assert standings(app_id="guess", round_number=round_.number) == []  # open: unspent
    round_services.round_close(round_id=round_.pk)
    rows = standings(app_id="guess", round_number=round_.number)
    by_name = {r.agent.name: r for r in rows}
    expected_sevens = sum(
        1
        for e in EpisodeRecord.objects.filter(submission__agent=seven)
        if e.query["ground_truth"]["number"] == 7
    )
    assert by_name["seven"].correctness.value == pytest.approx(expected_sevens / 30)
    assert by_name["null"].correctness.value == 0.0
    assert null.pk != seven.pk


def test_dead_agent_fails_episodes_but_closes_submission(
    team, toy_app, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(episode_services, "agent_client_build", lambda agent: OracleClient("dead"))
    agent = agent_services.agent_create(
        team=team, name="dead", endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=3
        )
    run_everything(django_capture_on_commit_callbacks, submission)
    assert submission.status == Submission.Status.FINISHED
    assert set(submission.episodes.values_list("failure", flat=True)) == {"agent:transport"}
    assert not submission.episodes.filter(correct=True).exists()


def test_evaluator_crash_closes_episode_as_error(
    team, toy_app, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(episode_services, "agent_client_build", lambda agent: OracleClient("crash"))
    agent = agent_services.agent_create(
        team=team, name="x", endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=2
        )
    run_everything(django_capture_on_commit_callbacks, submission)
    assert submission.status == Submission.Status.FINISHED
    assert set(submission.episodes.values_list("status", flat=True)) == {EpisodeRecord.Status.ERROR}
    assert standings(app_id="guess") == []  # errors are excluded from every figure


def test_episode_execution_is_idempotent(
    team, toy_app, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(episode_services, "agent_client_build", lambda agent: OracleClient("seven"))
    agent = agent_services.agent_create(
        team=team, name="seven", endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=1
        )
    run_everything(django_capture_on_commit_callbacks, submission)
    episode = submission.episodes.get()
    before = (episode.finished_at, episode.attempts)
    episode_services.episode_execute(episode_id=episode.pk)  # a redelivered task
    episode.refresh_from_db()
    assert (episode.finished_at, episode.attempts) == before


def test_interrupted_episode_gives_up_after_max_attempts(
    team, toy_app, django_capture_on_commit_callbacks
):
    agent = agent_services.agent_create(
        team=team, name="a", endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=1
        )
        submission_services.submission_prepare(submission_id=submission.pk)
    episode = submission.episodes.get()
    EpisodeRecord.objects.filter(pk=episode.pk).update(
        status="running", attempts=episode_services.EPISODE_MAX_ATTEMPTS
    )
    episode_services.episode_execute(episode_id=episode.pk)
    episode.refresh_from_db()
    submission.refresh_from_db()
    assert episode.status == EpisodeRecord.Status.ERROR and "interrupted" in episode.failure
    assert submission.status == Submission.Status.FINISHED


def test_bad_requests_are_refused_with_a_message(team):
    agent = agent_services.agent_create(
        team=team, name="a", endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )
    with pytest.raises(InvalidInputError, match="unknown"):
        submission_services.submission_create(agent=agent, apps=["nope"], queries_per_app=3)
    with pytest.raises(InvalidInputError, match="between"):
        submission_services.submission_create(agent=agent, apps=["malt"], queries_per_app=0)
    with pytest.raises(InvalidInputError, match="protocol"):
        agent_services.agent_create(
            team=team, name="b", endpoint_url="https://93.184.215.14/a", protocol="smtp"
        )
    assert Submission.objects.count() == 0


def test_generation_failure_fails_the_submission(
    team, monkeypatch, django_capture_on_commit_callbacks
):
    agent = agent_services.agent_create(
        team=team, name="a", endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )
    submission = Submission.objects.create(agent=agent, seed=1, apps=["broken"], queries_per_app=1)
    with registered_app({"broken": "tests.engine.no_such_module:App"}):
        submission_services.submission_prepare(submission_id=submission.pk)
    submission.refresh_from_db()
    assert submission.status == Submission.Status.FAILED
    assert "generation failed" in submission.error
