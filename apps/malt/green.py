"""MALT's AgentBeats green agent (evaluator/green): NetArena's ``config`` keys for MALT and how
NetArena counts and reports MALT queries.

The keys are every field of NetArena's ``MaltConfig`` (``app-malt/main.py``, commit 93225b4)
with its default, then ours (docs/agentbeats.md). NetArena's query types are MALT's operation
types per level (its query generator, ``app-malt/dy_query_generation.py``); our other labels
(``update``, ``count``, ``if-else``, ``for-loop``) have none.
"""

from __future__ import annotations

from evaluator.green.declarations import ConfigKey, NetArenaProfile
from evaluator.green.request import (
    AGENT_CLIENT_CONFIGS_REASON,
    BENCHMARK_PATH_REASON,
    OUTPUT_DIR_REASON,
    OUTPUT_FILE_REASON,
    agent_client_configs,
    common_keys,
    ignored_key,
    int_in,
    optional_int,
    regenerate_key,
)

from apps.malt.queries import LEVEL_LABELS

#: The ``config`` keys of MALT's green agent.
CONFIG_KEYS: tuple[ConfigKey, ...] = (
    *common_keys((1, 2, 3), (1, 2), "netarena", 10),
    regenerate_key("regenerate_query"),
    ignored_key("output_dir", "output", OUTPUT_DIR_REASON),
    ignored_key("output_file", "eval_results.jsonl", OUTPUT_FILE_REASON),
    ignored_key("benchmark_path", "malt_benchmark.jsonl", BENCHMARK_PATH_REASON),
    ignored_key("agent_client_configs", [], AGENT_CLIENT_CONFIGS_REASON, agent_client_configs),
    ConfigKey(
        "start_index",
        0,
        "netarena",
        "applied",
        "first query to run (Python slice of the planned queries)",
        int_in(0, 2**31 - 1),
    ),
    ConfigKey(
        "end_index",
        None,
        "netarena",
        "applied",
        "query to stop before (Python slice; null: to the end)",
        optional_int,
    ),
)

#: NetArena's operation type -> our labels, by level.
MALT_TYPES: dict[int, dict[str, tuple[str, ...]]] = {
    1: {"add": ("add",), "rank": ("rank",), "remove": ("remove",), "list": ("list",)},
    2: {
        "remove-list": ("remove", "list"),
        "remove-rank": ("remove", "rank"),
        "remove-count": ("remove", "count"),
    },
    3: {"add-list": ("add", "list"), "add-rank": ("add", "rank"), "add-count": ("add", "count")},
}

#: How NetArena counts and reports MALT queries (no healthy controls).
NETARENA_PROFILE = NetArenaProfile(
    result_format="app-malt",
    types=MALT_TYPES,
    labels_per_level={level: len(group) for level, group in LEVEL_LABELS.items()},
)
