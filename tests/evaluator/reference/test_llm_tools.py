"""The LLM reference agent served on ``openai-tools``: it forwards the app's tools to its
upstream model and passes the model's call through. Evaluator client -> served agent ->
scripted upstream, all over real HTTP; both requests are checked against the openai types."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from apps.route.app import RouteApp
from evaluator.agents import LOOPBACK_NETWORKS, AgentError, make_client
from evaluator.reference.agents import make_served_agent
from evaluator.reference.llm import EXAMPLE_RESULT
from evaluator.reference.server import RunningServer, build_asgi_app, serve_in_thread
from tests.evaluator.agents.test_openai_tools import (
    FakeModel,
    assert_openai_request,
    call_message,
    completion,
)

ROUTE = RouteApp()
UPSTREAM_ARGS = json.dumps({"machine": "h1", "command": "ip route"})
CHAT = [
    {"role": "user", "content": "Fix the network; pingall shows loss."},
    {
        "role": "assistant",
        "content": '{"machine": "r0", "command": "ip addr"}',
        "tool_call": {
            "id": "call_ev",
            "name": "run_command",
            "arguments": json.dumps({"machine": "r0", "command": "ip addr"}),
            "content": None,
        },
    },
    {"role": "user", "content": "1: lo ..."},
]


@pytest.fixture
def chain() -> Iterator[Any]:
    started: list[RunningServer] = []

    def start(strategy: str, replies: list[Any]) -> tuple[FakeModel, Any]:
        upstream = FakeModel(replies)
        upstream_server = serve_in_thread(upstream.app())
        agent = make_served_agent(
            "llm",
            "route",
            llm_options={
                "upstream_url": upstream_server.url,
                "model": "tool-model",
                "strategy": strategy,
                "allowed_networks": LOOPBACK_NETWORKS,
            },
        )
        served = serve_in_thread(build_asgi_app(agent, "openai-tools"))
        started.extend([upstream_server, served])
        client = make_client(
            "openai-tools", served.url, allowed_networks=LOOPBACK_NETWORKS, timeout_s=10
        )
        return upstream, client.for_app(ROUTE)

    yield start
    for server in started:
        server.stop()


def test_the_llm_agent_forwards_the_tools_and_passes_the_models_call_through(chain) -> None:
    model_says = call_message("run_command", UPSTREAM_ARGS, call_id="up_1", content="Thought: h1")
    upstream, client = chain("react", [completion(model_says)])
    reply = client.complete(CHAT, episode_id="episode-token-1")
    assert json.loads(reply.text) == {"machine": "h1", "command": "ip route"}
    assert reply.tool_call is not None
    assert reply.tool_call["name"] == "run_command"
    assert json.loads(reply.tool_call["arguments"]) == json.loads(UPSTREAM_ARGS)
    assert reply.tool_call["content"] == "Thought: h1"
    (sent,) = upstream.requests
    assert_openai_request(sent)
    assert sent["model"] == "tool-model" and sent["temperature"] == 0
    assert sent["tools"] == ROUTE.tools()
    assert sent["tool_choice"] == "required" and sent["parallel_tool_calls"] is False
    system, task, call, result = sent["messages"]
    assert system["role"] == "system" and "calling the tools" in system["content"]
    assert "'Thought:'" in system["content"]  # the react strategy, phrased for tool calls
    assert task == CHAT[0]
    assert call["tool_calls"][0]["id"] == "call_ev"
    assert call["tool_calls"][0]["function"]["name"] == "run_command"
    assert result == {
        "role": "tool",
        "tool_call_id": "call_ev",
        "content": "Observation:\n1: lo ...",
    }


def test_few_shot_examples_are_shown_as_answered_calls(chain) -> None:
    upstream, client = chain("few-shot", [completion(call_message("finish", "{}"))])
    reply = client.complete(CHAT[:1], episode_id="episode-token-2")
    assert reply.text == '{"done": true}'
    (sent,) = upstream.requests
    assert_openai_request(sent)
    messages = sent["messages"]
    examples = [m for m in messages if m["role"] == "assistant"]
    assert examples and len(examples) == len(ROUTE.few_shot_examples())
    for number, example in enumerate(examples, start=1):
        (shown,) = example["tool_calls"]
        assert shown["id"] == f"example_{number}"
        assert shown["function"]["name"] in ("run_command", "finish", "declare_healthy")
        answer = messages[messages.index(example) + 1]
        assert answer == {
            "role": "tool",
            "tool_call_id": f"example_{number}",
            "content": EXAMPLE_RESULT,
        }
    assert messages[-1] == CHAT[0]


def test_an_upstream_that_answers_two_calls_fails_the_reply_with_502(chain) -> None:
    two = call_message("finish", "{}")
    two["tool_calls"] = two["tool_calls"] * 2
    _upstream, client = chain("zero-shot", [completion(two)])
    with pytest.raises(AgentError) as caught:
        client.complete(CHAT[:1], episode_id="episode-token-3")
    assert caught.value.category == "http_status"
    assert "502" in str(caught.value) and "2 tool calls" in str(caught.value)
