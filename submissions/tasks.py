"""Celery tasks: thin wrappers over services, taking ids only (house style §4.4).

This module imports the services; the services send these tasks by name
(``dispatch.SUBMISSION_PREPARE_TASK``, ``dispatch.EPISODE_EXECUTE_TASK``) and never import it.

Episode tasks are idempotent (``episodes.episode_execute`` claims an episode for one delivery
and never scores it twice), acknowledged late and rejected back to the queue when their worker
process is lost. They retry only on infrastructure errors: an emulator or evaluator failure
(``episodes.EpisodeRetry``, with back-off), or the database being unreachable, at most
``episodes.EPISODE_MAX_ATTEMPTS`` times in all.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import InterfaceError, OperationalError

from submissions.services import dispatch, episodes, submissions


@shared_task(name=dispatch.SUBMISSION_PREPARE_TASK, acks_late=True, reject_on_worker_lost=True)
def submission_prepare(submission_id: int) -> None:
    """Generate a submission's queries and enqueue its episodes (queue ``control``)."""
    submissions.submission_prepare(submission_id=submission_id)


@shared_task(
    bind=True,
    name=dispatch.EPISODE_EXECUTE_TASK,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    soft_time_limit=1800,
    time_limit=1900,
    # the database unreachable for a moment: retry with exponential back-off (jittered)
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=10,
    retry_backoff_max=300,
    max_retries=episodes.EPISODE_MAX_ATTEMPTS,
)
def episode_execute(self: Any, episode_id: int) -> None:
    """Run one episode (queue = its app id: ``malt``, ``route``, ``k8s``)."""
    try:
        episodes.episode_execute(episode_id=episode_id, retry_infrastructure=True)
    except episodes.EpisodeRetry as retry:
        raise self.retry(countdown=retry.countdown_s, max_retries=None) from None


@shared_task(name="submissions.submissions_expire")
def submissions_expire() -> int:
    """Expire submissions and episodes no worker took (Celery beat, queue ``control``)."""
    return submissions.submissions_expire()


@shared_task(name="submissions.episodes_requeue")
def episodes_requeue() -> int:
    """Requeue running episodes whose worker died, and send again the tasks a broker lost
    with its data (Celery beat, queue ``control``)."""
    return episodes.episodes_requeue() + episodes.tasks_resend_after_broker_loss()


from submissions import preflight_tasks  # noqa: E402,F401 - agent pre-flight task
