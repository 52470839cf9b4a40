"""The agent-client interface: one class per wire protocol (DESIGN.md §6)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from evaluator.types import JSON


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
    """One agent answer: its text and how long the call took (seconds, wall clock)."""

    text: str
    latency_s: float


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
        """Return the agent's reply to ``messages``. Raises :class:`AgentError`."""

    def describe(self) -> JSON:
        """JSON description for result files (never includes secrets)."""
        return {"protocol": type(self).__name__}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""
