"""Django app config of ``ops``: registers the platform's Prometheus collector once."""

from __future__ import annotations

from django.apps import AppConfig


class OpsConfig(AppConfig):
    name = "ops"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from ops.metrics import register_platform_collector

        register_platform_collector()
