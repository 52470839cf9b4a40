"""Leaderboard views (thin: data comes from selectors)."""

from django.http import HttpRequest, HttpResponse


def leaderboard_page(request: HttpRequest) -> HttpResponse:
    """Render the leaderboard."""
    return HttpResponse("NetArena Leaderboard")
