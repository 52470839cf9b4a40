"""The MALT ``template`` floor agent: pattern matching on the prompt, no model, no ground truth.

It reads the ``## Request`` section of the task prompt, recognises each operation sentence with a
regular expression (one per sentence shape of the query generator), turns the matches, in the
order they occur, into an operation program (the language of :mod:`apps.malt.operations`) and
answers with the same ``process_graph`` runtime the oracle uses (:func:`apps.malt.reference.
oracle_code`). It never sees the ground truth: everything comes from the prompt text. Issue 11
asks for this agent as an honest adversary of the queries: whatever it solves, a benchmark
cannot credit to understanding. A request it cannot read gets the null reply.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from evaluator.types import JSON

from apps.malt.operations import Op, changes_topology
from apps.malt.queries import answer_kind
from apps.malt.reference import NULL_REPLY, oracle_code

_ID = r"`(?P<{0}>[^`]+)`"
_BPS = r"(?P<{0}>\d+) bit/s"


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.DOTALL)


#: (pattern, builder of the operation) per sentence shape, most specific shapes first.
_SHAPES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], Op]]] = [
    (
        _re(
            r"For each packet switch that is a direct child of "
            + _ID.format("block")
            + r": if its switch_loc stage is (?P<stage>\d+), add one new port named "
            r"`<switch name>\.p(?P<num>\d+)` with physical_capacity_bps "
            + _BPS.format("cap")
            + r".*?; otherwise remove its port `<switch name>\.p(?P<old>\d+)`"
        ),
        lambda m: {
            "op": "for_each",
            "items": {"children_of": m["block"], "kind": "EK_PACKET_SWITCH"},
            "body": [
                {
                    "op": "if",
                    "cond": {
                        "query": {"op": "stage", "node": "$item"},
                        "cmp": "==",
                        "value": int(m["stage"]),
                    },
                    "then": [
                        {
                            "op": "add_port",
                            "parent": "$item",
                            "name": f"$item_name.p{m['num']}",
                            "capacity_bps": int(m["cap"]),
                        }
                    ],
                    "else": [{"op": "remove", "node": f"EK_PORT:$item_name.p{m['old']}"}],
                }
            ],
        },
    ),
    (
        _re(
            r"For each packet switch that is a direct child of "
            + _ID.format("block")
            + r", add one new port named `<switch name>\.p(?P<num>\d+)`.*?with "
            r"physical_capacity_bps " + _BPS.format("cap")
        ),
        lambda m: {
            "op": "for_each",
            "items": {"children_of": m["block"], "kind": "EK_PACKET_SWITCH"},
            "body": [
                {
                    "op": "add_port",
                    "parent": "$item",
                    "name": f"$item_name.p{m['num']}",
                    "capacity_bps": int(m["cap"]),
                }
            ],
        },
    ),
    (
        _re(
            r"For each of the ports (?P<ports>(?:`[^`]+`(?:, )?)+), set physical_capacity_bps "
            r"to " + _BPS.format("cap")
        ),
        lambda m: {
            "op": "for_each",
            "items": {"nodes": sorted(re.findall(r"`([^`]+)`", m["ports"]))},
            "body": [{"op": "set_capacity", "node": "$item", "capacity_bps": int(m["cap"])}],
        },
    ),
    (
        _re(
            r"If the total capacity of the packet switch "
            + _ID.format("switch")
            + r" is at least "
            + _BPS.format("threshold")
            + r".*?, remove its port "
            + _ID.format("victim")
            + r"; otherwise add a new port named "
            + _ID.format("name")
            + r".*?with physical_capacity_bps "
            + _BPS.format("cap")
        ),
        lambda m: {
            "op": "if",
            "cond": {
                "query": {"op": "capacity", "node": m["switch"]},
                "cmp": ">=",
                "value": int(m["threshold"]),
            },
            "then": [{"op": "remove", "node": m["victim"]}],
            "else": [
                {
                    "op": "add_port",
                    "parent": m["switch"],
                    "name": m["name"],
                    "capacity_bps": int(m["cap"]),
                }
            ],
        },
    ),
    (
        _re(
            r"Add a new port named "
            + _ID.format("name")
            + r".*?with physical_capacity_bps "
            + _BPS.format("cap")
            + r".*? to the packet switch "
            + _ID.format("parent")
        ),
        lambda m: {
            "op": "add_port",
            "parent": m["parent"],
            "name": m["name"],
            "capacity_bps": int(m["cap"]),
        },
    ),
    (
        _re(
            r"Add a new packet switch named "
            + _ID.format("name")
            + r".*?stage (?P<stage>\d+)\) to "
            + _ID.format("parent")
            + r"\. It comes with (?P<ports>\d+) new ports?.*?with physical_capacity_bps "
            + _BPS.format("cap")
        ),
        lambda m: {
            "op": "add_switch",
            "parent": m["parent"],
            "name": m["name"],
            "stage": int(m["stage"]),
            "ports": int(m["ports"]),
            "port_capacity_bps": int(m["cap"]),
        },
    ),
    (
        _re(r"Remove " + _ID.format("node") + r" from the topology"),
        lambda m: {"op": "remove", "node": m["node"]},
    ),
    (
        _re(
            r"Set the physical_capacity_bps of port "
            + _ID.format("node")
            + r" to "
            + _BPS.format("cap")
        ),
        lambda m: {"op": "set_capacity", "node": m["node"], "capacity_bps": int(m["cap"])},
    ),
    (
        _re(r"[Ll]ist the direct child nodes of " + _ID.format("node")),
        lambda m: {"op": "list", "node": m["node"]},
    ),
    (
        _re(r"[Rr]ank the direct child nodes of " + _ID.format("node") + r" by their total"),
        lambda m: {"op": "rank", "node": m["node"]},
    ),
    (
        _re(r"[Rr]eport the total capacity of " + _ID.format("node")),
        lambda m: {"op": "capacity", "node": m["node"]},
    ),
    (
        _re(r"[Cc]ount the (?P<kind>EK_\w+) nodes contained in " + _ID.format("node")),
        lambda m: {"op": "count", "node": m["node"], "kind": m["kind"]},
    ),
]

_REQUEST_RE = re.compile(r"## Request\n(?P<request>.*?)\n\n## Answer format", re.DOTALL)


def request_text(history: list[JSON]) -> str:
    """The ``## Request`` section of the first user message ('' when there is none)."""
    for message in history:
        if message.get("role") == "user":
            match = _REQUEST_RE.search(str(message.get("content") or ""))
            return match["request"] if match else ""
    return ""


def template_program(request: str) -> list[Op]:
    """The operation program the sentence shapes find in ``request``, in text order.

    A span matched by an earlier (more specific) shape is not matched again by a later one.
    """
    found: list[tuple[int, Op]] = []
    taken: list[tuple[int, int]] = []
    for pattern, build in _SHAPES:
        for match in pattern.finditer(request):
            start, end = match.span()
            if any(start < t_end and t_start < end for t_start, t_end in taken):
                continue
            taken.append((start, end))
            found.append((start, build(match)))
    return [op for _, op in sorted(found, key=lambda item: item[0])]


def template_reply(history: list[JSON]) -> str:
    """The template agent's reply: ``process_graph`` code for the program it read, or the
    null reply when it recognised nothing."""
    program = template_program(request_text(history))
    if not program:
        return NULL_REPLY
    plan: dict[str, Any] = {
        "program": program,
        "answer_kind": answer_kind(program),
        "changes_topology": changes_topology(program),
    }
    return "```python\n" + oracle_code(plan) + "```\n"
