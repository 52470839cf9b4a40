"""Liveness before everything else."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from ops.views import healthz


class LivenessMiddleware:
    """Answer ``GET /healthz`` before any other middleware: no host validation, no HTTPS
    redirect, no session or database. A container runtime's health probe comes over plain
    HTTP with whatever ``Host`` it likes (docker-compose.yml), and a liveness answer must not
    depend on the settings being right for public traffic."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path == "/healthz" and request.method in ("GET", "HEAD"):
            return healthz(request)
        return self.get_response(request)
