"""Forms for registering an agent and submitting it, in the browser.

The forms only shape input; every rule (team membership, the outbound guard, agent limits,
one open submission per agent, the daily quota) is enforced by ``submissions.services``.
"""

from __future__ import annotations

from typing import Any

from django import forms

from evaluator.registry import app_ids
from submissions.agent_auth import auth_header_problem
from submissions.models import Agent, Team

#: Queries per app offered by default on the submit form (the API's default, submissions/apis.py).
DEFAULT_QUERIES_PER_APP = 30


def _app_choices() -> list[tuple[str, str]]:
    return [(app_id, app_id) for app_id in app_ids()]


def _api_key_field(*, label: str, help_text: str) -> forms.CharField:
    """The optional, masked API key field (``Agent`` stores it encrypted, 4096 characters at
    most)."""
    return forms.CharField(
        max_length=4096,
        required=False,
        widget=forms.PasswordInput,
        label=label,
        help_text=help_text,
    )


class _AgentEndpointForm(forms.Form):
    """The fields an agent's owner sets at registration and may change later: endpoint URL,
    model name and the header the key travels in (validated by ``submissions.agent_auth``).
    Subclasses add ``api_key`` through :func:`_api_key_field` with their own wording."""

    endpoint_url = forms.URLField(max_length=500, label="Endpoint URL", assume_scheme="https")
    model_name = forms.CharField(max_length=200, required=False)
    auth_header = forms.CharField(
        max_length=100,
        required=False,
        label="Auth header name",
        help_text="Header that carries the key; empty: Authorization: Bearer &lt;key&gt;.",
    )

    def clean_auth_header(self) -> str:
        """A header name the key may travel in (``submissions.agent_auth``)."""
        name = str(self.cleaned_data.get("auth_header") or "").strip()
        problem = auth_header_problem(name)
        if problem:
            raise forms.ValidationError(problem)
        return name


class AgentForm(_AgentEndpointForm):
    """Name, endpoint URL, protocol, model, optional API key, apps; ``team`` among the user's."""

    field_order = [
        "team",
        "name",
        "endpoint_url",
        "protocol",
        "model_name",
        "api_key",
        "auth_header",
        "apps",
    ]

    team = forms.ModelChoiceField(queryset=Team.objects.none())
    name = forms.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", max_length=100)
    protocol = forms.ChoiceField(choices=Agent.Protocol.choices)
    api_key = _api_key_field(label="API key", help_text="Stored encrypted; never shown again.")
    apps = forms.MultipleChoiceField(
        choices=_app_choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every app.",
    )

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = user.teams.order_by("name")  # type: ignore[attr-defined]


class SubmitForm(forms.Form):
    """An agent of the user's teams, the apps (all by default) and queries per app."""

    agent = forms.ModelChoiceField(queryset=Agent.objects.none())
    apps = forms.MultipleChoiceField(choices=_app_choices, widget=forms.CheckboxSelectMultiple)
    queries_per_app = forms.IntegerField(
        min_value=1, max_value=200, initial=DEFAULT_QUERIES_PER_APP
    )

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        kwargs.setdefault("initial", {}).setdefault("apps", app_ids())
        super().__init__(*args, **kwargs)
        agents = (
            Agent.objects.filter(team__members=user, is_active=True)
            .select_related("team")
            .order_by("team__name", "name")
        )
        self.fields["agent"].queryset = agents  # type: ignore[attr-defined]
        if len(agents) == 1:
            # the only choice is chosen for the user (no blank "---------" to pick past)
            self.fields["agent"].initial = agents[0].pk
            self.fields["agent"].empty_label = None  # type: ignore[attr-defined]


class AgentEditForm(_AgentEndpointForm):
    """Endpoint URL, model name and a replacement API key (empty: keep the stored one)."""

    field_order = ["endpoint_url", "model_name", "api_key", "auth_header"]

    api_key = _api_key_field(
        label="New API key", help_text="Leave empty to keep the stored key; it is never shown."
    )
