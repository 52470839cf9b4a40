"""Forms of the account pages."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm, PasswordResetForm, UserCreationForm
from django.contrib.auth.models import User

from accounts import login_limits


class NotificationForm(forms.Form):
    """The user's e-mail preferences."""

    submission_emails = forms.BooleanField(
        required=False,
        label="E-mail me when a submission of my teams finishes or fails",
        help_text="One e-mail per submission, with the result per app and a link to it.",
    )


class SignUpForm(UserCreationForm):
    """A user name, an e-mail address (needed for password resets) and a password twice.

    Raises a field error (not an exception) when the e-mail address is already taken, so that a
    password reset always reaches exactly one account.
    """

    email = forms.EmailField(required=True, help_text="Used only for password resets.")

    class Meta(UserCreationForm.Meta):
        model = User
        fields = ("username", "email")

    def clean_email(self) -> str:
        """Return the address lower-cased; refuse one that another account already uses."""
        email = self.cleaned_data["email"].strip().lower()
        if User.objects.filter(email__iexact=email).exists():
            raise forms.ValidationError("An account with this e-mail address already exists.")
        return email


class LimitedAuthenticationForm(AuthenticationForm):
    """Django's log-in form that says so when the log-in limits (``accounts.login_limits``)
    block this client; the counting itself happens for every log-in path (the
    ``user_login_failed`` signal, ``accounts.auth_backends.LoginLimitBackend``)."""

    def clean(self) -> dict[str, Any]:
        """Refuse with :func:`~accounts.login_limits.login_refused_message` over a limit, before
        the password is checked; otherwise Django's checks."""
        username = str(self.cleaned_data.get("username") or "")
        if self.request is not None and login_limits.login_refused(self.request, username):
            raise forms.ValidationError(login_limits.login_refused_message(), code="throttled")
        return super().clean()


class LimitedAdminAuthenticationForm(LimitedAuthenticationForm, AdminAuthenticationForm):
    """The admin's log-in form with the same message (``admin.site.login_form``)."""


class LimitedPasswordResetForm(PasswordResetForm):
    """Django's password-reset form that sends no e-mail over the caps of
    ``accounts.login_limits.password_reset_allowed`` (the page answers as usual)."""

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Send the reset e-mail unless this address or client reached its cap (the view
        passes the request as ``request=``)."""
        email = self.cleaned_data["email"]
        if login_limits.password_reset_allowed(kwargs.get("request"), email):
            super().save(*args, **kwargs)
