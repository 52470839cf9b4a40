"""Django app configuration for user accounts."""

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """Sign-up and the pages around Django's own authentication views; the "submission
    finished" e-mail is connected here (``accounts.notifications``)."""

    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Connect the finish e-mail to ``submissions.signals.submission_closed``."""
        from accounts.notifications import submission_finished_notify
        from submissions.signals import submission_closed

        submission_closed.connect(
            submission_finished_notify, dispatch_uid="accounts.submission_finished_notify"
        )
