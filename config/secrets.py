"""Start-up check: production never runs on the development keys.

Without ``DJANGO_SECRET_KEY`` the settings fall back to :data:`DEVELOPMENT_SECRET_KEY`, and
without ``NETARENA_SECRET_ENCRYPTION_KEY`` the key that encrypts agents' API keys is derived
from ``SECRET_KEY`` (``submissions/crypto.py``): with both unset, anyone holding a copy of the
database could decrypt every stored key. A site counts as production when ``DEBUG`` is off
and it serves a host name other than the local ones (``DJANGO_ALLOWED_HOSTS``); local runs,
tests and the demo keep working with the development keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.core.exceptions import ImproperlyConfigured

#: The public, well-known key of local runs (never valid in production).
DEVELOPMENT_SECRET_KEY = "netarena-local-development-key-not-for-production"  # noqa: S105

#: Host names that mean "this machine only" (Django's test client uses ``testserver``).
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]", "::1", "testserver"})


def is_production(*, debug: bool, allowed_hosts: Sequence[str]) -> bool:
    """True when DEBUG is off and the site answers for any non-local host (``*`` included)."""
    return not debug and any(host not in LOCAL_HOSTS for host in allowed_hosts)


def production_secrets_problems(
    *, debug: bool, allowed_hosts: Sequence[str], environ: Mapping[str, str]
) -> list[str]:
    """The missing or development-only secrets of a production configuration (empty if fine)."""
    if not is_production(debug=debug, allowed_hosts=allowed_hosts):
        return []
    problems = []
    secret_key = environ.get("DJANGO_SECRET_KEY", "")
    if not secret_key or secret_key == DEVELOPMENT_SECRET_KEY or len(secret_key) < 32:
        problems.append("DJANGO_SECRET_KEY must be set to a random value of 32 characters or more")
    if not environ.get("NETARENA_SECRET_ENCRYPTION_KEY"):
        problems.append("NETARENA_SECRET_ENCRYPTION_KEY must be set to a Fernet key")
    if len(environ.get("NETARENA_QUERY_ID_KEY", "")) < 32:
        # without it every process keys public query ids differently (evaluator.types)
        problems.append(
            "NETARENA_QUERY_ID_KEY must be set to a random value of 32 characters or more"
        )
    return problems


def production_secrets_check(
    *, debug: bool, allowed_hosts: Sequence[str], environ: Mapping[str, str]
) -> None:
    """Refuse to start a production configuration without real secrets.

    Raises:
        ImproperlyConfigured: naming each missing secret (never printing a value).
    """
    problems = production_secrets_problems(
        debug=debug, allowed_hosts=allowed_hosts, environ=environ
    )
    if problems:
        raise ImproperlyConfigured(
            "refusing to start in production (DEBUG off, DJANGO_ALLOWED_HOSTS "
            f"{list(allowed_hosts)}): " + "; ".join(problems)
        )
