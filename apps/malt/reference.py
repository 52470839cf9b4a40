"""MALT's reference replies: the null reply, and the oracle that turns a ground-truth program
into ``process_graph`` code.

The generated code is a second, independent implementation of the operation language
(:mod:`apps.malt.operations` works on a copy-on-write view; this one mutates the networkx
graph the sandbox hands it). The oracle scoring 100% correct and safe through the real
sandbox therefore checks the judge, the prompt contract and the ground truth against each
other. The program is embedded as a Python literal (``repr`` of JSON data), never as code.
"""

from __future__ import annotations

from typing import Any

#: Null agent: well-formed code that answers nothing and changes nothing.
NULL_REPLY = '```python\ndef process_graph(graph_data):\n    return {"answer": None}\n```\n'

_RUNTIME = """
CONTAINS = "RK_CONTAINS"


def _children(g, node):
    return sorted(c for c in g.successors(node) if g.edges[node, c].get("type") == CONTAINS)


def _below(g, node):
    seen, todo = set(), [node]
    while todo:
        for child in _children(g, todo.pop()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    seen.discard(node)
    return seen


def _capacity(g, node):
    members = _below(g, node) | {node}
    return sum(
        g.nodes[m]["physical_capacity_bps"] for m in members if g.nodes[m]["type"] == "EK_PORT"
    )


def _ask(g, op):
    kind, node = op["op"], op["node"]
    if kind == "list":
        return _children(g, node)
    if kind == "count":
        return len([m for m in _below(g, node) if g.nodes[m]["type"] == op["kind"]])
    if kind == "capacity":
        return _capacity(g, node) // op.get("unit_bps", 1)
    if kind == "rank":
        pairs = [[c, _capacity(g, c)] for c in _children(g, node)]
        return sorted(pairs, key=lambda p: (-p[1], p[0]))
    if kind == "stage":
        return g.nodes[node]["switch_loc"]["stage"]
    raise ValueError(kind)


def _fill(value, item, item_name):
    if isinstance(value, str):
        return value.replace("$item_name", item_name).replace("$item", item)
    if isinstance(value, list):
        return [_fill(v, item, item_name) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, item, item_name) for k, v in value.items()}
    return value


def _port(g, parent, name, capacity):
    port = "EK_PORT:" + name
    g.add_node(port, name=name, type="EK_PORT", physical_capacity_bps=capacity)
    g.add_edge(parent, port, type=CONTAINS)


def _run(g, program):
    answer = None
    for op in program:
        kind = op["op"]
        if kind == "add_switch":
            switch = "EK_PACKET_SWITCH:" + op["name"]
            g.add_node(switch, name=op["name"], type="EK_PACKET_SWITCH",
                       switch_loc={"stage": op["stage"]})
            g.add_edge(op["parent"], switch, type=CONTAINS)
            for number in range(1, op["ports"] + 1):
                _port(g, switch, op["name"] + ".p" + str(number), op["port_capacity_bps"])
        elif kind == "add_port":
            _port(g, op["parent"], op["name"], op["capacity_bps"])
        elif kind == "remove":
            g.remove_nodes_from(_below(g, op["node"]) | {op["node"]})
        elif kind == "set_capacity":
            g.nodes[op["node"]]["physical_capacity_bps"] = op["capacity_bps"]
        elif kind == "if":
            cond = op["cond"]
            left, right = _ask(g, cond["query"]), cond["value"]
            holds = {">=": left >= right, ">": left > right, "<=": left <= right,
                     "<": left < right, "==": left == right}[cond["cmp"]]
            value = _run(g, op["then"] if holds else op["else"])
            answer = answer if value is None else value
        elif kind == "for_each":
            items = op["items"]
            if "children_of" in items:
                members = [c for c in _children(g, items["children_of"])
                           if g.nodes[c]["type"] == items["kind"]]
            else:
                members = sorted(items["nodes"])
            for member in members:
                value = _run(g, _fill(op["body"], member, g.nodes[member]["name"]))
                answer = answer if value is None else value
        else:
            answer = _ask(g, op)
    return answer


def process_graph(graph_data):
    answer = _run(graph_data, PROGRAM)
    if ANSWER_IS_GRAPH:
        return {"answer": graph_data}
    if CHANGES_TOPOLOGY:
        return {"answer": answer, "updated_graph": graph_data}
    return {"answer": answer}
"""


def oracle_code(ground_truth: dict[str, Any]) -> str:
    """Return Python source defining ``process_graph`` that executes the ground-truth program.

    Raises ``KeyError`` when ``ground_truth`` lacks ``program``/``answer_kind``.
    """
    header = (
        f"PROGRAM = {ground_truth['program']!r}\n"
        f"ANSWER_IS_GRAPH = {ground_truth['answer_kind'] == 'graph'!r}\n"
        f"CHANGES_TOPOLOGY = {bool(ground_truth.get('changes_topology'))!r}\n"
    )
    return header + _RUNTIME


def oracle_reply_text(ground_truth: dict[str, Any]) -> str:
    """The oracle's full reply: a short sentence and one fenced python block."""
    return "Here is the code.\n\n```python\n" + oracle_code(ground_truth) + "```\n"
