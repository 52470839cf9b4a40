"""Forms of the leaderboard pages (the round form for staff)."""

from __future__ import annotations

from typing import Any

from django import forms

from evaluator.registry import app_ids, get_app
from submissions.services.submissions import ROUND_QUERIES_PER_APP_MAX


def _app_choices() -> list[tuple[str, str]]:
    return [(app_id, f"{app_id}: {get_app(app_id).title}") for app_id in app_ids()]


class RoundForm(forms.Form):
    """Apps (all registered by default), queries per app and whether spent packs are forced,
    for a new round."""

    apps = forms.MultipleChoiceField(choices=_app_choices, widget=forms.CheckboxSelectMultiple)
    queries_per_app = forms.IntegerField(
        min_value=1, max_value=ROUND_QUERIES_PER_APP_MAX, initial=30
    )  # mirrors the service's rule for field errors
    force_spent = forms.BooleanField(
        required=False,
        label="Also draw from spent held-out packs",
        help_text="Their queries are then not held out (no held-out gap counts them), and the "
        "round's page says so. Leave unticked: configure a fresh pack per app per round.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("initial", {}).setdefault("apps", app_ids())
        super().__init__(*args, **kwargs)
