"""Limits on guessing passwords and on password-reset e-mail (docs/security.md).

Failed log-ins are counted in Django's cache (shared by the web processes when
``NETARENA_CACHE_URL`` names a Redis database), in fixed windows of ``LOGIN_FAILURE_WINDOW_S``
seconds, per user name and client address (``LOGIN_FAILURES_MAX``) and per client address
(``LOGIN_FAILURES_PER_CLIENT_MAX``). Once either count is reached every further attempt is
refused, even with the right password, until the window ends: on the log-in page with a
message saying so, on the admin's and through ``POST /api/v1/token/`` as a failed log-in
(:class:`accounts.auth_backends.LoginLimitBackend` refuses before any password is checked).
A successful log-in clears its user name's count at that address. There is no count per user
name alone, so that nobody can lock another person out from elsewhere.

Password-reset e-mails are capped per e-mail address (``PASSWORD_RESETS_PER_EMAIL``) and per
client address (``PASSWORD_RESETS_PER_CLIENT``) in windows of ``PASSWORD_RESET_WINDOW_S``;
over a cap the form answers as usual and no e-mail is sent (the page must not tell whether an
address has an account).

The client address is ``REMOTE_ADDR``, or behind ``CLIENT_PROXY_HOPS`` trusted proxies the
address the nearest of them saw (that many entries from the right of ``X-Forwarded-For``).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

logger = logging.getLogger(__name__)

#: Defaults of the ``NETARENA`` settings read here.
DEFAULTS = {
    "LOGIN_FAILURES_MAX": 5,
    "LOGIN_FAILURES_PER_CLIENT_MAX": 20,
    "LOGIN_FAILURE_WINDOW_S": 900,
    "PASSWORD_RESETS_PER_EMAIL": 3,
    "PASSWORD_RESETS_PER_CLIENT": 10,
    "PASSWORD_RESET_WINDOW_S": 3600,
    "CLIENT_PROXY_HOPS": 0,
}


def _setting(name: str) -> int:
    return int(settings.NETARENA.get(name, DEFAULTS[name]))


def login_refused_message() -> str:
    """What the log-in page says to a refused attempt."""
    minutes = max(1, round(_setting("LOGIN_FAILURE_WINDOW_S") / 60))
    return (
        "Too many failed log-ins from your address: log-in is blocked for up to "
        f"{minutes} minutes. If you forgot your password, reset it."
    )


def client_address(request: Any) -> str:
    """The client's IP address (see the module docstring); "" when unknown."""
    meta = getattr(request, "META", {}) or {}
    hops = _setting("CLIENT_PROXY_HOPS")
    if hops > 0:
        forwarded = [a.strip() for a in str(meta.get("HTTP_X_FORWARDED_FOR", "")).split(",")]
        forwarded = [a for a in forwarded if a]
        if len(forwarded) >= hops:
            return forwarded[-hops]
    return str(meta.get("REMOTE_ADDR", ""))


def _key(kind: str, *parts: str) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]
    return f"netarena:limit:{kind}:{digest}"


def _count(key: str) -> int:
    return int(cache.get(key, 0) or 0)


def _hit(key: str, window_s: int) -> int:
    """Add one to ``key``'s count in its window (started by the first hit); the new count."""
    cache.add(key, 0, timeout=window_s)
    try:
        return int(cache.incr(key))
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=window_s)
        return 1


def _login_keys(request: Any, username: str) -> tuple[str, str]:
    address = client_address(request)
    return _key("login", username.strip().lower(), address), _key("login-client", address)


def login_refused(request: Any, username: str) -> bool:
    """True when a log-in as ``username`` from this client must be refused unchecked."""
    pair, client = _login_keys(request, username or "")
    return _count(pair) >= _setting("LOGIN_FAILURES_MAX") or _count(client) >= _setting(
        "LOGIN_FAILURES_PER_CLIENT_MAX"
    )


def login_failed(request: Any, username: str) -> None:
    """Count a failed log-in as ``username`` from this client."""
    window_s = _setting("LOGIN_FAILURE_WINDOW_S")
    pair, client = _login_keys(request, username or "")
    if _hit(pair, window_s) == _setting("LOGIN_FAILURES_MAX"):
        logger.warning(
            "log-in blocked for a user name from %s after repeated failures",
            client_address(request),
        )
    _hit(client, window_s)


def login_succeeded(request: Any, username: str) -> None:
    """Forget the failed log-ins of ``username`` from this client (not the client's total)."""
    cache.delete(_login_keys(request, username or "")[0])


def password_reset_allowed(request: HttpRequest | None, email: str) -> bool:
    """Count a password-reset request for ``email`` from this client; False once either cap
    (per e-mail address, per client address) is exceeded in the window."""
    window_s = _setting("PASSWORD_RESET_WINDOW_S")
    by_email = _hit(_key("reset-email", email.strip().lower()), window_s)
    by_client = _hit(_key("reset-client", client_address(request)), window_s)
    allowed = by_email <= _setting("PASSWORD_RESETS_PER_EMAIL") and by_client <= _setting(
        "PASSWORD_RESETS_PER_CLIENT"
    )
    if not allowed:
        address = client_address(request)
        logger.warning("password-reset e-mail not sent: cap reached (client %s)", address)
    return allowed


def on_login_failed(
    sender: Any, credentials: dict[str, Any], request: Any = None, **_: Any
) -> None:
    """``user_login_failed`` receiver: count it (calls without a request are not counted)."""
    if request is not None:
        login_failed(request, str(credentials.get("username") or ""))


def on_logged_in(sender: Any, request: Any, user: Any, **_: Any) -> None:
    """``user_logged_in`` receiver: clear the user name's count at this client."""
    if request is not None:
        login_succeeded(request, user.get_username())
