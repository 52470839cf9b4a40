"""The Celery application (Redis broker): the ``control`` queue plus one queue per app of the
registry, named by its app id (``evaluator.registry.worker_queues()``)."""

import os

from celery import Celery
from celery.signals import celeryd_after_setup

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("netarena")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def _host_check(sender: object = None, instance: object = None, **kwargs: object) -> None:
    from config.worker_host_check import on_worker_setup  # needs Django settings loaded

    on_worker_setup(sender=sender, instance=instance, **kwargs)


celeryd_after_setup.connect(_host_check, weak=False)
