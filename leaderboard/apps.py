"""App config."""

from django.apps import AppConfig


class LeaderboardConfig(AppConfig):
    """Django app config of ``leaderboard``."""

    name = "leaderboard"
    default_auto_field = "django.db.models.BigAutoField"
