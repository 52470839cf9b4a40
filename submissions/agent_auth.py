"""How an agent's secret is sent: ``Authorization: Bearer <key>`` by default, or the raw key
under a header name the team chose (e.g. ``X-API-Key``), for gateways that want one.

The header name is a token of RFC 9110 §5.1 (letters, digits and ``!#$%&'*+-.^_`|~``); names
the HTTP machinery or the evaluator set themselves are refused.
"""

from __future__ import annotations

import re
from typing import Any

from submissions.crypto import decrypt_secret

#: RFC 9110 §5.6.2 token, at most 100 characters.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,100}$")
#: Header names a team may not use for its key (lower case).
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "accept",
        "accept-encoding",
        "user-agent",
        "x-netarena-episode",
    }
)


def auth_header_problem(name: str) -> str | None:
    """Why ``name`` cannot carry an agent's key, or ``None`` (empty means the default)."""
    if not name:
        return None
    if not _TOKEN.match(name):
        return "the auth header name must be one HTTP header name (letters, digits, - and _)"
    if name.lower() in RESERVED_HEADERS:
        return f"{name} cannot carry the key; use Authorization or a header such as X-API-Key"
    return None


def auth_options(agent: Any) -> dict[str, Any]:
    """``make_client`` keyword arguments sending ``agent``'s decrypted key: ``api_key`` (as
    ``Authorization: Bearer``) without a custom header name, else ``headers={name: key}``."""
    key = decrypt_secret(agent.secret_encrypted)
    name = agent.auth_header
    if not key or not name or name.lower() == "authorization":
        return {"api_key": key}
    return {"api_key": None, "headers": {name: key}}
