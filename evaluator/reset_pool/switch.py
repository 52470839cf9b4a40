"""The switch of an app's reset pool: ``NETARENA_<APP>_POOL=<n>`` idle environments per key."""

from __future__ import annotations

import os


def pool_size(app_id: str, *, on_by_default: bool, size: int) -> int:
    """Idle environments per key from ``NETARENA_<APP_ID>_POOL`` (upper case).

    A number ``n`` >= 0 is the size (``0``: off); text that is not a number (``off``,
    ``false``) is ``0``; unset or empty: ``size`` when the app declares its pool
    ``on_by_default``, else ``0``.
    """
    raw = os.environ.get(pool_env(app_id), "").strip()
    if not raw:
        return size if on_by_default else 0
    try:
        return max(0, int(raw))
    except ValueError:
        return 0


def pool_env(app_id: str) -> str:
    """The switch variable of an app's pool: ``NETARENA_<APP_ID>_POOL``."""
    return f"NETARENA_{app_id.upper()}_POOL"
