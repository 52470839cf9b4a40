"""What the services do to a value before it goes into a database column (text or JSON)."""

from __future__ import annotations

import math
from typing import Any

#: Deepest nesting of a stored JSON value; deeper parts are replaced by a marker.
STORED_JSON_MAX_DEPTH = 64


def storable(value: Any, *, depth: int = 0) -> Any:
    """Return ``value`` made storable in every supported database.

    PostgreSQL refuses NUL in ``text`` and ``\\u0000`` in ``jsonb``, lone UTF-16 surrogates in
    both, and NaN/Infinity in JSON. Strings lose NUL (replaced by U+FFFD) and lone
    surrogates (replaced by ``?``); non-finite floats become their ``repr`` string; tuples
    become lists; any other non-JSON value becomes its ``str``; nesting deeper than
    :data:`STORED_JSON_MAX_DEPTH` is replaced by ``"<clipped: too deep>"``.
    """
    if depth > STORED_JSON_MAX_DEPTH:
        return "<clipped: too deep>"
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        cleaned = value.replace("\x00", "\ufffd")
        return cleaned.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {
            storable(str(k), depth=depth + 1): storable(v, depth=depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [storable(v, depth=depth + 1) for v in value]
    return storable(str(value), depth=depth + 1)
