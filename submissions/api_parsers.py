"""REST framework parsers with bounds on what a client can make the server do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, but a body nested too deeply is a 400, not a 500.

    Python's ``json`` decoder recurses once per nesting level and raises ``RecursionError``
    at about 1,000 levels, which DRF does not catch.
    """

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        """Parse like ``JSONParser``; ``RecursionError`` becomes ``ParseError`` (400)."""
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply") from None
