"""Django app configuration for user accounts."""

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """Sign-up and the pages around Django's own authentication views."""

    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"
