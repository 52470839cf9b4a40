"""The ``openai-chat`` agent protocol: any OpenAI-compatible chat server (docs/architecture.md §6).

Request: POST ``{base}/v1/chat/completions`` with ``{"model": ..., "messages": [...]}``
(plus optional extra body fields such as ``temperature``), ``Authorization: Bearer <key>``
when an API key is set, and header ``X-NetArena-Episode``. Reply text:
``choices[0].message.content`` (a string, or a list of ``{"type": "text", "text"}`` parts).
Spec: the OpenAI Chat Completions API reference; vLLM, Ollama and LiteLLM serve the same path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evaluator.agents._http import GuardedHttpClient, message_text
from evaluator.agents.base import AgentError, usage_from
from evaluator.types import JSON

CHAT_PATH = "/v1/chat/completions"


def chat_completions_url(base: str) -> str:
    """Return the chat-completions URL for a registered base URL.

    ``http://h:8000``, ``http://h:8000/`` and ``http://h:8000/v1`` all give
    ``http://h:8000/v1/chat/completions``; a URL already ending in ``/chat/completions`` is
    used as it is.
    """
    trimmed = base.rstrip("/")
    if trimmed.endswith("/chat/completions"):
        return trimmed
    if trimmed.endswith("/v1"):
        return trimmed + "/chat/completions"
    return trimmed + CHAT_PATH


class OpenAIChatClient(GuardedHttpClient):
    """Client of the ``openai-chat`` protocol.

    Args:
        base_url: server base URL (see :func:`chat_completions_url`).
        model: the ``model`` field sent (servers hosting one model often ignore it).
        extra_body: extra JSON fields of the request (``{"temperature": 0}``).
        **options: as :class:`GuardedHttpClient` (API key, timeouts, retries, guard, cap).
    """

    protocol = "openai-chat"

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(base_url, **options)
        self.model = model or "default"
        self.extra_body = dict(extra_body or {})

    @property
    def endpoint(self) -> str:
        """``{base}/v1/chat/completions``."""
        return chat_completions_url(self.url)

    def build_body(self, messages: list[JSON], episode_id: str) -> JSON:
        """Return ``{"model", "messages", **extra_body}``."""
        body: JSON = dict(self.extra_body)
        body["model"] = self.model
        body["messages"] = [{"role": m["role"], "content": m["content"]} for m in messages]
        return body

    def choice_message(self, data: Any) -> Any:
        """Return ``choices[0].message`` of a chat completion. Raises
        ``AgentError("bad_response")`` when there is none (quoting a server ``error``)."""
        try:
            return data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            error = data.get("error") if isinstance(data, dict) else None
            hint = f" (server error: {str(error)[:200]})" if error else ""
            raise AgentError(
                "bad_response", f"chat completion has no choices[0].message{hint}"
            ) from None

    def parse_reply(self, data: Any) -> str:
        """Return ``choices[0].message.content``. Raises ``AgentError("bad_response")``."""
        message = self.choice_message(data)
        if isinstance(message, dict) and message.get("content") is None:
            raise AgentError("bad_response", "chat completion message has no content")
        try:
            return message_text(message)
        except ValueError as exc:
            raise AgentError("bad_response", f"chat completion message: {exc}") from None

    def parse_usage(self, data: Any) -> tuple[int | None, int | None, str | None]:
        """``usage.prompt_tokens``, ``usage.completion_tokens`` and ``model`` of a chat
        completion (OpenAI API reference, "The chat completion object"); never raises."""
        return usage_from(data, "usage", "prompt_tokens", "completion_tokens")

    def describe(self) -> JSON:
        """Protocol, endpoint, limits and model name (the API key is never included)."""
        info = super().describe()
        info["model"] = self.model
        return info
