"""How the services hand work to the workers: Celery tasks sent by name, revoked, and the
``submission_closed`` signal sent once a close commits.

The tasks live in ``submissions.tasks`` and ``submissions.preflight_tasks``, which import the
services; the services send by name (through Celery's current application, the one
``config`` configures) so that nothing here imports the tasks or the project package.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app
from django.db import transaction

from submissions.models import Submission
from submissions.signals import submission_closed

logger = logging.getLogger(__name__)

#: Celery task names (``submissions/tasks.py``).
SUBMISSION_PREPARE_TASK = "submissions.submission_prepare"
EPISODE_EXECUTE_TASK = "submissions.episode_execute"


def episode_task_id(episode_id: int) -> str:
    """The Celery task id of an episode's task (stable, so that a cancel can revoke it)."""
    return f"episode-{episode_id}"


def task_send(name: str, args: tuple[Any, ...], *, queue: str, task_id: str | None = None) -> None:
    """Send the Celery task ``name`` with ``args`` to ``queue`` (call it from
    ``transaction.on_commit``); episode tasks get the id :func:`episode_task_id` so that a
    cancel can revoke them."""
    if task_id is None and name == EPISODE_EXECUTE_TASK:
        task_id = episode_task_id(int(args[0]))
    current_app.send_task(name, args=args, queue=queue, task_id=task_id)


#: A key the broker holds while it keeps its data (:func:`broker_data_lost`).
BROKER_MARK_KEY = "netarena:broker-mark"


def broker_data_lost() -> bool:
    """True when the broker has lost its data since the last call, i.e. every message it
    held (queued tasks) is gone: a Redis restarted without persistence (docker-compose.yml's
    keeps none) or flushed. Told by a marker key, set here when it is missing, so it is True
    once per loss (and on the very first call, when nothing can be known). False when the
    broker is not Redis or does not answer (the next call will tell)."""
    try:
        with current_app.connection_for_write() as connection:
            client = getattr(connection.default_channel, "client", None)
            if client is None:  # not the Redis transport
                return False
            return bool(client.set(BROKER_MARK_KEY, "1", nx=True))
    except Exception:  # noqa: BLE001 - the broker is down: the next call decides
        logger.warning("could not check the broker's marker key", exc_info=True)
        return False


def broker_mark_forget() -> None:
    """Delete the marker (best effort), so that the next :func:`broker_data_lost` is True: a
    re-send after a loss failed half-way and must be done again."""
    try:
        with current_app.connection_for_write() as connection:
            connection.default_channel.client.delete(BROKER_MARK_KEY)
    except Exception:  # noqa: BLE001 - the broker is down: it lost the marker anyway
        logger.warning("could not delete the broker's marker key", exc_info=True)


def tasks_revoke(task_ids: list[str]) -> None:
    """Ask the workers to drop these tasks (best effort: workers check the status anyway)."""
    if not task_ids:
        return
    try:
        current_app.control.revoke(task_ids)
    except Exception:  # noqa: BLE001 - the broker may be down; the workers' check suffices
        logger.warning("revoking %d episode task(s) failed", len(task_ids), exc_info=True)


def submission_closed_announce(submission_id: int) -> None:
    """Send :data:`submissions.signals.submission_closed` once the current transaction
    commits (at once outside one); a receiver's error is logged, never raised into the
    worker or the request that closed the submission."""

    def send() -> None:
        for receiver, result in submission_closed.send_robust(
            sender=Submission, submission_id=submission_id
        ):
            if isinstance(result, Exception):
                logger.error(
                    "receiver %r of submission_closed failed for submission %s: %r",
                    receiver,
                    submission_id,
                    result,
                )

    transaction.on_commit(send)
