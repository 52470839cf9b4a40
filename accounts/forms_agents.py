"""Forms for registering an agent and submitting it, in the browser.

The forms only shape input and mirror some rules for field errors; every rule (team
membership, the outbound guard, agent limits, the name and lengths, queries per app, one open
submission per agent, the daily quota) is enforced by the services
(``submissions.services.agents.agent_register``, ``submissions.services.submissions``).
"""

from __future__ import annotations

from typing import Any

from django import forms

from evaluator.prompting import DEFAULT_PROMPT_TYPE, PROMPT_TYPES, check_prompt_type
from evaluator.registry import app_ids
from submissions.agent_auth import auth_header_problem
from submissions.models import Agent, Team
from submissions.services.agents import (
    AGENT_NAME_PATTERN,
    API_KEY_MAX_CHARS,
    ENDPOINT_URL_MAX_CHARS,
    MODEL_NAME_MAX_CHARS,
)
from submissions.services.preflight import submittable_apps
from submissions.services.submissions import TEAM_QUERIES_PER_APP_MAX

#: Queries per app offered by default on the submit form (the API's default, submissions/apis.py).
DEFAULT_QUERIES_PER_APP = 30


def _app_choices() -> list[tuple[str, str]]:
    return [(app_id, app_id) for app_id in app_ids()]


def _api_key_field(*, label: str, help_text: str) -> forms.CharField:
    """The optional, masked API key field (``Agent`` stores it encrypted, 4096 characters at
    most)."""
    return forms.CharField(
        max_length=API_KEY_MAX_CHARS,
        required=False,
        widget=forms.PasswordInput,
        label=label,
        help_text=help_text,
    )


class _AgentEndpointForm(forms.Form):
    """The fields an agent's owner sets at registration and may change later: endpoint URL,
    model name and the header the key travels in (validated by ``submissions.agent_auth``).
    Subclasses add ``api_key`` through :func:`_api_key_field` with their own wording."""

    endpoint_url = forms.URLField(
        max_length=ENDPOINT_URL_MAX_CHARS, label="Endpoint URL", assume_scheme="https"
    )
    model_name = forms.CharField(max_length=MODEL_NAME_MAX_CHARS, required=False)
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
    name = forms.RegexField(AGENT_NAME_PATTERN, max_length=100)
    protocol = forms.ChoiceField(choices=Agent.Protocol.choices)
    api_key = _api_key_field(label="API key", help_text="Stored encrypted; never shown again.")
    apps = forms.MultipleChoiceField(
        choices=_app_choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=(
            "The benchmark apps your endpoint answers (each app's page on the board says what "
            "its agent does and replies). Its pre-flight sends one canary prompt per ticked "
            "app, and it can be submitted to the apps whose canary passed. None ticked: every "
            "app (the submit page then offers the apps that passed)."
        ),
    )

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        teams = user.teams.order_by("name")
        self.fields["team"].queryset = teams  # type: ignore[attr-defined]
        if len(teams) == 1:
            # a sole team is chosen for the user (no blank "---------" to pick past)
            self.fields["team"].initial = teams[0].pk
            self.fields["team"].empty_label = None  # type: ignore[attr-defined]


class SubmitForm(forms.Form):
    """An agent of the user's teams, the apps, queries per app and NetArena's prompt type
    (``evaluator.prompting``; only ``zeroshot_base`` submissions are ranked on the boards).

    The apps offered are the chosen agent's
    :func:`~submissions.services.preflight.submittable_apps`
    (after a partial pre-flight exactly the apps whose canary passed), all ticked;
    :attr:`offered` maps every agent's id to its apps for the page's script, which shows the
    chosen agent's apps only.
    """

    agent = forms.ModelChoiceField(queryset=Agent.objects.none())
    apps = forms.MultipleChoiceField(
        choices=_app_choices,
        widget=forms.CheckboxSelectMultiple,
        help_text="The apps this agent's pre-flight cleared.",
    )
    queries_per_app = forms.IntegerField(
        min_value=1, max_value=TEAM_QUERIES_PER_APP_MAX, initial=DEFAULT_QUERIES_PER_APP
    )
    prompt_type = forms.ChoiceField(
        choices=[(p, p) for p in PROMPT_TYPES],
        initial=DEFAULT_PROMPT_TYPE,
        required=False,
        help_text=(
            "How each task is sent (NetArena's prompt types): unchanged, with worked examples "
            "(fewshot), with a step-by-step reasoning instruction (cot), or both. Only "
            f"{DEFAULT_PROMPT_TYPE} submissions are ranked on the boards."
        ),
    )

    def __init__(self, *args: Any, user: Any, agent_id: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        agents = (
            Agent.objects.filter(team__members=user, is_active=True)
            .select_related("team")
            .order_by("team__name", "name")
        )
        self.fields["agent"].queryset = agents  # type: ignore[attr-defined]
        self.offered: dict[int, list[str]] = {a.pk: submittable_apps(agent=a) for a in agents}
        chosen = agent_id if agent_id in self.offered else None
        if len(agents) == 1:
            # the only choice is chosen for the user (no blank "---------" to pick past)
            chosen = agents[0].pk
            self.fields["agent"].empty_label = None  # type: ignore[attr-defined]
        if chosen is not None:
            self.fields["agent"].initial = chosen
        self.fields["apps"].initial = self.offered[chosen] if chosen is not None else app_ids()

    def clean_prompt_type(self) -> str:
        """The chosen prompt type, :data:`~evaluator.prompting.DEFAULT_PROMPT_TYPE` when left
        out (``check_prompt_type``'s message for any other value)."""
        chosen = self.cleaned_data.get("prompt_type") or DEFAULT_PROMPT_TYPE
        try:
            return check_prompt_type(chosen)
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None

    def clean(self) -> dict[str, Any] | None:
        """Refuse apps the chosen agent is not offered (its pre-flight did not clear them)."""
        data = super().clean() or {}
        agent, apps = data.get("agent"), data.get("apps")
        if agent is not None and apps:
            offered = self.offered.get(agent.pk, [])
            refused = [a for a in apps if a not in offered]
            if refused and offered:
                self.add_error(
                    "apps",
                    f"{agent.name} can be submitted to {', '.join(offered)} only; its "
                    f"pre-flight did not clear {', '.join(refused)}.",
                )
        return data


class AgentEditForm(_AgentEndpointForm):
    """Endpoint URL, model name and a replacement API key (empty: keep the stored one)."""

    field_order = ["endpoint_url", "model_name", "api_key", "auth_header"]

    api_key = _api_key_field(
        label="New API key", help_text="Leave empty to keep the stored key; it is never shown."
    )
