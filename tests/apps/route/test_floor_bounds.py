"""The route queries rank agents, not scripts.

Two parts:

* fast (no emulator, well under a second): the scripted heuristic floor agent configures only
  ``r0`` (checked on its replies to many observations), so it can at most repair a query whose
  faults all sit on ``r0``; the share of such queries in a 300-query sample per level is under
  the issue's targets (<= 50% correct at level 1, <= 20% at levels 2 and 3). At levels 2 and 3
  the two faults of a query sit on different machines, so the share is 0.
* emulated (root, real Mininet, tens of seconds): on a small seeded sample per level, the
  oracle fixes its queries (correct and safe), null fixes none, and the heuristic -- played
  on the sample's queries within its reach plus one outside it, the rest counting as failures
  by the reach argument above -- stays at or under the target. The bound still fails a script
  that solves everything (it would score every query of the sample).
"""

from __future__ import annotations

import json
import random

import pytest

from apps.route.app import RouteApp
from apps.route.reference import DIAGNOSES, heuristic_reply
from apps.route.replies import parse_reply
from apps.route.topology import RouteTopology
from evaluator.testing import play_reference
from evaluator.types import JSON, Query
from tests.apps.route.helpers import require_emulator

APP = RouteApp(healthy_share=0.0)  # fault queries only; controls: test_controls.py
#: level -> highest share of correct heuristic episodes
TARGETS = {1: 0.5, 2: 0.2, 3: 0.2}
#: level -> emulated sample size
SAMPLE = {1: 6, 2: 5, 3: 5}
SEED = 20261123


def _within_reach(query: Query) -> bool:
    """True when every fault of the query sits on r0, the only machine the heuristic touches."""
    return all(fault["machine"] == "r0" for fault in query.ground_truth["faults"])


# ----------------------------------------------------------------------------- fast part

_TOPO = RouteTopology(4, 2, prefix="fb1_")
_FIRST = (
    "task...\nIn this episode node names carry the prefix `fb1_`.\n\n"
    f"Topology and intended addressing:\n{_TOPO.describe()}\n\nInitial pingall:\n..."
)
_OUTPUTS = (
    "",
    "net.ipv4.ip_forward = 0",
    "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n-A INPUT -s 192.168.2.0/24 -j DROP\n"
    "-A OUTPUT -d 192.168.9.0/24 -j REJECT\nCOMMIT\n",
    "0:\tfrom all lookup local\n4242:\tfrom all iif fb1_r0-eth2 prohibit\n"
    "5151:\tfrom all iif fb1_h3-eth0 prohibit\n",
    "qdisc tbf 8001: dev fb1_r0-eth1 root refcnt 2 rate 306bit\n"
    "qdisc tbf 8002: dev fb1_h2-eth0 root refcnt 2 rate 306bit\n",
    "2: fb1_r0-eth1@if9: <BROADCAST,MULTICAST> mtu 68 qdisc noqueue state DOWN\n"
    "    inet 192.168.1.1/31 scope global fb1_r0-eth1\n",
    "192.168.2.0/24 via 10.255.255.254 dev fb1_r0-eth3 onlink\n"
    "default via 192.168.1.3 dev fb1_h1-eth0\n",
)


def test_the_heuristic_configures_only_r0() -> None:
    rng = random.Random(SEED)
    for _ in range(40):
        history: list[JSON] = [{"role": "user", "content": _FIRST}]
        for _step in range(30):
            reply = heuristic_reply(history)
            parsed = parse_reply(reply)
            if parsed.command is None:
                break
            assert parsed.machine == "r0", reply
            history.append({"role": "assistant", "content": reply})
            output = rng.choice(_OUTPUTS)
            history.append(
                {
                    "role": "user",
                    "content": f"Step on fb1_r0: x\nExit status: 0\nOutput:\n{output}\n\n"
                    "Pingall after this step:\n",
                }
            )
    assert json.loads(heuristic_reply([{"role": "user", "content": _FIRST}]))["command"] == (
        DIAGNOSES[0]
    )


@pytest.mark.parametrize("level", [1, 2, 3])
def test_queries_within_the_heuristics_reach_are_under_the_target(level: int) -> None:
    queries = APP.generate(300, SEED, level=level)
    reachable = sum(_within_reach(q) for q in queries)
    assert reachable <= TARGETS[level] * len(queries), (level, reachable)
    assert all(q.ground_truth["repair"] for q in queries)  # every query needs a repair


# ------------------------------------------------------------------------- emulated part


def _play(query: Query, agent: str) -> tuple[bool, bool]:
    verdict = play_reference(APP, query, agent)
    return verdict.correct, verdict.safe


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.parametrize("level", [1, 2, 3])
def test_oracle_solves_heuristic_stays_under_the_target_null_solves_none(level: int) -> None:
    require_emulator()
    size = SAMPLE[level]
    queries = APP.generate(size, SEED, level=level)
    for query in queries[:2]:
        assert _play(query, "oracle") == (True, True), query.ground_truth["faults"]
    assert not _play(queries[2], "null")[0]
    reach = [q for q in queries if _within_reach(q)]
    outside = [q for q in queries if not _within_reach(q)]
    heuristic = sum(_play(q, "heuristic")[0] for q in reach)
    if outside:  # the reach argument, checked once per level
        assert not _play(outside[0], "heuristic")[0]
    assert heuristic <= TARGETS[level] * size, f"heuristic {heuristic}/{size} at level {level}"
