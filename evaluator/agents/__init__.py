"""Agent clients, one per wire protocol (docs/architecture.md §6), all behind the outbound guard.

Use :func:`make_client` to build the client of a registered agent::

    client = make_client("openai-chat", "https://agent.example.org", model="m", api_key=key)
    reply = client.complete([{"role": "user", "content": prompt}], episode_id=token)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from evaluator.agents.a2a import A2AClient
from evaluator.agents.base import AgentClient, AgentError, AgentReply
from evaluator.agents.guard import LOOPBACK_NETWORKS, OutboundGuard, RefusedAddressError
from evaluator.agents.http_json import HttpJsonClient
from evaluator.agents.openai_chat import OpenAIChatClient
from evaluator.agents.openai_tools import OpenAIToolsClient

#: Wire protocols an agent can be registered with.
PROTOCOLS: tuple[str, ...] = ("openai-chat", "http-json", "a2a", "openai-tools")

__all__ = [
    "LOOPBACK_NETWORKS",
    "PROTOCOLS",
    "A2AClient",
    "AgentClient",
    "AgentError",
    "AgentReply",
    "HttpJsonClient",
    "OpenAIChatClient",
    "OpenAIToolsClient",
    "OutboundGuard",
    "RefusedAddressError",
    "make_client",
]


def make_client(
    protocol: str,
    url: str,
    *,
    api_key: str | None = None,
    model: str | None = None,
    timeout_s: float = 60.0,
    allowed_networks: Sequence[str] = (),
    max_response_bytes: int = 1_048_576,
    headers: Mapping[str, str] | None = None,
    allowed_ports: Collection[int] | None = None,
) -> AgentClient:
    """Return the client for an agent endpoint.

    Args:
        protocol: one of :data:`PROTOCOLS`.
        url: endpoint URL (``openai-chat``, ``openai-tools``: the server base; ``http-json``:
            the POST URL; ``a2a``: the agent's base URL, whose agent card names the JSON-RPC
            endpoint).
        api_key: optional secret, sent as ``Authorization: Bearer``.
        model: the ``model`` field for ``openai-chat`` and ``openai-tools`` (ignored by the
            others). An ``openai-tools`` client is used through ``client.for_app(app)``,
            which sends that app's tools.
        timeout_s: total deadline of one reply in seconds (60 s).
        allowed_networks: CIDR allow-list of non-public networks (``LOOPBACK_NETWORKS`` for
            local development and tests); public addresses are always allowed.
        max_response_bytes: response body cap in bytes (1 MiB by default).
        headers: extra request headers on every call (e.g. a key under the header name the
            team registered, instead of ``api_key``'s ``Authorization: Bearer``).
        allowed_ports: the ports every request may use, the registered URL's and the endpoint
            an A2A agent card names alike (a team agent's ``NETARENA_AGENT_PORTS``); None =
            any. A URL on another port is refused like a refused address.

    Raises:
        ValueError: unknown protocol, bad URL scheme/host, bad allow-list or limits.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown agent protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    try:
        OutboundGuard(allowed_ports=allowed_ports).check_syntax(url)
    except RefusedAddressError as exc:
        raise ValueError(str(exc)) from None
    options: dict[str, Any] = {
        "allowed_ports": allowed_ports,
        "api_key": api_key,
        "timeout_s": timeout_s,
        "allowed_networks": allowed_networks,
        "max_response_bytes": max_response_bytes,
        "headers": headers,
    }
    if protocol == "openai-chat":
        return OpenAIChatClient(url, model=model, **options)
    if protocol == "openai-tools":
        return OpenAIToolsClient(url, model=model, **options)
    if protocol == "a2a":
        return A2AClient(url, **options)
    return HttpJsonClient(url, **options)
