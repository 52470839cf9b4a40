"""What every reference agent is: the base class and the two errors of building and replying.

Kept apart from :mod:`evaluator.reference.agents` (the concrete agents) so that the LLM agent
module and the agents module both import it and never each other.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from evaluator.app import App
from evaluator.types import JSON


class AgentConfigError(ValueError):
    """A reference agent cannot be built from the given options (the message says why)."""


class AgentReplyError(Exception):
    """A reference agent cannot answer this request; served as an HTTP error.

    Attributes:
        status: HTTP status code to answer with (400 bad request, 404 no vault entry,
            502 upstream model failed).
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ReferenceAgent(ABC):
    """An agent that answers a chat with one reply text.

    Attributes:
        name: agent kind (``oracle``, ``null``, ``heuristic`` or ``llm``).
        app: the benchmark app whose queries it answers.
    """

    name: str = ""

    def __init__(self, app: App) -> None:
        self.app = app

    @abstractmethod
    def reply(self, messages: list[JSON], episode_id: str | None) -> str:
        """Return the reply to ``messages``. Raises :class:`AgentReplyError`."""

    def app_of(self, messages: list[JSON], episode_id: str | None) -> App:
        """The app a request belongs to (default: :attr:`app`). Raises
        :class:`AgentReplyError` (400) when it cannot be told."""
        return self.app

    def tool_reply(self, messages: list[JSON], episode_id: str | None) -> JSON:
        """The reply as one call of the app's tools (the ``openai-tools`` protocol):
        ``{"name", "arguments"}`` (``arguments`` an object or its JSON text), optionally
        ``"content"``. ``messages`` is the chat as :meth:`reply` gets it (assistant contents
        are the reply texts of the agent's earlier calls).

        Default: :meth:`reply`'s text carried by :meth:`evaluator.app.App.tool_call_from_reply`
        of the request's app. Raises :class:`AgentReplyError`.
        """
        name, arguments = self.app_of(messages, episode_id).tool_call_from_reply(
            self.reply(messages, episode_id)
        )
        return {"name": name, "arguments": arguments}

    @property
    def app_ids(self) -> list[str]:
        """Ids of the apps this agent answers."""
        return [self.app.app_id]

    def describe(self) -> JSON:
        """JSON description for the health endpoint (never secrets)."""
        return {"agent": self.name, "app": ",".join(self.app_ids)}
