"""REST framework parsers with bounds on what a client can make the server do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


def has_lone_surrogate(data: Any) -> bool:
    """True if a string anywhere in ``data`` (parsed JSON: dicts, lists, strings, numbers,
    keys included) holds a lone UTF-16 surrogate (U+D800..U+DFFF), which JSON's ``\\ud800``
    escapes can express but which is not Unicode text: it can be neither stored (PostgreSQL)
    nor written back out as UTF-8. Iterative, so any depth the parser accepted is fine."""
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, but a body nested too deeply or holding a lone surrogate is a 400,
    not a 500.

    Python's ``json`` decoder recurses once per nesting level and raises ``RecursionError``
    at about 1,000 levels, which DRF does not catch. A ``"\\ud800"`` escape decodes to a
    string that cannot be encoded as UTF-8: a field error that quotes it (``"..." is not a
    valid choice``) crashed the JSON renderer, and PostgreSQL refuses to store it.
    """

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        """Parse like ``JSONParser``.

        Raises:
            ParseError: (400) the body is nested too deeply, or a string in it holds a lone
                surrogate (:func:`has_lone_surrogate`); the message never quotes the string.
        """
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply") from None
        if has_lone_surrogate(data):
            raise ParseError(
                "JSON parse error - a string holds a lone UTF-16 surrogate escape "
                "(\\ud800-\\udfff without its pair), which is not Unicode text"
            )
        return data
