"""Facts about NetArena's AgentBeats setup, written down by hand as test data (key names,
values, counts); no code or text of NetArena's is copied.

Sources: NetArena's leaderboard repository (``lesleychou/netarena_leaderboard``, commit
7471120: ``malt_scenario.toml``, ``route_scenario.toml``, ``k8s_scenario.toml``, the
``[config]`` tables) and NetArena's repository (``Froot-NetSys/NetArena``, commit 93225b4:
the config classes ``MaltConfig``, ``AppRouteConfig``, ``K8sConfig`` and the query
generators).
"""

from __future__ import annotations

from typing import Any

#: The ``[config]`` table of each published leaderboard scenario, by app.
PUBLISHED_SCENARIO_CONFIGS: dict[str, dict[str, Any]] = {
    "malt": {
        "prompt_type": "zeroshot_base",
        "complexity_level": ["level1", "level2"],
        "num_queries": 1,
        "output_dir": "dump",
        "output_file": "query_output.jsonl",
        "benchmark_path": "assessment_queries.jsonl",
        "regenerate_query": True,
    },
    "route": {
        "prompt_type": "zeroshot_base",
        "num_queries": 2,
        "max_iterations": 10,
        "benchmark_path": "assessment_error_config.json",
        "regenerate_benchmark": True,
        "output_dir": "dump",
        "num_switches": 2,
        "num_hosts_per_subnet": 1,
    },
    "k8s": {
        "prompt_type": "zeroshot_base",
        "num_queries": 2,
        "max_iterations": 10,
        "benchmark_path": "assessment_error_config.json",
        "output_dir": "dump",
        "microservice_dir": "/microservices-demo",
        "regenerate_config": True,
    },
}

#: Every field of NetArena's config class per app, with its default.
CONFIG_CLASS_FIELDS: dict[str, dict[str, Any]] = {
    "malt": {  # MaltConfig
        "complexity_level": ["level1", "level2"],
        "prompt_type": "zeroshot_base",
        "num_queries": 10,
        "output_dir": "output",
        "output_file": "eval_results.jsonl",
        "benchmark_path": "malt_benchmark.jsonl",
        "regenerate_query": False,
        "start_index": 0,
        "end_index": None,
        "agent_client_configs": [],
    },
    "route": {  # AppRouteConfig
        "num_queries": 1,
        "output_dir": "results",
        "max_iterations": 10,
        "benchmark_path": "error_config.json",
        "regenerate_benchmark": False,
        "prompt_type": "zeroshot_base",
        "num_switches": 2,
        "num_hosts_per_subnet": 1,
        "agent_client_configs": [],
    },
    "k8s": {  # K8sConfig
        "prompt_type": "zeroshot_base",
        "num_queries": 10,
        "output_dir": "output",
        "microservice_dir": "microservices-demo",
        "output_file": "eval_results.jsonl",
        "benchmark_path": "error_config.jsonl",
        "regenerate_config": False,
        "max_iterations": 10,
        "agent_client_configs": [],
    },
}

#: NetArena's prompt types (its PromptType enum values).
PROMPT_TYPES = ("zeroshot_base", "fewshot_base", "zeroshot_cot", "fewshot_cot")

#: NetArena's MALT operation types per level (its query generator), ``num_queries`` each.
MALT_TYPES = {
    1: ["add", "rank", "remove", "list"],
    2: ["remove-list", "remove-rank", "remove-count"],
    3: ["add-list", "add-rank", "add-count"],
}
#: NetArena's route error types: five single, then every pair (ten), ``num_queries`` each.
ROUTE_ERRORS = [
    "disable_routing",
    "disable_interface",
    "remove_ip",
    "drop_traffic_to_from_subnet",
    "wrong_routing_table",
]
#: NetArena's k8s error types: five single, then every pair (ten), ``num_queries`` each,
#: except remove_ingress (at most 14 single queries) and change_protocol (at most 20: two
#: protocols for each of ten policies).
K8S_ERRORS = ["remove_ingress", "add_ingress", "change_port", "change_protocol", "add_egress"]
K8S_SINGLE_CAPS = {"remove_ingress": 14, "change_protocol": 20}


def expected_count(app_id: str, config: dict[str, Any]) -> int:
    """How many queries NetArena's green agent runs for ``config`` (no healthy controls:
    NetArena has none)."""
    n = config.get("num_queries", CONFIG_CLASS_FIELDS[app_id]["num_queries"])
    if app_id == "malt":
        levels = config.get("complexity_level", ["level1", "level2"])
        return sum(n * len(MALT_TYPES[int(str(level)[5:])]) for level in levels)
    singles = ROUTE_ERRORS if app_id == "route" else K8S_ERRORS
    caps = K8S_SINGLE_CAPS if app_id == "k8s" else {}
    pairs = len(singles) * (len(singles) - 1) // 2
    return sum(min(n, caps.get(e, n)) for e in singles) + pairs * n
