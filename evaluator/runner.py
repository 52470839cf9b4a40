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
from collections.abc import Sequence

from evaluator.agents.base import AgentClient, AgentError, AgentReply
from evaluator.app import App, EmulatorError
from evaluator.clip import DETAILS_MAX_BYTES, INFO_MAX_BYTES, clip_json, clip_text
from evaluator.deadline import JudgeBudgetExceeded
from evaluator.types import JSON, EpisodeResult, Query, Verdict

logger = logging.getLogger(__name__)

#: Transcript entries longer than this many characters are cut (result files stay small).
TRANSCRIPT_ENTRY_MAX_CHARS = 20_000
#: Characters of a tool call's arguments kept in its transcript entry (the entry's content,
#: the reply text the call stands for, holds them in full).
TOOL_ARGUMENTS_MAX_CHARS = 2_000
#: Characters of transcript content kept per episode; later entries are replaced by one note.
TRANSCRIPT_MAX_CHARS = 400_000
#: An episode whose emulator failed is tried this many times before it is recorded as an
#: infrastructure failure (excluded from the agent's statistics).
INFRASTRUCTURE_ATTEMPTS = 3
#: Seconds to wait before the 2nd, 3rd, ... attempt (back-off: a busy host or a cluster that
#: is still settling gets time to recover; the last value repeats).
INFRASTRUCTURE_BACKOFF_S = (0.5, 2.0)
#: ``failure`` prefix of an episode whose step or verdict raised while handling the agent's
#: output (``"bad_output:RecursionError"``): the agent's failure, scored incorrect and unsafe
#: (a reply that crashes the judge must not drop the query from the score).
BAD_OUTPUT = "bad_output"
#: ``failure`` prefix of an episode every attempt of which failed in the emulator *after* the
#: agent had acted (its code ran out of time on a busy host, the dataplane or the enforcer
#: failed after its write): ``"agent_caused:SandboxOverloadedError"``. The agent could have
#: produced the fault, so after the retries it is scored as the agent's failure, never left
#: out as infrastructure (docs/metrics.md, "Infrastructure failures").
AGENT_CAUSED = "agent_caused"
#: Characters of agent replies kept in full per episode for rejudging
#: (``EpisodeResult.replay``); an episode whose replies are longer is recorded as not
#: replayable (``replay = None``) rather than replayed from a cut transcript.
REPLAY_MAX_CHARS = 2_000_000


def _clip(text: str) -> str:
    return clip_text(text, TRANSCRIPT_ENTRY_MAX_CHARS)


class _Transcript:
    """The episode's transcript, bounded by :data:`TRANSCRIPT_MAX_CHARS` of content."""

    def __init__(self) -> None:
        self.entries: list[JSON] = []
        self.chars = 0
        self.full = False

    def add(self, role: str, content: str, **extra: object) -> None:
        if self.full:
            return
        text = _clip(content)
        if self.chars + len(text) > TRANSCRIPT_MAX_CHARS:
            self.full = True
            note = f"[transcript cut at {TRANSCRIPT_MAX_CHARS} characters]"
            self.entries.append({"role": "note", "content": note})
            return
        self.chars += len(text)
        entry: JSON = {"role": role, "content": text}
        for key, value in extra.items():
            entry[key] = clip_json(value, max_bytes=INFO_MAX_BYTES) if key == "info" else value
        self.entries.append(entry)


class _Usage:
    """Token counts and model name summed over an episode's replies (None until reported)."""

    def __init__(self) -> None:
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.model: str | None = None

    def add(self, reply: AgentReply) -> None:
        if reply.input_tokens is not None:
            self.input_tokens = (self.input_tokens or 0) + reply.input_tokens
        if reply.output_tokens is not None:
            self.output_tokens = (self.output_tokens or 0) + reply.output_tokens
        if reply.model is not None:
            self.model = reply.model


def _keep_for_replay(kept: list[str] | None, text: str) -> list[str] | None:
    """Append ``text`` unless the replies would exceed :data:`REPLAY_MAX_CHARS` (then None)."""
    if kept is None or sum(map(len, kept)) + len(text) > REPLAY_MAX_CHARS:
        return None
    kept.append(text)
    return kept


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
    replies were given (the episode gets the same budget). An agent that fails to answer
    (timeout, transport error, bad response) ends the episode as failed with
    ``failure = "agent:<category>"`` — never skipped.
    ``episode_id`` is the token the agent client sends with every request (default: a fresh
    random one); an oracle vault entry deposited under it must outlive the call.

    Raises:
        EmulatorError: the emulator itself failed (infrastructure; the caller may retry). When
            it failed in ``step`` or ``verdict`` after the agent's first reply, the exception
            carries ``after_agent_reply = True`` (see :func:`agent_could_cause`).
    """
    try:
        return _run_episode(app, query, client, max_steps=max_steps, episode_id=episode_id)
    except EmulatorError as exc:
        if not hasattr(exc, "after_agent_reply"):
            exc.after_agent_reply = False  # type: ignore[attr-defined]
        raise


def agent_could_cause(exc: EmulatorError) -> bool:
    """True when the agent could have produced this emulator failure: it was raised after the
    agent's first reply (while applying a step or judging the final state), and it is not
    one where the judge itself may be wrong (a cross-check disagreement, whose exception sets
    ``judge_disagreement = True``) or a missing tool."""
    from evaluator.app import DependencyMissingError

    return (
        bool(getattr(exc, "after_agent_reply", False))
        and not getattr(exc, "judge_disagreement", False)
        and not isinstance(exc, DependencyMissingError)
    )


def _run_episode(
    app: App,
    query: Query,
    client: AgentClient,
    *,
    max_steps: int | None,
    episode_id: str | None,
) -> EpisodeResult:
    budget = max_steps if max_steps is not None else app.max_steps
    episode_id = episode_id or new_episode_id()
    transcript = _Transcript()
    agent_failure: str | None = None
    agent_error_message = ""
    output_failure: str | None = None
    agent_s = 0.0
    replies = 0
    usage = _Usage()
    replayed: list[str] | None = []
    started = time.perf_counter()
    agent = client.for_app(app)
    with app.episode(query, max_steps=budget) as episode:
        observation = episode.reset()
        instance_names = episode.instance_names()
        agent.episode_started(instance_names)
        messages: list[JSON] = [{"role": "user", "content": observation}]
        transcript.add("user", observation)
        for _ in range(budget):
            try:
                reply = agent.complete(messages, episode_id=episode_id)
            except AgentError as exc:
                agent_failure = f"agent:{exc.category}"
                agent_error_message = str(exc)
                transcript.add("error", str(exc))
                break
            agent_s += reply.latency_s
            replies += 1
            usage.add(reply)
            replayed = _keep_for_replay(replayed, reply.text)
            called: JSON = {}
            if reply.tool_call is not None:
                called["tool_call"] = _call_summary(reply.tool_call)
            if reply.parts is not None:  # a2a: what the agent answered with, part by part
                called.update(parts=reply.parts, parts_from=reply.parts_from)
            transcript.add("assistant", reply.text, latency_s=reply.latency_s, **called)
            try:
                result = episode.step(reply.text)
            except EmulatorError as exc:
                exc.after_agent_reply = True  # type: ignore[attr-defined]
                raise
            except Exception as exc:  # noqa: BLE001 - agent output broke the judge: its failure
                output_failure = _bad_output(exc)
                transcript.add("error", f"{output_failure}: {_describe(exc)}")
                break
            transcript.add("user", result.observation, safe_step=result.safe_step, info=result.info)
            if result.terminated or result.truncated:
                break
            said: JSON = {"role": "assistant", "content": reply.text}
            if reply.tool_call is not None:
                said["tool_call"] = reply.tool_call  # the call goes back as the agent sent it
            messages.append(said)
            messages.append({"role": "user", "content": result.observation})
        if output_failure is None:
            try:
                verdict = episode.verdict()
            except EmulatorError as exc:
                exc.after_agent_reply = replies > 0  # type: ignore[attr-defined]
                raise
            except Exception as exc:  # noqa: BLE001 - as above, while judging the final state
                output_failure = _bad_output(exc)
                transcript.add("error", f"{output_failure}: {_describe(exc)}")
        if output_failure is not None:
            verdict = Verdict(
                correct=False,
                safe=False,
                latency_s=0.0,
                steps=replies,
                failure=output_failure,
                details={"error": output_failure},
            )
    failure = agent_failure or verdict.failure
    correct = verdict.correct and agent_failure is None
    return EpisodeResult.for_query(
        query,
        correct=correct,
        safe=verdict.safe,
        latency_s=verdict.latency_s,
        wall_s=time.perf_counter() - started,
        agent_s=agent_s,
        steps=verdict.steps,
        failure=None if correct else failure,
        details=clip_json(verdict.details, max_bytes=DETAILS_MAX_BYTES),
        transcript=transcript.entries,
        changed_state=verdict.changed_state,
        blast_radius=verdict.blast_radius,
        replay=None
        if replayed is None
        else {
            "replies": replayed,
            "agent_failure": agent_failure,
            "agent_error": agent_error_message[:2000] if agent_failure else None,
            "max_steps": budget,
            "instance_names": instance_names,
        },
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        served_model=usage.model,
    )


def _call_summary(call: JSON) -> JSON:
    """A tool call as the transcript keeps it: its name and its arguments text (cut)."""
    return {
        "name": str(call.get("name", "")),
        "arguments": clip_text(str(call.get("arguments", "")), TOOL_ARGUMENTS_MAX_CHARS),
    }


def _bad_output(exc: BaseException) -> str:
    """The failure category of an exception raised while handling agent output."""
    if isinstance(exc, JudgeBudgetExceeded):
        return f"{BAD_OUTPUT}:judge_timeout"
    return f"{BAD_OUTPUT}:{type(exc).__name__}"


def _describe(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"[:2000]
    except Exception:  # noqa: BLE001 - a hostile __str__ on an exception built from output
        return type(exc).__name__


def run_episode_guarded(
    app: App,
    query: Query,
    client: AgentClient,
    *,
    max_steps: int | None = None,
    episode_id: str | None = None,
    backoff_s: Sequence[float] = INFRASTRUCTURE_BACKOFF_S,
) -> EpisodeResult:
    """:func:`run_episode` with retries on emulator failures; never raises ``EmulatorError``.

    An episode whose emulator fails :data:`INFRASTRUCTURE_ATTEMPTS` times in a row comes back
    as :meth:`EpisodeResult.for_infrastructure_failure` (``result.infrastructure`` is set);
    before attempt ``k + 1`` it waits ``backoff_s[k - 1]`` seconds (the last value repeats).
    Every attempt uses the same ``episode_id`` (default: one fresh random token).

    When every attempt failed after the agent had acted (:func:`agent_could_cause`), the
    result is instead the agent's failure, ``failure = "agent_caused:<ExceptionType>"``,
    incorrect and unsafe: a fault the agent could have produced never drops its query.
    """
    episode_id = episode_id or new_episode_id()
    last_error = ""
    last_details: JSON = {}
    caused_by_agent = True
    for attempt in range(1, INFRASTRUCTURE_ATTEMPTS + 1):
        if attempt > 1 and backoff_s:
            time.sleep(backoff_s[min(attempt - 2, len(backoff_s) - 1)])
        try:
            return run_episode(app, query, client, max_steps=max_steps, episode_id=episode_id)
        except EmulatorError as exc:
            last_error = f"{type(exc).__name__}: {exc}"
            last_details = exc.details
            caused_by_agent = caused_by_agent and agent_could_cause(exc)
            logger.warning("episode %s attempt %d: %s", query.query_id, attempt, last_error)
    if caused_by_agent:
        return _agent_caused(query, last_error, last_details)
    return EpisodeResult.for_infrastructure_failure(
        query,
        last_error,
        attempts=INFRASTRUCTURE_ATTEMPTS,
        details=clip_json(last_details, max_bytes=DETAILS_MAX_BYTES) if last_details else None,
    )


def _agent_caused(query: Query, error: str, evidence: JSON) -> EpisodeResult:
    """The scored result of an episode whose every attempt failed after the agent acted."""
    kind = error.partition(":")[0] or "EmulatorError"
    details: JSON = {"error": error[:2000], "agent_caused": True}
    if evidence:
        details["evidence"] = clip_json(evidence, max_bytes=DETAILS_MAX_BYTES)
    return EpisodeResult.for_query(
        query,
        correct=False,
        safe=False,
        latency_s=0.0,
        wall_s=0.0,
        agent_s=0.0,
        steps=0,
        failure=f"{AGENT_CAUSED}:{kind}",
        details=details,
    )
