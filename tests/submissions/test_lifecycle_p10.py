"""Cancel, claim and requeue of episodes, infrastructure retries, incomplete submissions and
live progress, on the database with the toy app (the Celery hop replaced by service calls;
tests/submissions/test_worker_kill.py crosses the real Redis/Celery boundary)."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from evaluator.testing import GuessApp, ScriptedClient, registered_app
from evaluator.types import EpisodeResult
from submissions.errors import (
    NotYourSubmissionError,
    QuotaExceededError,
    SubmissionClosedError,
)
from submissions.models import Agent, EpisodeRecord, Submission, Team
from submissions.progress import submission_infrastructure_failures, submission_progress
from submissions.selectors import standings
from submissions.services import agents as agent_services
from submissions.services import dispatch
from submissions.services import episodes as episode_services
from submissions.services import rounds as round_services
from submissions.services import submissions as submission_services

pytestmark = pytest.mark.django_db


@pytest.fixture
def toy_app():
    with registered_app({"guess": GuessApp}):
        yield


@pytest.fixture
def member(django_user_model):
    return django_user_model.objects.create_user("ann", password="pw-ann-12345")


@pytest.fixture
def agent(member, monkeypatch) -> Agent:
    team = Team.objects.create(name="t")
    team.members.add(member)
    monkeypatch.setattr(episode_services, "agent_client_build", lambda agent: ScriptedClient(["7"]))
    return agent_services.agent_create(
        team=team, name="seven", endpoint_url="https://93.184.215.14/a", protocol="http-json"
    )


def _prepared(agent, captured, count=4, apps=("guess",)) -> Submission:
    with captured(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=list(apps), queries_per_app=count
        )
    with captured(execute=False):
        submission_services.submission_prepare(submission_id=submission.pk)
    submission.refresh_from_db()
    return submission


def _infra(query_app_error: str):
    def run(app, query, client, *, episode_id=None, **kwargs):
        return EpisodeResult.for_infrastructure_failure(query, query_app_error, attempts=3)

    return run


def test_cancel_skips_pending_keeps_running_and_counts_against_quota(
    toy_app, agent, member, settings, django_capture_on_commit_callbacks
):
    settings.NETARENA = {**settings.NETARENA, "SUBMISSIONS_PER_TEAM_PER_DAY": 1}
    submission = _prepared(agent, django_capture_on_commit_callbacks)
    first, second, *rest = submission.episodes.order_by("index")
    episode_services.episode_execute(episode_id=first.pk)  # scored before the cancel
    # the second is running on a (live) worker when the cancel arrives
    claimed = episode_services._episode_claim(second.pk)
    assert claimed is not None
    with (
        mock.patch.object(dispatch, "tasks_revoke") as revoke,
        django_capture_on_commit_callbacks(execute=True),
    ):
        submission_services.submission_cancel(submission=submission, actor=member)
    assert revoke.call_args.args[0] == [dispatch.episode_task_id(e.pk) for e in rest]
    submission.refresh_from_db()
    assert submission.status == Submission.Status.CANCELLED and submission.finished_at
    statuses = dict(submission.episodes.values_list("pk", "status"))
    assert statuses[first.pk] == "done" and statuses[second.pk] == "running"
    assert {statuses[e.pk] for e in rest} == {"cancelled"}
    # a worker that still receives a cancelled episode's task runs nothing
    episode_services.episode_execute(episode_id=rest[0].pk)
    assert EpisodeRecord.objects.get(pk=rest[0].pk).status == "cancelled"
    # the running one finishes and its verdict is stored whole; the submission stays cancelled
    episode_services._episode_store(claimed, correct=True, safe=True, steps=1)
    second.refresh_from_db()
    submission.refresh_from_db()
    assert second.status == "done" and second.correct is True
    assert submission.status == Submission.Status.CANCELLED
    assert standings(app_id="guess") == []  # never ranked
    with pytest.raises(SubmissionClosedError):
        submission_services.submission_cancel(submission=submission, actor=member)
    # quota: a cancelled submission was started, it counts
    with pytest.raises(QuotaExceededError):
        submission_services.submission_create(agent=agent, apps=["guess"], queries_per_app=1)


def test_only_team_members_cancel_and_round_submissions_need_staff(
    toy_app, agent, member, django_user_model, django_capture_on_commit_callbacks
):
    stranger = django_user_model.objects.create_user("eve", password="pw-eve-12345")
    submission = _prepared(agent, django_capture_on_commit_callbacks)
    with pytest.raises(NotYourSubmissionError):
        submission_services.submission_cancel(submission=submission, actor=stranger)
    with django_capture_on_commit_callbacks(execute=False):
        evaluation_round = round_services.round_create(apps=["guess"], queries_per_app=1)
    in_round = evaluation_round.submissions.get()
    with pytest.raises(NotYourSubmissionError):
        submission_services.submission_cancel(submission=in_round, actor=member)
    staff = django_user_model.objects.create_user("root", password="pw-root-1234", is_staff=True)
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_cancel(submission=in_round, actor=staff)
    assert Submission.objects.get(pk=in_round.pk).status == "cancelled"


def test_cancel_before_generation_runs_no_episode(
    toy_app, agent, member, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        submission = submission_services.submission_create(
            agent=agent, apps=["guess"], queries_per_app=3
        )
        submission_services.submission_cancel(submission=submission, actor=member)
    with django_capture_on_commit_callbacks(execute=False) as sent:
        submission_services.submission_prepare(submission_id=submission.pk)
    assert sent == [] and not submission.episodes.exists()


def test_a_delivery_never_runs_an_episode_a_live_worker_runs(
    toy_app, agent, django_capture_on_commit_callbacks
):
    submission = _prepared(agent, django_capture_on_commit_callbacks, count=1)
    episode = submission.episodes.get()
    owner = episode_services._episode_claim(episode.pk)
    assert owner is not None and owner.attempts == 1
    # a duplicate message (broker redelivery) while the owner's heartbeat is fresh: skipped
    assert episode_services._episode_claim(episode.pk) is None
    episode_services.episode_execute(episode_id=episode.pk)
    episode.refresh_from_db()
    assert (episode.status, episode.attempts) == ("running", 1)


def test_requeue_takes_over_a_dead_run_and_the_late_verdict_is_discarded(
    toy_app, agent, django_capture_on_commit_callbacks, settings
):
    submission = _prepared(agent, django_capture_on_commit_callbacks, count=2)
    dead_run, alive_run = submission.episodes.order_by("index")
    dead = episode_services._episode_claim(dead_run.pk)
    alive = episode_services._episode_claim(alive_run.pk)
    assert dead is not None and alive is not None
    stale = timezone.now() - timedelta(seconds=settings.NETARENA["EPISODE_STALE_S"] + 5)
    EpisodeRecord.objects.filter(pk=dead_run.pk).update(heartbeat_at=stale)
    with mock.patch.object(dispatch, "task_send") as send:
        assert episode_services.episodes_requeue() == 1
    assert send.call_args.args == (dispatch.EPISODE_EXECUTE_TASK, (dead_run.pk,))
    assert send.call_args.kwargs["queue"] == "guess"
    assert EpisodeRecord.objects.get(pk=dead_run.pk).status == "pending"
    assert EpisodeRecord.objects.get(pk=alive_run.pk).status == "running"  # fresh heartbeat
    # the requeued task runs the episode again (attempt 2) and scores it
    episode_services.episode_execute(episode_id=dead_run.pk)
    rerun = EpisodeRecord.objects.get(pk=dead_run.pk)
    assert (rerun.status, rerun.attempts) == ("done", 2) and rerun.correct is not None
    finished_at = rerun.finished_at
    # the first worker comes back to life and tries to store: discarded, scored once
    episode_services._episode_store(dead, correct=not rerun.correct, safe=False, steps=99)
    again = EpisodeRecord.objects.get(pk=dead_run.pk)
    assert (again.correct, again.steps, again.finished_at) == (
        rerun.correct,
        rerun.steps,
        finished_at,
    )


def test_requeue_closes_a_dead_run_of_a_cancelled_submission(
    toy_app, agent, member, django_capture_on_commit_callbacks
):
    submission = _prepared(agent, django_capture_on_commit_callbacks, count=1)
    episode = submission.episodes.get()
    episode_services._episode_claim(episode.pk)
    with django_capture_on_commit_callbacks(execute=False):
        submission_services.submission_cancel(submission=submission, actor=member)
    EpisodeRecord.objects.filter(pk=episode.pk).update(
        heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    with mock.patch.object(dispatch, "task_send") as send:
        assert episode_services.episodes_requeue() == 0
    send.assert_not_called()
    assert EpisodeRecord.objects.get(pk=episode.pk).status == "cancelled"


def test_infrastructure_failures_are_retried_with_back_off_then_recorded(
    toy_app, agent, monkeypatch, settings, django_capture_on_commit_callbacks
):
    settings.NETARENA = {**settings.NETARENA, "EPISODE_RETRY_BACKOFF_S": 4.0}
    monkeypatch.setattr(episode_services, "run_episode_guarded", _infra("EmulatorError: host lost"))
    submission = _prepared(agent, django_capture_on_commit_callbacks, count=1)
    episode = submission.episodes.get()
    countdowns = []
    for _ in range(episode_services.EPISODE_MAX_ATTEMPTS - 1):
        with pytest.raises(episode_services.EpisodeRetry) as retry:
            episode_services.episode_execute(episode_id=episode.pk, retry_infrastructure=True)
        countdowns.append(retry.value.countdown_s)
        assert EpisodeRecord.objects.get(pk=episode.pk).status == "pending"
    assert countdowns == [4.0, 8.0]
    episode_services.episode_execute(
        episode_id=episode.pk, retry_infrastructure=True
    )  # last attempt
    episode.refresh_from_db()
    assert (episode.status, episode.attempts) == ("error", episode_services.EPISODE_MAX_ATTEMPTS)
    assert episode.details["error_kind"] == "EmulatorError"
    submission.refresh_from_db()
    assert submission.incomplete and submission.platform_failed
    assert submission.status == Submission.Status.FINISHED
    assert submission_infrastructure_failures(submission=submission) == [
        {
            "episode": episode.pk,
            "app_id": "guess",
            "index": episode.index,
            "kind": "EmulatorError",
            "message": "EmulatorError: host lost",
            "attempts": 3,
        }
    ]


@pytest.mark.parametrize(("failures", "incomplete"), [(1, False), (2, True)])
def test_infrastructure_share_over_the_threshold_makes_a_submission_incomplete(
    toy_app,
    agent,
    monkeypatch,
    settings,
    failures,
    incomplete,
    django_capture_on_commit_callbacks,
):
    settings.NETARENA = {**settings.NETARENA, "INFRA_FAILURE_MAX_SHARE": 0.1}
    submission = _prepared(agent, django_capture_on_commit_callbacks, count=12)
    episodes = list(submission.episodes.order_by("index"))
    real_run = episode_services.run_episode_guarded
    for n, episode in enumerate(episodes):
        run = _infra("EmulatorError: lost") if n < failures else real_run
        monkeypatch.setattr(episode_services, "run_episode_guarded", run)
        episode_services.episode_execute(episode_id=episode.pk)
    submission.refresh_from_db()
    # 1 of 12 = 8% is within 10%; 2 of 12 = 17% is not
    assert submission.status == Submission.Status.FINISHED
    assert submission.incomplete is incomplete and submission.platform_failed is incomplete
    ranked = [r.submission.pk for r in standings(app_id="guess")]
    assert ranked == ([] if incomplete else [submission.pk])


def test_progress_counts_queue_position_and_estimate(
    toy_app, agent, django_capture_on_commit_callbacks
):
    submission = _prepared(agent, django_capture_on_commit_callbacks, count=4)
    other_team = Team.objects.create(name="later")
    later_agent = Agent.objects.create(
        team=other_team, name="b", endpoint_url="https://93.184.215.14/b", protocol="http-json"
    )
    later = _prepared(later_agent, django_capture_on_commit_callbacks, count=2)
    progress = submission_progress(submission=submission)
    assert (progress.done, progress.total, progress.percent) == (0, 4, 0.0)
    assert progress.open and progress.queue_position == 0 and progress.eta_s is None
    assert submission_progress(submission=later).queue_position == 1
    Submission.objects.filter(pk=submission.pk).update(
        started_at=timezone.now() - timedelta(seconds=30)
    )
    submission.refresh_from_db()
    for episode in submission.episodes.order_by("index")[:2]:
        episode_services.episode_execute(episode_id=episode.pk)
    progress = submission_progress(submission=submission)
    assert (progress.done, progress.total, progress.percent) == (2, 4, 50.0)
    assert progress.by_app["guess"].done == 2 and progress.by_app["guess"].total == 4
    assert progress.elapsed_s is not None and 29 <= progress.elapsed_s <= 60
    # two left at the observed mean of elapsed/2 per episode
    assert progress.eta_s == pytest.approx(progress.elapsed_s, abs=0.2)
    for episode in submission.episodes.filter(status="pending"):
        episode_services.episode_execute(episode_id=episode.pk)
    submission.refresh_from_db()
    done = submission_progress(submission=submission)
    assert (done.status, done.open, done.percent, done.eta_s) == ("finished", False, 100.0, None)
    assert done.queue_position is None
    assert submission_progress(submission=later).queue_position == 0
