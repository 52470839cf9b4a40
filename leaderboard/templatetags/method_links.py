"""``{% method "metrics" "Held-out queries" %}``: the URL of a method page and its anchor."""

from __future__ import annotations

from django import template

from leaderboard.method import method_url

register = template.Library()


@register.simple_tag
def method(slug: str, heading: str = "") -> str:
    """The URL of the method page ``slug`` (``/method/<slug>/``), at the anchor of
    ``heading`` (its text, as written in the document) when given."""
    return method_url(slug, heading)
