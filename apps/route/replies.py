"""Parsing route replies (the reply format the prompt documents).

One JSON object per step, ``{"machine": "<node>", "command": "<one command>"}``, or
``{"done": true}`` to stop, or ``{"done": true, "healthy": true}`` to stop and declare that the
network has no fault (the answer a healthy control expects). The object may be
fenced (````json ... ````) or surrounded by prose; the first object with those keys is used. A
reply without one is a step with an error observation (never a retry).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from evaluator.multistep import json_candidates

#: The reply that ends an episode without another command.
DONE_REPLY = json.dumps({"done": True})
#: The reply that ends an episode declaring the network healthy (nothing to repair).
HEALTHY_REPLY = json.dumps({"done": True, "healthy": True})


def command_reply(machine: str, command: str) -> str:
    """Return the JSON reply that runs ``command`` on ``machine``."""
    return json.dumps({"machine": machine, "command": command})


@dataclass(frozen=True)
class ParsedReply:
    """One agent reply, parsed.

    Attributes:
        machine: node name as given (prefix optional), or None.
        command: the command string, or None.
        done: the agent asked to stop.
        healthy: with ``done``, the agent declared the network healthy (``"healthy": true``).
        error: why the reply could not be used (shown to the agent), or None.
    """

    machine: str | None = None
    command: str | None = None
    done: bool = False
    healthy: bool = False
    error: str | None = None


def parse_reply(text: Any) -> ParsedReply:
    """Parse an agent reply (any type; never raises).

    Accepts plain JSON, fenced JSON or JSON inside prose. ``{"done": true}`` stops the episode.
    """
    if not isinstance(text, str) or not text.strip():
        return ParsedReply(
            error='empty reply: answer with one JSON object {"machine": ..., "command": ...}'
        )
    if len(text) > 200_000:
        text = text[:200_000]
    for candidate in json_candidates(text):
        try:
            data = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if not isinstance(data, dict):
            continue
        if data.get("done") is True and "command" not in data:
            return ParsedReply(done=True, healthy=data.get("healthy") is True)
        if "machine" in data or "command" in data:
            machine, command = data.get("machine"), data.get("command")
            if not isinstance(machine, str) or not machine.strip():
                return ParsedReply(error='"machine" must be a node name such as "r0" or "h1"')
            if not isinstance(command, str) or not command.strip():
                return ParsedReply(error='"command" must be one non-empty command string')
            return ParsedReply(machine=machine.strip(), command=command.strip())
    return ParsedReply(
        error='no JSON object with "machine" and "command" found: answer with exactly one '
        'object like {"machine": "r0", "command": "ip route"} (or {"done": true} to stop)'
    )
