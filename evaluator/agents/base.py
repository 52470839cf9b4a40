"""The agent-client interface: one class per wire protocol (docs/architecture.md §6)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evaluator.types import JSON

if TYPE_CHECKING:
    from evaluator.app import App


class AgentError(Exception):
    """The agent could not be asked or did not answer usably.

    Attributes:
        category: short failure category recorded on the episode: ``"timeout"``,
            ``"transport"``, ``"http_status"``, ``"too_large"``, ``"bad_response"``,
            ``"refused_address"``.
    """

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category


@dataclass(frozen=True)
class AgentReply:
    """One agent answer.

    Attributes:
        text: the reply text.
        latency_s: seconds of the evaluator's wall clock from sending the request to the last
            byte of the response (never a figure the agent reports).
        input_tokens, output_tokens: token counts the endpoint reported for this call (the
            OpenAI ``usage`` object, or ``usage`` in http-json / A2A metadata), ``None`` when
            it reported none or nothing usable. Self-reported: shown as cost, never scored.
        model: the model name the endpoint reported (``None`` when absent).
        tool_call: for the ``openai-tools`` protocol, the one call the reply carried, as it
            goes back into the conversation: ``{"id", "name", "arguments"}`` (``arguments`` the
            JSON text as sent, or an object re-serialised) plus ``"content"`` when the
            message had that key (its value as sent: text or ``None``); ``text`` is then the
            app's reply text of the call (:meth:`evaluator.app.App.reply_from_tool_call`).
            ``None`` on the other protocols.
        parts: for the ``a2a`` protocol, the parts of the message or artifact the answer
            was read from, as the transcript keeps them
            (:func:`evaluator.agents.a2a.part_records`: text, data as JSON, files by name and
            media type); ``None`` on the other protocols.
        parts_from: where those parts were: ``"message"``, ``"artifact"``, ``"status
            message"`` or ``"history message"`` (``None`` without parts).
    """

    text: str
    latency_s: float
    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None
    tool_call: JSON | None = None
    parts: list[JSON] | None = None
    parts_from: str | None = None


#: Largest token count accepted from one reply; larger (or negative, or non-integer) reported
#: counts are treated as not reported.
MAX_REPORTED_TOKENS = 100_000_000
#: Longest reported model name kept (characters).
MODEL_NAME_MAX_CHARS = 200


def reported_tokens(value: object) -> int | None:
    """A token count from agent JSON: a plain int in ``[0, MAX_REPORTED_TOKENS]``, else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value <= MAX_REPORTED_TOKENS:
            return value
    return None


def reported_model(value: object) -> str | None:
    """A model name from agent JSON: printable text cut to ``MODEL_NAME_MAX_CHARS``, else None."""
    if not isinstance(value, str):
        return None
    text = "".join(ch for ch in value if ch.isprintable())[:MODEL_NAME_MAX_CHARS].strip()
    return text or None


def usage_from(
    data: object, usage_key: str, input_key: str, output_key: str, model_key: str = "model"
) -> tuple[int | None, int | None, str | None]:
    """Read ``(input_tokens, output_tokens, model)`` from ``data[usage_key]`` and
    ``data[model_key]``; anything missing or malformed becomes ``None`` (never raises)."""
    if not isinstance(data, dict):
        return None, None, None
    usage = data.get(usage_key)
    model = reported_model(data.get(model_key))
    if not isinstance(usage, dict):
        return None, None, model
    return reported_tokens(usage.get(input_key)), reported_tokens(usage.get(output_key)), model


class AgentClient(ABC):
    """Sends the conversation so far to an agent endpoint and returns its reply text.

    ``messages`` is a chat list ``[{"role": "system"|"user"|"assistant", "content": str}]``;
    ``episode_id`` is an opaque per-episode token (sent as header ``X-NetArena-Episode``) that
    lets reference agents served by the deployment find the episode's ground truth in the
    oracle vault. Implementations apply timeouts, retry on transport errors only and cap the
    response size; every failure raises :class:`AgentError`.
    """

    @abstractmethod
    def complete(self, messages: list[JSON], *, episode_id: str) -> AgentReply:
        """Return the agent's reply to ``messages``. Raises :class:`AgentError`.

        An assistant message may carry a ``"tool_call"`` entry (the :attr:`AgentReply.tool_call`
        of that reply); clients of protocols without tools ignore it.
        """

    def for_app(self, app: App) -> AgentClient:
        """The client to use for episodes of ``app``. Default: this client. A client whose
        requests depend on the app (``openai-tools`` sends the app's tools) returns a copy
        bound to it, sharing this one's connections."""
        return self

    def episode_started(self, instance_names: dict[str, str]) -> None:  # noqa: B027
        """Hook called once per episode after reset with ``Episode.instance_names()``; agent
        endpoints ignore it (the replay client of ``evaluator.rejudge`` uses it)."""

    def describe(self) -> JSON:
        """JSON description for result files (never includes secrets)."""
        return {"protocol": type(self).__name__}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""
