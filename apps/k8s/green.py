"""k8s's AgentBeats green agent (evaluator/green): NetArena's ``config`` keys for k8s and how
NetArena counts and reports k8s queries.

The keys are every field of NetArena's ``K8sConfig`` (``app-k8s/run_workflow.py``, commit
93225b4) with its default, then ours (docs/agentbeats.md). NetArena's query types are its
error types (``generate_config`` in ``app-k8s/inject_errors.py``): five single and ten paired
ones, exactly our level labels (paper Table 6), except that single ``remove_ingress`` queries
stop at 14 and single ``change_protocol`` ones at 20 (the combinations its catalogue has).
"""

from __future__ import annotations

from evaluator.green.counts import fault_pair_types
from evaluator.green.declarations import ConfigKey, NetArenaProfile
from evaluator.green.request import (
    AGENT_CLIENT_CONFIGS_REASON,
    BENCHMARK_PATH_REASON,
    OUTPUT_DIR_REASON,
    OUTPUT_FILE_REASON,
    agent_client_configs,
    common_keys,
    ignored_key,
    max_iterations_key,
    regenerate_key,
)
from evaluator.sampling import HEALTHY_SHARE

from apps.k8s.queries import FAULT_NAMES, LEVEL_LABELS

#: The ``config`` keys of k8s's green agent.
CONFIG_KEYS: tuple[ConfigKey, ...] = (
    *common_keys((1, 2, 3), (1, 2, 3), "ours", 10),
    regenerate_key("regenerate_config"),
    max_iterations_key(),
    ignored_key("output_dir", "output", OUTPUT_DIR_REASON),
    ignored_key("output_file", "eval_results.jsonl", OUTPUT_FILE_REASON),
    ignored_key("benchmark_path", "error_config.jsonl", BENCHMARK_PATH_REASON),
    ignored_key(
        "microservice_dir",
        "microservices-demo",
        "NetArena's manifest checkout; each episode here deploys the engine's own manifests",
    ),
    ignored_key("agent_client_configs", [], AGENT_CLIENT_CONFIGS_REASON, agent_client_configs),
)

#: NetArena's k8s single error types whose count stops below ``num_queries``, with the bound.
K8S_SINGLE_CAPS: dict[str, int] = {"remove_ingress": 14, "change_protocol": 20}

#: How NetArena counts and reports k8s queries (healthy controls come on top).
NETARENA_PROFILE = NetArenaProfile(
    result_format="app-k8s",
    types=fault_pair_types(LEVEL_LABELS, FAULT_NAMES),
    labels_per_level={level: len(group) for level, group in LEVEL_LABELS.items()},
    caps=K8S_SINGLE_CAPS,
    healthy_share=HEALTHY_SHARE,
)
