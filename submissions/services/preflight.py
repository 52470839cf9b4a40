"""Pre-flight check of an agent endpoint, the Django side (docs/agents.md).

Saving an agent (the registration page, ``POST /api/v1/agents/``, an edit on the agent page)
or the team's "Run pre-flight again" button calls :func:`preflight_start`, which stores a
``running`` :class:`~submissions.models.AgentPreflight` and, once the transaction commits,
sends the Celery task ``submissions.agent_preflight`` (queue ``control``,
``submissions/preflight_tasks.py``). The task calls :func:`preflight_run`, which runs these
checks in order and stores each one's verdict and a message fit for the team:

1. ``guard``: the outbound guard and the port rule accept the URL
   (:func:`submissions.services.endpoints.agent_endpoint_check`, the rule applied at
   registration);
2. ``reachable`` and 3. ``protocol``: the HTTP requests of
   ``evaluator.agents.preflight_checks`` (within ``PREFLIGHT_PROBE_TIMEOUT_S``);
4. ``canary:<app>``, one per app the agent takes part in: the app's task prompt of a fixed-seed
   query (:data:`PREFLIGHT_SEED`, the app's lowest level) sent through the same agent client
   as an episode, judged by the app's reply parser (``preflight_checks.check_canary``); on
   ``openai-tools`` the answer must be one call of the app's tools;
5. ``latency``: the evaluator's wall clock around the canary replies (slowest and median).

A check that cannot run because an earlier one failed is ``skipped``. The pre-flight passes
when no check failed; it is ``partial`` when the endpoint checks passed and the canaries of
some apps passed while others failed: the agent may then be submitted to the apps whose canary
passed (:func:`preflight_passed_apps`; the submit page offers exactly those,
:func:`submittable_apps`). A failing or unfinished pre-flight, or a partial one asked for an
app whose canary failed, blocks the agent's team submissions (:func:`preflight_gate_check`,
called by ``submissions.services.submissions.submission_create``) before any quota is counted;
reference agents are exempt; an agent without any pre-flight (registered before pre-flights
existed, or by an admin) is not blocked. Nothing an endpoint does (slow, huge, garbage,
redirecting, private address) raises out of :func:`preflight_run`: it becomes a failed check,
and a pre-flight still ``running`` after ``PREFLIGHT_STALE_S`` is closed as failed when next
read.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from evaluator.agents import preflight_checks
from evaluator.agents._http import public_url
from evaluator.agents.preflight_checks import Check
from evaluator.oracle_vault import OracleVault
from evaluator.registry import CONTROL_QUEUE, app_ids, get_app
from evaluator.runner import new_episode_id
from submissions.errors import EndpointRefusedError, PreflightNotPassedError
from submissions.models import Agent, AgentPreflight
from submissions.services.endpoints import agent_endpoint_check, agent_preflight_target
from submissions.services.storage import storable
from submissions.services.teams import team_member_check

logger = logging.getLogger(__name__)

__all__ = [
    "PREFLIGHT_SEED",
    "PREFLIGHT_TASK",
    "Check",
    "PreflightNotPassedError",
    "agent_apps",
    "preflight_failed_apps",
    "preflight_gate_check",
    "preflight_latest",
    "preflight_passed_apps",
    "preflight_run",
    "preflight_start",
    "preflight_time_out",
    "submittable_apps",
]

#: Celery task name (``submissions/preflight_tasks.py``).
PREFLIGHT_TASK = "submissions.agent_preflight"
#: Seed of the canary queries: the same canary for every agent and every run.
PREFLIGHT_SEED = 20_261_010
#: Defaults of the ``NETARENA`` settings read here (seconds).
DEFAULT_PROBE_TIMEOUT_S = preflight_checks.DEFAULT_PROBE_TIMEOUT_S
DEFAULT_STALE_S = 900.0


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
    try:
        # one connection attempt and one retry (about 2 s), no result subscription: a broker
        # that is down must not hold the page or the API call for long
        with current_app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1)
            current_app.send_task(
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
        team_member_check(team=agent.team, user=actor)
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
    return [a for a in app_ids() if not agent.apps or a in agent.apps]


def submittable_apps(*, agent: Agent) -> list[str]:
    """The apps the submit page offers for ``agent``: after a partial pre-flight, exactly the
    apps whose canary passed; otherwise the apps it takes part in (a failed or running
    pre-flight is refused by :func:`preflight_gate_check` with its reason)."""
    latest = None if agent.is_reference else preflight_latest(agent=agent)
    if latest is not None and latest.status == AgentPreflight.Status.PARTIAL:
        return preflight_passed_apps(latest)
    return agent_apps(agent)


def preflight_gate_check(
    *, agent: Agent, apps: list[str] | None = None
) -> AgentPreflight | None:
    """Refuse a team submission of ``agent`` (to ``apps``) unless its latest pre-flight
    passed, or was partial and every app of ``apps`` is one whose canary passed, and checked
    the endpoint (URL and protocol) the agent has now.

    Reference agents are exempt; an agent that never had a pre-flight is not blocked.

    Returns:
        The pre-flight that cleared the submission (its ``endpoint_url`` and ``protocol`` are
        what the submission records and its episodes call), or None (reference agent, no
        pre-flight).

    Raises:
        PreflightNotPassedError: the latest pre-flight is running or failed, or partial and
            ``apps`` (None: every app it takes part in) names an app whose canary failed, or
            it checked another URL or protocol than the agent's (changed without one).
    """
    if agent.is_reference:
        return None
    latest = preflight_latest(agent=agent)
    if latest is None:
        return None
    if latest.status == AgentPreflight.Status.RUNNING:
        raise PreflightNotPassedError(
            "the agent's pre-flight check is still running; submit once it has passed"
        )
    if (latest.endpoint_url, latest.protocol) != (agent.endpoint_url, agent.protocol):
        raise PreflightNotPassedError(
            "the agent's endpoint changed since its last pre-flight; run the pre-flight again "
            "(no quota was used)"
        )
    if latest.status == AgentPreflight.Status.PASSED:
        return latest
    if latest.status == AgentPreflight.Status.PARTIAL:
        passed = preflight_passed_apps(latest)
        refused = [a for a in (agent_apps(agent) if apps is None else apps) if a not in passed]
        if not refused:
            return latest
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


# -- running and time-out bookkeeping -------------------------------------------------------


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
        checks=storable([asdict(c) for c in checks]),
        latency_s=max(latencies) if latencies else None,
        finished_at=timezone.now(),
    )


def _save_progress(preflight_id: int, checks: list[Check]) -> None:
    AgentPreflight.objects.filter(pk=preflight_id, status=AgentPreflight.Status.RUNNING).update(
        checks=storable([asdict(c) for c in checks])
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
    """Close a pre-flight the task's time limit (``limit_s`` seconds) interrupted as failed."""
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


def _run_checks(agent: Agent) -> Iterator[Check]:
    """Yield the checks one by one (so that the page shows progress)."""
    apps = agent_apps(agent)
    later = ["reachable", "protocol", *(f"canary:{a}" for a in apps), "latency"]
    guard_check = _check_guard(agent)
    yield guard_check
    if guard_check.status == "failed":
        yield from preflight_checks.skipped_checks(later, "the outbound guard refused the endpoint")
        return
    target = agent_preflight_target(agent=agent, timeout_s=probe_timeout_s())
    reach = preflight_checks.check_reachable(target)
    yield reach
    if reach.status == "failed":
        yield from preflight_checks.skipped_checks(later[1:], "the endpoint is not reachable")
        return
    protocol = preflight_checks.check_protocol(target)
    yield protocol
    if protocol.status == "failed":
        why = f"the endpoint does not speak {agent.protocol}"
        yield from preflight_checks.skipped_checks(later[2:], why)
        return
    canaries = [_check_canary(agent, app_id) for app_id in apps]
    yield from canaries
    yield preflight_checks.check_latency(canaries, reply_timeout_s=target.reply_timeout_s)


def _check_guard(agent: Agent) -> Check:
    """``guard``: the registration rule (:func:`agent_endpoint_check`) accepts the URL; the
    message says what kind of address it is."""
    title = preflight_checks.check_title("guard")
    try:
        agent_endpoint_check(endpoint_url=agent.endpoint_url, reference=agent.is_reference)
    except EndpointRefusedError as exc:
        return Check("guard", title, "failed", str(exc))
    target = agent_preflight_target(agent=agent, timeout_s=probe_timeout_s())
    kind = preflight_checks.address_kind(target.url, target.allowed_networks)
    if agent.is_reference:
        where = f"{kind or 'a public address'}, allowed for the project's reference agents"
    elif kind is None:
        where = "a public address on an allowed port"
    else:
        # the operator let team agents use such networks (a demo, a closed lab)
        where = f"{kind} on an allowed port, which this site lets team agents use"
    return Check("guard", title, "passed", f"{public_url(agent.endpoint_url)}: {where}")


def _check_canary(agent: Agent, app_id: str) -> Check:
    """``canary:<app_id>``: the canary query of ``app_id`` (:data:`PREFLIGHT_SEED`, lowest
    level) through ``preflight_checks.check_canary``; the oracle reference agent gets its
    deposit."""
    app = get_app(app_id)
    query = app.generate(1, PREFLIGHT_SEED, level=min(app.levels))[0]
    token = new_episode_id()
    deposit: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if agent.reference_kind == "oracle":
        deposit = OracleVault(settings.NETARENA["ORACLE_VAULT_DIR"]).deposit(query, token)
    target = agent_preflight_target(agent=agent, timeout_s=probe_timeout_s())
    with deposit:
        return preflight_checks.check_canary(target, app, query, episode_id=token)
