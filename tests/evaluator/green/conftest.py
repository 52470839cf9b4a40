"""Fixtures of the green agent tests: green and purple A2A servers on loopback, and an
assessment driven by the official a2a-sdk client (what AgentBeats' scenario runner uses).

Purple agents are this project's reference agents served over A2A in-process (as the a2a
client tests do); the green agent runs in-process too (:func:`start_green`), except where a
test starts ``manage.py serve_green`` itself.
"""

from __future__ import annotations

import asyncio
import json
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from evaluator.oracle_vault import OracleVault
from evaluator.reference.agents import make_agent
from evaluator.reference.server import RunningServer, build_asgi_app, serve_in_thread
from evaluator.registry import get_app
from tests.evaluator.conftest import LOOPBACK, free_port

with warnings.catch_warnings():  # a2a-sdk 0.3 uses a constant newer starlette deprecates
    warnings.simplefilter("ignore")
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import (
        DataPart,
        Message,
        Part,
        Role,
        Task,
        TaskIdParams,
        TaskStatusUpdateEvent,
        TextPart,
    )

    from evaluator.green.server import GreenAgentExecutor, asgi_app


@dataclass
class Green:
    """A green agent served in-process."""

    url: str
    executor: GreenAgentExecutor
    server: RunningServer


@dataclass
class Outcome:
    """What the client saw of one assessment.

    ``statuses``: texts of the status updates, in order (streaming only); ``artifacts``: the
    data of every artifact, in order; ``state``: the task's final state (``"completed"``...);
    ``message``: the text of the final status message.
    """

    task_id: str = ""
    state: str = ""
    message: str = ""
    statuses: list[str] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def queries(self) -> list[dict[str, Any]]:
        """The per-query records."""
        return [a for a in self.artifacts if a.get("kind") == "query"]

    @property
    def summary(self) -> dict[str, Any]:
        """The summary record (exactly one must exist)."""
        found = [a for a in self.artifacts if a.get("kind") == "summary"]
        assert len(found) == 1, self.artifacts
        return found[0]


def _text(message: Message | None) -> str:
    if message is None:
        return ""
    return "\n".join(p.root.text for p in message.parts if isinstance(p.root, TextPart))


def _data(parts: list[Part]) -> list[dict[str, Any]]:
    return [p.root.data for p in parts if isinstance(p.root, DataPart)]


def request_message(request: Any, *, as_data: bool = False) -> Message:
    """A user message carrying ``request``: a data part, or text (a ``str`` is sent as is)."""
    if as_data:
        part = Part(root=DataPart(data=request))
    else:
        text = request if isinstance(request, str) else json.dumps(request)
        part = Part(root=TextPart(text=text))
    return Message(role=Role.user, parts=[part], message_id=uuid.uuid4().hex)


async def _assess(
    url: str,
    message: Message,
    streaming: bool,
    on_event: Callable[[Any, Outcome], Awaitable[None]] | None,
) -> Outcome:
    outcome = Outcome()
    async with httpx.AsyncClient(timeout=300) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
        task: Task | None = None
        async for event in client.send_message(message):
            assert isinstance(event, tuple), f"the green agent answers with a task: {event}"
            task, update = event
            outcome.task_id = task.id
            if isinstance(update, TaskStatusUpdateEvent) and update.status.message:
                outcome.statuses.append(_text(update.status.message))
            if on_event is not None:
                await on_event(client, outcome)
        assert task is not None
        final = await client.get_task(_query(task.id))
        outcome.state = final.status.state.value
        outcome.message = _text(final.status.message)
        outcome.artifacts = [d for a in final.artifacts or [] for d in _data(a.parts)]
    return outcome


def _query(task_id: str) -> Any:
    from a2a.types import TaskQueryParams

    return TaskQueryParams(id=task_id)


def assess(
    url: str,
    request: Any,
    *,
    streaming: bool = True,
    as_data: bool = False,
    on_event: Callable[[Any, Outcome], Awaitable[None]] | None = None,
) -> Outcome:
    """Send ``request`` to the green agent at ``url`` with the a2a-sdk client (``message/stream``
    when ``streaming``, else ``message/send``) and return what came back. ``on_event(client,
    outcome)`` runs after every streamed event (a test cancels from there).

    Raises:
        A2AClientJSONRPCError: the green agent answered a JSON-RPC error.
    """
    return asyncio.run(_assess(url, request_message(request, as_data=as_data), streaming, on_event))


async def cancel(client: Any, task_id: str) -> Task:
    """``tasks/cancel`` through the a2a-sdk client."""
    return await client.cancel_task(TaskIdParams(id=task_id))


@pytest.fixture
def vault_dir(tmp_path: Path) -> Path:
    """An oracle vault directory shared by the green agent and the served oracle."""
    path = tmp_path / "vault"
    path.mkdir()
    return path


@pytest.fixture
def servers() -> Iterator[list[RunningServer]]:
    """Servers started by a test, stopped after it."""
    started: list[RunningServer] = []
    yield started
    for server in started:
        server.server.should_exit = True
    for server in started:
        server.stop()


@pytest.fixture
def start_green(servers: list[RunningServer], vault_dir: Path) -> Callable[..., Green]:
    """Start the green agent of an app in-process on a free port (loopback participants,
    the test's oracle vault)."""

    def start(app_id: str, **options: Any) -> Green:
        options.setdefault("vault", OracleVault(vault_dir))
        options.setdefault("allowed_networks", LOOPBACK)
        options.setdefault("timeout_s", 30.0)
        executor = GreenAgentExecutor(app_id, **options)
        port = free_port()
        card_url = f"http://127.0.0.1:{port}/"
        server = serve_in_thread(asgi_app(executor, card_url=card_url), port=port)
        servers.append(server)
        return Green(url=server.url, executor=executor, server=server)

    return start


@pytest.fixture
def start_purple(servers: list[RunningServer], vault_dir: Path) -> Callable[..., str]:
    """Serve a reference agent (``oracle``, ``null``, ``heuristic``...) of an app over A2A;
    return its URL. ``delay_s`` holds every request that long (a slow agent)."""

    def start(kind: str, app_id: str, *, delay_s: float = 0.0) -> str:
        agent = make_agent(kind, get_app(app_id), vault_dir=str(vault_dir))
        app = build_asgi_app(agent, "a2a")
        server = serve_in_thread(slowed(app, delay_s) if delay_s else app)
        servers.append(server)
        return server.url

    return start


def slowed(app: Any, delay_s: float) -> Any:
    """``app`` with every POST held ``delay_s`` seconds before it is handled."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("method") == "POST":
            await asyncio.sleep(delay_s)
        await app(scope, receive, send)

    return wrapped


def wait_until(condition: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Poll ``condition`` every 0.1 s until it holds or ``timeout_s`` passes; its last value."""
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[None]:
    """The embedded cluster, up for the session (:func:`tests.conftest.session_cluster`)."""
    from tests.conftest import session_cluster

    with session_cluster():
        yield
