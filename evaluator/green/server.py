"""The green agent's A2A server (a2a-sdk, A2A v0.3 JSON-RPC): one app per server.

``message/send`` or ``message/stream`` with an assessment request (:mod:`evaluator.green.request`)
starts a task that

1. fails the request with ``InvalidParamsError`` (-32602) if it is malformed, before any task
   exists;
2. fetches the participant's agent card; an unreachable or refused participant fails the task
   (state ``failed``, a status message saying why);
3. runs the planned episodes one at a time in a worker thread (:mod:`evaluator.green.assessment`),
   streaming per episode a ``working`` status update with a short text and a data artifact
   ``query-<n>`` (:func:`~evaluator.green.assessment.query_record`);
4. ends with the data artifact ``summary`` (:func:`~evaluator.green.assessment.summary_record`)
   and state ``completed``.

``tasks/cancel`` sets the assessment's stop flag: the episode in progress ends at its next agent
call (its emulator is torn down by its own ``close``), no further episode starts, the task ends
``canceled``, and the executor returns only once the episode thread has finished. Assessments
are run one at a time per server (emulator hosts are sized for one); a second request waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentSkill,
    DataPart,
    InvalidParamsError,
    Part,
    TaskState,
    TextPart,
)
from a2a.utils import new_agent_text_message, new_task
from a2a.utils.errors import ServerError

from evaluator.agents import LOOPBACK_NETWORKS, A2AClient, AgentError, make_client
from evaluator.green.assessment import (
    Assessment,
    StoppableClient,
    query_record,
    summary_record,
)
from evaluator.green.request import (
    AssessmentRequest,
    RequestError,
    config_keys,
    parse_request,
    request_payload,
)
from evaluator.oracle_vault import OracleVault
from evaluator.prompting import PromptTypeClient
from evaluator.registry import get_app
from evaluator.types import EpisodeResult

logger = logging.getLogger(__name__)

#: Default per-reply deadline of the purple agent in seconds (NetArena's A2A client uses 60 s).
DEFAULT_TIMEOUT_S = 60.0

#: Status text of a canceled assessment.
CANCELED_TEXT = "assessment canceled; no further query is run"

T = TypeVar("T")


def agent_card(app_id: str, url: str) -> AgentCard:
    """The green agent's A2A v0.3 card: streaming, one skill (the app's assessment, listing
    the app's own config keys, :func:`~evaluator.green.request.config_keys`), input as a data
    part or JSON text, output as data artifacts. ``url`` is the JSON-RPC endpoint.

    Raises:
        UnknownAppError: ``app_id`` is not registered.
    """
    app = get_app(app_id)
    example = {"participants": {"agent": "http://purple:9009"}, "config": {"num_queries": 1}}
    keys = ", ".join(key.name for key in config_keys(app_id))
    return AgentCard(
        name=f"netarena-green-{app_id}",
        description=(
            f"NetArena assessor for {app.title}: evaluates one purple A2A agent on seeded "
            "queries and streams a data artifact per query and a summary."
        ),
        url=url,
        version=str(app.version),
        default_input_modes=["data", "text"],
        default_output_modes=["data", "text"],
        capabilities=AgentCapabilities(streaming=True),
        skills=[
            AgentSkill(
                id=f"{app_id}-assessment",
                name=f"{app_id} assessment",
                description=(
                    f"Send {{participants: {{role: url}}, config}} with exactly one participant; "
                    f"config keys: {keys}."
                ),
                tags=["netarena", "benchmark", app_id],
                examples=[json.dumps(example)],
            )
        ],
    )


def _message_parts(context: RequestContext) -> tuple[list[str], list[Any]]:
    texts: list[str] = []
    data: list[Any] = []
    parts = context.message.parts if context.message is not None else []
    for part in parts:
        root = part.root
        if isinstance(root, TextPart):
            texts.append(root.text)
        elif isinstance(root, DataPart):
            data.append(root.data)
    return texts, data


def _invalid(exc: RequestError) -> ServerError:
    return ServerError(error=InvalidParamsError(message=str(exc), data={"key": exc.key}))


def _verdict_text(result: EpisodeResult) -> str:
    if result.infrastructure is not None:
        return "not scored (infrastructure failure)"
    correct = "correct" if result.correct else "incorrect"
    safe = "safe" if result.safe else "unsafe"
    return f"{correct}, {safe}"


class GreenAgentExecutor(AgentExecutor):
    """Runs assessments of one app (see the module docstring).

    Args:
        app_id: the app assessed (any registered app, :func:`evaluator.registry.app_ids`).
        vault: oracle vault shared with a locally served oracle purple agent, or ``None``.
        allowed_networks: CIDRs of non-public networks a participant may be in (the outbound
            guard, docs/architecture.md §6); default loopback only.
        timeout_s: deadline of one purple-agent reply in seconds.
    """

    def __init__(
        self,
        app_id: str,
        *,
        vault: OracleVault | None = None,
        allowed_networks: Sequence[str] = LOOPBACK_NETWORKS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.app_id = app_id
        self.app = get_app(app_id)
        self.vault = vault
        self.allowed_networks = tuple(allowed_networks)
        self.timeout_s = timeout_s
        self._stops: dict[str, threading.Event] = {}
        self._one_at_a_time = asyncio.Semaphore(1)

    @property
    def running(self) -> int:
        """Assessments whose ``execute`` has not returned yet (their episode threads included)."""
        return len(self._stops)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Check the request, then run the assessment as the module docstring describes.

        Raises:
            ServerError: ``InvalidParamsError`` for a malformed request (no task is created).
        """
        texts, data = _message_parts(context)
        try:
            request = parse_request(self.app_id, request_payload(texts, data))
        except RequestError as exc:
            raise _invalid(exc) from None
        try:
            client = make_client(
                "a2a",
                request.participant_url,
                timeout_s=self.timeout_s,
                allowed_networks=self.allowed_networks,
            )
        except ValueError as exc:  # a URL the outbound guard refuses by its form
            raise _invalid(RequestError(f"participants.{request.role}", str(exc))) from None
        assert isinstance(client, A2AClient) and context.message is not None
        task = context.current_task or new_task(context.message)
        stop = self._stops.setdefault(task.id, threading.Event())
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        try:
            await event_queue.enqueue_event(task)
            await self._assess(request, client, updater, stop)
        except asyncio.CancelledError:
            await self._end_canceled(updater)
            raise
        except Exception as exc:  # noqa: BLE001 - any fault ends the task failed, with why
            if stop.is_set():
                await self._end_canceled(updater)
            else:
                logger.exception("assessment %s failed", task.id)
                await updater.failed(self._say(updater, f"assessment failed: {exc}"))
        else:
            if stop.is_set():
                await self._end_canceled(updater)
        finally:
            stop.set()
            self._stops.pop(task.id, None)
            await asyncio.to_thread(client.close)

    async def _end_canceled(self, updater: TaskUpdater) -> None:
        # tasks/cancel answers from a queue tapped off this one, so the stream of the request
        # that started the task hears of the cancellation only from here, once the episode
        # thread has finished.
        with contextlib.suppress(RuntimeError):  # already ended (completed just before)
            await updater.cancel(self._say(updater, CANCELED_TEXT))

    @staticmethod
    def _say(updater: TaskUpdater, text: str) -> Any:
        return new_agent_text_message(text, updater.context_id, updater.task_id)

    async def _in_thread(self, stop: threading.Event, work: Callable[[], T]) -> T:
        """Run ``work`` in a worker thread; if this coroutine is cancelled, set ``stop`` and
        wait for the thread to finish (its episode closes its emulator) before re-raising."""
        future = asyncio.get_running_loop().run_in_executor(None, work)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            stop.set()
            with contextlib.suppress(Exception):
                await future
            raise

    async def _assess(
        self,
        request: AssessmentRequest,
        participant: A2AClient,
        updater: TaskUpdater,
        stop: threading.Event,
    ) -> None:
        config = request.config
        client = StoppableClient(PromptTypeClient(participant, config.prompt_type), stop)
        levels = ", ".join(f"level{k}" for k in config.levels)
        if self._one_at_a_time.locked():
            await updater.start_work(self._say(updater, "Waiting for the running assessment"))
        async with self._one_at_a_time:
            await updater.start_work(
                self._say(updater, f"Starting assessment: {self.app_id} at {levels}")
            )
            try:
                await self._in_thread(stop, lambda: participant.card)
            except AgentError as exc:
                await updater.failed(
                    self._say(
                        updater,
                        f'participant "{request.role}" at {request.participant_url} could not '
                        f"be reached ({exc.category}): {exc}",
                    )
                )
                return
            assessment = await self._in_thread(
                stop, lambda: Assessment.plan(self.app, request, client, self.vault)
            )
            results: list[EpisodeResult] = []
            total = len(assessment.jobs)
            for position, job in enumerate(assessment.jobs):
                if stop.is_set():
                    return
                result = await self._in_thread(stop, functools.partial(assessment.run, job))
                if stop.is_set():
                    return  # canceled during the episode: its result is not the agent's
                results.append(result)
                await updater.update_status(
                    TaskState.working,
                    self._say(
                        updater,
                        f'Query {position + 1}/{total} processed by agent "{request.role}": '
                        f"{_verdict_text(result)} (level {result.level}, {result.label})",
                    ),
                )
                await updater.add_artifact(
                    [
                        Part(
                            root=DataPart(
                                data=query_record(
                                    position, result, query=job[0], request=request
                                )
                            )
                        )
                    ],
                    name=f"query-{position}",
                )
            summary = summary_record(self.app_id, request, results)
            await updater.add_artifact([Part(root=DataPart(data=summary))], name="summary")
            await updater.complete(
                self._say(
                    updater,
                    f"Assessment complete: {summary['n']} scored episodes, avg_correctness "
                    f"{summary['avg_correctness']}, avg_safety {summary['avg_safety']}",
                )
            )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Stop the assessment between queries and end the task ``canceled``."""
        task_id = context.task_id or ""
        stop = self._stops.get(task_id)
        if stop is not None:
            stop.set()
        context_id = context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.cancel(new_agent_text_message(CANCELED_TEXT, context_id, task_id))


def build_app(
    app_id: str,
    *,
    card_url: str,
    vault: OracleVault | None = None,
    allowed_networks: Sequence[str] = LOOPBACK_NETWORKS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Any:
    """The ASGI application of a green agent for ``app_id`` whose card advertises
    ``card_url`` as its JSON-RPC endpoint (the options as :class:`GreenAgentExecutor`).

    Raises:
        UnknownAppError: ``app_id`` is not registered.
    """
    executor = GreenAgentExecutor(
        app_id, vault=vault, allowed_networks=allowed_networks, timeout_s=timeout_s
    )
    return asgi_app(executor, card_url=card_url)


def asgi_app(executor: GreenAgentExecutor, *, card_url: str) -> Any:
    """The ASGI application serving ``executor`` (a2a-sdk's default request handler, an
    in-memory task store, the JSON-RPC Starlette application)."""
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore())
    card = agent_card(executor.app_id, card_url)
    return A2AStarletteApplication(agent_card=card, http_handler=handler).build()
