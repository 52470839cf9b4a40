"""Worker host check: every app whose queue a Celery worker consumes must be runnable here.

Connected to Celery's ``celeryd_after_setup`` signal (the ``-Q`` queues are known by then) in
``config/celery.py``. A worker for the ``malt`` queue on a host without a usable sandbox, for
``route`` without Mininet, or for ``k8s`` without the cluster binaries or kubectl, stops at once
with the reason instead of turning every episode into an infrastructure failure ("fail loudly
at start-up"). Not an agent's pre-flight, which checks an agent's endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from evaluator.app import DependencyMissingError
from evaluator.registry import app_ids, get_app

logger = logging.getLogger(__name__)


def host_check_queues(queues: Iterable[str]) -> list[str]:
    """Run ``App.host_check()`` for every registered app among ``queues``; return those checked.

    Raises:
        DependencyMissingError: the first app that cannot run here (message names it).
    """
    checked = []
    for queue in queues:
        if queue not in app_ids():
            continue  # the control queue and queues of no app need nothing
        try:
            get_app(queue).host_check()
        except DependencyMissingError as exc:
            raise DependencyMissingError(f"the {queue} app cannot run on this host: {exc}") from exc
        checked.append(queue)
    return checked


def on_worker_setup(sender: object = None, instance: object = None, **kwargs: object) -> None:
    """``celeryd_after_setup`` receiver: check the worker's queues; exit the worker on failure.

    Celery logs and swallows ``Exception`` raised by signal receivers, so a failed check
    raises ``SystemExit`` (status 78, EX_CONFIG) after logging the reason.
    """
    app = getattr(instance, "app", None)
    consumed = getattr(getattr(getattr(app, "amqp", None), "queues", None), "consume_from", None)
    queues = list(consumed or {})
    try:
        checked = host_check_queues(queues)
    except DependencyMissingError as exc:
        logger.critical("worker refuses to start: %s", exc)
        raise SystemExit(78) from exc
    logger.info("worker host check passed for %s", ", ".join(checked) or "no app queue")
