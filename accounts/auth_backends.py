"""The authentication backend that enforces the log-in limits (``accounts.login_limits``).

Listed first in ``AUTHENTICATION_BACKENDS``, before Django's ``ModelBackend``: for a client
over a limit it raises ``PermissionDenied``, which makes ``django.contrib.auth.authenticate``
stop without checking the password (the site's log-in page, the admin's and the API's token
endpoint alike); otherwise it steps aside. It never authenticates anyone and has no
``get_user``, so sessions (and the test client's ``force_login``) keep ``ModelBackend``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied

from accounts import login_limits


class LoginLimitBackend:
    """Refuse log-ins over the limits; never authenticates."""

    def authenticate(self, request: Any, username: str | None = None, **_: Any) -> None:
        """Raise ``PermissionDenied`` when ``login_limits.login_refused``; else None.

        Raises:
            PermissionDenied: too many failed log-ins from this client (for this user name).
        """
        if request is not None and login_limits.login_refused(request, username or ""):
            raise PermissionDenied("too many failed log-ins")
        return None
