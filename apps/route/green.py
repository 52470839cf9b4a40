"""route's AgentBeats green agent (evaluator/green): NetArena's ``config`` keys for route and
how NetArena counts and reports route queries.

The keys are every field of NetArena's ``AppRouteConfig`` (``app-route/test_function.py``,
commit 93225b4) with its default, then ours (docs/agentbeats.md). NetArena's query types are
its error types (``generate_config`` in ``app-route/advanced_error_function.py``): the five
single ones and the ten pairs, which are exactly our level labels (paper Table 5).
"""

from __future__ import annotations

from evaluator.green.counts import fault_pair_types
from evaluator.green.declarations import ConfigKey, NetArenaProfile
from evaluator.green.request import (
    AGENT_CLIENT_CONFIGS_REASON,
    BENCHMARK_PATH_REASON,
    OUTPUT_DIR_REASON,
    agent_client_configs,
    common_keys,
    ignored_key,
    max_iterations_key,
    positive_int,
    regenerate_key,
)
from evaluator.sampling import HEALTHY_SHARE

from apps.route.faults import FAULT_TYPES
from apps.route.queries import LEVEL_LABELS

#: Why NetArena's topology-size keys have no effect here.
TOPOLOGY_REASON = (
    "NetArena's fixed topology size; topologies here are sized by level (docs/route.md)"
)

#: The ``config`` keys of route's green agent.
CONFIG_KEYS: tuple[ConfigKey, ...] = (
    *common_keys((1, 2, 3), (1, 2, 3), "ours", 1),
    regenerate_key("regenerate_benchmark"),
    max_iterations_key(),
    ignored_key("output_dir", "results", OUTPUT_DIR_REASON),
    ignored_key("benchmark_path", "error_config.json", BENCHMARK_PATH_REASON),
    ignored_key("num_switches", 2, TOPOLOGY_REASON, positive_int),
    ignored_key("num_hosts_per_subnet", 1, TOPOLOGY_REASON, positive_int),
    ignored_key("agent_client_configs", [], AGENT_CLIENT_CONFIGS_REASON, agent_client_configs),
)

#: How NetArena counts and reports route queries (healthy controls come on top).
NETARENA_PROFILE = NetArenaProfile(
    result_format="app-route",
    types=fault_pair_types(LEVEL_LABELS, FAULT_TYPES),
    labels_per_level={level: len(group) for level, group in LEVEL_LABELS.items()},
    healthy_share=HEALTHY_SHARE,
)
