"""Route's actions as OpenAI function tools (the ``openai-tools`` protocol).

Three tools, one per kind of reply the prompt documents (:mod:`apps.route.replies`):

* ``run_command(machine, command)`` -- run one command on one machine: the reply
  ``{"machine": ..., "command": ...}``;
* ``finish()`` -- stop: ``{"done": true}``;
* ``declare_healthy()`` -- stop and declare that nothing is broken:
  ``{"done": true, "healthy": true}``.

A call becomes that JSON text and :func:`apps.route.replies.parse_reply` judges it, so a call
with a missing or mistyped argument is refused with the parser's usual reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from evaluator.app import function_tool
from evaluator.types import JSON

from apps.route.replies import DONE_REPLY, HEALTHY_REPLY, parse_reply

RUN_COMMAND = "run_command"
FINISH = "finish"
DECLARE_HEALTHY = "declare_healthy"


def tools() -> list[JSON]:
    """The three route tools (OpenAI function tool definitions with JSON Schema parameters)."""
    return [
        function_tool(
            RUN_COMMAND,
            "Run one command on one machine of the emulated network and see its output and a "
            "fresh pingall. Read-only commands inspect; configuration commands repair.",
            {
                "machine": {
                    "type": "string",
                    "description": "The node to run on: the router (e.g. r0) or a host "
                    "(e.g. h1), as named in the topology.",
                },
                "command": {
                    "type": "string",
                    "description": "Exactly one command line, e.g. 'ip route' or "
                    "'ip link set dev r0-eth1 up'.",
                },
            },
            ["machine", "command"],
        ),
        function_tool(
            FINISH,
            "Stop: the network is repaired, or you give up. Nothing more is run.",
            {},
            [],
        ),
        function_tool(
            DECLARE_HEALTHY,
            "Stop and declare that the network has no fault, so that nothing needed repairing.",
            {},
            [],
        ),
    ]


def reply_from_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """The route reply text of a call of one of :func:`tools` (``name`` is one of them).

    ``run_command`` gives ``{"machine", "command"}`` with the arguments as they came (an absent
    one left out), which the reply parser checks.
    """
    if name == FINISH:
        return DONE_REPLY
    if name == DECLARE_HEALTHY:
        return HEALTHY_REPLY
    carried = {key: arguments[key] for key in ("machine", "command") if key in arguments}
    return json.dumps(carried)


def tool_call_from_reply(reply: str) -> tuple[str, JSON]:
    """The call carrying a route reply text (reference agents on ``openai-tools``).

    A reply the parser refuses becomes ``run_command`` without arguments, which it refuses too.
    """
    parsed = parse_reply(reply)
    if parsed.done:
        return (DECLARE_HEALTHY if parsed.healthy else FINISH), {}
    if parsed.error is not None:
        return RUN_COMMAND, {}
    return RUN_COMMAND, {"machine": parsed.machine, "command": parsed.command}
