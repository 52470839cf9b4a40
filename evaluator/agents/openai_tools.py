"""The ``openai-tools`` agent protocol: OpenAI chat completions with function tools.

Request: POST ``{base}/v1/chat/completions`` with ``{"model", "messages", "tools",
"tool_choice": "required", "parallel_tool_calls": false}`` (plus optional extra body fields);
``tools`` are the episode's app's actions (:meth:`evaluator.app.App.tools`). Each earlier
reply goes back as the assistant message the agent sent (its one tool call, and its
``content`` when it had that key) and each observation as a ``{"role": "tool",
"tool_call_id": <that call's id>, "content": ...}`` message; the task is the first user
message.

Reply: ``choices[0].message.tool_calls`` must hold exactly one function call of one of the
app's tools. Its ``arguments`` may be a JSON text (OpenAI, vLLM) or an object; missing,
empty or undecodable arguments count as ``{}``. The call becomes the app's reply text
(:meth:`evaluator.app.App.reply_from_tool_call`), which the app's parser judges as any text
reply. No call, several calls, or a call of an unknown tool is a ``bad_response``.
Spec: the OpenAI Chat Completions API reference (function calling); vLLM and Ollama serve the
same shapes (``content`` null, empty or absent beside the call).
"""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from evaluator.agents._http import excerpt, message_text
from evaluator.agents.base import AgentError, AgentReply
from evaluator.agents.openai_chat import OpenAIChatClient
from evaluator.app import App, tool_names
from evaluator.types import JSON


def decode_arguments(raw: Any) -> dict[str, Any]:
    """The argument object of a tool call's ``function.arguments``.

    A JSON text is decoded (a text that decodes to another JSON text is decoded once more,
    as some gateways double-encode); an object is taken as it is. Anything else -- absent,
    empty, undecodable, or not an object -- gives ``{}``. Never raises.
    """
    value = raw
    for _ in range(2):
        if not isinstance(value, str):
            break
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return {}
    return dict(value) if isinstance(value, dict) else {}


def wire_arguments(raw: Any) -> str:
    """``function.arguments`` as it goes back to the agent: the text it sent, or its object
    serialised (``"{}"`` when it sent none or something unserialisable)."""
    if isinstance(raw, str):
        return raw
    try:
        return json.dumps(raw if raw is not None else {})
    except (TypeError, ValueError, RecursionError):
        return "{}"


def read_tool_call(message: Any, names: list[str]) -> tuple[JSON, dict[str, Any]]:
    """Read the one tool call of an assistant message.

    Args:
        message: ``choices[0].message`` of a chat completion.
        names: the function names that may be called.

    Returns:
        ``(record, arguments)``: ``record`` is ``{"id", "name", "arguments"}`` as it goes back
        into the conversation (an absent id replaced by a fresh ``call_...``), with
        ``"content"`` when the message had that key; ``arguments`` the decoded object.

    Raises:
        AgentError: ``bad_response`` for no call, several calls, a call without a function
            name, or a name not in ``names``.
    """
    if not isinstance(message, dict):
        raise AgentError("bad_response", "chat completion message is not an object")
    calls = message.get("tool_calls")
    if not calls:
        said = message.get("content")
        hint = f"; its content began {excerpt(said, 120)}" if isinstance(said, str) and said else ""
        raise AgentError(
            "bad_response",
            "the reply has no tool call (openai-tools requires exactly one call of the "
            f"app's tools per reply: {', '.join(names)}){hint}",
        )
    if not isinstance(calls, list):
        raise AgentError("bad_response", "'tool_calls' must be a list")
    if len(calls) > 1:
        called = [
            str(c.get("function", {}).get("name"))[:40]
            if isinstance(c, dict) and isinstance(c.get("function"), dict)
            else "?"
            for c in calls[:10]
        ]
        raise AgentError(
            "bad_response",
            f"the reply has {len(calls)} tool calls ({', '.join(called)}); openai-tools takes "
            "exactly one call per reply (the request sets parallel_tool_calls to false)",
        )
    call = calls[0]
    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(function, dict) or not isinstance(name, str) or not name:
        raise AgentError("bad_response", "the tool call has no function name")
    if name not in names:
        raise AgentError(
            "bad_response",
            f"the reply calls an unknown tool {excerpt(name, 60)}; this app's tools are "
            f"{', '.join(names)}",
        )
    call_id = call.get("id")
    record: JSON = {
        "id": call_id if isinstance(call_id, str) and call_id else f"call_{secrets.token_hex(8)}",
        "name": name,
        "arguments": wire_arguments(function.get("arguments")),
    }
    if "content" in message:
        content = message["content"]
        record["content"] = content if isinstance(content, str) else None
    return record, decode_arguments(function.get("arguments"))


def wire_messages(messages: list[JSON]) -> list[JSON]:
    """The evaluator's chat as OpenAI tool-calling messages.

    An assistant message with a ``"tool_call"`` record (:attr:`AgentReply.tool_call`) becomes
    the assistant message with that one call, and the user message after it the ``tool``
    message answering the call's id; other messages keep their role and content.
    """
    out: list[JSON] = []
    answering: str | None = None
    for message in messages:
        role = message.get("role")
        call = message.get("tool_call")
        if role == "assistant" and isinstance(call, dict):
            sent: JSON = {"role": "assistant"}
            if "content" in call:
                sent["content"] = call["content"]
            sent["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ]
            out.append(sent)
            answering = str(call["id"])
            continue
        if role == "user" and answering is not None:
            out.append({"role": "tool", "tool_call_id": answering, "content": message["content"]})
        else:
            out.append({"role": role, "content": message.get("content", "")})
        answering = None
    return out


def chat_from_wire(
    messages: list[Any], reply_text: Callable[[str, dict[str, Any]], str] | None = None
) -> list[JSON]:
    """The inverse of :func:`wire_messages` (a server of the protocol reading a request).

    ``tool`` messages become user messages; an assistant message with one tool call becomes
    an assistant message with the call's ``"tool_call"`` record and, as content,
    ``reply_text(name, arguments)`` (``""`` without ``reply_text``).

    Raises:
        ValueError: a message that is not an object, has an unknown role, an unusable content,
            or an assistant message with several tool calls.
    """
    chat: list[JSON] = []
    for number, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ValueError(f"messages[{number}] must be an object")
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            calls = message["tool_calls"]
            if not isinstance(calls, list) or len(calls) != 1:
                raise ValueError(f"messages[{number}] must carry exactly one tool call")
            call = calls[0]
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise ValueError(f"messages[{number}]: the tool call has no function name")
            record: JSON = {
                "id": str(call.get("id") or ""),
                "name": function["name"],
                "arguments": wire_arguments(function.get("arguments")),
            }
            arguments = decode_arguments(function.get("arguments"))
            text = reply_text(function["name"], arguments) if reply_text else ""
            chat.append({"role": "assistant", "content": text, "tool_call": record})
            continue
        if role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"messages[{number}] has an unknown role")
        content = message_text({"content": message.get("content") or ""})
        chat.append({"role": "user" if role == "tool" else role, "content": content})
    return chat


class OpenAIToolsClient(OpenAIChatClient):
    """Client of the ``openai-tools`` protocol (see the module docstring).

    Built unbound (``make_client("openai-tools", ...)``); :meth:`for_app` returns the copy that
    sends one app's tools, which the runner and the pre-flight use.

    Args:
        app: the app whose tools are sent (``None``: unbound; :meth:`complete` then raises).
        **options: as :class:`OpenAIChatClient` (model, extra body, key, limits, guard).
    """

    protocol = "openai-tools"

    def __init__(self, base_url: str, *, app: App | None = None, **options: Any) -> None:
        super().__init__(base_url, **options)
        self.app = app

    def for_app(self, app: App) -> OpenAIToolsClient:
        """A copy sending ``app``'s tools; it shares this client's connection pool."""
        bound = copy.copy(self)
        bound.app = app
        return bound

    def _bound_app(self) -> App:
        if self.app is None:
            raise ValueError("an openai-tools client must be bound to an app (for_app) first")
        return self.app

    def build_body(self, messages: list[JSON], episode_id: str) -> JSON:
        """``{"model", "messages", "tools", "tool_choice": "required",
        "parallel_tool_calls": false, **extra_body}``. Raises ``ValueError`` when unbound."""
        app = self._bound_app()
        body: JSON = dict(self.extra_body)
        body["model"] = self.model
        body["messages"] = wire_messages(messages)
        body["tools"] = app.tools()
        body["tool_choice"] = "required"
        body["parallel_tool_calls"] = False
        return body

    def reply_from_data(self, data: Any) -> AgentReply:
        """The app's reply text of the one tool call, with the call record and usage.

        Raises:
            AgentError: ``bad_response`` (no ``choices[0].message``, no call, several calls,
                an unknown tool).
        """
        app = self._bound_app()
        message = self.choice_message(data)
        record, arguments = read_tool_call(message, tool_names(app.tools()))
        input_tokens, output_tokens, model = self.parse_usage(data)
        return AgentReply(
            text=app.reply_from_tool_call(record["name"], arguments),
            latency_s=0.0,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            model=model,
            tool_call=record,
        )

    def describe(self) -> JSON:
        """As :class:`OpenAIChatClient`, plus the bound app's tool names."""
        info = super().describe()
        if self.app is not None:
            info["tools"] = tool_names(self.app.tools())
        return info


def tool_call_message(record: Mapping[str, Any]) -> JSON:
    """The assistant message of a chat completion carrying one call ``{"name", "arguments"}``
    (and ``"id"``, ``"content"`` when given; a fresh id and ``content: null`` otherwise)."""
    return {
        "role": "assistant",
        "content": record.get("content"),
        "tool_calls": [
            {
                "id": str(record.get("id") or f"call_{secrets.token_hex(12)}"),
                "type": "function",
                "function": {
                    "name": str(record["name"]),
                    "arguments": wire_arguments(record.get("arguments")),
                },
            }
        ],
    }
