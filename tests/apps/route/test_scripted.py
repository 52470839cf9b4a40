"""The route scripted agent (apps/route/scripted.py): written against the public fault
catalogue, it must repair most public queries on real Mininet (the benchmark's honesty check is
only as good as its strongest script), from the conversation alone."""

from __future__ import annotations

import inspect
import json
from collections import Counter

import pytest

from apps.route import scripted
from apps.route.app import RouteApp
from apps.route.prompt import render_reset_observation
from apps.route.scripted import (
    ADDR,
    IPTABLES,
    ROUTE,
    fixes_for_addresses,
    fixes_for_iptables,
    fixes_for_netconf,
    fixes_for_routes,
    fixes_for_rules,
    read_pingall,
    read_plan,
    scripted_reply,
    suspects,
)
from apps.route.topology import RouteTopology
from evaluator.testing import play_reference
from tests.apps.route.helpers import require_emulator

APP = RouteApp(healthy_share=0.0)
#: A seed no other test uses; 4 queries per level.
SEED, PER_LEVEL = 777_001, 4
#: The target on public queries: at least 70% correct and safe.
PUBLIC_TARGET = 0.70

TOPOLOGY = RouteTopology(3, 2, 2, "nq1a_")


def _pingall(failing: set[tuple[str, str]]) -> str:
    nodes = [f"h{n}" for n in range(1, TOPOLOGY.num_hosts + 1)] + ["r0", "r1"]
    lines = ["*** Ping: testing ping reachability"]
    for src in nodes:
        cells = ["X" if (src, dst) in failing else f"nq1a_{dst}" for dst in nodes if dst != src]
        lines.append(f"nq1a_{src} -> {' '.join(cells)}")
    total = len(nodes) * (len(nodes) - 1)
    lines.append(f"*** Results: 0.0% dropped ({total - len(failing)}/{total} received)")
    return "\n".join(lines)


def _first_observation(failing: set[tuple[str, str]]) -> str:
    return render_reset_observation(
        "task", prefix="nq1a_", topology=TOPOLOGY.describe(), initial_pingall=_pingall(failing)
    )


def _isolated(host: str) -> set[tuple[str, str]]:
    nodes = [f"h{n}" for n in range(1, TOPOLOGY.num_hosts + 1)] + ["r0", "r1"]
    return {(host, n) for n in nodes if n != host} | {(n, host) for n in nodes if n != host}


def test_the_plan_is_read_from_the_first_observation() -> None:
    plan = read_plan(_first_observation(set()))
    assert plan.prefix == "nq1a_"
    assert plan.machines["r0"].interfaces["nq1a_r0-eth1"] == "192.168.1.1/24"
    assert plan.machines["r0"].routes == ["192.168.2.0/24 via 10.0.1.2 dev nq1a_r0-eth101"]
    assert plan.machines["r1"].routes == ["default via 10.0.1.1 dev nq1a_r1-eth100"]
    assert plan.machines["h3"].subnet == 2
    assert plan.machines["h3"].routes == ["default via 192.168.2.1 dev nq1a_h3-eth0"]
    assert plan.owner == {1: "r0", 2: "r1", 3: "r0"}


def test_a_full_initial_pingall_is_declared_healthy_and_a_loss_is_not() -> None:
    assert json.loads(scripted_reply([{"role": "user", "content": _first_observation(set())}])) \
        == {"done": True, "healthy": True}
    history = [{"role": "user", "content": _first_observation(_isolated("h3"))}]
    assert json.loads(scripted_reply(history)) == {"machine": "nq1a_h3", "command": ADDR}


def test_the_pingall_localises_a_host_fault_before_any_router() -> None:
    failing = _isolated("h4")
    assert read_pingall(_pingall(failing), "nq1a_") == failing
    ranked = suspects(read_plan(_first_observation(failing)), failing)
    assert ranked[0][0] == "h4" and ranked[0][1][0] == ADDR
    # a host that loses one other subnet only: its firewall is read first
    one_subnet = {("h1", "h5"), ("h1", "h6"), ("h5", "h1"), ("h6", "h1")}
    ranked = suspects(read_plan(_first_observation(one_subnet)), one_subnet)
    assert ranked[0] == ("h1", (IPTABLES, ROUTE, ADDR, "tc qdisc show"))


def test_reads_are_diffed_against_the_plan_and_distractors_are_left_alone() -> None:
    plan = read_plan(_first_observation(set()))
    addresses = (
        "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\n    inet 127.0.0.1/8 scope host lo\n"
        "2: nq1a_h1-eth0@if9: <BROADCAST,MULTICAST,NOARP> mtu 68 qdisc noqueue\n"
        "    inet 192.168.1.100/31 scope global nq1a_h1-eth0\n"
        "3: nq1a_dm0@nq1a_dn0: <BROADCAST,MULTICAST> mtu 1500 qdisc noop\n"
    )
    assert fixes_for_addresses(plan.machines["h1"], addresses) == [
        "ip link set nq1a_h1-eth0 up",
        "ip link set nq1a_h1-eth0 mtu 1500",
        "ip link set nq1a_h1-eth0 arp on",
        "ip addr add 192.168.1.100/24 brd + dev nq1a_h1-eth0",
        "ip addr del 192.168.1.100/31 dev nq1a_h1-eth0",
        "ip route replace default via 192.168.1.1 dev nq1a_h1-eth0",
    ]
    routes = (
        "192.168.1.0/24 dev nq1a_r0-eth1 proto kernel scope link src 192.168.1.1\n"
        "192.168.3.0/24 dev nq1a_r0-eth1 scope link\n"
        "10.0.1.0/30 dev nq1a_r0-eth101 proto kernel scope link src 10.0.1.1\n"
        "192.168.2.0/24 via 10.0.1.2 dev nq1a_r0-eth101\n"
        "blackhole 192.168.2.96/27\n"
        "blackhole 10.170.4.0/24\n"
    )
    assert fixes_for_routes(plan.machines["r0"], routes) == [
        "ip route replace 192.168.3.0/24 dev nq1a_r0-eth3 proto kernel scope link "
        "src 192.168.3.1",
        "ip route del blackhole 192.168.2.96/27",
    ]
    save = (
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n"
        "-A INPUT -s 10.170.0.0/16 -j DROP\n-A INPUT -s 192.168.2.0/24 -p icmp -j DROP\n"
        "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\nCOMMIT\n"
    )
    assert fixes_for_iptables(save) == [
        "iptables -t filter -P FORWARD ACCEPT",
        "iptables -D INPUT -s 192.168.2.0/24 -p icmp -j DROP",
    ]
    rules = (
        "0:\tfrom all lookup local\n1234:\tfrom all iif nq1a_r0-eth1 lookup 150\n"
        "31000:\tfrom 10.170.0.0/16 prohibit\n32766:\tfrom all lookup main\n"
    )
    assert fixes_for_rules(rules) == ["ip rule del pref 1234"]
    netconf = (
        "inet nq1a_r0-eth1 forwarding on rp_filter off\n"
        "inet nq1a_r0-eth3 forwarding off rp_filter off\ninet all forwarding on rp_filter off\n"
    )
    assert fixes_for_netconf(plan.machines["r0"], netconf) == [
        "sysctl -w net.ipv4.conf.nq1a_r0-eth3.forwarding=1"
    ]


def test_scripted_agent_reads_only_the_conversation() -> None:
    assert list(inspect.signature(scripted.scripted_reply).parameters) == ["history"]
    assert APP.has_scripted


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_scripted_agent_repairs_most_public_queries() -> None:
    require_emulator()
    solved: Counter[int] = Counter()
    total = 0
    for level in APP.levels:
        for query in APP.generate(PER_LEVEL, seed=SEED, level=level):
            verdict = play_reference(APP, query, "scripted")
            solved[level] += bool(verdict.correct and verdict.safe)
            total += 1
    assert sum(solved.values()) / total >= PUBLIC_TARGET, solved
