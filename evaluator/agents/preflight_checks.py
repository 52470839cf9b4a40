"""The HTTP probes of an agent's pre-flight: reachable, protocol, canary and latency checks.

Plain Python (no Django): the site's pre-flight service (``submissions.services.preflight``)
turns a registered agent into a :class:`PreflightTarget` (URL, protocol, key, allowed networks,
deadlines), calls the checks here one by one and stores the :class:`Check` verdicts they
return. Every request passes the outbound guard (docs/architecture.md §6), follows no
redirect, and stops at :attr:`PreflightTarget.timeout_s` and :data:`PROBE_MAX_BYTES`. Nothing an
endpoint does (slow, huge, garbage, redirecting, private address) raises out of a check: it
becomes a failed :class:`Check` whose message is fit for the team (never the guard's view of
internal networks).

The checks (docs/agents.md):

- ``reachable``: a ``GET`` of the endpoint URL gets an HTTP answer (any status; a redirect
  fails, since agent calls never follow redirects);
- ``protocol``: ``a2a``: the agent card names a JSON-RPC endpoint the guard accepts;
  ``openai-chat`` and ``openai-tools``: ``GET {base}/v1/models`` answers the OpenAI model
  list; ``http-json``: a ``POST`` of ``{"prompt", "history", "episode_id"}`` answers a JSON
  object;
- ``canary:<app>``: the app's task prompt of one query sent through the agent's protocol
  client, and the app's reply parser's verdict on the answer
  (:meth:`evaluator.app.App.reply_problem`);
- ``latency``: the slowest and the median canary reply.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from evaluator.agents import A2AClient, AgentError, make_client
from evaluator.agents._http import USER_AGENT, excerpt, public_url
from evaluator.agents.base import AgentClient
from evaluator.agents.guard import (
    OutboundGuard,
    RefusedAddressError,
    ResolveError,
    address_problem,
)
from evaluator.agents.openai_chat import chat_completions_url
from evaluator.app import App
from evaluator.runner import new_episode_id
from evaluator.types import Query

#: Default deadline of one reachability or protocol probe, in seconds.
DEFAULT_PROBE_TIMEOUT_S = 10.0
#: Response bytes read by the reachability and protocol probes.
PROBE_MAX_BYTES = 1_048_576
#: Characters of a reply quoted in a check message.
QUOTE_CHARS = 160
#: Connect deadline of one probe, in seconds (at most the probe's whole deadline).
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Check:
    """One check's verdict (stored by the site as a dict in ``AgentPreflight.checks``).

    Attributes:
        name: ``guard``, ``reachable``, ``protocol``, ``canary:<app id>``, ``latency`` (or
            ``queue``, ``finished``, ``internal`` for a pre-flight that could not run).
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


@dataclass(frozen=True)
class PreflightTarget:
    """An agent endpoint as the probes see it (plain values, no database row).

    Attributes:
        url: the registered endpoint URL.
        protocol: one of ``evaluator.agents.PROTOCOLS``.
        model_name: the model the agent asked for ("" = none).
        api_key: the decrypted key sent as ``Authorization: Bearer`` (None = none).
        auth_headers: headers carrying the key instead (a header name the team chose).
        allowed_networks: CIDR allow-list of non-public networks the guard accepts.
        allowed_ports: the ports the guard accepts (None = any; a team agent's port set).
        timeout_s: deadline of one reachability or protocol probe, in seconds.
        reply_timeout_s: deadline of one agent reply (the canaries), in seconds.
    """

    url: str
    protocol: str
    model_name: str = ""
    api_key: str | None = None
    auth_headers: Mapping[str, str] = field(default_factory=dict)
    allowed_networks: Sequence[str] = ()
    timeout_s: float = DEFAULT_PROBE_TIMEOUT_S
    reply_timeout_s: float = 60.0
    allowed_ports: Collection[int] | None = None

    def client(self) -> AgentClient:
        """The protocol client an episode would use for this endpoint.

        Raises:
            ValueError: the URL or protocol is malformed (``make_client``).
        """
        return make_client(
            self.protocol,
            self.url,
            api_key=self.api_key,
            headers=dict(self.auth_headers) or None,
            model=self.model_name or None,
            timeout_s=self.reply_timeout_s,
            allowed_networks=list(self.allowed_networks),
            allowed_ports=self.allowed_ports,
        )

    def guard(self) -> OutboundGuard:
        """The outbound guard with this endpoint's allowed networks and ports."""
        return OutboundGuard(list(self.allowed_networks), allowed_ports=self.allowed_ports)


def check_title(name: str) -> str:
    """The human title of check ``name`` (``canary:malt`` -> ``Canary prompt (malt)``)."""
    if name.startswith("canary:"):
        return f"Canary prompt ({name.split(':', 1)[1]})"
    return {
        "guard": "Outbound guard",
        "reachable": "Reachability",
        "protocol": "Protocol",
        "latency": "Latency",
    }.get(name, name)


def skipped_checks(names: Sequence[str], why: str) -> Iterator[Check]:
    """One ``skipped`` check per name, saying ``not run: <why>``."""
    for name in names:
        yield Check(name, check_title(name), "skipped", f"not run: {why}")


def address_kind(url: str, allowed_networks: Sequence[str]) -> str | None:
    """Why the address ``url`` resolves to is not public (``"a loopback address"``, ``"a
    private address"``, ...), None for a public address (or one the guard refuses or that no
    longer resolves)."""
    try:
        return address_problem(OutboundGuard(list(allowed_networks)).check_url(url).address)
    except (RefusedAddressError, ResolveError):
        return None


@dataclass(frozen=True)
class _Answer:
    status: int
    body: bytes
    location: str
    latency_s: float


class _ProbeError(Exception):
    """A probe request failed; the message is for the team."""


def _guarded_client(target: PreflightTarget) -> httpx.Client:
    return httpx.Client(
        transport=target.guard().transport(), follow_redirects=False, trust_env=False
    )


def _request(
    target: PreflightTarget,
    method: str,
    url: str,
    *,
    body: bytes | None = None,
    read_body: bool = True,
) -> _Answer:
    """One guarded request with the probe deadline and size cap. Raises ``_ProbeError``."""
    timeout_s = target.timeout_s
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if body is not None:
        headers["Content-Type"] = "application/json"
    if target.auth_headers:
        headers.update(target.auth_headers)
    elif target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    deadline = time.monotonic() + timeout_s
    started = time.perf_counter()
    try:
        with (
            _guarded_client(target) as client,
            client.stream(
                method,
                url,
                content=body,
                headers=headers,
                timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S)),
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


def _redirect_message(target: PreflightTarget, answer: _Answer) -> str:
    location = answer.location or "(no Location)"
    try:
        target.guard().check_url(httpx.URL(target.url).join(location))
        refused = ""
    except (RefusedAddressError, ResolveError, httpx.InvalidURL):
        refused = ", an address the outbound guard refuses"
    return (
        f"answered HTTP {answer.status} redirecting to {excerpt(location, 120)}{refused}; agent "
        "calls never follow redirects: register the final URL"
    )


def check_reachable(target: PreflightTarget) -> Check:
    """``reachable``: a ``GET`` of the endpoint URL answers with any status but a redirect."""
    title = check_title("reachable")
    try:
        answer = _request(target, "GET", target.url, read_body=False)
    except _ProbeError as exc:
        return Check("reachable", title, "failed", str(exc))
    if 300 <= answer.status < 400:
        return Check(
            "reachable", title, "failed", _redirect_message(target, answer), answer.latency_s
        )
    return Check(
        "reachable",
        title,
        "passed",
        f"answered HTTP {answer.status} in {answer.latency_s:.2f} s",
        answer.latency_s,
    )


def check_protocol(target: PreflightTarget) -> Check:
    """``protocol``: the endpoint speaks ``target.protocol`` (see the module docstring)."""
    title = check_title("protocol")
    if target.protocol == "a2a":
        return _check_a2a(target)
    openai = target.protocol in ("openai-chat", "openai-tools")
    try:
        if openai:
            url = chat_completions_url(target.url).removesuffix("/chat/completions")
            answer = _request(target, "GET", url + "/models")
        else:
            probe = {
                "prompt": "pre-flight: reply with any text",
                "history": [],
                "episode_id": new_episode_id(),
            }
            answer = _request(target, "POST", target.url, body=json.dumps(probe).encode())
    except _ProbeError as exc:
        return Check("protocol", title, "failed", str(exc))
    if 300 <= answer.status < 400:
        return Check(
            "protocol", title, "failed", _redirect_message(target, answer), answer.latency_s
        )
    try:
        data = json.loads(answer.body)
    except (ValueError, RecursionError):
        data = None
    if openai:
        return _openai_models_check(target, answer, data)
    return _http_json_check(answer, data)


def _http_json_check(answer: _Answer, data: Any) -> Check:
    title = check_title("protocol")
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


def _openai_models_check(target: PreflightTarget, answer: _Answer, data: Any) -> Check:
    title = check_title("protocol")
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
    message = f"{target.protocol}: /v1/models lists {len(ids)} model(s): {shown or '(none)'}"
    if target.model_name and ids and target.model_name not in ids:
        message += f"; note: {target.model_name!r} is not among them"
    return Check("protocol", title, "passed", message, answer.latency_s)


def _check_a2a(target: PreflightTarget) -> Check:
    title = check_title("protocol")
    try:
        client = target.client()
    except ValueError as exc:
        return Check("protocol", title, "failed", f"the endpoint is misconfigured: {exc}")
    try:
        if not isinstance(client, A2AClient):
            return Check("protocol", title, "failed", "not an A2A client")
        client.timeout_s = min(client.timeout_s, target.timeout_s)
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


def check_canary(target: PreflightTarget, app: App, query: Query, *, episode_id: str) -> Check:
    """``canary:<app id>``: send ``query``'s prompt through the agent's protocol client (on
    ``openai-tools`` with the app's tools) and judge the answer with the app's reply parser.

    Args:
        episode_id: the token sent with the request (the oracle reads its deposit by it).
    """
    name = f"canary:{app.app_id}"
    title = check_title(name)
    try:
        client = target.client()
    except ValueError as exc:
        return Check(name, title, "failed", f"the endpoint is misconfigured: {exc}")
    try:
        reply = client.for_app(app).complete(
            [{"role": "user", "content": query.prompt}], episode_id=episode_id
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
            f"the {app.app_id} reply parser refused the answer: {problem}; the answer began "
            f"{excerpt(reply.text, QUOTE_CHARS)}{model}",
            reply.latency_s,
        )
    return Check(
        name,
        title,
        "passed",
        f"the {app.app_id} reply parser accepted the answer ({app.reply_format}) after "
        f"{reply.latency_s:.2f} s{model}",
        reply.latency_s,
    )


def check_latency(canaries: Sequence[Check], *, reply_timeout_s: float) -> Check:
    """``latency``: the slowest and the median canary reply against the episode's per-reply
    deadline ``reply_timeout_s`` (seconds); ``skipped`` when no canary was answered."""
    title = check_title("latency")
    measured = [c.latency_s for c in canaries if c.latency_s is not None]
    if not measured:
        return Check("latency", title, "skipped", "not measured: no canary was answered")
    return Check(
        "latency",
        title,
        "passed",
        f"slowest canary reply {max(measured):.2f} s, median {statistics.median(measured):.2f} s "
        f"(an episode allows {reply_timeout_s:g} s per reply)",
        max(measured),
    )
