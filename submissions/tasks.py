"""Celery tasks: thin wrappers over services, taking ids only (house style §4.4).

This module imports the services; the services send these tasks by name
(``services.SUBMISSION_PREPARE_TASK``, ``services.EPISODE_EXECUTE_TASK``) and never import it.
"""

from __future__ import annotations

from celery import shared_task

from submissions import services


@shared_task(name=services.SUBMISSION_PREPARE_TASK, acks_late=True)
def submission_prepare(submission_id: int) -> None:
    """Generate a submission's queries and enqueue its episodes (queue ``control``)."""
    services.submission_prepare(submission_id=submission_id)


@shared_task(
    name=services.EPISODE_EXECUTE_TASK,
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=1800,
    time_limit=1900,
)
def episode_execute(episode_id: int) -> None:
    """Run one episode (queue = its app id: ``malt``, ``route``, ``k8s``)."""
    services.episode_execute(episode_id=episode_id)


@shared_task(name="submissions.submissions_expire")
def submissions_expire() -> int:
    """Expire submissions and episodes no worker took (Celery beat, queue ``control``)."""
    return services.submissions_expire()


from submissions import preflight_tasks  # noqa: E402,F401 - agent pre-flight task (A10)
