"""Proving a view of the MALT graph safe from its few changes.

:func:`apps.malt.checks.check_safety` reads every node and edge of a graph: about 6 ms for the
6,133-node topology. A :class:`~apps.malt.overlay.TopologyView` knows exactly what differs
from its base graph (removed nodes, added nodes and edges, replaced attribute dicts), and
every constraint of :data:`apps.malt.checks.SAFETY_CONSTRAINTS` is local: it concerns one node,
one edge, or one node's edges. So when the base graph passes :func:`check_safety` (checked
once per process), the view passes too as long as every node or edge the changes touch passes,
which :func:`view_plainly_safe` checks in time proportional to the changes.

The judge uses it for the expected final topology and the unchanged query graph: when an
answer equals one of them (C-level dict equality), its safety report is that graph's, and a
proved-safe graph's report is the empty one. The proof is one-sided: True means
:func:`check_safety` of ``NormalizedGraph.from_view(view)`` reports no violation; False only
means "not shown here", and the judge then runs the full pass on the answer.
``tests/apps/malt/test_costs.py`` compares both on ground truths and on views broken in each way.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Mapping
from itertools import compress
from typing import Any

import networkx as nx

from apps.malt.checks import NormalizedGraph, _is_int, check_safety
from apps.malt.overlay import TopologyView
from apps.malt.topology import (
    ALLOWED_RELATIONS,
    CONTAINS,
    ENTITY_KINDS,
    MIN_PORT_CAPACITY_BPS,
    RELATION_KINDS,
)

_VALID_KINDS = frozenset(ENTITY_KINDS)
_RELATIONS = frozenset(RELATION_KINDS)
_BASE_FACTS: dict[int, tuple[nx.DiGraph, bool, dict[tuple[Any, Any], str]]] = {}
#: Base graphs whose facts are kept: the shipped fabric and the recent fabric variants
#: (apps.malt.fabric keeps 8 variants; each entry holds its graph alive).
_BASE_FACTS_KEPT = 9
_BASE_FACTS_LOCK = threading.Lock()


def _base_facts(base: nx.DiGraph) -> tuple[bool, dict[tuple[Any, Any], str]]:
    """``(base passes check_safety, (kind, name) -> node)``, cached per base graph object
    (the :data:`_BASE_FACTS_KEPT` most recently used)."""
    with _BASE_FACTS_LOCK:
        cached = _BASE_FACTS.pop(id(base), None)
        if cached is not None and cached[0] is base:
            _BASE_FACTS[id(base)] = cached  # most recently used last
            return cached[1], cached[2]
    safe = check_safety(NormalizedGraph.from_view(TopologyView(base))).safe
    owners = {(a.get("type"), a.get("name")): n for n, a in base.nodes(data=True)}
    with _BASE_FACTS_LOCK:
        while len(_BASE_FACTS) >= _BASE_FACTS_KEPT:
            del _BASE_FACTS[next(iter(_BASE_FACTS))]
        _BASE_FACTS[id(base)] = (base, safe, owners)
    return safe, owners


def _node_ok(attrs: Mapping[str, Any]) -> bool:
    """The per-node constraints of check_safety (node_type, required_attribute, bandwidth)."""
    kind, name = attrs.get("type"), attrs.get("name")
    if type(kind) is not str or kind not in _VALID_KINDS or type(name) is not str or not name:
        return False
    if kind == "EK_PORT":
        capacity = attrs.get("physical_capacity_bps")
        return capacity is not None and _is_int(capacity) and capacity >= MIN_PORT_CAPACITY_BPS
    if kind == "EK_PACKET_SWITCH":
        loc = attrs.get("switch_loc")
        stage = loc.get("stage") if isinstance(loc, dict) else None
        return stage is not None and _is_int(stage) and stage >= 1
    return True


def trusted_port_attrs(attrs_by_port: Mapping[str, Mapping[str, Any]], base: nx.DiGraph) -> bool:
    """True when every dict of ``attrs_by_port`` is its base port's attributes with a valid
    ``physical_capacity_bps``: what a dict must be for :func:`view_plainly_safe` to skip it
    as ``trusted`` (O(ports) in Python; the judge relies on how
    :func:`apps.malt.queries.initial_port_attrs` builds its dicts, and the tests check that
    with this function)."""
    nodes = base.nodes
    for port, attrs in attrs_by_port.items():
        if port not in nodes:
            return False
        base_attrs = nodes[port]
        if base_attrs.get("type") != "EK_PORT" or not _node_ok(attrs):
            return False
        if attrs.keys() != base_attrs.keys() | {"physical_capacity_bps"}:
            return False
        if any(v != base_attrs[k] for k, v in attrs.items() if k != "physical_capacity_bps"):
            return False
    return True


def view_plainly_safe(
    view: TopologyView, trusted: Mapping[str, Mapping[str, Any]] | None = None
) -> bool:
    """True only if ``check_safety(NormalizedGraph.from_view(view))`` reports no violation.

    Args:
        view: the view to prove safe; its base graph must never be mutated.
        trusted: attribute dicts already checked with :func:`trusted_port_attrs`; an entry of
            ``view.replaced_attrs`` that *is* (identity) the trusted dict of its node is not
            checked again.

    Returns False whenever the proof does not go through (for instance the base graph is
    unsafe, a node changed kind or name, an added edge repeats a base edge); O(changes and
    the neighbours of removed nodes), plus one C-level pass over ``replaced_attrs``.
    """
    base = view.base
    base_safe, owners = _base_facts(base)
    if not base_safe or view.number_of_nodes() == 0:
        return False
    removed, added, replaced = view.removed, view.added_nodes, view.replaced_attrs
    # replaced attributes: per-node checks, and the same kind and name as before
    keys = list(replaced)
    if trusted is not None:
        keys = list(
            compress(
                keys, map(operator.is_not, map(replaced.__getitem__, keys), map(trusted.get, keys))
            )
        )
    for node in keys:
        attrs = replaced[node]
        before: Mapping[str, Any] = added[node] if node in added else base.nodes[node]
        if not _node_ok(attrs) or (attrs.get("type"), attrs.get("name")) != (
            before.get("type"),
            before.get("name"),
        ):
            return False
    # added nodes: per-node checks and entities not used by a remaining node
    entities: set[tuple[Any, Any]] = set()
    for node in added:
        attrs = view.attrs(node)
        entity = (attrs.get("type"), attrs.get("name"))
        if not _node_ok(attrs) or entity in entities:
            return False
        owner = owners.get(entity)
        if owner is not None and owner not in removed:
            return False
        entities.add(entity)
    # added edges between present nodes: type, no self-loop, allowed, not a base edge again
    live: list[tuple[str, str, str]] = []
    for (source, target), attrs in view.added_edges.items():
        if not (view.has_node(source) and view.has_node(target)):
            continue
        relation = attrs.get("type")
        if type(relation) is not str or relation not in _RELATIONS or source == target:
            return False
        if (view.kind(source), relation, view.kind(target)) not in ALLOWED_RELATIONS:
            return False
        if source in base and target in base and base.has_edge(source, target):
            return False
        live.append((source, target, relation))
    # nodes whose edges changed: not isolated, ports in one switch, switches with a port
    touched: set[str] = set(added)
    for source, target, _ in live:
        touched.add(source)
        touched.add(target)
    for node in removed:
        touched.update(base.predecessors(node))
        touched.update(base.successors(node))
    touched -= removed
    added_in: dict[str, list[tuple[str, str]]] = {}
    added_out: dict[str, list[tuple[str, str]]] = {}
    for source, target, relation in live:
        added_out.setdefault(source, []).append((target, relation))
        added_in.setdefault(target, []).append((source, relation))
    for node in touched:
        incoming = [(s, a.get("type")) for s, a in _base_in(base, node) if s not in removed]
        incoming += added_in.get(node, [])
        outgoing = [(t, a.get("type")) for t, a in _base_out(base, node) if t not in removed]
        outgoing += added_out.get(node, [])
        if not incoming and not outgoing:
            return False
        kind = view.kind(node)
        if kind == "EK_PORT":
            parents = [
                s for s, r in incoming if r == CONTAINS and view.kind(s) == "EK_PACKET_SWITCH"
            ]
            if len(parents) != 1:
                return False
        elif kind == "EK_PACKET_SWITCH" and not any(
            r == CONTAINS and view.kind(t) == "EK_PORT" for t, r in outgoing
        ):
            return False
    return True


def _base_in(base: nx.DiGraph, node: str) -> list[tuple[str, dict[str, Any]]]:
    return list(base.pred[node].items()) if node in base else []


def _base_out(base: nx.DiGraph, node: str) -> list[tuple[str, dict[str, Any]]]:
    return list(base.succ[node].items()) if node in base else []
