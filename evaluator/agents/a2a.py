"""The ``a2a`` agent protocol: Agent2Agent (A2A) v0.3 over JSON-RPC 2.0 (docs/architecture.md §6).

This is what NetArena's own harness speaks, so a "purple" A2A agent
written for it can be registered unchanged. Wire facts follow the A2A specification v0.3.0
(a2a-protocol.org: agent card discovery, the JSON-RPC transport's ``message/send``, and the
Message / Task / Part objects with their ``kind`` discriminators):

1. **Agent card.** The client GETs ``{url}/.well-known/agent-card.json`` (falling back to the
   pre-0.3 path ``/.well-known/agent.json`` when that answers 404); a registered URL that
   already ends in ``.json`` is taken as the card URL itself. The card is fetched once per
   client (and again only after a failure), through the same outbound guard, deadline, retries
   and size cap as every other call. Its ``url`` (or the ``JSONRPC`` entry of
   ``additionalInterfaces`` when ``preferredTransport`` is another transport) is the JSON-RPC
   endpoint; that endpoint must pass the guard too, otherwise the call fails with
   ``refused_address``. The card fetch is not counted in the reply latency.
2. **Request.** Each turn is one ``message/send`` request whose ``params.message`` is a user
   message with a fresh ``messageId`` and one text part, and no ``contextId`` (like the
   reference harness, every turn is stateless). The whole conversation so far goes into that
   text, rendered by :func:`render_transcript`; a conversation of one user message (MALT, or
   the first turn of route/k8s) is sent verbatim. Header ``X-NetArena-Episode`` as for the
   other protocols.
3. **Reply.** The JSON-RPC ``result`` is either a Message (its text parts joined with ``"\\n"``,
   data parts rendered as indented JSON) or a Task: the text of its last artifact, else of its
   status message, else of the last agent message in its history. A task in state ``failed``,
   ``rejected``, ``canceled`` or ``auth-required``, a task that is not finished
   (``submitted``/``working``: the evaluator only waits for blocking answers), a JSON-RPC
   ``error`` object or any other shape is ``AgentError("bad_response")`` quoting the agent.

Plain httpx JSON-RPC is used rather than the ``a2a-sdk`` client: the SDK is async-only, pulls in
``google-api-core`` and would have to be threaded through the guard's pinned transport, while
the v0.3 request/response shapes needed here are a few fields.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from evaluator.agents._http import (
    USER_AGENT,
    GuardedHttpClient,
    excerpt,
    public_url,
)
from evaluator.agents.base import AgentError, AgentReply, usage_from
from evaluator.agents.guard import RefusedAddressError, ResolveError
from evaluator.clip import clip_json, clip_text
from evaluator.types import JSON

#: Protocol version this client and the reference server speak (A2A spec tag v0.3.0).
A2A_PROTOCOL_VERSION = "0.3.0"
#: Well-known agent card path (A2A v0.3) and the path used before v0.3 (a2a-sdk keeps both).
CARD_PATH = "/.well-known/agent-card.json"
LEGACY_CARD_PATH = "/.well-known/agent.json"
#: The JSON-RPC method of one non-streaming turn (A2A v0.3).
SEND_METHOD = "message/send"
#: Task states whose result is a failure (A2A v0.3 TaskState values).
FAILED_TASK_STATES = frozenset({"failed", "rejected", "canceled", "auth-required"})
#: Task states whose result carries the agent's answer.
ANSWERED_TASK_STATES = frozenset({"completed", "input-required"})

#: Parts of one reply kept in its transcript entry (:func:`part_records`); the rest are counted.
PARTS_KEPT = 10
#: Characters of a text part kept in the transcript entry (the entry's content, the answer
#: read from the parts, holds the text parts in full up to the entry's own limit).
PART_TEXT_MAX_CHARS = 2_000
#: Bytes of compact JSON of a data part kept in the transcript entry.
PART_DATA_MAX_BYTES = 4 * 1024
#: Characters of a file part's name and of its media type kept.
PART_NAME_MAX_CHARS = 200

_FENCE_RUN_RE = re.compile(r"=+")
_TRANSCRIPT_START_RE = re.compile(r"\A(={3,}) (?:task|system) \1\n")
_REPLY_LABEL_RE = re.compile(r"\Ayour reply \d+\Z")


# -- the conversation as one text ---------------------------------------------------------


def _fence_for(messages: list[JSON]) -> str:
    longest = 0
    for message in messages:
        for run in _FENCE_RUN_RE.findall(str(message.get("content", ""))):
            longest = max(longest, len(run))
    return "=" * max(3, longest + 1)


def render_transcript(messages: list[JSON]) -> str:
    """Render a chat as the single text an A2A agent receives.

    A chat of one user message is returned verbatim (exactly the app's prompt, as the
    reference harness sends it). A longer chat becomes blocks separated by a blank line, each
    a header line and the message content::

        === task ===
        <first user message: the app's prompt>

        === your reply 1 ===
        <the agent's first reply>

        === observation 1 ===
        <what the app answered>

    Header labels are ``system``, ``task`` (user messages before the first reply),
    ``your reply N`` and ``observation N`` (user messages after reply N). The fence is the
    shortest run of ``=`` (at least 3) that occurs in no message, so headers are unambiguous
    and :func:`parse_transcript` recovers the chat exactly.

    Args:
        messages: ``[{"role": "system"|"user"|"assistant", "content": str}, ...]``; other
            roles are rendered as user messages.
    """
    if (
        len(messages) == 1
        and messages[0].get("role") == "user"
        and not _TRANSCRIPT_START_RE.match(str(messages[0].get("content", "")))
    ):
        return str(messages[0].get("content", ""))
    fence = _fence_for(messages)
    blocks = []
    replies = 0
    for message in messages:
        role = message.get("role")
        if role == "system":
            label = "system"
        elif role == "assistant":
            replies += 1
            label = f"your reply {replies}"
        else:
            label = f"observation {replies}" if replies else "task"
        blocks.append(f"{fence} {label} {fence}\n{message.get('content', '')}")
    return "\n\n".join(blocks)


def parse_transcript(text: str) -> list[JSON]:
    """Inverse of :func:`render_transcript`: the chat an A2A request text stands for.

    Text that does not start with a ``=== task ===`` (or ``=== system ===``) header is one
    user message. Never raises: a hand-written text that merely looks like a transcript gives
    whatever chat its headers describe.
    """
    start = _TRANSCRIPT_START_RE.match(text)
    if start is None:
        return [{"role": "user", "content": text}]
    fence = re.escape(start.group(1))
    header = re.compile(rf"(?:\A|\n\n){fence} ([^\n]*?) {fence}\n")
    found = list(header.finditer(text))
    messages: list[JSON] = []
    for number, match in enumerate(found):
        end = found[number + 1].start() if number + 1 < len(found) else len(text)
        label = match.group(1)
        if label == "system":
            role = "system"
        elif _REPLY_LABEL_RE.match(label):
            role = "assistant"
        else:
            role = "user"
        messages.append({"role": role, "content": text[match.end() : end]})
    return messages


# -- reading A2A objects -------------------------------------------------------------------


def parts_text(parts: Any, where: str) -> str | None:
    """Return the text of A2A message/artifact ``parts``, or ``None`` if none is textual.

    Text parts are joined with ``"\\n"``; data parts are rendered as ``json.dumps(data,
    indent=2)`` (as the reference harness does); file parts are skipped. A part without
    ``kind`` is judged by its fields (``text`` / ``data``).

    Raises:
        AgentError: ``bad_response`` when ``parts`` is not a list or a text part is not text.
    """
    if not isinstance(parts, list):
        raise AgentError("bad_response", f"A2A {where} needs a 'parts' list")
    texts: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            raise AgentError("bad_response", f"A2A {where} has a part that is not an object")
        kind = part.get("kind") or ("text" if "text" in part else "data" if "data" in part else "")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise AgentError("bad_response", f"A2A {where} has a text part without text")
            texts.append(text)
        elif kind == "data":
            try:
                texts.append(json.dumps(part.get("data"), indent=2, ensure_ascii=False))
            except (TypeError, ValueError, RecursionError):
                raise AgentError("bad_response", f"A2A {where} has unusable data") from None
    return "\n".join(texts) if texts else None


def part_records(parts: list[Any]) -> list[JSON]:
    """The parts of a reply as its transcript entry keeps them (bounded and storable): ``{"kind":
    "text", "text"}`` (cut at :data:`PART_TEXT_MAX_CHARS`), ``{"kind": "data", "data"}`` (the
    JSON value, bounded by ``evaluator.clip`` at :data:`PART_DATA_MAX_BYTES`), ``{"kind":
    "file", "name", "mime_type"}`` (a file's bytes or URI are not kept), or ``{"kind":
    <other>}``. At most :data:`PARTS_KEPT` parts; when there are more, a last ``{"kind":
    "more", "count"}`` says how many were left out. Never raises (``parts`` were already read
    by :func:`parts_text`)."""
    records: list[JSON] = []
    for part in parts[:PARTS_KEPT]:
        if not isinstance(part, dict):
            continue
        kind = part.get("kind") or ("text" if "text" in part else "data" if "data" in part else "")
        if kind == "text":
            records.append(
                {"kind": "text", "text": clip_text(str(part.get("text", "")), PART_TEXT_MAX_CHARS)}
            )
        elif kind == "data":
            records.append(
                {"kind": "data", "data": clip_json(part.get("data"), max_bytes=PART_DATA_MAX_BYTES)}
            )
        elif kind == "file":
            file = part.get("file")
            if not isinstance(file, dict):
                file = {}
            name, mime_type = file.get("name"), file.get("mimeType")
            records.append(
                {
                    "kind": "file",
                    "name": clip_text(name, PART_NAME_MAX_CHARS) if isinstance(name, str) else "",
                    "mime_type": clip_text(mime_type, PART_NAME_MAX_CHARS)
                    if isinstance(mime_type, str)
                    else "",
                }
            )
        else:
            records.append({"kind": clip_text(str(kind), PART_NAME_MAX_CHARS) or "unknown"})
    if len(parts) > PARTS_KEPT:
        records.append({"kind": "more", "count": len(parts) - PARTS_KEPT})
    return records


def _message_text(message: Any, where: str) -> str | None:
    if not isinstance(message, dict):
        return None
    return parts_text(message.get("parts"), where)


def task_text(task: Mapping[str, Any]) -> str:
    """Return the answer carried by an A2A Task object (:func:`task_answer`'s text).

    Raises:
        AgentError: as :func:`task_answer`.
    """
    return task_answer(task)[0]


def task_answer(task: Mapping[str, Any]) -> tuple[str, list[Any], str]:
    """Return the answer carried by an A2A Task object, the parts it was read from and where
    they were (``"artifact"``, ``"status message"`` or ``"history message"``).

    Raises:
        AgentError: ``bad_response`` for a failed/rejected/canceled/auth-required task (with
            the agent's status message), an unfinished task, or one without any answer.
    """
    status = task.get("status")
    state = status.get("state") if isinstance(status, dict) else None
    if not isinstance(state, str):
        state = None
    status_message = status.get("message") if isinstance(status, dict) else None
    if state in FAILED_TASK_STATES:
        said = None
        try:
            said = _message_text(status_message, "status message")
        except AgentError:
            pass
        detail = f": {excerpt(said, 500)}" if said else ""
        raise AgentError("bad_response", f"the agent's A2A task ended {state}{detail}")
    if state not in ANSWERED_TASK_STATES:
        raise AgentError(
            "bad_response",
            f"the agent's A2A task is {excerpt(str(state), 40)}, not completed; the evaluator "
            "sends blocking message/send requests and needs the finished task in the answer",
        )
    artifacts = task.get("artifacts")
    if isinstance(artifacts, list):
        for artifact in reversed(artifacts):
            if isinstance(artifact, dict):
                text = parts_text(artifact.get("parts"), "artifact")
                if text is not None:
                    return text, artifact["parts"], "artifact"
    text = _message_text(status_message, "status message")
    if text is not None and isinstance(status_message, dict):
        return text, status_message["parts"], "status message"
    history = task.get("history")
    if isinstance(history, list):
        for message in reversed(history):
            if isinstance(message, dict) and message.get("role") == "agent":
                text = _message_text(message, "history message")
                if text is not None:
                    return text, message["parts"], "history message"
    raise AgentError(
        "bad_response", f"the agent's A2A task is {state} but carries no text or data answer"
    )


@dataclass(frozen=True)
class AgentCardInfo:
    """What the client kept of a fetched agent card.

    Attributes:
        card_url: where the card was fetched.
        rpc_url: the JSON-RPC endpoint the card names (absolute, guard-checked).
        name, version, protocol_version: the card's fields (``""`` when absent).
        sha256: hex digest of the card bytes, a fingerprint for result files.
    """

    card_url: str
    rpc_url: str
    name: str
    version: str
    protocol_version: str
    sha256: str

    def describe(self) -> JSON:
        """JSON form for result files (URLs without user info or query)."""
        return {
            "card_url": public_url(self.card_url),
            "endpoint": public_url(self.rpc_url),
            "name": self.name,
            "version": self.version,
            "protocol_version": self.protocol_version,
            "sha256": self.sha256,
        }


def card_rpc_url(card: Mapping[str, Any], card_url: str) -> str:
    """Return the JSON-RPC endpoint named by an agent card (relative URLs resolved).

    v0.3 cards name it in ``url`` with ``preferredTransport`` (default ``JSONRPC``); when the
    preferred transport is another one, the ``JSONRPC`` entry of ``additionalInterfaces`` is
    used. A v1.0-style card with only ``supportedInterfaces`` is read the same way.

    Raises:
        AgentError: ``bad_response`` when the card names no JSON-RPC endpoint.
    """
    candidates: list[Any] = []
    preferred = card.get("preferredTransport", "JSONRPC")
    if isinstance(preferred, str) and preferred.upper() == "JSONRPC":
        candidates.append(card.get("url"))
    for key, field in (
        ("additionalInterfaces", "transport"),
        ("supportedInterfaces", "protocolBinding"),
    ):
        interfaces = card.get(key)
        if isinstance(interfaces, list):
            for interface in interfaces:
                if (
                    isinstance(interface, dict)
                    and str(interface.get(field, "")).upper() == "JSONRPC"
                ):
                    candidates.append(interface.get("url"))
    for candidate in candidates:
        if isinstance(candidate, str) and candidate.strip():
            try:
                return str(httpx.URL(card_url).join(candidate.strip()))
            except httpx.InvalidURL:
                continue
    raise AgentError(
        "bad_response",
        f"the agent card at {public_url(card_url)} names no JSON-RPC endpoint "
        f"(preferredTransport {excerpt(str(preferred), 40)}); the evaluator speaks A2A JSON-RPC",
    )


class _CardNotFoundError(Exception):
    """The card path answered 404: try the next well-known path."""


class A2AClient(GuardedHttpClient):
    """Client of the ``a2a`` protocol (A2A v0.3 JSON-RPC ``message/send``).

    Args:
        url: the agent's base URL (the card is at ``{url}/.well-known/agent-card.json``) or
            the card URL itself (ending in ``.json``).
        **options: as :class:`GuardedHttpClient` (API key, timeouts, retries, guard, cap).
            The card fetch gets the same deadline, retries and size cap as one reply.
    """

    protocol = "a2a"

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        self._card: AgentCardInfo | None = None
        self._card_lock = threading.Lock()

    # -- the card ------------------------------------------------------------------------

    def card_urls(self) -> list[str]:
        """The card URLs tried in order (the given ``.json`` URL, or the two well-known paths)."""
        parsed = httpx.URL(self.url)
        if parsed.path.endswith(".json"):
            return [self.url]
        base = str(parsed.copy_with(query=None, fragment=None)).rstrip("/")
        return [base + CARD_PATH, base + LEGACY_CARD_PATH]

    @property
    def card(self) -> AgentCardInfo:
        """The agent card, fetched on first use. Raises :class:`AgentError`."""
        with self._card_lock:
            if self._card is None:
                self._card = self.fetch_card()
            return self._card

    def fetch_card(self) -> AgentCardInfo:
        """Fetch the agent card and check the endpoint it names against the guard.

        Raises:
            AgentError: as a reply would (``transport``, ``timeout``, ``http_status``,
                ``too_large``), ``bad_response`` for a card that is not a JSON object or names
                no JSON-RPC endpoint, ``refused_address`` when that endpoint is refused.
        """
        deadline = time.monotonic() + self.timeout_s
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        headers.update(self.extra_headers)
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        urls = self.card_urls()
        raw = b""
        card_url = urls[0]
        for number, card_url in enumerate(urls):
            try:
                raw = self.request_with_retries(
                    "GET",
                    card_url,
                    None,
                    headers,
                    deadline,
                    what="agent card",
                    not_found=_CardNotFoundError,
                )
                break
            except _CardNotFoundError:
                if number + 1 == len(urls):
                    tried = ", ".join(public_url(u) for u in urls)
                    raise AgentError(
                        "http_status", f"no A2A agent card found (HTTP 404 at {tried})"
                    ) from None
        try:
            card = json.loads(raw)
        except (ValueError, RecursionError):
            card = None
        if not isinstance(card, dict):
            raise AgentError(
                "bad_response",
                f"the agent card at {public_url(card_url)} is not a JSON object: {excerpt(raw)}",
            )
        rpc_url = card_rpc_url(card, card_url)
        try:
            self.guard.check_url(rpc_url)
        except RefusedAddressError as exc:
            raise AgentError(
                "refused_address",
                f"the agent card at {public_url(card_url)} names the endpoint "
                f"{public_url(rpc_url)}, which the guard refuses: {exc}",
            ) from None
        except ResolveError as exc:
            raise AgentError("transport", f"agent card endpoint: {exc}") from None

        def field(name: str) -> str:
            value = card.get(name)
            return value[:200] if isinstance(value, str) else ""

        return AgentCardInfo(
            card_url=card_url,
            rpc_url=rpc_url,
            name=field("name"),
            version=field("version"),
            protocol_version=field("protocolVersion"),
            sha256=hashlib.sha256(raw).hexdigest(),
        )

    # -- one turn ------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The JSON-RPC endpoint named by the agent card (fetched on first use)."""
        return self.card.rpc_url

    def complete(self, messages: list[JSON], *, episode_id: str) -> AgentReply:
        """Send the chat as one ``message/send`` and return the reply. Raises AgentError.

        The first call also fetches the agent card (not counted in ``latency_s``).
        """
        _ = self.card  # fetch (or re-fetch after a failure) before the reply clock starts
        return super().complete(messages, episode_id=episode_id)

    def build_body(self, messages: list[JSON], episode_id: str) -> JSON:
        """Return the JSON-RPC ``message/send`` request for ``messages``."""
        return {
            "jsonrpc": "2.0",
            "id": uuid.uuid4().hex,
            "method": SEND_METHOD,
            "params": {
                "message": {
                    "kind": "message",
                    "role": "user",
                    "messageId": uuid.uuid4().hex,
                    "parts": [{"kind": "text", "text": render_transcript(messages)}],
                }
            },
        }

    def reply_from_data(self, data: Any) -> AgentReply:
        """The reply of a decoded response (its ``latency_s`` is filled in by the caller):
        :meth:`parse_answer`'s text, with the parts it was read from (bounded by
        :func:`part_records`) and where they were; :meth:`parse_usage`'s counts and model.

        Raises:
            AgentError: as :meth:`parse_answer`.
        """
        text, parts, where = self.parse_answer(data)
        input_tokens, output_tokens, model = self.parse_usage(data)
        return AgentReply(
            text=text,
            latency_s=0.0,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            model=model,
            parts=part_records(parts),
            parts_from=where,
        )

    def parse_reply(self, data: Any) -> str:
        """Return the answer of a JSON-RPC response (:meth:`parse_answer`'s text)."""
        return self.parse_answer(data)[0]

    def parse_answer(self, data: Any) -> tuple[str, list[Any], str]:
        """Return the answer of a JSON-RPC response (Message or Task result), the parts it
        was read from and where they were (``"message"``, or as :func:`task_answer`).

        Raises:
            AgentError: ``bad_response`` for a JSON-RPC error object, a failed or unfinished
                task, or any other shape.
        """
        if not isinstance(data, dict):
            raise AgentError("bad_response", "A2A reply must be a JSON-RPC response object")
        error = data.get("error")
        if error is not None:
            if isinstance(error, dict):
                code = error.get("code")
                message = error.get("message")
                if isinstance(code, int) and not isinstance(code, bool):
                    detail = f" {code}"
                else:
                    detail = f" {excerpt(str(code), 20)}" if code is not None else ""
                said = excerpt(str(message), 300) if message is not None else "(no message)"
                raise AgentError("bad_response", f"agent answered JSON-RPC error{detail}: {said}")
            raise AgentError("bad_response", f"agent answered JSON-RPC error {excerpt(str(error))}")
        result = data.get("result")
        if not isinstance(result, dict):
            raise AgentError(
                "bad_response", "A2A reply has neither a 'result' object nor an 'error'"
            )
        kind = result.get("kind")
        if kind is None:
            kind = "task" if "status" in result else "message" if "parts" in result else None
        if kind == "message":
            text = parts_text(result.get("parts"), "message")
            if text is None:
                raise AgentError("bad_response", "the agent's A2A message has no text or data part")
            return text, result["parts"], "message"
        if kind == "task":
            return task_answer(result)
        raise AgentError(
            "bad_response",
            f"A2A result of kind {excerpt(str(kind), 40)}; message/send answers a message or "
            "a task",
        )

    def parse_usage(self, data: Any) -> tuple[int | None, int | None, str | None]:
        """Token counts and model from the result's ``metadata`` when the agent puts them there
        (``{"usage": {"input_tokens", "output_tokens"}, "model"}``; A2A defines no usage
        field, so this is our convention, docs/agent-protocols.md); never raises."""
        result = data.get("result") if isinstance(data, dict) else None
        metadata = result.get("metadata") if isinstance(result, dict) else None
        return usage_from(metadata, "usage", "input_tokens", "output_tokens")

    def describe(self) -> JSON:
        """Protocol, endpoint, limits, A2A version and the fetched card's fingerprint."""
        info = super().describe()
        info["a2a_version"] = A2A_PROTOCOL_VERSION
        if self._card is not None:
            info["card"] = self._card.describe()
        return info
