"""The REST API's one mapping of service errors (settings ``REST_FRAMEWORK["EXCEPTION_HANDLER"]``).

A view lets a :class:`submissions.errors.ServiceError` (the root of every rule a service
refuses, the team rules of ``accounts.services`` included) propagate; this handler answers it
as ``{"detail": str(error), "code": error.code}`` with the error's HTTP status. Anything else
goes to DRF's own handler (validation errors, authentication, throttling, 404).
"""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler

from submissions.errors import ServiceError


def service_error_response(exc: ServiceError) -> Response:
    """``{"detail", "code"}`` of a service error with its HTTP status (400/403/404/409/429)."""
    return Response({"detail": str(exc), "code": exc.code}, status=exc.http_status)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's exception handler, with service errors mapped by :func:`service_error_response`."""
    if isinstance(exc, ServiceError):
        return service_error_response(exc)
    return exception_handler(exc, context)
