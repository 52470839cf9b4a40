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

    @property
    def app_ids(self) -> list[str]:
        """Ids of the apps this agent answers."""
        return [self.app.app_id]

    def describe(self) -> JSON:
        """JSON description for the health endpoint (never secrets)."""
        return {"agent": self.name, "app": ",".join(self.app_ids)}
