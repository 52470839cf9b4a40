"""The Celery application (Redis broker). One queue per benchmark app: malt, route, k8s."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("netarena")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
