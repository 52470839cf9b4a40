"""The rules an agent's endpoint obeys and the clients that call it.

Which networks an endpoint may live on, the URL and port check applied at registration, at
every edit and by the pre-flight, and the protocol client an episode or a probe uses; all of
them pass the outbound guard (docs/architecture.md §6, docs/security.md).
"""

from __future__ import annotations

import logging

from django.conf import settings

from evaluator.agents import LOOPBACK_NETWORKS, make_client
from evaluator.agents.base import AgentClient
from evaluator.agents.guard import OutboundGuard, RefusedAddressError, ResolveError
from evaluator.agents.preflight_checks import PreflightTarget
from submissions.agent_auth import auth_options
from submissions.errors import EndpointRefusedError
from submissions.models import Agent

logger = logging.getLogger(__name__)

#: What a refused registration says (the guard's detail is logged, never shown).
ENDPOINT_REFUSED_MESSAGE = (
    "endpoint refused: it must be a public http(s) address on an allowed port "
    "(see the documentation of agent endpoints)"
)


def agent_allowed_networks(*, reference: bool) -> list[str]:
    """The non-public networks an agent's endpoint may live on (CIDR strings).

    Public addresses are always allowed. Only the project's reference agents (served on
    loopback by the project itself) may use ``LOOPBACK_NETWORKS`` and ``AGENT_ALLOWED_NETWORKS``
    (``NETARENA_AGENT_ALLOWED_NETWORKS``); a team's agent gets no private network at all
    unless the operator lists some in ``TEAM_AGENT_NETWORKS``
    (``NETARENA_TEAM_AGENT_NETWORKS``: the single-machine demo, a closed lab).
    """
    if not reference:
        return list(settings.NETARENA.get("TEAM_AGENT_NETWORKS", []))
    return list(settings.NETARENA["AGENT_ALLOWED_NETWORKS"]) + list(LOOPBACK_NETWORKS)


def agent_allowed_ports(*, reference: bool) -> frozenset[int] | None:
    """The TCP ports an agent's client may call: ``AGENT_PORTS`` (``NETARENA_AGENT_PORTS``)
    for a team's agent, any (None) for the project's reference agents (free loopback ports).

    The guard of the agent's client applies it to every request, so an A2A agent card cannot
    name a JSON-RPC endpoint on a port the registered URL could not use.
    """
    return None if reference else frozenset(settings.NETARENA["AGENT_PORTS"])


def agent_endpoint_check(*, endpoint_url: str, reference: bool = False) -> None:
    """Check an agent endpoint with the outbound guard and the port rule before it is stored.

    A team's agent must use one of ``AGENT_PORTS`` (``NETARENA_AGENT_PORTS``, default 80, 443,
    8000, 8080, 8443; docs/security.md); reference agents listen on free loopback ports.
    The guard's full explanation (what the host resolved to, the allow-list) is logged; the
    error shown to the user is generic so that it reveals nothing about the server's network.

    Raises:
        EndpointRefusedError: bad URL, a port outside the set, an unresolvable host or a
            refused address.
    """
    guard = OutboundGuard(
        agent_allowed_networks(reference=reference),
        allowed_ports=agent_allowed_ports(reference=reference),
    )
    try:
        guard.check_url(endpoint_url)  # scheme, host, port, then every resolved address
    except (RefusedAddressError, ResolveError, ValueError) as exc:
        logger.warning("agent endpoint %r refused: %s", endpoint_url[:200], exc)
        raise EndpointRefusedError(ENDPOINT_REFUSED_MESSAGE) from None


def agent_client_build(*, agent: Agent) -> AgentClient:
    """Build the protocol client of ``agent`` (decrypting its key; loopback and any port only
    for references), with the per-reply deadline ``AGENT_TIMEOUT_S`` (seconds).

    Raises:
        ValueError: the endpoint URL or protocol is malformed.
    """
    allowed = agent_allowed_networks(reference=agent.is_reference)
    return make_client(
        agent.protocol,
        agent.endpoint_url,
        **auth_options(agent),  # key as Bearer or under the agent's auth header
        model=agent.model_name or None,
        timeout_s=settings.NETARENA["AGENT_TIMEOUT_S"],
        allowed_networks=allowed,
        allowed_ports=agent_allowed_ports(reference=agent.is_reference),
    )


def agent_preflight_target(*, agent: Agent, timeout_s: float) -> PreflightTarget:
    """``agent``'s endpoint as plain values for the pre-flight probes
    (``evaluator.agents.preflight_checks``): its URL, protocol, model, decrypted key (as Bearer or
    under its auth header), allowed networks, the probe deadline ``timeout_s`` and the
    per-reply deadline ``AGENT_TIMEOUT_S`` (seconds); its client equals
    :func:`agent_client_build`'s."""
    auth = auth_options(agent)
    return PreflightTarget(
        url=agent.endpoint_url,
        protocol=agent.protocol,
        model_name=agent.model_name,
        api_key=auth.get("api_key"),
        auth_headers=dict(auth.get("headers") or {}),
        allowed_networks=tuple(agent_allowed_networks(reference=agent.is_reference)),
        timeout_s=timeout_s,
        reply_timeout_s=float(settings.NETARENA["AGENT_TIMEOUT_S"]),
        allowed_ports=agent_allowed_ports(reference=agent.is_reference),
    )
