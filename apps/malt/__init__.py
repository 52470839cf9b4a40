"""MALT capacity planning: the constructive NetArena application (paper Appendix B, Table 4).

The agent writes Python ``process_graph(graph_data)`` code that answers a query about, or
changes, Google's MALT example datacenter topology (or a variant pack's fabric in the same
schema) held as a ``networkx.DiGraph``. The code runs in the sandbox (``evaluator.sandbox``);
the result is judged for correctness against ground truth computed by executing the query's
operations, and for safety against the topology constraints.
Entry point: :class:`apps.malt.app.MaltApp` (registry id ``malt``). See ``docs/malt.md``.
"""
