"""HTTP server for reference agents, on either wire protocol (DESIGN.md §6).

:func:`build_asgi_app` puts a :class:`~evaluator.reference.agents.ReferenceAgent` behind

- ``openai-chat``: ``POST /v1/chat/completions`` with ``{"model", "messages"}``, answering a
  chat completion object whose ``choices[0].message.content`` is the reply;
- ``http-json``: ``POST /`` (or ``/act``) with ``{"prompt", "history", "episode_id"}``,
  answering ``{"text": reply}``;

and ``GET /healthz`` on both. The episode token comes from header ``X-NetArena-Episode`` (or
the ``episode_id`` body field of ``http-json``). Errors are JSON with an HTTP status: 400 bad
request, 404 no oracle vault entry, 413 body too large, 502 upstream model failed, 500 agent
crash. :func:`serve` runs it in the foreground; :func:`serve_in_thread` runs it in a background
thread on a free port (tests, benchmarks, workers).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from evaluator.agents import PROTOCOLS
from evaluator.agents._http import EPISODE_HEADER, message_text
from evaluator.reference.agents import AgentReplyError, ReferenceAgent
from evaluator.types import JSON

#: Largest request body the server reads, in bytes (a route/k8s history is ~130 kB at most).
MAX_REQUEST_BYTES = 16 * 1024 * 1024
_ROLES = {"system", "user", "assistant", "tool"}


class _BadRequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _read_json(request: Request) -> Any:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_REQUEST_BYTES:
        raise _BadRequestError(413, f"request body larger than {MAX_REQUEST_BYTES} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > MAX_REQUEST_BYTES:
            raise _BadRequestError(413, f"request body larger than {MAX_REQUEST_BYTES} bytes")
    try:
        return json.loads(bytes(body))
    except (ValueError, RecursionError):
        raise _BadRequestError(400, "request body is not JSON") from None


def _normalise_messages(raw: Any, field: str) -> list[JSON]:
    if not isinstance(raw, list):
        raise _BadRequestError(400, f"'{field}' must be a list of messages")
    messages: list[JSON] = []
    for number, item in enumerate(raw):
        role = item.get("role") if isinstance(item, dict) else None
        if role not in _ROLES:
            raise _BadRequestError(400, f"{field}[{number}] needs a role among {sorted(_ROLES)}")
        try:
            content = message_text(item)
        except ValueError as exc:
            raise _BadRequestError(400, f"{field}[{number}]: {exc}") from None
        messages.append({"role": role, "content": content})
    return messages


def parse_openai_request(body: Any) -> list[JSON]:
    """Return the chat of an openai-chat request body. Raises ``_BadRequestError`` (400)."""
    if not isinstance(body, dict):
        raise _BadRequestError(400, "request body must be a JSON object")
    return _normalise_messages(body.get("messages"), "messages")


def parse_http_json_request(body: Any) -> tuple[list[JSON], str | None]:
    """Return (chat, body episode id) of an http-json request: history + prompt as user."""
    if not isinstance(body, dict):
        raise _BadRequestError(400, "request body must be a JSON object")
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise _BadRequestError(400, "'prompt' must be a string")
    history = _normalise_messages(body.get("history", []), "history")
    episode_id = body.get("episode_id")
    return [*history, {"role": "user", "content": prompt}], (
        episode_id if isinstance(episode_id, str) else None
    )


def chat_completion_body(text: str, model: str) -> JSON:
    """Return an OpenAI chat completion object whose only choice says ``text``."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def build_asgi_app(agent: ReferenceAgent, protocol: str) -> Starlette:
    """Return the ASGI app serving ``agent`` on ``protocol`` (one of ``PROTOCOLS``).

    Raises:
        ValueError: unknown protocol.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")

    def error(status: int, message: str) -> JSONResponse:
        if protocol == "openai-chat":
            kind = "invalid_request_error" if status < 500 else "server_error"
            return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)
        return JSONResponse({"error": message}, status_code=status)

    async def answer(messages: list[JSON], episode_id: str | None) -> str | JSONResponse:
        try:
            reply: str = await run_in_threadpool(agent.reply, messages, episode_id)
        except AgentReplyError as exc:
            return error(exc.status, str(exc))
        except Exception as exc:  # noqa: BLE001 - a crashing agent answers 500, server lives on
            return error(500, f"{agent.name} agent failed: {type(exc).__name__}: {exc}")
        return reply

    async def chat_completions(request: Request) -> JSONResponse:
        try:
            body = await _read_json(request)
            messages = parse_openai_request(body)
        except _BadRequestError as exc:
            return error(exc.status, str(exc))
        result = await answer(messages, request.headers.get(EPISODE_HEADER))
        if isinstance(result, JSONResponse):
            return result
        model = body.get("model") if isinstance(body.get("model"), str) else agent.name
        return JSONResponse(chat_completion_body(result, model))

    async def http_json(request: Request) -> JSONResponse:
        try:
            messages, body_episode = parse_http_json_request(await _read_json(request))
        except _BadRequestError as exc:
            return error(exc.status, str(exc))
        result = await answer(messages, request.headers.get(EPISODE_HEADER) or body_episode)
        if isinstance(result, JSONResponse):
            return result
        return JSONResponse({"text": result})

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "protocol": protocol, **agent.describe()})

    routes = [Route("/healthz", healthz, methods=["GET"])]
    if protocol == "openai-chat":
        routes.append(Route("/v1/chat/completions", chat_completions, methods=["POST"]))
    else:
        routes.append(Route("/", http_json, methods=["POST"]))
        routes.append(Route("/act", http_json, methods=["POST"]))
    return Starlette(routes=routes)


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind and return a listening TCP socket (``port=0`` picks a free port).

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    family, kind, proto, _canon, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[
        0
    ]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(128)
    return sock


def socket_url(sock: socket.socket) -> str:
    """Return ``http://host:port`` of a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _uvicorn_server(asgi_app: Any, log_level: str) -> uvicorn.Server:
    config = uvicorn.Config(
        asgi_app, log_level=log_level, access_log=False, lifespan="off", timeout_keep_alive=30
    )
    return uvicorn.Server(config)


def serve(
    asgi_app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
    on_listen: Callable[[str], None] | None = None,
) -> None:
    """Serve ``asgi_app`` in the foreground until interrupted (SIGINT/SIGTERM).

    ``on_listen`` is called with the base URL once the socket is bound (``port=0`` picks a
    free port, so the URL is the only place the chosen port appears).
    """
    sock = bind_socket(host, port)
    if on_listen is not None:
        on_listen(socket_url(sock))
    _uvicorn_server(asgi_app, log_level).run(sockets=[sock])


@dataclass
class RunningServer:
    """A server started by :func:`serve_in_thread`; ``url`` is ``http://host:port``."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return int(self.url.rsplit(":", 1)[1])

    def stop(self, timeout_s: float = 5.0) -> None:
        """Ask the server to exit and wait up to ``timeout_s`` seconds for it."""
        self.server.should_exit = True
        self.thread.join(timeout_s)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_in_thread(
    asgi_app: Any, *, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 10.0
) -> RunningServer:
    """Start ``asgi_app`` in a daemon thread and return once it accepts connections.

    Raises:
        RuntimeError: the server did not start within ``startup_timeout_s`` seconds.
    """
    sock = bind_socket(host, port)
    server = _uvicorn_server(asgi_app, "warning")
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="agent-server"
    )
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("agent server did not start")
        time.sleep(0.01)
    return RunningServer(url=socket_url(sock), server=server, thread=thread)
