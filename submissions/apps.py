"""App config."""

from django.apps import AppConfig


class SubmissionsConfig(AppConfig):
    """Django app config of ``submissions``."""

    name = "submissions"
    default_auto_field = "django.db.models.BigAutoField"
