"""Celery tasks: thin wrappers over services, taking ids only (house style §4.4)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="submissions.submission_prepare", acks_late=True)
def submission_prepare(submission_id: int) -> None:
    """Generate a submission's queries and enqueue its episodes (queue ``control``)."""
    from submissions.services import submission_prepare as prepare

    prepare(submission_id=submission_id)


@shared_task(
    name="submissions.episode_execute",
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=1800,
    time_limit=1900,
)
def episode_execute(episode_id: int) -> None:
    """Run one episode (queue = its app id: ``malt``, ``route``, ``k8s``)."""
    from submissions.services import episode_execute as execute

    execute(episode_id=episode_id)
