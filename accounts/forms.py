"""Forms of the account pages."""

from __future__ import annotations

from django import forms
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.models import User


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
