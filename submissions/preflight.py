"""Pre-flight check of an agent endpoint (docs/agents.md).

Saving an agent (the registration page, ``POST /api/v1/agents/``, an edit on the agent page)
or the team's "Run pre-flight again" button calls :func:`preflight_start`, which stores a
``running`` :class:`~submissions.models.AgentPreflight` and, once the transaction commits,
sends the Celery task ``submissions.agent_preflight`` (queue ``control``,
``submissions/preflight_tasks.py``). The task calls :func:`preflight_run`, which runs these
checks in order and stores each one's verdict and a message fit for the team:

1. ``guard``: the outbound guard and the port rule accept the URL
   (:func:`submissions.services.agent_endpoint_check`, the rule applied at registration);
2. ``reachable``: a ``GET`` of the endpoint URL gets an HTTP answer within
   ``PREFLIGHT_PROBE_TIMEOUT_S`` (any status; a redirect fails, since agent calls never
   follow redirects);
3. ``protocol``: the endpoint speaks its registered protocol — ``a2a``: the agent card at
   ``/.well-known/agent-card.json`` (or ``/.well-known/agent.json``) names a JSON-RPC endpoint
   the guard accepts; ``openai-chat`` and ``openai-tools``: ``GET {base}/v1/models`` answers
   the OpenAI model list;
   ``http-json``: a ``POST`` of ``{"prompt", "history", "episode_id"}`` answers a JSON object;
4. ``canary:<app>``, one per app the agent takes part in: the app's task prompt of a fixed-seed
   query (:data:`PREFLIGHT_SEED`, the app's lowest level) sent through the same agent client
   as an episode, and the app's reply parser's verdict on the answer
   (:meth:`evaluator.app.App.reply_problem`); on ``openai-tools`` the answer must be one call
   of the app's tools (the client refuses anything else), judged as the reply text it stands
   for;
5. ``latency``: the evaluator's wall clock around the canary replies (slowest and total).

A check that cannot run because an earlier one failed is ``skipped``. The pre-flight passes
when no check failed; it is ``partial`` when the endpoint checks passed and the canaries of
some apps passed while others failed: the agent may then be submitted to the apps whose canary
passed (:func:`preflight_passed_apps`; the submit page offers exactly those,
:func:`submittable_apps`). A failing or unfinished pre-flight, or a partial one asked for an
app whose canary failed, blocks the agent's team submissions (:func:`preflight_gate_check`,
called by ``services._team_submission_rules_check``) before any quota is counted; reference
agents are exempt; an agent without any pre-flight (registered before pre-flights existed, or
by an admin) is not blocked. Nothing an endpoint does (slow,
huge, garbage, redirecting, private address) raises out of :func:`preflight_run`: it becomes a
failed check, and a pre-flight still ``running`` after ``PREFLIGHT_STALE_S`` is closed as
failed when next read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from evaluator.agents import A2AClient, AgentError
from evaluator.agents._http import USER_AGENT, excerpt, public_url
from evaluator.agents.guard import (
    OutboundGuard,
    RefusedAddressError,
    ResolveError,
    address_problem,
)
from evaluator.agents.openai_chat import chat_completions_url
from evaluator.oracle_vault import OracleVault
from evaluator.registry import CONTROL_QUEUE, app_ids, get_app
from evaluator.runner import new_episode_id
from submissions import services
from submissions.agent_auth import auth_header_problem, auth_options
from submissions.crypto import encrypt_secret
from submissions.errors import EndpointRefusedError, InvalidInputError, ServiceError
from submissions.models import Agent, AgentPreflight

logger = logging.getLogger(__name__)

#: Celery task name (``submissions/preflight_tasks.py``).
PREFLIGHT_TASK = "submissions.agent_preflight"
#: Seed of the canary queries: the same canary for every agent and every run.
PREFLIGHT_SEED = 20_261_010
#: Defaults of the ``NETARENA`` settings read here (seconds).
DEFAULT_PROBE_TIMEOUT_S = 10.0
DEFAULT_STALE_S = 900.0
#: Response bytes read by the reachability and protocol probes.
PROBE_MAX_BYTES = 1_048_576
#: Characters of a reply quoted in a check message.
QUOTE_CHARS = 160


class PreflightNotPassedError(ServiceError):
    """The agent's latest pre-flight failed or has not finished: no submission yet."""

    code = "preflight"
    http_status = 409


@dataclass(frozen=True)
class Check:
    """One check's verdict, stored as a dict in ``AgentPreflight.checks``.

    Attributes:
        name: ``guard``, ``reachable``, ``protocol``, ``canary:<app id>`` or ``latency``.
        title: short human title.
        status: ``passed``, ``failed`` or ``skipped``.
        message: what was found, for the team (never the guard's view of internal networks).
        latency_s: seconds of the evaluator's wall clock for this check's request, if any.
    """

    name: str
    title: str
    status: str
    message: str
    latency_s: float | None = None


def _setting(name: str, default: float) -> float:
    return float(settings.NETARENA.get(name, default))


def probe_timeout_s() -> float:
    """Deadline of one reachability or protocol probe (``NETARENA["PREFLIGHT_PROBE_TIMEOUT_S"]``,
    default 10 s)."""
    return _setting("PREFLIGHT_PROBE_TIMEOUT_S", DEFAULT_PROBE_TIMEOUT_S)


def stale_after_s() -> float:
    """Age after which a ``running`` pre-flight counts as failed
    (``NETARENA["PREFLIGHT_STALE_S"]``, default 900 s, above the task's hard time limit)."""
    return _setting("PREFLIGHT_STALE_S", DEFAULT_STALE_S)


# -- starting, reading, gating -------------------------------------------------------------


def _send(preflight_id: int) -> None:
    """Send the task; a broker that is down fails the pre-flight instead of the request."""
    from config.celery import app as celery_app

    try:
        # one connection attempt and one retry (about 2 s), no result subscription: a broker
        # that is down must not hold the page or the API call for long
        with celery_app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1)
            celery_app.send_task(
                PREFLIGHT_TASK,
                args=(preflight_id,),
                queue=CONTROL_QUEUE,
                retry=False,
                ignore_result=True,
                connection=connection,
            )
    except Exception:  # noqa: BLE001 - any broker failure: the team can run it again
        logger.exception("could not queue pre-flight %s", preflight_id)
        _finish(
            preflight_id,
            [
                Check(
                    "queue",
                    "Queued",
                    "failed",
                    "the pre-flight could not be queued (task broker unavailable); run it again",
                )
            ],
        )


def preflight_start(*, agent: Agent, actor: Any = None) -> AgentPreflight:
    """Store a ``running`` pre-flight of ``agent`` and queue it when the transaction commits.

    Args:
        actor: the user asking (pages, API); when given they must be a member of the team.

    Raises:
        NotTeamMemberError: ``actor`` is not a member of the agent's team.
    """
    if actor is not None:
        services.team_member_check(team=agent.team, user=actor)
    preflight = AgentPreflight.objects.create(
        agent=agent,
        endpoint_url=agent.endpoint_url,
        protocol=agent.protocol,
        requested_by=actor if getattr(actor, "is_authenticated", False) else None,
    )
    preflight_id = preflight.pk
    transaction.on_commit(lambda: _send(preflight_id))
    return preflight


def _expire_if_stale(preflight: AgentPreflight) -> AgentPreflight:
    if preflight.status != AgentPreflight.Status.RUNNING:
        return preflight
    age_s = (timezone.now() - preflight.created_at).total_seconds()
    if age_s <= stale_after_s():
        return preflight
    message = (
        f"the pre-flight did not finish within {stale_after_s():g} s (no worker took it, or it "
        "was interrupted); run it again"
    )
    _finish(
        preflight.pk,
        [*_checks_of(preflight), Check("finished", "Finished", "failed", message)],
        only_running=True,
    )
    preflight.refresh_from_db()
    return preflight


def _checks_of(preflight: AgentPreflight) -> list[Check]:
    out = []
    for item in preflight.checks or []:
        with contextlib.suppress(TypeError):
            out.append(Check(**item))
    return out


def preflight_latest(*, agent: Agent) -> AgentPreflight | None:
    """The agent's newest pre-flight (a stale ``running`` one is closed as failed first)."""
    latest = AgentPreflight.objects.filter(agent=agent).order_by("-created_at", "-pk").first()
    return None if latest is None else _expire_if_stale(latest)


def _canary_apps(preflight: AgentPreflight, status: str) -> list[str]:
    """Apps whose canary check has ``status``, in registry order."""
    found = {
        c.name.split(":", 1)[1]
        for c in _checks_of(preflight)
        if c.name.startswith("canary:") and c.status == status
    }
    return [a for a in app_ids() if a in found]


def preflight_passed_apps(preflight: AgentPreflight) -> list[str]:
    """The apps a pre-flight cleared for submission: every app whose canary passed when the
    pre-flight passed or was partial; none otherwise."""
    if preflight.status not in (AgentPreflight.Status.PASSED, AgentPreflight.Status.PARTIAL):
        return []
    return _canary_apps(preflight, "passed")


def preflight_failed_apps(preflight: AgentPreflight) -> list[str]:
    """The apps whose canary failed in ``preflight``, in registry order."""
    return _canary_apps(preflight, "failed")


def agent_apps(agent: Agent) -> list[str]:
    """The apps ``agent`` takes part in: those it was registered for, or every app."""
    return _agent_apps(agent)


def submittable_apps(*, agent: Agent) -> list[str]:
    """The apps the submit page offers for ``agent``: after a partial pre-flight, exactly the
    apps whose canary passed; otherwise the apps it takes part in (a failed or running
    pre-flight is refused by :func:`preflight_gate_check` with its reason)."""
    latest = None if agent.is_reference else preflight_latest(agent=agent)
    if latest is not None and latest.status == AgentPreflight.Status.PARTIAL:
        return preflight_passed_apps(latest)
    return agent_apps(agent)


def preflight_gate_check(*, agent: Agent, apps: list[str] | None = None) -> None:
    """Refuse a team submission of ``agent`` (to ``apps``) unless its latest pre-flight
    passed, or was partial and every app of ``apps`` is one whose canary passed.

    Reference agents are exempt; an agent that never had a pre-flight is not blocked.

    Raises:
        PreflightNotPassedError: the latest pre-flight is running or failed, or partial and
            ``apps`` (None: every app it takes part in) names an app whose canary failed.
    """
    if agent.is_reference:
        return
    latest = preflight_latest(agent=agent)
    if latest is None or latest.status == AgentPreflight.Status.PASSED:
        return
    if latest.status == AgentPreflight.Status.RUNNING:
        raise PreflightNotPassedError(
            "the agent's pre-flight check is still running; submit once it has passed"
        )
    if latest.status == AgentPreflight.Status.PARTIAL:
        passed = preflight_passed_apps(latest)
        refused = [a for a in (agent_apps(agent) if apps is None else apps) if a not in passed]
        if not refused:
            return
        raise PreflightNotPassedError(
            f"the agent's pre-flight passed for {', '.join(passed)} only; its canary prompt "
            f"failed for {', '.join(refused)}: submit it to {', '.join(passed)}, or fix the "
            "endpoint and run the pre-flight again (no quota was used)"
        )
    failed = [c.title for c in _checks_of(latest) if c.status == "failed"]
    raise PreflightNotPassedError(
        "the agent's pre-flight check failed ("
        + (", ".join(failed) or "see the agent page")
        + "); fix the endpoint and run the pre-flight again (no quota was used)"
    )


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
        NotTeamMemberError: ``actor`` is not a member of the agent's team
            (``submissions.errors``).
        EndpointRefusedError: the outbound guard or the port rule refuses the new URL.
    """
    services.team_member_check(team=agent.team, user=actor)
    services.agent_endpoint_check(endpoint_url=endpoint_url, reference=agent.is_reference)
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


# -- running -------------------------------------------------------------------------------


def _verdict(checks: list[Check]) -> str:
    """``passed`` when no check failed; ``partial`` when only canaries failed and at least one
    canary passed; ``failed`` otherwise."""
    if not checks:
        return AgentPreflight.Status.FAILED
    failed = [c for c in checks if c.status == "failed"]
    if not failed:
        return AgentPreflight.Status.PASSED
    canaries_only = all(c.name.startswith("canary:") for c in failed)
    some_passed = any(c.name.startswith("canary:") and c.status == "passed" for c in checks)
    if canaries_only and some_passed:
        return AgentPreflight.Status.PARTIAL
    return AgentPreflight.Status.FAILED


def _finish(preflight_id: int, checks: list[Check], *, only_running: bool = False) -> None:
    latencies = [c.latency_s for c in checks if c.name.startswith("canary:") and c.latency_s]
    rows = AgentPreflight.objects.filter(pk=preflight_id)
    if only_running:
        rows = rows.filter(status=AgentPreflight.Status.RUNNING)
    rows.update(
        status=_verdict(checks),
        checks=services.storable([asdict(c) for c in checks]),
        latency_s=max(latencies) if latencies else None,
        finished_at=timezone.now(),
    )


def _save_progress(preflight_id: int, checks: list[Check]) -> None:
    AgentPreflight.objects.filter(pk=preflight_id, status=AgentPreflight.Status.RUNNING).update(
        checks=services.storable([asdict(c) for c in checks])
    )


def preflight_run(*, preflight_id: int) -> None:
    """Run the checks of a ``running`` pre-flight and store them (see the module docstring).

    Idempotent: a finished pre-flight is left as it is. Never raises for anything the
    endpoint does; an unexpected error closes the pre-flight as failed.
    """
    preflight = AgentPreflight.objects.select_related("agent").filter(pk=preflight_id).first()
    if preflight is None or preflight.status != AgentPreflight.Status.RUNNING:
        return
    AgentPreflight.objects.filter(pk=preflight_id).update(started_at=timezone.now(), checks=[])
    checks: list[Check] = []
    try:
        for check in _run_checks(preflight.agent):
            checks.append(check)
            _save_progress(preflight_id, checks)
    except Exception as exc:  # noqa: BLE001 - the pre-flight must end, whatever happened
        logger.exception("pre-flight %s crashed", preflight_id)
        checks.append(
            Check(
                "internal",
                "Pre-flight",
                "failed",
                f"the pre-flight stopped on an internal error ({type(exc).__name__}); run it again",
            )
        )
    _finish(preflight_id, checks)


def preflight_time_out(*, preflight_id: int, limit_s: float) -> None:
    """Close a pre-flight the task's time limit interrupted as failed."""
    preflight = AgentPreflight.objects.filter(pk=preflight_id).first()
    if preflight is None:
        return
    checks = _checks_of(preflight)
    checks.append(
        Check(
            "finished",
            "Finished",
            "failed",
            f"the pre-flight took longer than {limit_s:g} s in total and was stopped",
        )
    )
    _finish(preflight_id, checks, only_running=True)


def _agent_apps(agent: Agent) -> list[str]:
    return [a for a in app_ids() if not agent.apps or a in agent.apps]


def _run_checks(agent: Agent) -> Any:
    """Yield the checks one by one (so that the page shows progress)."""
    apps = _agent_apps(agent)
    later = ["reachable", "protocol", *(f"canary:{a}" for a in apps), "latency"]
    guard_check = _check_guard(agent)
    yield guard_check
    if guard_check.status == "failed":
        yield from _skipped(later, "the outbound guard refused the endpoint")
        return
    reach = _check_reachable(agent)
    yield reach
    if reach.status == "failed":
        yield from _skipped(later[1:], "the endpoint is not reachable")
        return
    protocol = _check_protocol(agent)
    yield protocol
    if protocol.status == "failed":
        yield from _skipped(later[2:], f"the endpoint does not speak {agent.protocol}")
        return
    canaries = [_check_canary(agent, app_id) for app_id in apps]
    yield from canaries
    yield _check_latency(canaries)


def _skipped(names: list[str], why: str) -> Any:
    for name in names:
        yield Check(name, _title(name), "skipped", f"not run: {why}")


def _title(name: str) -> str:
    if name.startswith("canary:"):
        return f"Canary prompt ({name.split(':', 1)[1]})"
    return {
        "guard": "Outbound guard",
        "reachable": "Reachability",
        "protocol": "Protocol",
        "latency": "Latency",
    }.get(name, name)


def _address_kind(agent: Agent) -> str | None:
    """Why the endpoint's address is not public (``"a loopback address"``, ``"a private
    address"``, ...), None for a public address (or one that no longer resolves)."""
    guard = OutboundGuard(services.agent_allowed_networks(reference=agent.is_reference))
    try:
        return address_problem(guard.check_url(agent.endpoint_url).address)
    except (RefusedAddressError, ResolveError):
        return None


def _check_guard(agent: Agent) -> Check:
    try:
        services.agent_endpoint_check(endpoint_url=agent.endpoint_url, reference=agent.is_reference)
    except EndpointRefusedError as exc:
        return Check("guard", _title("guard"), "failed", str(exc))
    kind = _address_kind(agent)
    if agent.is_reference:
        where = f"{kind or 'a public address'}, allowed for the project's reference agents"
    elif kind is None:
        where = "a public address on an allowed port"
    else:
        # the operator let team agents use such networks (a demo, a closed lab)
        where = f"{kind} on an allowed port, which this site lets team agents use"
    return Check("guard", _title("guard"), "passed", f"{public_url(agent.endpoint_url)}: {where}")


def _guarded_client(agent: Agent) -> httpx.Client:
    guard = OutboundGuard(services.agent_allowed_networks(reference=agent.is_reference))
    return httpx.Client(transport=guard.transport(), follow_redirects=False, trust_env=False)


@dataclass(frozen=True)
class _Answer:
    status: int
    body: bytes
    location: str
    latency_s: float


def _request(
    agent: Agent, method: str, url: str, *, body: bytes | None = None, read_body: bool = True
) -> _Answer:
    """One guarded request with the probe deadline and size cap. Raises ``_ProbeError``."""
    timeout_s = probe_timeout_s()
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if body is not None:
        headers["Content-Type"] = "application/json"
    auth = auth_options(agent)
    if auth.get("headers"):
        headers.update(auth["headers"])
    elif auth.get("api_key"):
        headers["Authorization"] = f"Bearer {auth['api_key']}"
    deadline = time.monotonic() + timeout_s
    started = time.perf_counter()
    try:
        with (
            _guarded_client(agent) as client,
            client.stream(
                method,
                url,
                content=body,
                headers=headers,
                timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            ) as response,
        ):
            data = b""
            if read_body:
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > PROBE_MAX_BYTES:
                        raise _ProbeError(f"the answer is larger than {PROBE_MAX_BYTES} bytes")
                    if time.monotonic() > deadline:
                        raise _ProbeError(f"the answer was still streaming after {timeout_s:g} s")
            return _Answer(
                response.status_code,
                data,
                response.headers.get("location", "")[:300],
                time.perf_counter() - started,
            )
    except RefusedAddressError:
        raise _ProbeError("the outbound guard refused the address") from None
    except ResolveError as exc:
        raise _ProbeError(f"the host name did not resolve ({exc})") from None
    except httpx.TimeoutException:
        raise _ProbeError(f"no answer within {timeout_s:g} s") from None
    except (httpx.HTTPError, OSError) as exc:
        raise _ProbeError(f"connection failed: {type(exc).__name__}: {excerpt(str(exc))}") from None


class _ProbeError(Exception):
    """A probe request failed; the message is for the team."""


def _redirect_message(agent: Agent, answer: _Answer) -> str:
    target = answer.location or "(no Location)"
    try:
        resolved = httpx.URL(agent.endpoint_url).join(target)
        guard = OutboundGuard(services.agent_allowed_networks(reference=agent.is_reference))
        guard.check_url(resolved)
        refused = ""
    except (RefusedAddressError, ResolveError, httpx.InvalidURL):
        refused = ", an address the outbound guard refuses"
    return (
        f"answered HTTP {answer.status} redirecting to {excerpt(target, 120)}{refused}; agent "
        "calls never follow redirects: register the final URL"
    )


def _check_reachable(agent: Agent) -> Check:
    try:
        answer = _request(agent, "GET", agent.endpoint_url, read_body=False)
    except _ProbeError as exc:
        return Check("reachable", _title("reachable"), "failed", str(exc))
    if 300 <= answer.status < 400:
        return Check(
            "reachable",
            _title("reachable"),
            "failed",
            _redirect_message(agent, answer),
            answer.latency_s,
        )
    return Check(
        "reachable",
        _title("reachable"),
        "passed",
        f"answered HTTP {answer.status} in {answer.latency_s:.2f} s",
        answer.latency_s,
    )


def _check_protocol(agent: Agent) -> Check:
    title = _title("protocol")
    if agent.protocol == "a2a":
        return _check_a2a(agent)
    try:
        if agent.protocol in ("openai-chat", "openai-tools"):
            url = chat_completions_url(agent.endpoint_url).removesuffix("/chat/completions")
            answer = _request(agent, "GET", url + "/models")
        else:
            probe = {
                "prompt": "pre-flight: reply with any text",
                "history": [],
                "episode_id": new_episode_id(),
            }
            answer = _request(agent, "POST", agent.endpoint_url, body=json.dumps(probe).encode())
    except _ProbeError as exc:
        return Check("protocol", title, "failed", str(exc))
    if 300 <= answer.status < 400:
        return Check(
            "protocol", title, "failed", _redirect_message(agent, answer), answer.latency_s
        )
    try:
        data = json.loads(answer.body)
    except (ValueError, RecursionError):
        data = None
    if agent.protocol in ("openai-chat", "openai-tools"):
        return _openai_models_check(agent, answer, data)
    if not isinstance(data, dict):
        return Check(
            "protocol",
            title,
            "failed",
            f"POST answered HTTP {answer.status} with no JSON object: "
            f"{excerpt(answer.body, QUOTE_CHARS)}",
            answer.latency_s,
        )
    if isinstance(data.get("text"), str):
        said = f'{{"text": ...}} in {answer.latency_s:.2f} s'
    elif answer.status < 500:
        said = (
            f"HTTP {answer.status} with a JSON object (the canary prompts below check real answers)"
        )
    else:
        return Check(
            "protocol",
            title,
            "failed",
            f"POST answered HTTP {answer.status}: {excerpt(answer.body, QUOTE_CHARS)}",
            answer.latency_s,
        )
    return Check("protocol", title, "passed", f"http-json: POST answered {said}", answer.latency_s)


def _openai_models_check(agent: Agent, answer: _Answer, data: Any) -> Check:
    title = _title("protocol")
    models = data.get("data") if isinstance(data, dict) else None
    if answer.status != 200 or not isinstance(models, list):
        return Check(
            "protocol",
            title,
            "failed",
            f"GET /v1/models answered HTTP {answer.status} without an OpenAI model list "
            f"({excerpt(answer.body, QUOTE_CHARS)}); an OpenAI-compatible server lists its models "
            "there",
            answer.latency_s,
        )
    ids = [str(m.get("id"))[:100] for m in models if isinstance(m, dict) and m.get("id")]
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    message = f"{agent.protocol}: /v1/models lists {len(ids)} model(s): {shown or '(none)'}"
    if agent.model_name and ids and agent.model_name not in ids:
        message += f"; note: {agent.model_name!r} is not among them"
    return Check("protocol", title, "passed", message, answer.latency_s)


def _check_a2a(agent: Agent) -> Check:
    title = _title("protocol")
    try:
        client = services.agent_client_build(agent=agent)
    except ValueError as exc:
        return Check("protocol", title, "failed", f"the endpoint is misconfigured: {exc}")
    try:
        if not isinstance(client, A2AClient):
            return Check("protocol", title, "failed", "not an A2A client")
        client.timeout_s = min(client.timeout_s, probe_timeout_s())
        started = time.perf_counter()
        card = client.fetch_card()
    except AgentError as exc:
        return Check("protocol", title, "failed", f"A2A agent card: {exc}")
    finally:
        client.close()
    named = card.name or "(no name)"
    return Check(
        "protocol",
        title,
        "passed",
        f"A2A agent card at {public_url(card.card_url)}: {named} "
        f"{card.version or ''} (protocol {card.protocol_version or '?'}), JSON-RPC endpoint "
        f"{public_url(card.rpc_url)}",
        time.perf_counter() - started,
    )


def _check_canary(agent: Agent, app_id: str) -> Check:
    name = f"canary:{app_id}"
    title = _title(name)
    app = get_app(app_id)
    query = app.generate(1, PREFLIGHT_SEED, level=min(app.levels))[0]
    token = new_episode_id()
    deposit: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if agent.reference_kind == "oracle":
        deposit = OracleVault(settings.NETARENA["ORACLE_VAULT_DIR"]).deposit(query, token)
    try:
        client = services.agent_client_build(agent=agent)
    except ValueError as exc:
        return Check(name, title, "failed", f"the endpoint is misconfigured: {exc}")
    try:
        with deposit:
            reply = client.for_app(app).complete(
                [{"role": "user", "content": query.prompt}], episode_id=token
            )
    except AgentError as exc:
        return Check(name, title, "failed", f"no usable answer ({exc.category}): {exc}")
    finally:
        client.close()
    problem = app.reply_problem(reply.text)
    model = f"; model reported: {reply.model}" if reply.model else ""
    if reply.tool_call is not None:
        model = f"; tool call {reply.tool_call['name']}{model}"
    if problem is not None:
        return Check(
            name,
            title,
            "failed",
            f"the {app_id} reply parser refused the answer: {problem}; the answer began "
            f"{excerpt(reply.text, QUOTE_CHARS)}{model}",
            reply.latency_s,
        )
    return Check(
        name,
        title,
        "passed",
        f"the {app_id} reply parser accepted the answer ({app.reply_format}) after "
        f"{reply.latency_s:.2f} s{model}",
        reply.latency_s,
    )


def _check_latency(canaries: list[Check]) -> Check:
    title = _title("latency")
    measured = [c.latency_s for c in canaries if c.latency_s is not None]
    if not measured:
        return Check("latency", title, "skipped", "not measured: no canary was answered")
    limit_s = float(settings.NETARENA["AGENT_TIMEOUT_S"])
    return Check(
        "latency",
        title,
        "passed",
        f"slowest canary reply {max(measured):.2f} s, median {statistics.median(measured):.2f} s "
        f"(an episode allows {limit_s:g} s per reply)",
        max(measured),
    )
