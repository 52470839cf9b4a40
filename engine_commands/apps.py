"""App config."""

from django.apps import AppConfig


class EngineCommandsConfig(AppConfig):
    """Django app config of ``engine_commands`` (management commands only, no models)."""

    name = "engine_commands"
    verbose_name = "Evaluation engine commands"
