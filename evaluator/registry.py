"""Registry of benchmark applications.

Apps are imported lazily from dotted paths so that importing the engine never needs Mininet
or a Kubernetes cluster; an app whose dependencies are missing fails only when it is made.
"""

from __future__ import annotations

import importlib
from functools import cache

from evaluator.app import App, UnknownAppError

#: app id -> "module:Class". The id is also the Celery queue name of the app.
APP_PATHS: dict[str, str] = {
    "malt": "apps.malt.app:MaltApp",
    "route": "apps.route.app:RouteApp",
    "k8s": "apps.k8s.app:K8sApp",
}


#: Longest app id: the ``app_id`` columns of the site's tables (``submissions/models.py``) hold
#: 20 characters.
APP_ID_MAX_LENGTH = 20

#: Celery queue of submission-level work (generating a batch, closing a submission); every
#: episode runs on the queue named after its app.
CONTROL_QUEUE = "control"


def app_ids() -> list[str]:
    """Return the registered app ids in display order."""
    return list(APP_PATHS)


def worker_queues() -> list[str]:
    """Return every Celery queue a worker serving all apps must consume: control + app ids."""
    return [CONTROL_QUEUE, *app_ids()]


@cache
def get_app(app_id: str) -> App:
    """Return the (cached) app instance for ``app_id``.

    Raises:
        UnknownAppError: ``app_id`` is not registered or its module does not define it.
    """
    try:
        module_name, class_name = APP_PATHS[app_id].split(":")
    except KeyError:
        raise UnknownAppError(f"unknown app {app_id!r}; known: {', '.join(APP_PATHS)}") from None
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, class_name)
    except (ImportError, AttributeError) as exc:
        raise UnknownAppError(f"app {app_id!r} is not available: {exc}") from exc
    app: App = cls()
    return app


if __name__ == "__main__":  # for shell scripts: `python -m evaluator.registry queues|apps`
    import sys

    commands = {"queues": worker_queues, "apps": app_ids}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        sys.exit("usage: python -m evaluator.registry queues|apps")
    print(",".join(commands[sys.argv[1]]()))  # noqa: T201
