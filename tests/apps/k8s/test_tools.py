"""The k8s tools (``openai-tools``): a call becomes a fenced kubectl command (its ``stdin`` a
here-document) or ``done``/``healthy``, and the k8s reply parser judges it."""

from __future__ import annotations

import pytest

from apps.k8s.app import K8sApp
from apps.k8s.replies import DONE_WORD, HEALTHY_WORD, parse_reply
from apps.k8s.tools import DECLARE_HEALTHY, FINISH, RUN_KUBECTL
from evaluator.app import tool_names

APP = K8sApp()
MANIFEST = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: a\n"


def test_the_tools_and_their_schemas() -> None:
    tools = APP.tools()
    assert tool_names(tools) == [RUN_KUBECTL, FINISH, DECLARE_HEALTHY]
    run = tools[0]["function"]["parameters"]
    assert set(run["properties"]) == {"command", "stdin"} and run["required"] == ["command"]


def test_a_command_and_its_stdin_become_the_parsed_command_and_here_document() -> None:
    plain = parse_reply(APP.reply_from_tool_call(RUN_KUBECTL, {"command": "kubectl get pods"}))
    assert plain.argv == ("kubectl", "get", "pods") and plain.stdin is None
    applied = parse_reply(
        APP.reply_from_tool_call(RUN_KUBECTL, {"command": "kubectl apply -f -", "stdin": MANIFEST})
    )
    assert applied.argv == ("kubectl", "apply", "-f", "-") and applied.stdin == MANIFEST
    assert APP.reply_from_tool_call(FINISH, {}) == DONE_WORD
    assert APP.reply_from_tool_call(DECLARE_HEALTHY, {}) == HEALTHY_WORD


def test_a_manifest_holding_the_delimiter_line_is_passed_whole() -> None:
    tricky = "data:\n  x: |\n    EOF\n    EOF_1\nkind: ConfigMap\n"
    text = APP.reply_from_tool_call(RUN_KUBECTL, {"command": "kubectl apply -f -", "stdin": tricky})
    assert parse_reply(text).stdin == tricky


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({}, "empty reply"),
        ({"command": "   "}, "empty reply"),
        ({"command": 3}, "empty reply"),
        ({"command": "kubectl get pods | grep a"}, "shell syntax '|'"),
        ({"command": "kubectl get pods\nkubectl get svc"}, "one command per reply"),
        ({"command": "cat /etc/passwd"}, "only kubectl commands"),
    ],
)
def test_calls_the_parser_refuses_get_its_reason(arguments, problem) -> None:
    found = APP.reply_problem(APP.reply_from_tool_call(RUN_KUBECTL, arguments))
    assert found is not None and problem in found


def test_a_command_already_fenced_is_read_as_written() -> None:
    text = APP.reply_from_tool_call(RUN_KUBECTL, {"command": "```\nkubectl get pods\n```"})
    assert parse_reply(text).argv == ("kubectl", "get", "pods")


def test_reference_replies_survive_the_round_trip() -> None:
    replies = {DONE_WORD, HEALTHY_WORD, "```\nkubectl get networkpolicy -o yaml\n```", "oops | x"}
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
        again = parse_reply(APP.reply_from_tool_call(name, arguments))
        first = parse_reply(reply)
        assert (again.argv, again.stdin, again.done, again.healthy, again.error is None) == (
            first.argv,
            first.stdin,
            first.done,
            first.healthy,
            first.error is None,
        ), reply
