"""Redis and PostgreSQL restarts lose no episode and fail none (found by the soak,
benchmarks/bench_soak.py).

* A broker that loses its data (Redis restarted without persistence: every queued message
  gone) strands no episode: the beat's requeue job sends the tasks of pending episodes and
  queued submissions again, once per loss; a duplicate preparation never cancels a started
  submission. (Before: every episode still queued stayed pending until it expired hours later.)
"""

from __future__ import annotations

from unittest import mock

import pytest

from evaluator.testing import GuessApp, ScriptedClient, registered_app
from submissions import tasks
from submissions.models import Agent, Submission, Team
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
    raced = []

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

