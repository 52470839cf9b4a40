"""What the site's POST buttons share: call one service and tell the user how it went.

The buttons (cancel a submission, run an agent's pre-flight again, edit an agent, close a
round, remove a team member) each call one service function, which enforces every rule and
raises a typed error when it refuses (a ``submissions.errors.ServiceError``, the one root of
every service error, ``accounts.services.TeamError`` among them); the view shows that error's
user-facing text, or a success note, on the page it redirects to.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest

from submissions.errors import ServiceError


def flash_service_call(
    request: HttpRequest,
    call: Callable[[], object],
    *,
    success: str,
    errors: tuple[type[Exception], ...] = (ServiceError,),
) -> bool:
    """Run ``call`` (a service function bound to its arguments) and flash its outcome.

    When ``call`` raises one of ``errors`` (a rule the service refused the request for), its
    message (``str(error)``, user-facing by the services' contract) is flashed as an error;
    otherwise ``success`` is flashed. Any other exception propagates: it is a fault, not a
    refusal, and must not be shown as a message.

    Returns:
        True when ``call`` returned, False when it was refused.
    """
    try:
        call()
    except errors as error:
        messages.error(request, str(error))
        return False
    messages.success(request, success)
    return True
