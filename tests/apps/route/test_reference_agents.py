"""37 episodes on real Mininet: oracle / null / heuristic figures, then nothing leaked.

15 oracle episodes (1 per Table 5 label, all levels), 5 null episodes, 12 heuristic
episodes (level 1) and 5 episodes of an agent that litters its
nodes (extra veths, iptables rules, qdiscs, timeouts). Afterwards the host must show no
interface, bridge, node shell, namespace, lock file, descriptor, child process or iptables
rule more than before.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from apps.route.app import RouteApp
from apps.route.replies import DONE_REPLY
from evaluator.runner import run_episode
from evaluator.testing import ScriptedClient
from evaluator.types import JSON, EpisodeResult
from tests.apps.route.helpers import host_footprint, leaked, require_emulator

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.slow]

APP = RouteApp(healthy_share=0.0)  # fault queries only; controls: test_controls.py


@pytest.fixture(autouse=True)
def _emulator() -> None:
    require_emulator()


def _children() -> int:
    me = str(os.getpid())
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[1] == me:
                count += 1
    return count


#: The paper's methods per label (paper C.2); the heuristic diagnoses every one of them on r0.
PAPER_METHODS = {"DR": 4, "DI": 3, "RI": 4, "DT": 4, "WR": 4}

LITTER = [
    json.dumps({"machine": "r0", "command": "ip link add junk0 type veth peer name junk1"}),
    json.dumps({"machine": "h1", "command": "iptables -A OUTPUT -d 10.9.9.9 -j DROP"}),
    json.dumps({"machine": "r0", "command": "ip link add br-junk type bridge"}),
    json.dumps(
        {
            "machine": "h2",
            "command": "tc qdisc add dev lo root tbf rate 1mbit burst 1600 latency 1s",
        }
    ),
    json.dumps({"machine": "r0", "command": "ip monitor"}),
    json.dumps({"machine": "r0", "command": "ss -K dst 192.168.1.100"}),
]


def test_oracle_null_heuristic_over_37_episodes_and_no_leaks() -> None:
    before = host_footprint()
    children_before = _children()
    results: dict[str, list[EpisodeResult]] = {"oracle": [], "null": [], "heuristic": []}
    for query in APP.generate(15, seed=2026):

        def oracle_agent(messages: list[JSON], truth: JSON = query.ground_truth) -> str:
            return APP.oracle_reply(truth, messages)

        results["oracle"].append(
            run_episode(
                APP, query, ScriptedClient(lambda messages, _episode_id: oracle_agent(messages))
            )
        )
    for query in APP.generate(5, seed=2027):
        results["null"].append(
            run_episode(
                APP, query, ScriptedClient(lambda messages, _episode_id: APP.null_reply(messages))
            )
        )
    heuristic_queries = APP.generate(12, seed=2028, level=1)
    for query in heuristic_queries:
        results["heuristic"].append(
            run_episode(
                APP,
                query,
                ScriptedClient(lambda messages, _episode_id: APP.heuristic_reply(messages)),
            )
        )
    small = RouteApp(switches=(2, 2), hosts=(2, 2), probe_timeout_s=0.05)
    for query in small.generate(5, seed=2029):
        result = run_episode(
            small,
            query,
            ScriptedClient(then=DONE_REPLY, replies=list(LITTER)),
            max_steps=len(LITTER),
        )
        assert not result.correct and result.steps == len(LITTER)

    oracle = results["oracle"]
    assert len({r.labels[0] if len(r.labels) == 1 else "+".join(r.labels) for r in oracle}) == 15
    bad = [(r.labels, r.details) for r in oracle if not (r.correct and r.safe)]
    assert not bad, bad
    assert all(r.failure is None for r in oracle)
    assert not any(r.correct for r in results["null"])
    assert all(r.safe and r.steps == 1 for r in results["null"])
    heuristic = results["heuristic"]
    solved = Counter(r.labels[0] for r in heuristic if r.correct)
    print(  # the figure reported for the heuristic
        f"\nheuristic level-1: {sum(solved.values())}/{len(heuristic)} correct, "
        f"{sum(r.safe for r in heuristic)}/{len(heuristic)} safe, by label {dict(solved)}; "
        f"oracle mean steps {sum(r.steps for r in oracle) / len(oracle):.2f}"
    )
    # a floor, not a solver: at most half of level 1 ...
    assert sum(solved.values()) <= 0.5 * len(heuristic)
    # ... but still every fault it was built for: the paper's methods on r0
    for query, result in zip(heuristic_queries, heuristic, strict=True):
        fault = query.ground_truth["faults"][0]
        if fault["machine"] == "r0" and fault["method"] <= PAPER_METHODS[fault["label"]]:
            assert result.correct and result.safe, (fault, result.details)

    after = host_footprint()
    for key in (
        "interfaces",
        "bridges",
        "mininet_shells",
        "mininet_namespaces",
        "locks",
        "open_fds",
        "iptables_rules",
    ):
        assert not leaked(before, after, key), (key, before[key], after[key])
    interfaces = after["all_interfaces"]
    assert isinstance(interfaces, list)
    assert not [i for i in interfaces if i.startswith(("junk", "br-junk"))]
    assert _children() == children_before
