"""Routing-misconfiguration benchmark app (paper Appendix C, Table 5) on real Mininet.

Modules:
    mn        -- import of Debian's Mininet package from the venv, iproute2 Linux bridge.
    topology  -- the router/switch/host topology and its IP plan.
    network   -- one running, per-episode-prefixed Mininet network; probes and evaluator exec.
    faults    -- the fault catalogue (five categories, all methods), levels and labels.
    sandbox   -- parsing of agent replies and the no-shell command sandbox (bwrap + netns).
    agents    -- oracle, heuristic and null reference replies.
    app       -- ``RouteApp`` (the registered app ``route``).
    episode   -- ``RouteEpisode``: one attempt on a private Mininet network.
"""
