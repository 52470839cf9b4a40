"""Reference agents as pure functions of the history (no emulator)."""

from __future__ import annotations

import json

from apps.route.app import RouteApp
from apps.route.faults import with_prefix
from apps.route.reference import DIAGNOSES, heuristic_fixes, heuristic_reply, oracle_reply
from apps.route.topology import RouteTopology

APP = RouteApp()
TOPO = RouteTopology(3, 2, prefix="nab1_")
FIRST = (
    "task...\nIn this episode node names carry the prefix `nab1_`.\n\n"
    f"Topology and intended addressing:\n{TOPO.describe()}\n\nInitial pingall:\n..."
)
PLAN = {TOPO.router_intf(i): (f"192.168.{i}.1", f"192.168.{i}.0/24") for i in (1, 2, 3)}


def _obs(output: str) -> str:
    return f"Step 1 on nab1_r0: x\nExit status: 0\nOutput:\n{output}\n\nPingall after this step:\n"


def test_oracle_walks_the_repair_sequence_using_its_own_history() -> None:
    query = next(q for q in APP.generate(30, seed=2) if len(q.ground_truth["repair"]) >= 3)
    repair = [
        {"machine": step["machine"], "command": with_prefix(step["command"], "nab1_")}
        for step in query.ground_truth["repair"]
    ]
    history = [{"role": "user", "content": FIRST}]
    for expected in repair:
        reply = json.loads(oracle_reply(query.ground_truth, history))
        assert reply == expected
        history += [
            {"role": "assistant", "content": json.dumps(reply)},
            {"role": "user", "content": _obs("")},
        ]
    assert json.loads(oracle_reply(query.ground_truth, history)) == {"done": True}


def test_oracle_ignores_foreign_replies_in_history() -> None:
    query = APP.generate(1, seed=4)[0]
    history = [
        {"role": "user", "content": FIRST},
        {"role": "assistant", "content": "garbage"},
        {"role": "user", "content": "Step 1: reply not used"},
    ]
    first = query.ground_truth["repair"][0]
    reply = json.loads(oracle_reply(query.ground_truth, history))
    assert reply == {"machine": first["machine"], "command": with_prefix(first["command"], "nab1_")}


def test_oracle_tells_machines_apart_and_reads_version_1_truths() -> None:
    step = "ip route replace default via 192.168.1.1"
    truth = {"repair": [{"machine": "h1", "command": step}, {"machine": "h2", "command": step}]}
    history = [{"role": "user", "content": FIRST}]
    history += [{"role": "assistant", "content": json.dumps({"machine": "h1", "command": step})}]
    assert json.loads(oracle_reply(truth, history)) == {"machine": "h2", "command": step}
    old = {"repair": ["ip link set {p}r0-eth1 up"]}
    assert json.loads(oracle_reply(old, history[:1])) == {
        "machine": "r0",
        "command": "ip link set nab1_r0-eth1 up",
    }


def test_null_stops() -> None:
    assert json.loads(APP.null_reply([{"role": "user", "content": FIRST}])) == {"done": True}


ADDR_OUTPUT = """\
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN group default qlen 1000
    inet 127.0.0.1/8 scope host lo
2: nab1_r0-eth1@if9: <BROADCAST,MULTICAST> mtu 1500 qdisc noqueue state DOWN group default
    link/ether 6e:8c:3a:1f:00:01 brd ff:ff:ff:ff:ff:ff link-netnsid 0
    inet 192.168.1.1/24 brd 192.168.1.255 scope global nab1_r0-eth1
3: nab1_r0-eth2@if10: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 68 qdisc noqueue state UP group default
    inet 192.168.2.1/31 scope global nab1_r0-eth2
4: nab1_r0-eth3@if11: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP
    inet 192.168.3.1/24 brd 192.168.3.255 scope global nab1_r0-eth3
"""


def test_heuristic_address_fixes() -> None:
    assert heuristic_fixes("ip addr show", ADDR_OUTPUT, PLAN) == [
        "ip link set nab1_r0-eth1 up",
        "ip link set nab1_r0-eth2 mtu 1500",
        "ip addr add 192.168.2.1/24 brd + dev nab1_r0-eth2",
        "ip addr del 192.168.2.1/31 dev nab1_r0-eth2",
    ]


def test_heuristic_route_rule_iptables_qdisc_and_sysctl_fixes() -> None:
    routes = (
        "192.168.1.0/24 dev nab1_r0-eth1 proto kernel scope link src 192.168.1.1\n"
        "192.168.2.0/24 via 10.255.255.254 dev nab1_r0-eth3 onlink\n"
        "192.168.3.0/24 dev nab1_r0-eth3 proto kernel scope link src 192.168.3.1\n"
    )
    assert heuristic_fixes("ip route show", routes, PLAN) == [
        "ip route del 192.168.2.0/24 via 10.255.255.254 dev nab1_r0-eth3",
        "ip route add 192.168.2.0/24 dev nab1_r0-eth2 proto kernel scope link src 192.168.2.1",
    ]
    saved = (
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [3:252]\n:OUTPUT ACCEPT [0:0]\n"
        "-A INPUT -s 192.168.3.0/24 -p icmp -j REJECT --reject-with icmp-port-unreachable\n"
        "COMMIT\n"
    )
    assert heuristic_fixes("iptables-save", saved, PLAN) == [
        "iptables -t filter -P FORWARD ACCEPT",
        "iptables -D INPUT -s 192.168.3.0/24 -p icmp -j REJECT --reject-with icmp-port-unreachable",
    ]
    rules = "0:\tfrom all lookup local\n4242:\tfrom all iif nab1_r0-eth2 prohibit\n"
    assert heuristic_fixes("ip rule show", rules, PLAN) == ["ip rule del pref 4242"]
    qdiscs = "qdisc tbf 8001: dev nab1_r0-eth1 root refcnt 2 rate 306bit burst 128b lat 30s\n"
    assert heuristic_fixes("tc qdisc show", qdiscs, PLAN) == ["tc qdisc del dev nab1_r0-eth1 root"]
    assert heuristic_fixes("sysctl net.ipv4.ip_forward", "net.ipv4.ip_forward = 0", PLAN) == [
        "sysctl -w net.ipv4.ip_forward=1"
    ]
    assert heuristic_fixes("sysctl net.ipv4.ip_forward", "net.ipv4.ip_forward = 1", PLAN) == []


def test_heuristic_runs_diagnoses_in_order_then_fixes_then_stops() -> None:
    history = [{"role": "user", "content": FIRST}]

    def say(command: str, output: str) -> None:
        history.append(
            {"role": "assistant", "content": json.dumps({"machine": "r0", "command": command})}
        )
        history.append({"role": "user", "content": _obs(output)})

    assert json.loads(heuristic_reply(history))["command"] == DIAGNOSES[0]
    say(DIAGNOSES[0], ADDR_OUTPUT)
    assert json.loads(heuristic_reply(history))["command"] == "ip link set nab1_r0-eth1 up"
    for fix in heuristic_fixes(DIAGNOSES[0], ADDR_OUTPUT, PLAN):
        say(fix, "")
    assert json.loads(heuristic_reply(history))["command"] == DIAGNOSES[1]
    healthy_routes = "\n".join(
        f"192.168.{i}.0/24 dev nab1_r0-eth{i} proto kernel scope link src 192.168.{i}.1"
        for i in (1, 2, 3)
    )
    for diagnosis in DIAGNOSES[1:]:
        assert json.loads(heuristic_reply(history))["command"] == diagnosis
        say(diagnosis, healthy_routes if diagnosis == "ip route show" else "")
    assert json.loads(heuristic_reply(history)) == {"done": True}
