"""The route command allow-list: per-tool grammars, no emulator needed.

Refused: every spelling that escaped the old deny-list (abbreviated and combined options that
read host files), other namespaces, programs, files, control characters. Allowed: every
command the reference agents (oracle repairs, heuristic diagnoses and fixes) and the few-shot
examples send, and the everyday read-only commands of a network engineer.
"""

from __future__ import annotations

import json

import pytest

from apps.route import reference as agents
from apps.route.allowlist import COMMAND_MAX_CHARS, check_command
from apps.route.allowlist_specs import TOOLS
from apps.route.app import RouteApp
from apps.route.faults import METHODS, make_fault, with_prefix
from apps.route.queries import LEVEL_LABELS
from apps.route.topology import RouteTopology

PREFIX = "nq7x_"

# --- refused -----------------------------------------------------------------------------
#: (command, text the refusal must contain). The first block: the escapes a security review
#: found, verbatim.
REFUSED = [
    ("ip -ba /proc/1/environ", "ip -ba"),
    ("ip --bat /proc/1/environ", "ip --bat"),
    ("ip -forc -ba /proc/1/environ", "ip -forc"),
    ("ip -b /proc/1/environ", "ip -b"),
    ("ip -batch /etc/shadow", "ip -batch"),
    ("ip --batch /etc/shadow", "ip -batch"),
    ("tc -forc -bat /proc/1/environ", "tc -forc"),
    ("tc -bat /proc/1/environ", "tc -bat"),
    ("tc -batch /tmp/x", "tc -batch"),
    ("tc -b /tmp/x", "tc -b"),
    ("arp -vf /proc/1/environ", "arp -f"),
    ("arp -nvf /proc/1/environ", "arp -f"),
    ("arp -f /etc/shadow", "arp -f"),
    ("arp --fil /proc/1/environ", "--file"),
    ("arp --file /proc/1/environ", "arp --file"),
    ("arp --file=/proc/1/environ", "arp --file"),
    ("ss -F /proc/1/environ", "ss -F"),
    ("ss -tnF /proc/1/environ", "ss -F"),
    ("ss --filter /proc/1/environ", "ss --filter"),
    ("ss --fil /proc/1/environ", "--filter"),
    ("ss -D /tmp/dump", "ss -D"),
    ("ss -N other", "ss -N"),
    ("ss -K dst 192.168.1.100", "ss -K"),
    ("iptables --modp /tmp/x -L", "--modprobe"),
    ("iptables --modprobe=/tmp/x -L", "--modprobe"),
    ("iptables -M /tmp/x -L", "iptables -M"),
    ("iptables-save --fi /tmp/out", "--file"),
    ("iptables-save -f /tmp/out", "iptables-save -f"),
    ("iptables-save --modprobe /tmp/x", "--modprobe"),
    ("ip6tables-save --fi /tmp/out", "--file"),
    ("ip vr exe default cat /proc/1/environ", "ip vrf"),
    ("ip vrf exec default bash", "ip vrf"),
    ("ip netns exec other ip link", "ip netns"),
    ("ip net exec other ip link", "ip netns"),
    ("ip -n other link", "ip -n"),
    ("ip -netns other link", "ip -netns"),
    ("ip --netns other link", "ip -netns"),
    ("ip -a netns exec", "ip -a"),
    ("ip link set lo netns 1", "ip netns"),
    ("ip link set lo netn 1", "ip netns"),
    ("ip monitor", "ip monitor"),
    ("ip mon", "ip monitor"),
    ("ip xfrm state", "ip xfrm"),
    ("ip link set dev lo xdp obj /tmp/prog.o", "ip xdp"),
    ("ip link set dev lo xdpgeneric pinned x", "ip xdp"),
    ("ip route add 10.0.0.0/8 encap bpf in obj x dev lo", "ip bpf"),
    ("tc exec bpf", "tc exec"),
    ("tc ex bpf", "tc exec"),
    ("tc filter add dev lo ingress bpf obj x", "tc filter add"),
    ("tc qdisc add dev lo root netem delay 10ms distribution ../../../etc/x", "tc distribution"),
    ("tc -cf /etc/shadow qdisc show", "tc -cf"),
    ("tc -n other qdisc", "tc -n"),
    ("sysctl -p /etc/sysctl.conf", "sysctl -p"),
    ("sysctl -p", "sysctl"),
    ("sysctl --system", "sysctl --system"),
    ("sysctl --load=/etc/x", "sysctl --load"),
    ("sysctl -a", "sysctl"),
    ("sysctl -wp net.ipv4.ip_forward=1", "sysctl -p"),
    ("sysctl kernel.hostname=x", "net.*"),
    ("sysctl -w kernel.panic=1", "net.*"),
    ("sysctl -w net/../kernel/panic=1", "net.*"),
    ("sysctl -w net.ipv4..ip_forward=1", "net.*"),
    ("sysctl -w net.ipv4.ip_forward=1 kernel.panic=1", "net.*"),
    ("sysctl -w kernel.core_pattern=|/bin/sh", "shell syntax"),
    # an IPv6 stable_secret cannot be unset: it would reach the next episode on a reused network
    ("sysctl -w net.ipv6.conf.nq7x_h1-eth0.stable_secret=2001:db8::1", "cannot be unset"),
    ("sysctl net.ipv6.conf.default.stable_secret=2001:db8::1", "writing stable_secret"),
    ("sysctl -nw net/ipv6/conf/lo/stable_secret=::1", "writing stable_secret"),
    ("sysctl --write net.ipv6.conf.all.stable_secret=::1", "writing stable_secret"),
    ("sysctl -q net.ipv4.ip_forward=1 net.ipv6.conf.lo.stable_secret=::1", "stable_secret"),
    # MPLS routes are no part of the tasks (and a reused network does not restore them)
    ("ip -f mpls route add 100 dev lo", "not mpls"),
    ("ip -family mpls route show", "not mpls"),
    # state a reused network would not get back is not writable at all
    ("ip addrlabel add prefix 2001:db8::/32 label 99", "ip addrlabel"),
    ("ip maddress add 33:33:00:00:00:99 dev lo", "ip maddress add"),
    ("ip nexthop add id 1 blackhole", "ip nexthop"),
    ("ip token set ::1/64 dev lo", "ip token"),
    ("cat /etc/shadow", "/proc/net"),
    ("cat /proc/1/environ", "/proc/net"),
    ("cat /proc/self/environ", "/proc/net"),
    ("cat /proc/net/../../etc/shadow", "/proc/net"),
    ("cat /proc/net/../1/environ", "/proc/net"),
    ("cat -A /proc/net/route", "/proc/net"),
    ("cat", "/proc/net"),
    ("netstat -c", "netstat -c"),
    ("netstat --continuous", "netstat --continuous"),
    ("netstat --rout", "--route"),
    ("route --num", "--numeric"),
    ("route add -net 10.0.0.0/8 dev lo -x", "route -x"),
    ("ifconfig -z", "ifconfig -z"),
    ("ip -bri addr", "ip -bri"),
    ("ip -stat link", "ip -stat"),
    ("ip -4s addr", "ip -4s"),
    ("ip -rc 10 addr", "ip -rc"),
    ("ip addr sa", "ip address sa"),
    ("ip route restore", "ip route restore"),
    ("ip route save", "ip route save"),
    ("ip route showdump", "ip route showdump"),
    ("ip addr s", "ip address s"),
    ("ip tuntap add tap0 mode tap", "ip tuntap"),
    ("ip route add 10.0.0.0/8 dev /proc/1/environ", "file"),
    ("iptables -m bpf --object-pinned /sys/fs/bpf/x -j DROP", "iptables -m"),
    ("iptables -A INPUT --dp 22 -j DROP", "abbreviated"),
    ("iptables -c 1 2 -A INPUT -j DROP", "iptables -c"),
    ("iptables -L --", "--"),
    ("ip -- addr", "--"),
    # control characters and shell syntax
    ("ip addr\x00show", "control characters"),
    ("ip addr show\x00", "control characters"),
    ("ip\taddr", "control characters"),
    ("ip addr show \x1b[2J", "control characters"),
    ("ip addr show\x7f", "control characters"),
    ("ip addr show\u2028", "control characters"),
    ("ip route\nreboot", "shell syntax"),
    ("ip route; rm -rf /", "shell syntax"),
    ("ip route && reboot", "shell syntax"),
    ("ip route | grep x", "shell syntax"),
    ("echo $(id)", "shell syntax"),
    ("ip `id`", "shell syntax"),
    ("ip route > /etc/passwd", "shell syntax"),
    # tools
    ("rm -rf /", "not an allowed tool"),
    ("bash -c 'ip route'", "not an allowed tool"),
    ("nsenter -t 1 -n ip link", "not an allowed tool"),
    ("python3 -c 'import os'", "not an allowed tool"),
    ("sudo ip route", "no sudo"),
    ("ping -c1 192.168.1.100", "no ping"),
    ("ip 'unterminated", "cannot split"),
    ("ip " + "x" * COMMAND_MAX_CHARS, "longer than"),
    ("", "empty"),
]


@pytest.mark.parametrize(("command", "reason_part"), REFUSED)
def test_refused(command: str, reason_part: str) -> None:
    argv, reason = check_command(command)
    assert argv is None, command
    assert reason is not None and reason_part in reason, (command, reason)


def test_refusal_of_an_abbreviation_names_what_the_tool_would_do() -> None:
    assert "-batch" in (check_command("ip -ba x")[1] or "")
    assert "-force" in (check_command("ip -forc -ba x")[1] or "")
    assert "--file" in (check_command("arp --fil x")[1] or "")


@pytest.mark.parametrize("bad", ["\x00", "\x01", "\x08", "\x0b", "\x0c", "\x1f", "\x7f", "\x85"])
def test_every_control_character_is_refused(bad: str) -> None:
    for command in (f"ip addr show{bad}", f"{bad}ip route", f"sysctl net.ipv4.ip_forward{bad}"):
        argv, reason = check_command(command)
        assert argv is None and reason, repr(command)


def test_non_string_never_raises() -> None:
    for value in (None, 3, b"ip route", ["ip", "route"]):
        argv, reason = check_command(value)  # type: ignore[arg-type]
        assert argv is None and reason


# --- allowed -------------------------------------------------------------------------------
EVERYDAY = [
    "ip addr", "ip a", "ip addr show", "ip address show dev nq7x_r0-eth1", "ip -br addr",
    "ip -br a", "ip -4 addr show", "ip -s link", "ip -d link show", "ip -j route",
    "ip -o addr", "ip link", "ip l", "ip link show", "ip link show dev nq7x_r0-eth2",
    "ip r", "ip route", "ip ro", "ip route show", "ip route show table all",
    "ip route get 192.168.2.100", "ip -6 route", "ip rule", "ip rule show", "ip ru",
    "ip neigh", "ip n", "ip neighbour show", "ip neigh flush dev nq7x_r0-eth1",
    "ip netconf show", "ip maddr show", "ip -f inet addr show", "ip --brief addr",
    "ip route add default via 192.168.1.1", "ip route replace 192.168.3.0/24 dev nq7x_r0-eth3",
    "ip route add blackhole 10.9.0.0/16", "ip link set dev nq7x_r0-eth1 up",
    "ip addr add 192.168.1.1/24 dev nq7x_r0-eth1 label nq7x_r0-eth1:1",
    "ip link add junk0 type veth peer name junk1", "ip rule add from all lookup main pref 100",
    "ifconfig", "ifconfig -a", "ifconfig nq7x_r0-eth1", "ifconfig nq7x_r0-eth1 up",
    "ifconfig nq7x_r0-eth1 192.168.1.1 netmask 255.255.255.0 up", "ifconfig nq7x_r0-eth1 -arp",
    "ifconfig nq7x_r0-eth1 mtu 1500",
    "route", "route -n", "route -ne", "route -n -e", "route --numeric",
    "route add -net 192.168.3.0 netmask 255.255.255.0 dev nq7x_r0-eth3",
    "route del -net 192.168.3.0 netmask 255.255.255.0 gw 10.255.255.254",
    "route add default gw 192.168.1.1",
    "arp", "arp -n", "arp -a", "arp -an", "arp -e", "arp -i nq7x_r0-eth1 -n",
    "arp -d 192.168.1.100", "arp -s 192.168.1.100 00:11:22:33:44:55",
    "iptables -L", "iptables -L -n -v", "iptables -nvL", "iptables -L FORWARD -n -v",
    "iptables -nvL FORWARD", "iptables -S", "iptables -S FORWARD", "iptables -t nat -L -n",
    "iptables --list --numeric --verbose --line-numbers", "iptables -L -n --line-numbers",
    "iptables -P FORWARD ACCEPT", "iptables -F FORWARD", "iptables -D FORWARD 1",
    "iptables -A INPUT -p tcp -m tcp --dport 22 -j ACCEPT",
    "iptables -I FORWARD 1 -s 192.168.2.0/24 -j ACCEPT",
    "iptables -D INPUT -s 192.168.2.0/24 -j REJECT --reject-with icmp-port-unreachable",
    "iptables -A INPUT -m comment --comment 'allow ssh' -j ACCEPT",
    "iptables -C FORWARD ! -s 192.168.2.0/24 -j DROP", "iptables -w -L",
    "ip6tables -L -n", "iptables-save", "iptables-save -c", "iptables-save -t filter",
    "iptables-save --table nat", "ip6tables-save",
    "sysctl net.ipv4.ip_forward", "sysctl -n net.ipv4.ip_forward",
    "sysctl -w net.ipv4.ip_forward=1", "sysctl net.ipv4.conf.all.forwarding",
    "sysctl -w net.ipv4.conf.all.rp_filter=0", "sysctl net/ipv4/ip_forward",
    "sysctl -nw net.ipv4.ip_forward=1", "sysctl --values net.ipv4.ip_forward",
    "tc qdisc", "tc qdisc show", "tc q", "tc -s qdisc show", "tc qdisc show dev nq7x_r0-eth1",
    "tc qdisc del dev nq7x_r0-eth1 root", "tc class show dev nq7x_r0-eth1",
    "tc filter show dev nq7x_r0-eth1", "tc -s -d qdisc show",
    "tc qdisc add dev nq7x_r0-eth1 root netem delay 100ms",
    "tc qdisc replace dev nq7x_r0-eth1 root pfifo_fast",
    "ss", "ss -tan", "ss -tulpn", "ss -s", "ss -t -a -n", "ss --tcp --all", "ss -f inet -n",
    "ss -tn state established", "ss -tn dport = :22",
    "netstat", "netstat -rn", "netstat -i", "netstat -tulpn", "netstat -s", "netstat --route",
    "cat /proc/net/route", "cat /proc/net/arp", "cat /proc/net/dev",
    "cat /proc/sys/net/ipv4/ip_forward", "cat /proc/sys/net/ipv4/conf/all/forwarding",
    "cat /proc/net/fib_trie", "cat /proc/sys/net/ipv6/conf/default/stable_secret",
    "sysctl net.ipv6.conf.default.stable_secret", "ip -f inet6 route show",
]  # fmt: skip


@pytest.mark.parametrize("command", EVERYDAY)
def test_everyday_commands_allowed(command: str) -> None:
    argv, reason = check_command(command)
    assert reason is None, (command, reason)
    assert argv and argv[0] == command.split()[0]


def _reference_commands() -> set[str]:
    """Every repair command of every fault method on every kind of machine (as the oracle
    sends them), on one-, two- and three-router topologies, plus those of generated queries."""
    import random

    commands: set[str] = set()
    for routers, switches in ((1, 3), (2, 4), (3, 5)):
        topo = RouteTopology(switches, 2, routers, "{p}")
        machines = [f"r{i}" for i in range(routers)] + ["h1", f"h{switches * 2}"]
        for label, methods in METHODS.items():
            for method, (_name, kinds) in methods.items():
                for machine in machines:
                    if machine[0].upper() not in kinds:
                        continue
                    for seed in range(12):
                        fault = make_fault(label, method, machine, topo, random.Random(seed))
                        commands.update(with_prefix(c, PREFIX) for c in fault["repair"])
    app = RouteApp()
    for level in LEVEL_LABELS:
        for query in app.generate(60, seed=11, level=level):
            commands.update(
                with_prefix(step["command"], PREFIX) for step in query.ground_truth["repair"]
            )
    return commands


def test_every_oracle_repair_is_allowed() -> None:
    commands = _reference_commands()
    assert len(commands) > 50
    for command in sorted(commands):
        argv, reason = check_command(command)
        assert reason is None and argv, (command, reason)


def test_every_heuristic_diagnosis_and_fix_is_allowed() -> None:
    for diagnosis in agents.DIAGNOSES:
        assert check_command(diagnosis)[1] is None, diagnosis
    plan = {f"{PREFIX}r0-eth{i}": (f"192.168.{i}.1", f"192.168.{i}.0/24") for i in (1, 2, 3)}
    outputs = {
        "ip addr show": (
            f"1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\n    inet 127.0.0.1/8 scope host lo\n"
            f"2: {PREFIX}r0-eth1@if5: <BROADCAST,MULTICAST> mtu 68 qdisc noqueue\n"
            f"    inet 10.3.4.1/24 scope global {PREFIX}r0-eth1\n"
            f"    inet 192.168.2.1/31 scope global {PREFIX}r0-eth1\n"
            f"3: {PREFIX}r0-eth2@if6: <BROADCAST,MULTICAST,UP> mtu 1500 qdisc noqueue\n"
        ),
        "ip route show": (
            f"192.168.1.0/24 dev {PREFIX}r0-eth2 scope link\n"
            f"192.168.2.0/24 via 10.255.255.254 dev {PREFIX}r0-eth3 onlink\n"
            f"192.168.3.0/24 dev {PREFIX}r0-eth1 scope link metric 7000\n"
            "192.168.3.0/24 via 192.168.1.100 dev x\n"
        ),
        "sysctl net.ipv4.ip_forward": "net.ipv4.ip_forward = 0",
        "iptables-save": (
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n"
            "-A INPUT -s 192.168.2.0/24 -p icmp -j DROP\n"
            "-A OUTPUT -d 192.168.2.0/24 -j REJECT --reject-with icmp-port-unreachable\n"
            "-A FORWARD -s 192.168.3.0/24 -j DROP\nCOMMIT\n"
            "*mangle\n:PREROUTING DROP [0:0]\n-A PREROUTING -i x -j DROP\nCOMMIT\n"
        ),
        "ip rule show": "0:\tfrom all lookup local\n1234:\tfrom all iif x prohibit\n",
        "tc qdisc show": f"qdisc tbf 8001: dev {PREFIX}r0-eth1 root refcnt 2 rate 400bit\n",
    }
    fixes = []
    for diagnosis, output in outputs.items():
        found = agents.heuristic_fixes(diagnosis, output, plan)
        assert found, diagnosis
        fixes += found
    for command in fixes:
        argv, reason = check_command(command)
        assert reason is None and argv, (command, reason)


def test_every_few_shot_answer_is_allowed() -> None:
    for _situation, answer in RouteApp().few_shot_examples():
        command = json.loads(answer).get("command")  # a healthy control's example has none
        assert command is None or check_command(command)[1] is None, command


# --- the table -------------------------------------------------------------------------------
def test_each_spelling_is_listed_once_per_row_and_every_refusal_has_a_reason() -> None:
    """A spelling listed twice in a row would be read by whichever entry comes first, so an
    option refused in one entry could be allowed by another."""
    for tool, spec in TOOLS.items():
        spellings = [name for option in spec.options for name in option.names]
        assert len(spellings) == len(set(spellings)), tool
        objects = [obj.name for obj in spec.objects]
        assert len(objects) == len(set(objects)), tool
        for option in spec.options:
            assert not (option.refused and option.allowed), option
        assert all(why for why in spec.keywords.values()), tool


def test_a_row_refuses_its_refused_options_in_every_spelling() -> None:
    for tool, spec in TOOLS.items():
        for option in spec.options:
            if not option.refused:
                continue
            for name in option.names:
                word = name if spec.style != "getopt" else ("-" if len(name) == 1 else "--") + name
                argv, reason = check_command(f"{tool} {word} x")
                assert argv is None and reason and option.refused in reason, (tool, word, reason)
