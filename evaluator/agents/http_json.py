"""The ``http-json`` agent protocol: the simplest endpoint a team can host.

See docs/architecture.md §6.

Request (POST to the registered URL, header ``X-NetArena-Episode: <token>``)::

    {"prompt": "<newest user message>",
     "history": [{"role": "user"|"assistant"|"system", "content": "..."}, ...],
     "episode_id": "<token>"}

Response: ``{"text": "<the agent's reply>"}``. The full format is in docs/agent-protocols.md.
"""

from __future__ import annotations

from typing import Any

from evaluator.agents._http import GuardedHttpClient
from evaluator.agents.base import AgentError
from evaluator.types import JSON


def split_prompt(messages: list[JSON]) -> tuple[str, list[JSON]]:
    """Split a chat into (newest user message text, the messages before it).

    A chat that does not end with a user message yields an empty prompt and the whole chat
    as history.
    """
    if messages and messages[-1].get("role") == "user":
        return str(messages[-1].get("content", "")), list(messages[:-1])
    return "", list(messages)


class HttpJsonClient(GuardedHttpClient):
    """Client of the ``http-json`` protocol; options as :class:`GuardedHttpClient`."""

    protocol = "http-json"

    def build_body(self, messages: list[JSON], episode_id: str) -> JSON:
        """Return ``{"prompt", "history", "episode_id"}``."""
        prompt, history = split_prompt(messages)
        return {"prompt": prompt, "history": history, "episode_id": episode_id}

    def parse_reply(self, data: Any) -> str:
        """Return ``data["text"]``. Raises ``AgentError("bad_response")`` on another shape."""
        if not isinstance(data, dict):
            raise AgentError("bad_response", "http-json reply must be a JSON object with 'text'")
        text = data.get("text")
        if not isinstance(text, str):
            raise AgentError(
                "bad_response",
                f"http-json reply needs a string 'text' field, got {type(text).__name__}",
            )
        return text
