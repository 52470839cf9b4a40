"""HTTP server for reference agents, on any wire protocol (docs/architecture.md §6).

:func:`build_asgi_app` puts a :class:`~evaluator.reference.agents.ReferenceAgent` behind

- ``openai-chat``: ``POST /v1/chat/completions`` with ``{"model", "messages"}``, answering a
  chat completion object whose ``choices[0].message.content`` is the reply, and
  ``GET /v1/models`` listing the agent kind as the one model;
- ``openai-tools``: the same paths; the request carries the app's ``tools`` and the reply is a
  chat completion whose message holds one call of them (``finish_reason: "tool_calls"``).
  Earlier calls in the request are read back as the app's reply texts and ``tool`` messages
  as observations (:func:`evaluator.agents.openai_tools.chat_from_wire`); a request without
  tools, or without the tool the agent calls, is a 400;
- ``http-json``: ``POST /`` (or ``/act``) with ``{"prompt", "history", "episode_id"}``,
  answering ``{"text": reply}``;
- ``a2a``: the agent card at ``GET /.well-known/agent-card.json`` (and the pre-0.3 path
  ``/.well-known/agent.json``) naming ``POST /`` as the JSON-RPC 2.0 endpoint, where
  ``message/send`` is answered with an agent Message (the request text is turned back into a
  chat by :func:`evaluator.agents.a2a.parse_transcript`). Malformed requests get JSON-RPC
  error objects (-32700 parse error, -32600 invalid request, -32601 unknown method, -32602
  invalid params, -32001 task not found, -32004 unsupported operation); an agent that cannot
  answer yields a Task in state ``failed`` whose status message says why;

and ``GET /healthz`` on all. The episode token comes from header ``X-NetArena-Episode`` (or
the ``episode_id`` body field of ``http-json``). Errors are JSON with an HTTP status: 400 bad
request, 404 no oracle vault entry, 413 body too large, 502 upstream model failed, 500 agent
crash. :func:`serve` runs it in the foreground; :func:`serve_in_thread` runs it in a background
thread on a free port (tests, benchmarks, workers).
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from evaluator.agents import PROTOCOLS
from evaluator.agents._http import EPISODE_HEADER, message_text
from evaluator.agents.a2a import (
    A2A_PROTOCOL_VERSION,
    CARD_PATH,
    LEGACY_CARD_PATH,
    SEND_METHOD,
    parse_transcript,
)
from evaluator.agents.openai_tools import chat_from_wire, tool_call_message
from evaluator.app import tool_names
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


def tool_call_completion_body(call: JSON, model: str) -> JSON:
    """Return an OpenAI chat completion object whose only choice makes one tool call
    (``call``: ``{"name", "arguments"}``, optionally ``"id"``, ``"content"``)."""
    body = chat_completion_body("", model)
    body["choices"][0]["message"] = tool_call_message(call)
    body["choices"][0]["finish_reason"] = "tool_calls"
    return body


def request_tool_names(body: Any) -> list[str]:
    """The function names of an openai-tools request's ``tools``. Raises ``_BadRequestError``
    (400) when it carries none."""
    tools = body.get("tools") if isinstance(body, dict) else None
    names = tool_names(tools) if isinstance(tools, list) else []
    if not names:
        raise _BadRequestError(
            400, "an openai-tools request carries the app's function tools in 'tools'"
        )
    return names


# -- a2a --------------------------------------------------------------------------------

#: JSON-RPC 2.0 error codes (JSON-RPC 2.0 specification §5.1).
RPC_PARSE_ERROR = -32700
RPC_INVALID_REQUEST = -32600
RPC_METHOD_NOT_FOUND = -32601
RPC_INVALID_PARAMS = -32602
#: A2A v0.3 error codes: TaskNotFoundError, UnsupportedOperationError.
A2A_TASK_NOT_FOUND = -32001
A2A_UNSUPPORTED_OPERATION = -32004
_TASK_METHODS = ("tasks/get", "tasks/cancel", "tasks/resubscribe")


class _RpcError(Exception):
    def __init__(self, request_id: Any, code: int, message: str) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.code = code


def agent_card(agent: ReferenceAgent, rpc_url: str) -> JSON:
    """Return the A2A v0.3 agent card of a served reference agent.

    ``rpc_url`` is the JSON-RPC endpoint the card advertises. Streaming and push notifications
    are not offered; one skill per served app.
    """
    apps = ", ".join(agent.app_ids)
    return {
        "protocolVersion": A2A_PROTOCOL_VERSION,
        "name": f"netarena-{agent.name}",
        "description": (
            f"NetArena {agent.name} reference agent for {apps}. Send the episode so far as one "
            "text message; the reply is the next action in the app's answer format."
        ),
        "url": rpc_url,
        "preferredTransport": "JSONRPC",
        "version": "0.1.0",
        "capabilities": {"streaming": False, "pushNotifications": False},
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": [
            {
                "id": f"{app_id}-{agent.name}",
                "name": f"{app_id} ({agent.name})",
                "description": f"Answers NetArena {app_id} queries as the {agent.name} agent.",
                "tags": ["netarena", app_id, agent.name],
            }
            for app_id in agent.app_ids
        ],
    }


def _request_parts_text(parts: Any) -> str:
    if not isinstance(parts, list) or not parts:
        raise ValueError("'message.parts' must be a non-empty list")
    texts = []
    for number, part in enumerate(parts):
        if not isinstance(part, dict):
            raise ValueError(f"message.parts[{number}] must be an object")
        kind = part.get("kind")
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise ValueError(f"message.parts[{number}] is a text part without text")
            texts.append(part["text"])
        elif kind == "data":
            try:
                texts.append(json.dumps(part.get("data"), indent=2, ensure_ascii=False))
            except (TypeError, ValueError, RecursionError):
                raise ValueError(f"message.parts[{number}] has unusable data") from None
        elif kind != "file":
            raise ValueError(f"message.parts[{number}] has unknown kind {str(kind)[:40]!r}")
    if not texts:
        raise ValueError("the message has no text part")
    return "\n".join(texts)


def parse_a2a_request(body: Any) -> tuple[Any, list[JSON], JSON]:
    """Return (request id, chat, request message) of a JSON-RPC ``message/send`` request.

    The text parts of the user message (joined with ``"\\n"``; data parts as JSON) are turned
    back into a chat by :func:`~evaluator.agents.a2a.parse_transcript`.

    Raises:
        _RpcError: the JSON-RPC error to answer (invalid request, unknown or unsupported
            method, task methods, invalid params).
    """
    if not isinstance(body, dict):
        raise _RpcError(
            None, RPC_INVALID_REQUEST, "a JSON-RPC request must be an object (no batches)"
        )
    request_id = body.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | None):
        raise _RpcError(None, RPC_INVALID_REQUEST, "'id' must be a string, a number or null")
    if body.get("jsonrpc") != "2.0":
        raise _RpcError(request_id, RPC_INVALID_REQUEST, "'jsonrpc' must be \"2.0\"")
    method = body.get("method")
    if not isinstance(method, str):
        raise _RpcError(request_id, RPC_INVALID_REQUEST, "'method' must be a string")
    if method in _TASK_METHODS:
        raise _RpcError(
            request_id, A2A_TASK_NOT_FOUND, "task not found: this agent answers with messages"
        )
    if method == "message/stream":
        raise _RpcError(
            request_id,
            A2A_UNSUPPORTED_OPERATION,
            "streaming is not supported (capabilities.streaming is false); use message/send",
        )
    if method != SEND_METHOD:
        raise _RpcError(request_id, RPC_METHOD_NOT_FOUND, f"method not found: {method[:80]!r}")
    params = body.get("params")
    message = params.get("message") if isinstance(params, dict) else None
    if not isinstance(message, dict):
        raise _RpcError(request_id, RPC_INVALID_PARAMS, "'params.message' must be an object")
    if message.get("role") != "user":
        raise _RpcError(request_id, RPC_INVALID_PARAMS, "'params.message.role' must be 'user'")
    try:
        text = _request_parts_text(message.get("parts"))
    except ValueError as exc:
        raise _RpcError(request_id, RPC_INVALID_PARAMS, str(exc)) from None
    return request_id, parse_transcript(text), message


def _agent_message(text: str, context_id: Any) -> JSON:
    message: JSON = {
        "kind": "message",
        "messageId": uuid.uuid4().hex,
        "role": "agent",
        "parts": [{"kind": "text", "text": text}],
    }
    if isinstance(context_id, str):
        message["contextId"] = context_id
    return message


def failed_task(reason: str, context_id: Any) -> JSON:
    """Return an A2A Task in state ``failed`` whose status message says ``reason``."""
    context = context_id if isinstance(context_id, str) else uuid.uuid4().hex
    return {
        "kind": "task",
        "id": uuid.uuid4().hex,
        "contextId": context,
        "status": {
            "state": "failed",
            "message": _agent_message(reason, context),
            "timestamp": datetime.now(UTC).isoformat(),
        },
    }


def _rpc_response(request_id: Any, *, result: Any = None, error: JSON | None = None) -> JSON:
    if error is not None:
        return {"jsonrpc": "2.0", "id": request_id, "error": error}
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def build_asgi_app(
    agent: ReferenceAgent, protocol: str, *, public_url: str | None = None
) -> Starlette:
    """Return the ASGI app serving ``agent`` on ``protocol`` (one of ``PROTOCOLS``).

    ``public_url`` (``a2a`` only) is the JSON-RPC endpoint URL the agent card advertises; by
    default it is derived from each card request (its scheme and ``Host``, path ``/``).

    Raises:
        ValueError: unknown protocol.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")

    def error(status: int, message: str) -> JSONResponse:
        if protocol in ("openai-chat", "openai-tools"):
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

    def tool_answer(messages: list[Any], episode_id: str | None) -> JSON:
        # the request's app, then its calls read back as that app's reply texts
        try:
            bare = chat_from_wire(messages)
        except ValueError as exc:
            raise _BadRequestError(400, str(exc)) from None
        app = agent.app_of(bare, episode_id)
        chat = chat_from_wire(messages, app.reply_from_tool_call)
        return agent.tool_reply(chat, episode_id)

    async def tool_completions(request: Request) -> JSONResponse:
        try:
            body = await _read_json(request)
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                raise _BadRequestError(400, "'messages' must be a list of messages")
            offered = request_tool_names(body)
            call = await run_in_threadpool(
                tool_answer, body["messages"], request.headers.get(EPISODE_HEADER)
            )
        except _BadRequestError as exc:
            return error(exc.status, str(exc))
        except AgentReplyError as exc:
            return error(exc.status, str(exc))
        except Exception as exc:  # noqa: BLE001 - a crashing agent answers 500, server lives on
            return error(500, f"{agent.name} agent failed: {type(exc).__name__}: {exc}")
        if call["name"] not in offered:
            return error(
                400, f"the request's tools ({', '.join(offered)}) lack {call['name']!r}"
            )
        asked = body.get("model")
        return JSONResponse(
            tool_call_completion_body(call, asked if isinstance(asked, str) else agent.name)
        )

    async def http_json(request: Request) -> JSONResponse:
        try:
            messages, body_episode = parse_http_json_request(await _read_json(request))
        except _BadRequestError as exc:
            return error(exc.status, str(exc))
        result = await answer(messages, request.headers.get(EPISODE_HEADER) or body_episode)
        if isinstance(result, JSONResponse):
            return result
        return JSONResponse({"text": result})

    async def a2a_card(request: Request) -> JSONResponse:
        return JSONResponse(agent_card(agent, public_url or str(request.base_url)))

    async def a2a_rpc(request: Request) -> JSONResponse:
        try:
            body = await _read_json(request)
        except _BadRequestError as exc:
            code = RPC_PARSE_ERROR if exc.status == 400 else RPC_INVALID_REQUEST
            error = {"code": code, "message": str(exc)}
            status = 200 if exc.status == 400 else exc.status
            return JSONResponse(_rpc_response(None, error=error), status_code=status)
        try:
            request_id, messages, message = parse_a2a_request(body)
        except _RpcError as exc:
            error = {"code": exc.code, "message": str(exc)}
            return JSONResponse(_rpc_response(exc.request_id, error=error))
        context_id = message.get("contextId")
        episode_id = request.headers.get(EPISODE_HEADER)
        try:
            reply: str = await run_in_threadpool(agent.reply, messages, episode_id)
        except AgentReplyError as exc:
            task = failed_task(f"{agent.name} agent cannot answer: {exc}", context_id)
            return JSONResponse(_rpc_response(request_id, result=task))
        except Exception as exc:  # noqa: BLE001 - a crashing agent fails the task, server lives on
            task = failed_task(
                f"{agent.name} agent failed: {type(exc).__name__}: {exc}", context_id
            )
            return JSONResponse(_rpc_response(request_id, result=task))
        return JSONResponse(_rpc_response(request_id, result=_agent_message(reply, context_id)))

    async def models(request: Request) -> JSONResponse:
        # the OpenAI "list models" answer: servers are told apart by it (site pre-flight)
        listed = {"id": agent.name, "object": "model", "owned_by": "netarena-reference"}
        return JSONResponse({"object": "list", "data": [listed]})

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "protocol": protocol, **agent.describe()})

    routes = [Route("/healthz", healthz, methods=["GET"])]
    if protocol == "openai-chat":
        routes.append(Route("/v1/chat/completions", chat_completions, methods=["POST"]))
        routes.append(Route("/v1/models", models, methods=["GET"]))
    elif protocol == "openai-tools":
        routes.append(Route("/v1/chat/completions", tool_completions, methods=["POST"]))
        routes.append(Route("/v1/models", models, methods=["GET"]))
    elif protocol == "a2a":
        routes.append(Route(CARD_PATH, a2a_card, methods=["GET"]))
        routes.append(Route(LEGACY_CARD_PATH, a2a_card, methods=["GET"]))
        routes.append(Route("/", a2a_rpc, methods=["POST"]))
    else:
        routes.append(Route("/", http_json, methods=["POST"]))
        routes.append(Route("/act", http_json, methods=["POST"]))
    return Starlette(routes=routes)


def print_line(line: str) -> None:
    """Write ``line`` to stdout and flush: the start announcement that supervisors read the
    server's URL from."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


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
