"""Agents: register, create, update, the header that carries the key.

:func:`agent_register` is what a team does, from the registration page or
``POST /api/v1/agents/``: it creates the agent under every rule of :func:`agent_create`, sets
the header its key travels in and starts its pre-flight, in one transaction. The forms and
serializers mirror some rules to show field errors; these services are the authority, so the
admin, reference agents and commands obey them too. Every refusal raises a typed error from
``submissions.errors``. The endpoint rules themselves (allowed networks, the URL and port
check, the protocol client) are ``submissions.services.endpoints``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import transaction

from evaluator.agents import PROTOCOLS
from evaluator.registry import app_ids
from submissions.agent_auth import auth_header_problem
from submissions.crypto import encrypt_secret
from submissions.errors import AgentLimitError, DuplicateAgentError, InvalidInputError
from submissions.models import Agent, AgentPreflight, Team
from submissions.services.endpoints import agent_endpoint_check
from submissions.services.preflight import preflight_start
from submissions.services.teams import team_member_check

REFERENCE_KINDS = ("oracle", "null", "heuristic", "scripted", "llm")
#: An agent's name: a letter or digit, then up to 99 letters, digits, ``.``, ``_`` or ``-``
#: (the registration form and the API serializer mirror it).
AGENT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
#: Longest endpoint URL, model name and API key stored, in characters (the ``Agent`` columns;
#: the key's bound caps what is encrypted; mirrored by the registration form and the API
#: serializer).
ENDPOINT_URL_MAX_CHARS = 500
MODEL_NAME_MAX_CHARS = 200
API_KEY_MAX_CHARS = 4096


def agent_create(
    *,
    team: Team,
    name: str,
    endpoint_url: str,
    protocol: str,
    model_name: str = "",
    api_key: str = "",
    reference_kind: str = "",
    apps: Sequence[str] = (),
    actor: Any = None,
) -> Agent:
    """Store an agent endpoint (no pre-flight); the API key is encrypted before it is stored.

    Teams register through :func:`agent_register`; reference agents and admin commands call
    this directly.

    Args:
        actor: the user acting (API, pages); when given they must be a member of ``team``.
            Internal callers (reference agents, admin commands) pass ``None``.

    Raises:
        NotTeamMemberError: ``actor`` is not a member of ``team``.
        InvalidInputError: unknown protocol, reference kind or app.
        DuplicateAgentError: the team already has an agent of that name.
        AgentLimitError: the team has ``AGENTS_PER_TEAM`` agents already (reference agents
            are exempt).
        EndpointRefusedError: the outbound guard or the port rule refuses the endpoint.
    """
    if actor is not None:
        team_member_check(team=team, user=actor)
    if protocol not in PROTOCOLS:
        raise InvalidInputError(f"unknown protocol {protocol!r}")
    if reference_kind and reference_kind not in REFERENCE_KINDS:
        raise InvalidInputError(f"unknown reference kind {reference_kind!r}")
    unknown_apps = [a for a in apps if a not in app_ids()]
    if unknown_apps:
        raise InvalidInputError(f"unknown apps {unknown_apps}; known: {app_ids()}")
    agent_endpoint_check(endpoint_url=endpoint_url, reference=bool(reference_kind))
    with transaction.atomic():
        # The team row lock serialises concurrent registrations of one team (cap and names).
        Team.objects.select_for_update().filter(pk=team.pk).first()
        if Agent.objects.filter(team=team, name=name).exists():
            raise DuplicateAgentError("this team already has an agent of that name")
        cap = settings.NETARENA["AGENTS_PER_TEAM"]
        if not reference_kind and Agent.objects.filter(team=team).count() >= cap:
            raise AgentLimitError(f"a team may register at most {cap} agents")
        return Agent.objects.create(
            team=team,
            name=name,
            endpoint_url=endpoint_url,
            protocol=protocol,
            model_name=model_name,
            secret_encrypted=encrypt_secret(api_key),
            reference_kind=reference_kind,
            apps=list(apps),
        )


def _registration_fields_check(
    *, name: str, endpoint_url: str, model_name: str, api_key: str
) -> None:
    """The shape rules of a team's registration: the name pattern, the URL, model name and
    key lengths (:data:`AGENT_NAME_PATTERN`, :data:`ENDPOINT_URL_MAX_CHARS`,
    :data:`MODEL_NAME_MAX_CHARS`, :data:`API_KEY_MAX_CHARS`).

    Raises:
        InvalidInputError: a rule is broken.
    """
    if not re.fullmatch(AGENT_NAME_PATTERN, name):
        raise InvalidInputError(
            "an agent name is a letter or digit followed by at most 99 letters, digits, "
            "'.', '_' or '-'"
        )
    limits = (
        ("endpoint URL", endpoint_url, ENDPOINT_URL_MAX_CHARS),
        ("model name", model_name, MODEL_NAME_MAX_CHARS),
        ("API key", api_key, API_KEY_MAX_CHARS),
    )
    for what, value, limit in limits:
        if len(value) > limit:
            raise InvalidInputError(f"the {what} is longer than {limit} characters")


def agent_register(
    *,
    team: Team,
    actor: Any,
    name: str,
    endpoint_url: str,
    protocol: str,
    model_name: str = "",
    api_key: str = "",
    auth_header: str = "",
    apps: Sequence[str] = (),
) -> tuple[Agent, AgentPreflight]:
    """Register a team's agent and start its pre-flight (the page and the API both call this).

    In one transaction: the rules of :func:`agent_create` (membership, protocol, apps, the
    outbound guard, unique name, ``AGENTS_PER_TEAM``), the name pattern and lengths, the auth
    header name (``submissions.agent_auth``), then a ``running`` pre-flight queued on commit.
    A refusal stores nothing.

    Returns:
        The agent and its pre-flight.

    Raises:
        NotTeamMemberError, InvalidInputError, DuplicateAgentError, AgentLimitError,
        EndpointRefusedError: see :func:`agent_create`; ``InvalidInputError`` also for a
            name, URL or key that breaks :func:`_registration_fields_check` or an unusable
            auth header name.
    """
    team_member_check(team=team, user=actor)
    _registration_fields_check(
        name=name, endpoint_url=endpoint_url, model_name=model_name, api_key=api_key
    )
    auth_header = auth_header.strip()
    problem = auth_header_problem(auth_header)
    if problem:
        raise InvalidInputError(problem)
    with transaction.atomic():
        agent = agent_create(
            team=team,
            name=name,
            endpoint_url=endpoint_url,
            protocol=protocol,
            model_name=model_name,
            api_key=api_key,
            apps=apps,
            actor=actor,
        )
        agent_auth_header_set(agent=agent, name=auth_header)
        preflight = preflight_start(agent=agent, actor=actor)  # runs on commit
    return agent, preflight


def agent_auth_header_set(*, agent: Agent, name: str) -> None:
    """Set the header that carries ``agent``'s key ("" = ``Authorization: Bearer``).

    Raises:
        InvalidInputError: not a usable header name (``submissions.agent_auth``).
    """
    name = name.strip()
    problem = auth_header_problem(name)
    if problem:
        raise InvalidInputError(problem)
    if agent.auth_header != name:
        agent.auth_header = name
        agent.save(update_fields=["auth_header"])


def agent_update(
    *,
    agent: Agent,
    actor: Any,
    endpoint_url: str,
    model_name: str,
    api_key: str = "",
    auth_header: str | None = None,
) -> AgentPreflight:
    """Change an agent's endpoint and model (and its secret when ``api_key`` is not empty:
    replace only; its auth header name when ``auth_header`` is not None) and start a new
    pre-flight.

    Raises:
        InvalidInputError: ``auth_header`` is not a usable header name.
        NotTeamMemberError: ``actor`` is not a member of the agent's team.
        EndpointRefusedError: the outbound guard or the port rule refuses the new URL.
    """
    team_member_check(team=agent.team, user=actor)
    agent_endpoint_check(endpoint_url=endpoint_url, reference=agent.is_reference)
    with transaction.atomic():
        agent.endpoint_url = endpoint_url
        agent.model_name = model_name
        fields = ["endpoint_url", "model_name"]
        if api_key:
            agent.secret_encrypted = encrypt_secret(api_key)
            fields.append("secret_encrypted")
        agent.save(update_fields=fields)
        if auth_header is not None:
            agent_auth_header_set(agent=agent, name=auth_header)
        return preflight_start(agent=agent, actor=actor)
