"""The episode runner: drives one query through an app episode and an agent client.

:func:`run_episode` runs one episode and lets emulator faults raise; :func:`run_episode_guarded`
retries those and turns the last one into an :class:`~evaluator.types.InfrastructureFailure`.
A caller that serves the oracle reference agent deposits the query in the oracle vault around
the call (``with vault.deposit(query) as episode_id: run_episode(..., episode_id=episode_id)``).
"""

from __future__ import annotations

import logging
import secrets
import time

from evaluator.agents.base import AgentClient, AgentError
from evaluator.app import App, EmulatorError
from evaluator.types import JSON, EpisodeResult, Query

logger = logging.getLogger(__name__)

#: Transcript entries longer than this many characters are cut (result files stay small).
TRANSCRIPT_ENTRY_MAX_CHARS = 20_000
#: An episode whose emulator failed is tried this many times before it is recorded as an
#: infrastructure failure (excluded from the agent's statistics).
INFRASTRUCTURE_ATTEMPTS = 2


def _clip(text: str) -> str:
    if len(text) <= TRANSCRIPT_ENTRY_MAX_CHARS:
        return text
    return (
        text[:TRANSCRIPT_ENTRY_MAX_CHARS]
        + f"\n[... {len(text) - TRANSCRIPT_ENTRY_MAX_CHARS} characters cut]"
    )


def new_episode_id() -> str:
    """Return a fresh random episode token (128 bits, URL-safe)."""
    return secrets.token_urlsafe(16)


def run_episode(
    app: App,
    query: Query,
    client: AgentClient,
    *,
    max_steps: int | None = None,
    episode_id: str | None = None,
) -> EpisodeResult:
    """Run ``query`` with ``client`` and return the scored result.

    The agent sees the first observation as a user message, answers, sees the next observation,
    and so on until the episode terminates, is truncated or ``max_steps`` (default: the app's)
    replies were given. An agent that fails to answer (timeout, transport error, bad response)
    ends the episode as failed with ``failure = "agent:<category>"`` — never skipped.
    ``episode_id`` is the token the agent client sends with every request (default: a fresh
    random one); an oracle vault entry deposited under it must outlive the call.

    Raises:
        EmulatorError: the emulator itself failed (infrastructure; the caller may retry).
    """
    budget = max_steps if max_steps is not None else app.max_steps
    episode_id = episode_id or new_episode_id()
    transcript: list[JSON] = []
    agent_failure: str | None = None
    agent_s = 0.0
    started = time.perf_counter()
    with app.episode(query) as episode:
        observation = episode.reset()
        messages: list[JSON] = [{"role": "user", "content": observation}]
        transcript.append({"role": "user", "content": _clip(observation)})
        for _ in range(budget):
            try:
                reply = client.complete(messages, episode_id=episode_id)
            except AgentError as exc:
                agent_failure = f"agent:{exc.category}"
                transcript.append({"role": "error", "content": _clip(str(exc))})
                break
            agent_s += reply.latency_s
            transcript.append(
                {
                    "role": "assistant",
                    "content": _clip(reply.text),
                    "latency_s": reply.latency_s,
                }
            )
            result = episode.step(reply.text)
            transcript.append(
                {
                    "role": "user",
                    "content": _clip(result.observation),
                    "safe_step": result.safe_step,
                    "info": result.info,
                }
            )
            if result.terminated or result.truncated:
                break
            messages.append({"role": "assistant", "content": reply.text})
            messages.append({"role": "user", "content": result.observation})
        verdict = episode.verdict()
    failure = agent_failure or verdict.failure
    return EpisodeResult.for_query(
        query,
        correct=verdict.correct and agent_failure is None,
        safe=verdict.safe,
        latency_s=verdict.latency_s,
        wall_s=time.perf_counter() - started,
        agent_s=agent_s,
        steps=verdict.steps,
        failure=None if verdict.correct and agent_failure is None else failure,
        details=verdict.details,
        transcript=transcript,
    )


def run_episode_guarded(
    app: App,
    query: Query,
    client: AgentClient,
    *,
    max_steps: int | None = None,
    episode_id: str | None = None,
) -> EpisodeResult:
    """:func:`run_episode` with retries on emulator failures; never raises ``EmulatorError``.

    An episode whose emulator fails :data:`INFRASTRUCTURE_ATTEMPTS` times in a row comes back
    as :meth:`EpisodeResult.for_infrastructure_failure` (``result.infrastructure`` is set).
    Every attempt uses the same ``episode_id`` (default: one fresh random token).
    """
    episode_id = episode_id or new_episode_id()
    last_error = ""
    for attempt in range(1, INFRASTRUCTURE_ATTEMPTS + 1):
        try:
            return run_episode(app, query, client, max_steps=max_steps, episode_id=episode_id)
        except EmulatorError as exc:
            last_error = f"{type(exc).__name__}: {exc}"
            logger.warning("episode %s attempt %d: %s", query.query_id, attempt, last_error)
    return EpisodeResult.for_infrastructure_failure(
        query, last_error, attempts=INFRASTRUCTURE_ATTEMPTS
    )
