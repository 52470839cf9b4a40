"""The ``openai-tools`` protocol: the client against scripted OpenAI-compatible servers over real
HTTP (reply shapes of OpenAI, vLLM and Ollama, malformed calls), request and response shapes
checked against the official ``openai`` package's types, and the reference server answering
with tool calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionFunctionToolParam
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from apps.route.app import RouteApp
from evaluator.agents import LOOPBACK_NETWORKS, AgentError, OpenAIToolsClient, make_client
from evaluator.agents.openai_tools import decode_arguments
from evaluator.reference.agents import make_served_agent
from evaluator.reference.server import RunningServer, build_asgi_app, serve_in_thread
from evaluator.runner import run_episode
from evaluator.testing import GuessApp
from evaluator.types import JSON

REQUEST = TypeAdapter(CompletionCreateParamsNonStreaming)
TOOL = TypeAdapter(ChatCompletionFunctionToolParam)


def _consume(value: Any) -> Any:
    """Validate lazily checked iterables of a pydantic result by walking them."""
    if isinstance(value, dict):
        return {key: _consume(item) for key, item in value.items()}
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    return [_consume(item) for item in value]


def assert_openai_request(body: JSON) -> None:
    """``body`` is a valid non-streaming chat completion request of the openai package."""
    _consume(REQUEST.validate_python(body))
    for tool in body.get("tools", []):
        _consume(TOOL.validate_python(tool))


def completion(message: JSON, *, finish: str = "tool_calls") -> JSON:
    """A chat completion object with one choice carrying ``message``."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def call_message(
    name: str, arguments: Any, *, call_id: str = "call_1", content: Any = None, **extra: Any
) -> JSON:
    """An assistant message with one function call (``content`` left out when ``...``)."""
    message: JSON = {
        "role": "assistant",
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            | extra
        ],
    }
    if content is not ...:
        message["content"] = content
    return message


class FakeModel:
    """A scripted OpenAI-compatible server: answers ``replies`` in order, records requests."""

    def __init__(self, replies: list[JSON]) -> None:
        self.replies = list(replies)
        self.requests: list[JSON] = []

    def app(self) -> Starlette:
        async def chat(request: Request) -> JSONResponse:
            self.requests.append(json.loads(await request.body()))
            return JSONResponse(self.replies.pop(0))

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.fixture
def model_server() -> Iterator[Any]:
    started: list[RunningServer] = []

    def start(replies: list[JSON]) -> tuple[FakeModel, RunningServer]:
        model = FakeModel(replies)
        server = serve_in_thread(model.app())
        started.append(server)
        return model, server

    yield start
    for server in started:
        server.stop()


def tools_client(url: str) -> OpenAIToolsClient:
    client = make_client("openai-tools", url, allowed_networks=LOOPBACK_NETWORKS, timeout_s=10)
    assert isinstance(client, OpenAIToolsClient)
    return client


TASK = [{"role": "user", "content": "task"}]


def test_an_episode_sends_tools_and_returns_each_observation_as_a_tool_message(
    model_server,
) -> None:
    app = GuessApp()
    query = app.generate(1, seed=4)[0]
    number = str(query.ground_truth["number"])
    wrong = "-1"
    model, server = model_server(
        [
            completion(call_message("answer", json.dumps({"text": wrong}), call_id="call_a")),
            completion(
                call_message("answer", json.dumps({"text": number}), call_id="call_b", content="")
            ),
        ]
    )
    result = run_episode(app, query, tools_client(server.url))
    assert result.correct and result.steps == 2
    first, second = model.requests
    for body in (first, second):
        assert_openai_request(body)
        assert body["tools"] == app.tools()
        assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is False
    assert first["messages"] == [{"role": "user", "content": query.prompt}]
    assert second["messages"] == [
        {"role": "user", "content": query.prompt},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "answer", "arguments": json.dumps({"text": wrong})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "no"},
    ]
    said = [e for e in result.transcript if e["role"] == "assistant"]
    assert [e["content"] for e in said] == [wrong, number]
    assert said[0]["tool_call"] == {"name": "answer", "arguments": json.dumps({"text": wrong})}
    assert result.input_tokens == 22 and result.output_tokens == 14


ROUTE = RouteApp()
RUN = {"machine": "r0", "command": "ip route"}


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        # OpenAI and vLLM: content null, arguments a JSON text
        ("openai/vllm", call_message("run_command", json.dumps(RUN), call_id="chatcmpl-tool-9")),
        # Ollama's OpenAI endpoint: empty content, an index on the call
        ("ollama", call_message("run_command", json.dumps(RUN), content="", index=0)),
        # servers that leave content out, or send the arguments as an object
        ("no content key", call_message("run_command", json.dumps(RUN), content=...)),
        ("object arguments", call_message("run_command", RUN)),
        ("double-encoded arguments", call_message("run_command", json.dumps(json.dumps(RUN)))),
        ("text beside the call", call_message("run_command", json.dumps(RUN), content="I look.")),
    ],
)
def test_reply_shapes_of_openai_vllm_and_ollama_give_the_same_reply(
    model_server, shape: str, message: JSON
) -> None:
    body = completion(message)
    if shape in ("openai/vllm", "ollama", "text beside the call"):
        ChatCompletion.model_validate(body)  # the official type accepts the shape
    _model, server = model_server([body])
    reply = tools_client(server.url).for_app(ROUTE).complete(TASK, episode_id="tok-12345678")
    assert json.loads(reply.text) == RUN
    assert ROUTE.reply_problem(reply.text) is None
    assert reply.tool_call is not None and reply.tool_call["name"] == "run_command"
    assert decode_arguments(reply.tool_call["arguments"]) == RUN
    assert isinstance(reply.tool_call["arguments"], str)  # goes back as a JSON text
    assert ("content" in reply.tool_call) == ("content" in message)
    assert reply.tool_call.get("content") == message.get("content")
    assert reply.input_tokens == 11 and reply.output_tokens == 7


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "a",
                        "type": "function",
                        "function": {"name": "finish", "arguments": "{}"},
                    },
                    {
                        "id": "b",
                        "type": "function",
                        "function": {"name": "run_command", "arguments": json.dumps(RUN)},
                    },
                ],
            },
            "2 tool calls (finish, run_command)",
        ),
        ({"role": "assistant", "content": "I would run ip route."}, "no tool call"),
        ({"role": "assistant", "content": None, "tool_calls": []}, "no tool call"),
        (call_message("rm_rf", "{}"), "unknown tool 'rm_rf'"),
        (
            {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {}}]},
            "no function name",
        ),
    ],
)
def test_a_reply_without_exactly_one_known_call_is_a_bad_response(
    model_server, message: JSON, error: str
) -> None:
    _model, server = model_server([completion(message)])
    with pytest.raises(AgentError) as caught:
        tools_client(server.url).for_app(ROUTE).complete(TASK, episode_id="tok-12345678")
    assert caught.value.category == "bad_response"
    assert error in str(caught.value)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (json.dumps({"machine": "r0"}), '"command" must be one non-empty command string'),
        (json.dumps({"command": "ip route"}), '"machine" must be a node name'),
        (json.dumps({"machine": "r0", "command": 7}), '"command" must be one non-empty'),
        (None, 'no JSON object with "machine" and "command" found'),
        ("", 'no JSON object with "machine" and "command" found'),
        ('{"machine": "r0", "command": "ip', 'no JSON object with "machine" and "command" found'),
    ],
)
def test_missing_or_broken_arguments_are_judged_by_the_apps_parser(
    model_server, arguments: Any, problem: str
) -> None:
    """A call whose arguments are missing, mistyped or undecodable is an ordinary reply the
    app's parser refuses (a step with an error observation), not an agent failure."""
    _model, server = model_server([completion(call_message("run_command", arguments))])
    reply = tools_client(server.url).for_app(ROUTE).complete(TASK, episode_id="tok-12345678")
    found = ROUTE.reply_problem(reply.text)
    assert found is not None and problem in found


def test_an_unbound_client_refuses_to_send(model_server) -> None:
    _model, server = model_server([])
    with pytest.raises(ValueError, match="bound to an app"):
        tools_client(server.url).complete(TASK, episode_id="tok-12345678")


# -- the reference server on openai-tools -------------------------------------------------


@pytest.fixture
def null_route_server() -> Iterator[RunningServer]:
    server = serve_in_thread(build_asgi_app(make_served_agent("null", "route"), "openai-tools"))
    yield server
    server.stop()


def _post(server: RunningServer, body: JSON) -> tuple[int, JSON]:
    import httpx

    answer = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=10)
    return answer.status_code, answer.json()


def test_the_reference_server_answers_a_valid_tool_call_completion(null_route_server) -> None:
    request = {
        "model": "null",
        "messages": [
            {"role": "user", "content": "Fix the network; pingall shows loss."},
            call_message("run_command", json.dumps(RUN)),
            {"role": "tool", "tool_call_id": "call_1", "content": "default via ..."},
        ],
        "tools": ROUTE.tools(),
        "tool_choice": "required",
        "parallel_tool_calls": False,
    }
    assert_openai_request(request)
    status, body = _post(null_route_server, request)
    assert status == 200, body
    parsed = ChatCompletion.model_validate(body)
    choice = parsed.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].type == "function"
    assert calls[0].function.name == "finish"  # the null agent's {"done": true}
    assert json.loads(calls[0].function.arguments) == {}
    assert calls[0].id.startswith("call_")


def test_the_reference_server_refuses_requests_without_the_apps_tools(null_route_server) -> None:
    chat = [{"role": "user", "content": "Fix the network; pingall shows loss."}]
    status, body = _post(null_route_server, {"model": "m", "messages": chat})
    assert status == 400 and "tools" in body["error"]["message"]
    only_run = [t for t in ROUTE.tools() if t["function"]["name"] == "run_command"]
    status, body = _post(null_route_server, {"model": "m", "messages": chat, "tools": only_run})
    assert status == 400 and "lack 'finish'" in body["error"]["message"]
    two_calls = {
        "role": "assistant",
        "tool_calls": call_message("finish", "{}")["tool_calls"] * 2,
    }
    status, body = _post(
        null_route_server, {"model": "m", "messages": [*chat, two_calls], "tools": ROUTE.tools()}
    )
    assert status == 400 and "exactly one tool call" in body["error"]["message"]
