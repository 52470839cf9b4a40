"""Django app configuration for user accounts."""

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """Sign-up and the pages around Django's own authentication views; the "submission
    finished" e-mail is connected here (``accounts.notifications``)."""

    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Connect the finish e-mail to ``submissions.signals.submission_closed`` and the log-in
        limits (``accounts.login_limits``) to Django's log-in signals."""
        from django.contrib.auth.signals import user_logged_in, user_login_failed

        from accounts import login_limits
        from accounts.notifications import submission_finished_notify
        from submissions.signals import submission_closed

        submission_closed.connect(
            submission_finished_notify, dispatch_uid="accounts.submission_finished_notify"
        )
        user_login_failed.connect(
            login_limits.on_login_failed, dispatch_uid="accounts.login_failed"
        )
        user_logged_in.connect(login_limits.on_logged_in, dispatch_uid="accounts.logged_in")
