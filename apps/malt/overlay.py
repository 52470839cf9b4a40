"""A copy-on-write view of the MALT graph, used to compute ground truth without copying.

``copy.deepcopy`` of the 6,133-node graph costs tens of milliseconds (the reference spends
about 85 ms per query on it). Ground truth only touches a handful of
nodes, so :class:`TopologyView` records the changes (removed nodes, added nodes and edges,
replaced attribute dicts) on top of the read-only base graph and answers reads through them.
Building a view is O(1); each operation costs time proportional to the nodes it touches.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import networkx as nx

from apps.malt.topology import CONTAINS

Attrs = dict[str, Any]


class TopologyView:
    """Read/write view over a base ``DiGraph`` that never modifies the base.

    Node keys and attribute layout are those of :mod:`apps.malt.topology`. Reads return
    attribute dicts that must not be mutated by the caller (use :meth:`set_attr`).
    """

    def __init__(self, base: nx.DiGraph) -> None:
        self.base = base
        self.removed: set[str] = set()
        self.added_nodes: dict[str, Attrs] = {}
        self.replaced_attrs: dict[str, Attrs] = {}
        #: nodes whose ``replaced_attrs`` dict this view made itself and may change in place;
        #: any other entry (e.g. the per-query port dicts :func:`apps.malt.queries.initial_view`
        #: shares between views) is copied before its first change (copy-on-write)
        self.owned_attrs: set[str] = set()
        self.added_edges: dict[tuple[str, str], Attrs] = {}
        self._added_succ: dict[str, list[str]] = {}

    # ----------------------------------------------------------------- reads
    def has_node(self, node: str) -> bool:
        """True when ``node`` exists in the current state."""
        if node in self.added_nodes:
            return True
        return node in self.base and node not in self.removed

    def attrs(self, node: str) -> Attrs:
        """Attributes of ``node``. Raises ``KeyError`` when it does not exist."""
        if not self.has_node(node):
            raise KeyError(node)
        if node in self.replaced_attrs:
            return self.replaced_attrs[node]
        if node in self.added_nodes:
            return self.added_nodes[node]
        attrs: Attrs = self.base.nodes[node]
        return attrs

    def kind(self, node: str) -> str:
        """The node's ``type`` (EK_* kind)."""
        kind: str = self.attrs(node)["type"]
        return kind

    def successors(self, node: str) -> Iterator[tuple[str, Attrs]]:
        """Yield ``(child, edge attrs)`` for every out-edge of ``node`` in the current state."""
        if node in self.base and node not in self.removed:
            for child, edge in self.base.adj[node].items():
                if child not in self.removed:
                    yield child, edge
        for child in self._added_succ.get(node, ()):
            if self.has_node(child):
                yield child, self.added_edges[(node, child)]

    def children(self, node: str) -> list[str]:
        """Direct RK_CONTAINS children of ``node``, sorted by node id."""
        return sorted(c for c, e in self.successors(node) if e.get("type") == CONTAINS)

    def descendants(self, node: str) -> set[str]:
        """Every node reachable from ``node`` over RK_CONTAINS edges (``node`` excluded)."""
        seen: set[str] = set()
        stack = [node]
        while stack:
            current = stack.pop()
            for child, edge in self.successors(current):
                if edge.get("type") == CONTAINS and child not in seen:
                    seen.add(child)
                    stack.append(child)
        seen.discard(node)
        return seen

    def nodes(self) -> Iterator[tuple[str, Attrs]]:
        """Yield ``(node, attrs)`` for every node of the current state."""
        removed, replaced = self.removed, self.replaced_attrs
        for node, attrs in self.base.nodes(data=True):
            if node not in removed:
                yield node, replaced.get(node, attrs)
        for node, attrs in self.added_nodes.items():
            yield node, self.replaced_attrs.get(node, attrs)

    def edges(self) -> Iterator[tuple[str, str, Attrs]]:
        """Yield ``(source, target, attrs)`` for every edge of the current state."""
        removed = self.removed
        for source, target, attrs in self.base.edges(data=True):
            if source not in removed and target not in removed:
                yield source, target, attrs
        for (source, target), attrs in self.added_edges.items():
            if self.has_node(source) and self.has_node(target):
                yield source, target, attrs

    def number_of_nodes(self) -> int:
        """Node count of the current state (O(1))."""
        return len(self.base) - len(self.removed) + len(self.added_nodes)

    # ---------------------------------------------------------------- writes
    def add_node(self, node: str, attrs: Attrs) -> None:
        """Add a new node. Raises ``ValueError`` when the id exists or existed in the base."""
        if node in self.base or node in self.added_nodes:
            # A removed base id is not reused either: its base edges would come back.
            raise ValueError(f"node id {node} is already used")
        self.added_nodes[node] = dict(attrs)

    def add_edge(self, source: str, target: str, attrs: Attrs) -> None:
        """Add an edge between existing nodes. Raises ``ValueError`` otherwise."""
        if not (self.has_node(source) and self.has_node(target)):
            raise ValueError(f"edge {source} -> {target} needs both ends to exist")
        if (source, target) not in self.added_edges:
            self._added_succ.setdefault(source, []).append(target)
        self.added_edges[(source, target)] = dict(attrs)

    def remove(self, node: str) -> set[str]:
        """Remove ``node`` and everything it contains (its RK_CONTAINS descendants).

        Returns the removed node ids. Raises ``KeyError`` when ``node`` does not exist.
        """
        if not self.has_node(node):
            raise KeyError(node)
        gone = self.descendants(node) | {node}
        for item in gone:
            if item in self.added_nodes:
                del self.added_nodes[item]
            else:
                self.removed.add(item)
            self.replaced_attrs.pop(item, None)
            self.owned_attrs.discard(item)
        return gone

    def set_attr(self, node: str, key: str, value: Any) -> None:
        """Set attribute ``key`` of ``node`` (copy-on-write). Raises ``KeyError`` if absent."""
        attrs = self.attrs(node)
        if node not in self.owned_attrs:
            attrs = copy.deepcopy(attrs)
            self.replaced_attrs[node] = attrs
            self.owned_attrs.add(node)
        attrs[key] = value

    def to_networkx(self) -> nx.DiGraph:
        """Materialise the current state as a new ``DiGraph`` (tests and tools; O(graph))."""
        graph = nx.DiGraph()
        for node, attrs in self.nodes():
            graph.add_node(node, **copy.deepcopy(attrs))
        for source, target, attrs in self.edges():
            graph.add_edge(source, target, **attrs)
        return graph
