"""API throttles whose rates are read from settings at each request.

DRF's ``AnonRateThrottle`` and ``UserRateThrottle`` copy ``DEFAULT_THROTTLE_RATES`` once, when
the class is defined, so a changed setting (an environment variable read by a test settings
override) would be ignored; these read ``api_settings`` every time (DRF reloads it when the
``REST_FRAMEWORK`` setting changes). Rates: ``NETARENA_API_ANON_RATE`` (per client IP),
``NETARENA_API_USER_RATE`` (per user); the counters live in Django's cache.
"""

from __future__ import annotations

from typing import Any

from rest_framework import throttling
from rest_framework.settings import api_settings


def _rate(scope: Any) -> str | None:
    rates: dict[str, Any] = api_settings.DEFAULT_THROTTLE_RATES
    rate = rates.get(str(scope))
    return None if rate is None else str(rate)


class AnonRateThrottle(throttling.AnonRateThrottle):
    """Anonymous callers, per client IP (scope ``anon``)."""

    def get_rate(self) -> str | None:
        """The current ``anon`` rate, e.g. ``"120/min"`` (None: unthrottled)."""
        return _rate(self.scope)


class UserRateThrottle(throttling.UserRateThrottle):
    """Authenticated callers, per user; anonymous ones per IP (scope ``user``)."""

    def get_rate(self) -> str | None:
        """The current ``user`` rate, e.g. ``"1200/min"`` (None: unthrottled)."""
        return _rate(self.scope)
