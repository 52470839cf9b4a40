"""The text the agent sees: fixed instructions (graph format, rules, return contract) + question.

Written for this project (not taken from the paper or its code). Everything the judge relies
on is stated here: node identity, the attribute layout of new nodes, what "contains",
"capacity" and "count" mean, the answer types and the tie order of rankings.
"""

from __future__ import annotations

import networkx as nx

from apps.malt.topology import ALLOWED_RELATIONS, MIN_PORT_CAPACITY_BPS

#: Text in every MALT task prompt and in no other app's (the function the agent must define).
PROMPT_MARKER = "process_graph"

#: Preamble run (trusted) in the sandbox before the agent's code; the prompt names these.
SANDBOX_PREAMBLE = "import copy\nimport json\nimport math\n\nimport networkx as nx\n"

#: Answer kinds and how each must be returned (shown per query).
ANSWER_CONTRACT: dict[str, str] = {
    "graph": "`answer` is the updated topology itself (the networkx DiGraph after the change).",
    "set": "`answer` is a list of node ids (strings); order does not matter, no duplicates.",
    "ranking": "`answer` is a list of `[node_id, total_capacity_bps]` pairs (capacity in "
    "bit/s), sorted by total capacity from largest to smallest; entries with equal capacity are "
    "ordered by node id ascending (plain string order).",
    "number": "`answer` is an integer, in the unit the request asks for (bit/s when it names "
    "none); a float with an integral value is also accepted, strings are not.",
}


def _hierarchy_lines() -> str:
    lines = []
    for source, relation, target in sorted(ALLOWED_RELATIONS):
        verb = "contains" if relation == "RK_CONTAINS" else "controls"
        lines.append(f"  - {source} {verb} {target} (edge type {relation})")
    return "\n".join(lines)


INSTRUCTIONS = f"""You are a datacenter network engineer doing capacity planning on Google's MALT
example topology. Write Python code that answers the request below.

## The graph
Your function receives `graph_data`, a `networkx.DiGraph` with the whole topology (a private
copy: change it freely).
- Every node is one entity. Its node id is the string "<TYPE>:<name>", for example
  "EK_PACKET_SWITCH:ju1.a1.m1.s2c1". A packet switch, its chassis and its control point share
  the name "ju1.a1.m1.s2c1" but are three different nodes with three different ids.
- Node attributes: `name` (str), `type` (str, one of EK_JUPITER, EK_SUPERBLOCK, EK_SPINEBLOCK,
  EK_AGG_BLOCK, EK_PACKET_SWITCH, EK_CHASSIS, EK_CONTROL_POINT, EK_PORT, EK_RACK,
  EK_CONTROL_DOMAIN), plus per type: EK_PORT has `physical_capacity_bps` (int, bit/s);
  EK_PACKET_SWITCH has `switch_loc`, a dict like {{"stage": 2}}; EK_SUPERBLOCK has
  `index_within_jupiter` (int); EK_JUPITER has `jupiter_type` (str).
- Every edge has exactly one attribute, `type`, either "RK_CONTAINS" or "RK_CONTROLS", and
  points from the container (or controller) to the contained (or controlled) node.
- The only edges that may exist:
{_hierarchy_lines()}

## How requests name things
- A request names a node by its `name`, with its kind ("packet switch `ju1.a1.m1.s2c1`",
  "chassis `ju1.a1.m1.s2c1`", "aggregation block `ju1.a2.m3`"); where a name belongs to a
  single node the kind may be left out. Answers use node ids ("<TYPE>:<name>").
- Some nodes are described instead of named. "Largest", "biggest", "busiest",
  "highest-capacity" and "with the most capacity" pick the node with the highest total
  capacity among the ones described; "smallest", "least loaded", "lowest-capacity" and
  "with the least capacity" the lowest. For ports, "fastest"/"slowest" compare their capacity.
  Such a description always picks exactly one node, in the topology before any change.
- Capacities in requests are given in Gbit/s (1 Gbit/s = 1000000000 bit/s) or in bit/s; the
  graph always stores bit/s. Numbers you return are in bit/s unless the request asks for
  another unit.
- Naming rule for new nodes. A new port of a switch is named "<switch name>.p<N>" and a new
  packet switch of a block at stage S is named "<block name>.s<S>c<N>", where N is one more than
  the highest number already used by that switch's ports (for a switch: by that block's
  stage-S switches); the ports of a new switch are "<switch name>.p1", "<switch name>.p2", ...
  A request may give the new name or leave it to this rule. A switch's "highest-numbered port"
  is the port with the largest N.
- The stage of a packet switch is the `stage` in its `switch_loc`. A port's capacity is its
  `physical_capacity_bps`.

## Meanings
- "X contains Y" / "Y is in X" / "Y is under X": Y is reachable from X over RK_CONTAINS edges.
  "Direct child nodes" (or "children") of X are the targets of X's own RK_CONTAINS edges.
- The total capacity (or bandwidth) of a node is the sum of `physical_capacity_bps` over the
  distinct EK_PORT nodes it contains (for a port: its own). Units are bit/s, integers.
- Counting nodes of a type in X counts the distinct nodes of that type that X contains
  (X itself is not counted).
- Removing a node removes it together with every node it contains (recursively) and all
  edges of the removed nodes. Nothing else is removed.
- Adding a node: the new node gets exactly the attributes listed above for its type and no
  others (`name`, `type`, and `physical_capacity_bps` for a port or `switch_loc` for a packet
  switch), with the values the request gives, and exactly the RK_CONTAINS edges the request
  implies: from its parent to it and, for a new switch, from the switch to each new port.
  New node ids follow the "<TYPE>:<name>" rule.
- Port capacities must stay integers of at least {MIN_PORT_CAPACITY_BPS} bit/s, every packet
  switch must keep at least one port, and no node may be left without edges.

## What to return
Define `def process_graph(graph_data):` returning a dict:
- "answer": the value asked for, in the form stated under "Answer format" below;
- "updated_graph": the topology after your changes, as a networkx DiGraph (or its
  `networkx.node_link_data` dict). It is required whenever the request changes the topology
  (it may be left out if "answer" already is that graph); leave it out when nothing changes.
The returned topology is checked against the rules above. Helper functions, imports from the
standard library and networkx are allowed; `nx`, `json`, `copy` and `math` are already
imported. Do not read files, use the network, or print large outputs. The code runs with
time and memory limits.

Reply with exactly one ```python code block containing the complete code."""


#: The shipped fabric's wording that :func:`fabric_instructions` rewrites for another fabric:
#: ``(text in INSTRUCTIONS, template of its replacement)``. ``{site}``, ``{switch}`` and
#: ``{block}`` are names taken from the query's own fabric.
_FABRIC_WORDING: tuple[tuple[str, str], ...] = (
    (
        "on Google's MALT\nexample topology.",
        "on a datacenter\nfabric modelled in Google's MALT schema (site `{site}`).",
    ),
    ('A new port of a switch is named "<switch name>.p<N>" and a new\n'
     '  packet switch of a block at stage S is named "<block name>.s<S>c<N>", where N is one '
     'more than\n  the highest number already used by that switch\'s ports (for a switch: by '
     'that block\'s\n  stage-S switches); the ports of a new switch are "<switch name>.p1", '
     '"<switch name>.p2", ...\n  A request may give the new name or leave it to this rule.',
     'A new port of a switch is named "<switch name>.p<N>", where N is\n  one more than the '
     'highest number already used by that switch\'s ports; the ports of a new\n  switch are '
     '"<switch name>.p1", "<switch name>.p2", ... A request may give a new port\'s name or\n'
     '  leave it to this rule; it always gives the name of a new packet switch.'),
    ("ju1.a1.m1.s2c1", "{switch}"),
    ("ju1.a2.m3", "{block}"),
)


def fabric_instructions(fabric: nx.DiGraph | None = None) -> str:
    """The fixed instructions for a query on ``fabric``: :data:`INSTRUCTIONS` itself for the
    shipped MALT example (``None``), else the same text worded from the fabric: "a datacenter
    fabric modelled in Google's MALT schema (site `<jupiter name>`)" instead of "Google's MALT
    example topology", the examples' switch and aggregation block names taken from the
    fabric (the first of each in name order), and the naming rule for new ports only: on
    another fabric the shipped scheme for new switch names does not apply, so a request on
    it must name every new packet switch (docs/writing-a-variant-pack.md).

    Raises:
        ValueError: ``fabric`` has no EK_JUPITER, EK_PACKET_SWITCH or aggregation block.
    """
    if fabric is None:
        return INSTRUCTIONS

    def first(*kinds: str) -> str:
        names = sorted(str(a["name"]) for _, a in fabric.nodes(data=True) if a.get("type") in kinds)
        if not names:
            raise ValueError(f"the fabric has no {' or '.join(kinds)}")
        return names[0]

    words = {"site": first("EK_JUPITER"), "switch": first("EK_PACKET_SWITCH"),
             "block": first("EK_AGG_BLOCK", "EK_SPINEBLOCK")}
    text = INSTRUCTIONS
    for shipped, template in _FABRIC_WORDING:
        if shipped not in text:  # the table must follow INSTRUCTIONS
            raise RuntimeError(f"INSTRUCTIONS no longer hold {shipped!r}: update _FABRIC_WORDING")
        text = text.replace(shipped, template.format(**words))
    return text


def render_prompt(
    question: str, answer_kind: str, changes_topology: bool, fabric: nx.DiGraph | None = None
) -> str:
    """Return the full prompt for one query: instructions, request and the answer format.

    ``fabric`` is the query's graph when it is not the shipped MALT example (a pack's fabric
    variant, :func:`apps.malt.fabric.base_graph`): the instructions are then worded from it
    (:func:`fabric_instructions`). Public queries pass none and keep their bytes.

    Raises ``KeyError`` for an unknown ``answer_kind`` (see :data:`ANSWER_CONTRACT`).
    """
    graph_rule = (
        "This request changes the topology: return the changed graph "
        + ("as `answer`." if answer_kind == "graph" else 'under "updated_graph".')
        if changes_topology
        else 'This request does not change the topology: do not return "updated_graph".'
    )
    return (
        f"{fabric_instructions(fabric)}\n\n## Request\n{question}\n\n## Answer format\n"
        f"{ANSWER_CONTRACT[answer_kind]}\n{graph_rule}\n"
    )
