"""Route's tools (``openai-tools``): each call becomes the reply text the prompt documents and
route's own parser judges it; reference replies survive the round trip unchanged in meaning."""

from __future__ import annotations

import json

import pytest

from apps.route.app import RouteApp
from apps.route.replies import DONE_REPLY, HEALTHY_REPLY, parse_reply
from apps.route.tools import DECLARE_HEALTHY, FINISH, RUN_COMMAND
from evaluator.app import tool_names

APP = RouteApp()


def test_the_tools_and_their_schemas() -> None:
    tools = APP.tools()
    assert tool_names(tools) == [RUN_COMMAND, FINISH, DECLARE_HEALTHY]
    run = tools[0]["function"]["parameters"]
    assert run["required"] == ["machine", "command"] and run["additionalProperties"] is False
    assert all(t["type"] == "function" and t["function"]["description"] for t in tools)


def test_each_call_becomes_the_documented_reply() -> None:
    text = APP.reply_from_tool_call(RUN_COMMAND, {"machine": "h1", "command": "ip route"})
    assert json.loads(text) == {"machine": "h1", "command": "ip route"}
    assert parse_reply(text).machine == "h1" and parse_reply(text).command == "ip route"
    assert APP.reply_from_tool_call(FINISH, {}) == DONE_REPLY
    assert APP.reply_from_tool_call(DECLARE_HEALTHY, {"ignored": 1}) == HEALTHY_REPLY
    assert parse_reply(APP.reply_from_tool_call(DECLARE_HEALTHY, {})).healthy


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"machine": "r0"}, '"command" must be one non-empty command string'),
        ({"command": "ip route"}, '"machine" must be a node name'),
        ({"machine": "", "command": "ip route"}, '"machine" must be a node name'),
        ({"machine": "r0", "command": ["ip", "route"]}, '"command" must be one non-empty'),
        ({}, 'no JSON object with "machine" and "command" found'),
    ],
)
def test_missing_or_mistyped_arguments_get_the_parsers_reason(arguments, problem) -> None:
    found = APP.reply_problem(APP.reply_from_tool_call(RUN_COMMAND, arguments))
    assert found is not None and problem in found


def test_reference_replies_survive_the_round_trip() -> None:
    replies = {DONE_REPLY, HEALTHY_REPLY, '{"machine": "r0", "command": "ip -s link"}'}
    for query in APP.generate(12, seed=3):
        history = [{"role": "user", "content": query.prompt}]
        replies |= {
            APP.oracle_reply(query.ground_truth, history),
            APP.null_reply(history),
            APP.heuristic_reply(history),
            APP.scripted_reply(history),
        }
    for reply in replies:
        name, arguments = APP.tool_call_from_reply(reply)
        assert name in tool_names(APP.tools())
        assert parse_reply(APP.reply_from_tool_call(name, arguments)) == parse_reply(reply)


def test_an_unparseable_reply_stays_unparseable() -> None:
    name, arguments = APP.tool_call_from_reply("I would look at the routes first.")
    assert APP.reply_problem(APP.reply_from_tool_call(name, arguments)) is not None
