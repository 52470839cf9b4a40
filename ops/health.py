"""Readiness checks of the site (``/readyz``), built on django-health-check.

Ready means: the database answers, the Celery broker (Redis) answers, the shared cache works,
and every Celery queue the platform sends work to (``control`` plus one per registered app,
:func:`platform_queues`) has at least one live worker consuming it. A queue without a worker
would let submissions wait forever, so the site reports itself not ready (HTTP 503).
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from health_check.base import HealthCheck
from health_check.exceptions import ServiceUnavailable

from evaluator.registry import CONTROL_QUEUE, app_ids

#: Seconds the Celery broadcast waits for workers to answer (each check has its own budget).
WORKER_PING_TIMEOUT_S = 1.5


def platform_queues() -> list[str]:
    """The Celery queues the site sends tasks to: ``control`` and one per registered app."""
    return [CONTROL_QUEUE, *app_ids()]


def _celery_app() -> Any:
    """The Celery application the project configured (Celery's current app)."""
    from celery import current_app

    return current_app


@dataclasses.dataclass
class BrokerCheck(HealthCheck):
    """The Celery broker accepts a connection (a Redis ``PING`` through kombu)."""

    timeout = datetime.timedelta(seconds=3)

    def run(self) -> None:
        try:
            with _celery_app().connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=2)
        except Exception as exc:  # kombu raises transport-specific errors
            raise ServiceUnavailable(f"broker unreachable: {type(exc).__name__}") from exc


@dataclasses.dataclass
class QueueWorkersCheck(HealthCheck):
    """Every queue of :func:`platform_queues` has a live worker (Celery ``active_queues``).

    Raises ``ServiceUnavailable`` naming the queues without a worker.
    """

    timeout = datetime.timedelta(seconds=4)

    def run(self) -> None:
        missing = queues_without_worker()
        if missing:
            raise ServiceUnavailable(f"no worker for queue(s): {', '.join(missing)}")


def queues_without_worker(timeout_s: float = WORKER_PING_TIMEOUT_S) -> list[str]:
    """The queues of :func:`platform_queues` that no live worker consumes, sorted.

    Asks every worker over the broker (Celery's ``inspect().active_queues()`` broadcast);
    an unreachable broker counts as no worker at all.
    """
    try:
        replies = _celery_app().control.inspect(timeout=timeout_s).active_queues() or {}
    except Exception:  # noqa: BLE001 - broker down: no worker can be reached
        replies = {}
    served = {queue.get("name") for queues in replies.values() for queue in queues or []}
    return sorted(set(platform_queues()) - served)
