"""API throttles whose rates are read from settings at each request.

DRF's ``AnonRateThrottle`` and ``UserRateThrottle`` copy ``DEFAULT_THROTTLE_RATES`` once, when
the class is defined, so a changed setting (an environment variable read by a test settings
override) would be ignored; these read ``api_settings`` every time (DRF reloads it when the
``REST_FRAMEWORK`` setting changes). Rates: ``NETARENA_API_ANON_RATE`` (per client IP),
``NETARENA_API_USER_RATE`` (per user); the counters live in Django's cache.
"""

from __future__ import annotations

from rest_framework import throttling
from rest_framework.settings import api_settings


class _RateFromSettings:
    scope: str

    def get_rate(self) -> str | None:
        """The rate of this scope, e.g. ``"120/min"`` (None: unthrottled)."""
        rates: dict[str, str | None] = api_settings.DEFAULT_THROTTLE_RATES
        return rates.get(self.scope)


class AnonRateThrottle(_RateFromSettings, throttling.AnonRateThrottle):
    """Anonymous callers, per client IP (scope ``anon``)."""


class UserRateThrottle(_RateFromSettings, throttling.UserRateThrottle):
    """Authenticated callers, per user; anonymous ones per IP (scope ``user``)."""
