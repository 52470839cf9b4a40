"""Redis and PostgreSQL restarts lose no episode and fail none (found by the soak,
benchmarks/bench_soak.py).

* A broker that loses its data (Redis restarted without persistence: every queued message
  gone) strands no episode: the beat's requeue job sends the tasks of pending episodes and
  queued submissions again, once per loss; a duplicate preparation never cancels a started
  submission. (Before: every episode still queued stayed pending until it expired hours later.)
* A database restart while a verdict is stored is waited for, not recorded as an
  infrastructure failure, and never scores an episode twice; a heartbeat that fails once
  beats again. (Before: "storing the verdict failed: OperationalError", and a heartbeat thread
  that stopped for good, so a long episode was requeued while it still ran.) A task retried
  because the database went away between storing the last verdict and closing the submission
  closes it. (Before: the retry found the episode done and the submission stayed running.)
"""

from __future__ import annotations

import contextlib
import time
from types import SimpleNamespace
from unittest import mock

import pytest
from django.db import OperationalError

from evaluator.testing import GuessApp, ScriptedClient, registered_app
from submissions import tasks
from submissions.models import Agent, EpisodeRecord, Submission, Team
from submissions.services import agents as agent_services
from submissions.services import dispatch
from submissions.services import episodes as episode_services
from submissions.services import submissions as submission_services


@pytest.fixture
def toy_app():
    with registered_app({"guess": GuessApp}):
        yield


@pytest.fixture
def agents(monkeypatch) -> list[Agent]:
    team = Team.objects.create(name="t")
    monkeypatch.setattr(episode_services, "agent_client_build", lambda agent: ScriptedClient(["7"]))
    return [
        agent_services.agent_create(
            team=team, name=name, endpoint_url="https://93.184.215.14/a", protocol="http-json"
        )
        for name in ("one", "two")
    ]


@pytest.mark.django_db
def test_tasks_lost_with_the_broker_are_sent_again_once(
    toy_app, agents, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        running = submission_services.submission_create(
            agent=agents[0], apps=["guess"], queries_per_app=4
        )
        submission_services.submission_prepare(submission_id=running.pk)
        queued = submission_services.submission_create(
            agent=agents[1], apps=["guess"], queries_per_app=2
        )
    done, claimed, *pending = running.episodes.order_by("index")
    episode_services.episode_execute(episode_id=done.pk)
    assert episode_services._episode_claim(claimed.pk) is not None  # a live worker runs it
    with (
        mock.patch.object(dispatch, "broker_data_lost", return_value=True),
        mock.patch.object(dispatch, "task_send") as send,
    ):
        assert episode_services.tasks_resend_after_broker_loss() == 1 + len(pending)
    sent = sorted((c.args[0], c.args[1], c.kwargs["queue"]) for c in send.call_args_list)
    assert sent == sorted(
        [(dispatch.SUBMISSION_PREPARE_TASK, (queued.pk,), "control")]
        + [(dispatch.EPISODE_EXECUTE_TASK, (e.pk,), "guess") for e in pending]
    )
    # the beat task does it with the requeue; nothing more while the broker keeps its data
    with (
        mock.patch.object(dispatch, "broker_data_lost", return_value=False),
        mock.patch.object(dispatch, "task_send") as send,
    ):
        assert tasks.episodes_requeue() == 0
    send.assert_not_called()


@pytest.mark.django_db
def test_a_failed_resend_is_done_again_at_the_next_run(
    toy_app, agents, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agents[0], apps=["guess"], queries_per_app=2
        )
        submission_services.submission_prepare(submission_id=submission.pk)
    with (
        mock.patch.object(dispatch, "broker_data_lost", return_value=True),
        mock.patch.object(dispatch, "task_send", side_effect=ConnectionError("down again")),
        mock.patch.object(dispatch, "broker_mark_forget") as forget,
        pytest.raises(ConnectionError),
    ):
        episode_services.tasks_resend_after_broker_loss()
    forget.assert_called_once()


@pytest.mark.django_db
def test_a_duplicate_preparation_never_cancels_the_started_submission(
    toy_app, agents, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agents[0], apps=["guess"], queries_per_app=3
        )
    real = submission_services.generate_batch
    raced: list[bool] = []

    def generate_while_another_delivery_prepares(*args, **kwargs):
        if not raced:  # the other delivery runs to the end while this one generates
            raced.append(True)
            submission_services.submission_prepare(submission_id=submission.pk)
        return real(*args, **kwargs)

    with (
        django_capture_on_commit_callbacks(execute=False),
        mock.patch.object(
            submission_services, "generate_batch", generate_while_another_delivery_prepares
        ),
    ):
        submission_services.submission_prepare(submission_id=submission.pk)
    assert Submission.objects.get(pk=submission.pk).status == "running"
    assert list(submission.episodes.values_list("status", flat=True)) == ["pending"] * 3


@pytest.mark.integration
def test_the_broker_marker_tells_a_loss_once():
    import redis

    from tests.submissions.celery_worker import broker_url

    client = redis.Redis.from_url(broker_url())
    client.delete(dispatch.BROKER_MARK_KEY)
    assert dispatch.broker_data_lost() is True  # nothing known: assume the worst
    assert dispatch.broker_data_lost() is False
    client.flushdb()  # what a restart without persistence leaves
    assert dispatch.broker_data_lost() is True
    assert dispatch.broker_data_lost() is False
    dispatch.broker_mark_forget()
    assert dispatch.broker_data_lost() is True


def _claimed(agent, captured) -> EpisodeRecord:
    with captured(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=1
        )
        submission_services.submission_prepare(submission_id=submission.pk)
    claimed = episode_services._episode_claim(submission.episodes.get().pk)
    assert claimed is not None
    return claimed


@pytest.fixture
def no_reconnect(monkeypatch):
    """Closing the connection inside a test's transaction would break it: record only."""
    connections = mock.Mock()
    monkeypatch.setattr(episode_services, "db_connections", connections)
    monkeypatch.setattr(episode_services.time, "sleep", lambda s: None)
    return connections


@pytest.mark.django_db
def test_a_verdict_waits_for_the_database_to_come_back(
    toy_app, agents, django_capture_on_commit_callbacks, no_reconnect, caplog
):
    episode = _claimed(agents[0], django_capture_on_commit_callbacks)
    real = episode_services.aggregate_refresh
    failures = [OperationalError("server closed the connection")] * 2

    def refresh(**kwargs):
        if failures:
            raise failures.pop()
        real(**kwargs)

    with mock.patch.object(episode_services, "aggregate_refresh", refresh):
        episode_services._episode_store(episode, correct=True, safe=True, steps=1)
    stored = EpisodeRecord.objects.get(pk=episode.pk)
    assert (stored.status, stored.correct, stored.attempts) == ("done", True, 1)
    assert Submission.objects.get(pk=stored.submission_id).status == "finished"
    assert no_reconnect.close_all.call_count == 2
    assert caplog.text.count(f"episode {episode.pk} scored (attempt 1)") == 1


@pytest.mark.django_db
def test_a_commit_whose_answer_was_lost_is_stored_once(
    toy_app, agents, django_capture_on_commit_callbacks, no_reconnect, caplog
):
    episode = _claimed(agents[0], django_capture_on_commit_callbacks)
    real_atomic = episode_services.transaction.atomic
    tries = []

    @contextlib.contextmanager
    def atomic():
        tries.append(1)
        with real_atomic():
            yield
        if len(tries) == 1:  # committed, then the connection broke before the answer
            raise OperationalError("server closed the connection unexpectedly")

    with mock.patch.object(episode_services, "transaction", SimpleNamespace(atomic=atomic)):
        episode_services._episode_store(episode, correct=True, safe=True, steps=1)
    stored = EpisodeRecord.objects.get(pk=episode.pk)
    assert (stored.status, stored.attempts, len(tries)) == ("done", 1, 2)
    assert Submission.objects.get(pk=stored.submission_id).status == "finished"
    assert caplog.text.count(f"episode {episode.pk} scored (attempt 1)") == 1
    assert "verdict discarded" not in caplog.text


@pytest.mark.django_db
def test_a_database_down_for_good_still_closes_the_episode(
    toy_app, agents, django_capture_on_commit_callbacks, no_reconnect, settings
):
    settings.NETARENA = {**settings.NETARENA, "EPISODE_STALE_S": 0.0}  # no time to wait
    episode = _claimed(agents[0], django_capture_on_commit_callbacks)
    with mock.patch.object(
        episode_services, "aggregate_refresh", side_effect=OperationalError("down")
    ):
        episode_services._episode_store(episode, correct=True, safe=True, steps=1)
    assert EpisodeRecord.objects.get(pk=episode.pk).status == "error"


def test_a_heartbeat_that_fails_beats_again(settings, monkeypatch):
    settings.NETARENA = {**settings.NETARENA, "EPISODE_HEARTBEAT_S": 0.02}
    monkeypatch.setattr(episode_services, "db_connections", mock.Mock())
    beats = []
    outcomes = [OperationalError("restarting"), OperationalError("restarting")]

    def update(**fields):
        if outcomes:
            raise outcomes.pop()
        beats.append(fields["heartbeat_at"])
        return 1

    rows = mock.Mock(update=update)
    monkeypatch.setattr(episode_services, "_mine", lambda episode: rows)
    with episode_services._heartbeat(mock.Mock(pk=1)):
        deadline = time.monotonic() + 10
        while len(beats) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(beats) >= 3 and not outcomes


@pytest.mark.django_db
def test_the_retry_of_a_stored_verdict_closes_its_submission(
    toy_app, agents, django_capture_on_commit_callbacks
):
    episode = _claimed(agents[0], django_capture_on_commit_callbacks)
    # the verdict is committed, then the database goes away before the submission is closed:
    # the task fails (and Celery retries it)
    with (
        mock.patch.object(
            episode_services,
            "submission_close_if_complete",
            side_effect=OperationalError("server closed the connection"),
        ),
        pytest.raises(OperationalError),
    ):
        episode_services._episode_store(episode, correct=True, safe=True, steps=1)
    assert EpisodeRecord.objects.get(pk=episode.pk).status == "done"
    assert Submission.objects.get(pk=episode.submission_id).status == "running"
    episode_services.episode_execute(episode_id=episode.pk)  # the retry: nothing to run
    assert Submission.objects.get(pk=episode.submission_id).status == "finished"
    assert EpisodeRecord.objects.get(pk=episode.pk).attempts == 1
