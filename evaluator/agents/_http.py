"""Shared machinery of the HTTP agent clients: guard, deadline, retries, size cap, errors.

Every protocol client (``http_json``, ``openai_chat``) subclasses :class:`GuardedHttpClient`
and only says how to build the request body and how to read the reply text out of the
response JSON. Failure categories are the ones of :class:`AgentError`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from abc import abstractmethod
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar

import httpx

from evaluator.agents.base import AgentClient, AgentError, AgentReply, usage_from
from evaluator.agents.guard import OutboundGuard, RefusedAddressError, ResolveError
from evaluator.types import JSON

#: Header carrying the per-episode token (see ``evaluator/oracle_vault.py``).
EPISODE_HEADER = "X-NetArena-Episode"
USER_AGENT = "netarena-evaluator/0.1"
#: Bytes of an error body quoted in an ``http_status`` error message.
ERROR_EXCERPT_BYTES = 300


class _RetryableError(Exception):
    """A transport failure worth another attempt (connect refused/reset/timeout)."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category


def excerpt(data: bytes | str, limit: int = 200) -> str:
    """Return a short, quoted, printable rendering of untrusted response data (``repr``)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def public_url(url: str | httpx.URL) -> str:
    """Return ``url`` without user info, query or fragment (those may hold secrets)."""
    try:
        parsed = httpx.URL(url)
        return str(parsed.copy_with(username=None, password=None, query=None, fragment=None))
    except (httpx.InvalidURL, TypeError):
        return "(invalid URL)"


class GuardedHttpClient(AgentClient):
    """Base of the HTTP agent clients.

    One :meth:`complete` call POSTs JSON to ``self.endpoint`` through the outbound guard and
    returns the reply text and its wall-clock latency (seconds, retries included).

    Args:
        url: the agent endpoint as registered by the team.
        timeout_s: total deadline of one ``complete`` call in seconds (all attempts, backoff
            and body reading); 60 s is NetArena's reference harness default. Each socket read
            also times out at the remaining time.
        connect_timeout_s: per-attempt TCP/TLS connect timeout in seconds.
        max_retries: extra attempts after a transport failure (connection refused, reset,
            closed without answer, connect timeout). HTTP answers and bad bodies are final.
        backoff_s: delay before the first retry; doubles on each further retry.
        allowed_networks: CIDR allow-list of the guard (``evaluator/agents/guard.py``).
        allowed_ports: the ports every request may use (the guard's ``allowed_ports``; None =
            any).
        max_response_bytes: the response body (after content decoding) is read as a stream
            and the call fails with ``too_large`` as soon as it exceeds this many bytes.
        headers: extra request headers (e.g. a gateway's routing header).
        api_key: optional secret sent as ``Authorization: Bearer <key>``; never in
            ``describe()`` or error messages.
        verify: TLS verification (``True``, ``False`` or an ``ssl.SSLContext``).

    Raises:
        ValueError: non-positive timeout or size cap, negative retries, bad allow-list entry.
    """

    protocol: ClassVar[str] = ""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 60.0,
        connect_timeout_s: float = 10.0,
        max_retries: int = 2,
        backoff_s: float = 0.25,
        allowed_networks: Sequence[str] = (),
        max_response_bytes: int = 1_048_576,
        headers: Mapping[str, str] | None = None,
        api_key: str | None = None,
        verify: Any = True,
        allowed_ports: Collection[int] | None = None,
    ) -> None:
        if timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError("timeouts must be positive")
        if max_response_bytes <= 0:
            raise ValueError("max_response_bytes must be positive")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.url = url
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_response_bytes = int(max_response_bytes)
        self.extra_headers = dict(headers or {})
        self._api_key = api_key
        self.guard = OutboundGuard(allowed_networks, allowed_ports=allowed_ports)
        #: attempts made by the last :meth:`complete` call (1 = no retry).
        self.last_attempts = 0
        self._client = httpx.Client(
            transport=self.guard.transport(verify=verify),
            follow_redirects=False,
            trust_env=False,  # a proxy from the environment would bypass address pinning
        )

    # -- protocol-specific parts -------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The URL that is POSTed to (default: the registered URL itself)."""
        return self.url

    @abstractmethod
    def build_body(self, messages: list[JSON], episode_id: str) -> JSON:
        """Return the JSON request body for ``messages``."""

    @abstractmethod
    def parse_reply(self, data: Any) -> str:
        """Return the reply text from the decoded response JSON.

        Raises:
            AgentError: category ``bad_response`` when the JSON has the wrong shape.
        """

    def parse_usage(self, data: Any) -> tuple[int | None, int | None, str | None]:
        """Return ``(input_tokens, output_tokens, model)`` the response reports (default:
        ``data["usage"]["input_tokens"/"output_tokens"]`` and ``data["model"]``); ``None``
        for anything absent or malformed. Never raises."""
        return usage_from(data, "usage", "input_tokens", "output_tokens")

    def request_headers(self, episode_id: str) -> dict[str, str]:
        """Headers of one request, with ``Authorization: Bearer`` when an API key is set."""
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
            EPISODE_HEADER: episode_id,
        }
        headers.update(self.extra_headers)
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    # -- the call ----------------------------------------------------------------------

    def complete(self, messages: list[JSON], *, episode_id: str) -> AgentReply:
        """POST ``messages`` and return the agent's reply. Raises :class:`AgentError`."""
        started = time.perf_counter()
        deadline = time.monotonic() + self.timeout_s
        body = json.dumps(self.build_body(messages, episode_id)).encode()
        headers = self.request_headers(episode_id)
        raw = self.request_with_retries("POST", self.endpoint, body, headers, deadline)
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: absurdly nested arrays
            raise AgentError(
                "bad_response", f"agent response is not usable JSON: {excerpt(raw)}"
            ) from None
        reply = self.reply_from_data(data)
        return dataclasses.replace(reply, latency_s=time.perf_counter() - started)

    def reply_from_data(self, data: Any) -> AgentReply:
        """The reply of a decoded response (its ``latency_s`` is filled in by the caller):
        :meth:`parse_reply`'s text and :meth:`parse_usage`'s counts and model.

        Raises:
            AgentError: category ``bad_response`` when the JSON has the wrong shape.
        """
        text = self.parse_reply(data)
        input_tokens, output_tokens, model = self.parse_usage(data)
        return AgentReply(
            text=text,
            latency_s=0.0,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            model=model,
        )

    def request_with_retries(
        self,
        method: str,
        url: str | httpx.URL,
        body: bytes | None,
        headers: dict[str, str],
        deadline: float,
        *,
        what: str = "",
        not_found: type[Exception] | None = None,
    ) -> bytes:
        """Send one request, retrying transport failures with backoff until ``deadline``.

        ``what`` prefixes error messages (e.g. ``"agent card"``); with ``not_found`` set, an
        HTTP 404 raises that exception instead of an ``http_status`` error.

        Raises:
            AgentError: every failure, with the categories of :class:`AgentError`.
        """
        prefix = f"{what}: " if what else ""
        attempt = 0
        while True:
            attempt += 1
            self.last_attempts = attempt
            try:
                return self._send_once(method, url, body, headers, deadline, not_found)
            except _RetryableError as exc:
                delay = self.backoff_s * (2 ** (attempt - 1))
                out_of_time = time.monotonic() + delay >= deadline
                if attempt > self.max_retries or out_of_time:
                    why = "deadline reached" if out_of_time else "no retries left"
                    raise AgentError(
                        exc.category, f"{prefix}{exc} (after {attempt} attempt(s), {why})"
                    ) from None
                time.sleep(delay)

    def _send_once(
        self,
        method: str,
        url: str | httpx.URL,
        body: bytes | None,
        headers: dict[str, str],
        deadline: float,
        not_found: type[Exception] | None,
    ) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AgentError("timeout", f"no reply within the {self.timeout_s:g} s deadline")
        timeout = httpx.Timeout(
            connect=min(self.connect_timeout_s, remaining),
            read=remaining,
            write=remaining,
            pool=remaining,
        )
        where = public_url(url)
        try:
            with self._client.stream(
                method, url, content=body, headers=headers, timeout=timeout
            ) as response:
                if not_found is not None and response.status_code == 404:
                    raise not_found(where)
                self._check_status(response)
                return self._read_capped(response, deadline)
        except RefusedAddressError as exc:
            raise AgentError("refused_address", str(exc)) from None
        except ResolveError as exc:
            raise AgentError("transport", str(exc)) from None
        except httpx.ConnectTimeout:
            raise _RetryableError("timeout", f"connecting to {where} timed out") from None
        except (httpx.ConnectError, httpx.ReadError, httpx.WriteError) as exc:
            raise _RetryableError("transport", f"{where}: {exc or type(exc).__name__}") from None
        except httpx.RemoteProtocolError as exc:
            raise _RetryableError("transport", f"{where}: {exc}") from None
        except httpx.TimeoutException:
            raise AgentError(
                "timeout", f"{where} did not answer within the {self.timeout_s:g} s deadline"
            ) from None
        except httpx.DecodingError as exc:
            raise AgentError("bad_response", f"{where}: undecodable body: {exc}") from None
        except httpx.HTTPError as exc:
            raise AgentError("transport", f"{where}: {exc}") from None

    def _check_status(self, response: httpx.Response) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        if 300 <= status < 400 and "location" in response.headers:
            location = response.headers["location"][:500]
            try:
                target = response.request.url.join(location)
                self.guard.check_url(target)
            except (RefusedAddressError, ResolveError) as exc:
                raise AgentError(
                    "refused_address",
                    f"agent answered HTTP {status} redirecting to {excerpt(location)}, "
                    f"which the guard refuses ({exc}); redirects are not followed",
                ) from None
            except httpx.InvalidURL:
                pass
            raise AgentError(
                "http_status",
                f"agent answered HTTP {status} redirecting to {excerpt(location)}; redirects "
                "are not followed, register the final endpoint URL instead",
            )
        head = b""
        for chunk in response.iter_raw():
            head += chunk
            if len(head) >= ERROR_EXCERPT_BYTES:
                break
        detail = f": {excerpt(head, ERROR_EXCERPT_BYTES)}" if head else ""
        raise AgentError("http_status", f"agent answered HTTP {status}{detail}")

    def _read_capped(self, response: httpx.Response, deadline: float) -> bytes:
        cap = self.max_response_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise AgentError(
                "too_large", f"agent response declares {declared} bytes, more than {cap}"
            )
        parts: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > cap:
                raise AgentError("too_large", f"agent response exceeded {cap} bytes")
            if time.monotonic() > deadline:
                raise AgentError(
                    "timeout", f"agent response still streaming after {self.timeout_s:g} s"
                )
            parts.append(chunk)
        return b"".join(parts)

    def describe(self) -> JSON:
        """JSON description for result files: protocol, endpoint without secrets, limits."""
        return {
            "protocol": self.protocol,
            "url": public_url(self.url),
            "timeout_s": self.timeout_s,
            "max_retries": self.max_retries,
            "max_response_bytes": self.max_response_bytes,
        }

    def close(self) -> None:
        """Close pooled connections."""
        self._client.close()


def message_text(message: Any) -> str:
    """Return the text of one chat message's ``content`` (a string or a list of text parts).

    Raises:
        ValueError: the message or its content has an unusable shape.
    """
    if not isinstance(message, dict):
        raise ValueError("a message must be a JSON object")
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
        return "".join(texts)
    raise ValueError("message content must be a string or a list of text parts")
