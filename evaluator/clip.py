"""Bounded, storable JSON: what the engine keeps of agent-influenced data.

Verdict details and transcripts carry text and values an agent chose. Before they are stored
(result files, the site's PostgreSQL ``jsonb`` columns) they pass through :func:`clip_json`
and :func:`clip_text`, which bound their size and make them acceptable to PostgreSQL:

* strings longer than ``max_chars`` are cut (with a note of how much was cut); NUL characters
  (refused by PostgreSQL ``text`` and ``jsonb``) and lone surrogates (not UTF-8) are replaced
  by U+FFFD;
* non-finite floats (``NaN``, ``Infinity``, refused by PostgreSQL's JSON) become the strings
  ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
* containers deeper than ``max_depth`` become ``"[clipped: nested deeper than N]"``; lists and
  dicts keep their first ``max_items`` entries; dict keys become strings; any other type
  becomes its ``repr`` (clipped);
* if the result still encodes to more than ``max_bytes`` of JSON, it is replaced by
  ``{"clipped": true, "bytes": <encoded size>, "preview": <first bytes of the encoding>}``.

The documented sizes are in ``docs/result-format.md`` and ``docs/security.md``.
"""

from __future__ import annotations

import json
import math
from typing import Any

#: Longest verdict ``details`` (bytes of compact JSON) kept per episode.
DETAILS_MAX_BYTES = 64 * 1024
#: Longest ``info`` object (bytes of compact JSON) kept per transcript entry.
INFO_MAX_BYTES = 16 * 1024
#: Longest string kept inside details / info values (characters).
VALUE_MAX_CHARS = 4_000
#: Deepest nesting kept inside details / info (containers).
MAX_DEPTH = 16
#: Most list items / dict entries kept per container.
MAX_ITEMS = 200

_REPLACEMENT = "\ufffd"


def storable_text(text: str) -> str:
    """Return ``text`` with NULs and lone surrogates replaced by U+FFFD (PostgreSQL-safe)."""
    if "\x00" in text:
        text = text.replace("\x00", _REPLACEMENT)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def clip_text(text: str, max_chars: int) -> str:
    """Return ``text`` cut to ``max_chars`` characters (plus a note) and made storable."""
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n[... {len(text) - max_chars} characters cut]"
    return storable_text(text)


def _clip(value: Any, depth: int, max_depth: int, max_items: int, max_chars: int) -> Any:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, str):
        return clip_text(value, max_chars)
    if isinstance(value, list | tuple | set | frozenset | dict):
        if depth >= max_depth:
            return f"[clipped: nested deeper than {max_depth}]"
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for count, (key, item) in enumerate(value.items()):
                if count >= max_items:
                    out["[clipped]"] = f"{len(value) - max_items} more entries"
                    break
                text_key = key if isinstance(key, str) else repr(key)
                out[clip_text(text_key, max_chars)] = _clip(
                    item, depth + 1, max_depth, max_items, max_chars
                )
            return out
        items = list(value) if not isinstance(value, list) else value
        clipped = [
            _clip(item, depth + 1, max_depth, max_items, max_chars) for item in items[:max_items]
        ]
        if len(items) > max_items:
            clipped.append(f"[clipped: {len(items) - max_items} more items]")
        return clipped
    return clip_text(repr(value), max_chars)


def clip_json(
    value: Any,
    *,
    max_bytes: int = DETAILS_MAX_BYTES,
    max_depth: int = MAX_DEPTH,
    max_items: int = MAX_ITEMS,
    max_chars: int = VALUE_MAX_CHARS,
) -> Any:
    """Return a bounded, PostgreSQL-storable copy of ``value`` (see the module docstring).

    Never raises for any input (cycles are cut by the depth limit; unknown types become their
    ``repr``, and a failing ``repr`` becomes its exception's type name). The JSON of the
    result is at most ``max_bytes`` bytes (an oversized value becomes the ``clipped``
    envelope whose preview is cut until the whole envelope fits).
    """
    try:
        bounded = _clip(value, 0, max_depth, max_items, max_chars)
    except Exception as exc:  # noqa: BLE001 - a hostile __repr__ / __iter__ must not escape
        bounded = f"[unrepresentable: {type(exc).__name__}]"
    encoded = json.dumps(bounded, separators=(",", ":"), allow_nan=False)
    size = len(encoded.encode("utf-8"))
    if size <= max_bytes:
        return bounded
    preview_chars = max_bytes // 2
    while True:  # the preview is re-escaped inside the envelope: shrink until it fits
        envelope = {"clipped": True, "bytes": size, "preview": encoded[:preview_chars]}
        if preview_chars == 0 or len(json.dumps(envelope).encode("utf-8")) <= max_bytes:
            return envelope
        preview_chars //= 2
