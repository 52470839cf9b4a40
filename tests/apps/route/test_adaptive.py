"""The route adaptive agent (apps/route/adaptive.py) learns the held-out fault kinds of an exposed
pack from its ground truths alone, and repairs them from what its reads show; on a pack it
never saw (another observation format) it has no plan and nothing of its own to do.

No Mininet: the conversation is written here (the real measurement is ``benchmarks/
bench_difficulty.py --apps route --agents oracle,scripted,adaptive --exposed-pack ...``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.route.adaptive import learn_kind, learner_from
from apps.route.app import RouteApp
from apps.route.prompt import render_reset_observation, render_step_observation
from apps.route.scripted import scripted_reply
from apps.route.topology import RouteTopology
from evaluator.variants import generate_batch, load_pack

APP = RouteApp(healthy_share=0.0)
PACKS = Path(__file__).resolve().parents[2] / "variant_packs" / "route"
TOPOLOGY = RouteTopology(3, 2, 2, "nq7a_")
NODES = [f"h{n}" for n in range(1, TOPOLOGY.num_hosts + 1)] + ["r0", "r1"]


def _pingall(failing: set[tuple[str, str]]) -> str:
    lines = ["*** Ping: testing ping reachability"]
    for src in NODES:
        cells = ["X" if (src, dst) in failing else f"nq7a_{dst}" for dst in NODES if dst != src]
        lines.append(f"nq7a_{src} -> {' '.join(cells)}")
    total = len(NODES) * (len(NODES) - 1)
    lines.append(f"*** Results: 0.0% dropped ({total - len(failing)}/{total} received)")
    return "\n".join(lines)


def _cut_off(host: str, mates: tuple[str, ...]) -> set[tuple[str, str]]:
    """``host`` reaches only its subnet mates (its gateway's address is poisoned)."""
    far = [n for n in NODES if n != host and n not in mates]
    return {(host, n) for n in far} | {(n, host) for n in far}


@pytest.fixture(scope="module")
def learner():
    pack = load_pack(PACKS / "heldout-faults")
    return learner_from(generate_batch(APP, 60, 11, packs=[pack], share=1.0))


def test_it_learns_the_held_out_kinds_with_their_reads(learner) -> None:
    reads = {kind.label: kind.read for kind in learner.kinds.values()}
    assert reads == {"NB": "ip neigh show", "BR": "ip link show",
                     "LT": "ip route show table local"}
    assert learner.kinds[("LT", "ip route show table local")].where == {"router"}
    # a public kind read by a command the scripted agent already reads is left to it
    fault = {"label": "X", "machine": "h1", "inject": ["ip route del default"],
             "repair": ["ip route add default via 192.168.1.1"]}
    assert learn_kind(fault) is None


def test_it_reads_a_suspect_and_repairs_what_the_read_shows(learner) -> None:
    failing = _cut_off("h1", ("h2",))
    history: list[dict[str, str]] = [{"role": "user", "content": render_reset_observation(
        "task", prefix="nq7a_", topology=TOPOLOGY.describe(), initial_pingall=_pingall(failing))}]
    first = json.loads(learner.reply(history))
    assert first["machine"] == "nq7a_h1"
    assert first["command"] in {"ip neigh show", "ip link show"}  # the most often seen first
    first = {"machine": "nq7a_h1", "command": "ip neigh show"}  # the reply is a pure function
    output = ("192.168.1.101 dev nq7a_h1-eth0 lladdr 0a:c5:79:34:eb:e7 REACHABLE\n"
              "192.168.1.1 dev nq7a_h1-eth0 lladdr 02:00:5e:2b:0a:f3 PERMANENT\n")
    history += [{"role": "assistant", "content": json.dumps(first)},
                {"role": "user", "content": render_step_observation(
                    1, "nq7a_h1", first["command"], "0", output) + "\n\nPingall after this "
                    "step:\n" + _pingall(failing)}]
    assert json.loads(learner.reply(history)) == {
        "machine": "nq7a_h1", "command": "ip neigh del 192.168.1.1 dev nq7a_h1-eth0"}


def test_without_a_plan_it_is_the_scripted_agent(learner) -> None:
    pack = load_pack(PACKS / "heldout-format")
    for query in generate_batch(APP, 3, 5, packs=[pack], share=1.0):
        history = [{"role": "user", "content": query.prompt}]
        assert learner.reply(history) == scripted_reply(history)
