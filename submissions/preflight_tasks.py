"""Celery task of the agent pre-flight (``submissions/services/preflight.py``), queue ``control``.

The soft time limit closes an endpoint that keeps the checks busy as a failed pre-flight; the
hard limit (and ``preflight.stale_after_s`` above it) means no pre-flight stays ``running``.
"""

from __future__ import annotations

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded

from submissions.services import preflight

#: Seconds a pre-flight may take in total (three canaries at the 60 s reply deadline fit).
SOFT_TIME_LIMIT_S = 600
HARD_TIME_LIMIT_S = 660


@shared_task(
    name=preflight.PREFLIGHT_TASK,
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=SOFT_TIME_LIMIT_S,
    time_limit=HARD_TIME_LIMIT_S,
)
def agent_preflight(preflight_id: int) -> None:
    """Run one agent pre-flight (queue ``control``)."""
    try:
        preflight.preflight_run(preflight_id=preflight_id)
    except SoftTimeLimitExceeded:
        preflight.preflight_time_out(preflight_id=preflight_id, limit_s=SOFT_TIME_LIMIT_S)
