"""Agent reply parsing and the command allow-list (no emulator)."""

from __future__ import annotations

import pytest

from apps.route.commands import COMMAND_MAX_CHARS, check_command
from apps.route.replies import parse_reply


@pytest.mark.parametrize(
    "text",
    [
        '{"machine": "r0", "command": "ip route"}',
        '```json\n{"machine": "r0", "command": "ip route"}\n```',
        'Let me look at the routes first.\n```\n{"machine": "r0", "command": "ip route"}\n```',
        'Thought: check routes. Action: {"machine": "r0", "command": "ip route"} -- done.',
        '  {"command": "ip route", "machine": " r0 ", "why": {"nested": "{}"}}  ',
    ],
)
def test_parse_accepts_plain_fenced_and_embedded_json(text: str) -> None:
    parsed = parse_reply(text)
    assert (parsed.machine, parsed.command, parsed.done, parsed.error) == (
        "r0",
        "ip route",
        False,
        None,
    )


def test_parse_done_and_errors() -> None:
    assert parse_reply('{"done": true}').done
    assert parse_reply('I am finished. ```json\n{"done": true}\n```').done
    assert not parse_reply('{"done": false}').done
    for bad in ["", "   ", "ip route", "[1, 2]", '{"machine": 3, "command": "ip r"}',
                '{"machine": "r0", "command": ""}', '{"machine": "r0", "command": ["ip", "r"]}',
                '{"machine": "r0"', None, 42, "{" * 5000]:  # fmt: skip
        parsed = parse_reply(bad)
        assert parsed.error and not parsed.done and parsed.command is None, bad


def test_parse_reports_which_field_is_wrong() -> None:
    assert "machine" in (parse_reply('{"command": "ip r"}').error or "")
    assert "command" in (parse_reply('{"machine": "r0"}').error or "")


@pytest.mark.parametrize(
    "command",
    [
        "ip route show",
        "ip -br addr",
        "ip link set n123_r0-eth1 up",
        "ip addr add 192.168.1.1/24 brd + dev n123_r0-eth1",
        "ifconfig n123_r0-eth2 up",
        "route -n",
        "arp -n",
        "iptables -L -n -v",
        "iptables -D FORWARD -s 192.168.2.0/24 -j DROP",
        "iptables-save",
        "sysctl net.ipv4.ip_forward",
        "sysctl -w net.ipv4.ip_forward=1",
        "tc qdisc del dev n123_r0-eth3 root",
        "ss -tan",
        "netstat -rn",
        "cat /proc/net/route",
        "cat /proc/sys/net/ipv4/ip_forward",
        "ip rule del pref 1234",
    ],
)
def test_allowed_commands(command: str) -> None:
    argv, reason = check_command(command)
    assert reason is None and argv and argv[0] == command.split()[0]


@pytest.mark.parametrize(
    ("command", "reason_part"),
    [
        ("rm -rf /", "not an allowed tool"),
        ("ip route; rm -rf /", "shell syntax"),
        ("ip route && reboot", "shell syntax"),
        ("ip route | grep x", "shell syntax"),
        ("echo $(id)", "shell syntax"),
        ("ip `id`", "shell syntax"),
        ("ip route > /etc/passwd", "shell syntax"),
        ("bash -c 'ip route'", "not an allowed tool"),
        ("sh -c id", "not an allowed tool"),
        ("nsenter -t 1 -n ip link", "not an allowed tool"),
        ("ip netns exec other ip link", "ip netns"),
        ("ip -n other link", "ip -n"),
        ("ip -batch /etc/shadow", "ip -batch"),
        ("ip vrf exec default bash", "ip vrf"),
        ("ip link set lo netns 1", "ip netns"),
        ("ip monitor", "ip monitor"),
        ("sudo ip route", "no sudo"),
        ("ping -c1 192.168.1.100", "no ping"),
        ("sysctl kernel.hostname=x", "net.*"),
        ("sysctl -w kernel.core_pattern=|/bin/sh", "shell syntax"),
        ("sysctl -w kernel.panic=1", "net.*"),
        ("sysctl -p", "sysctl"),
        ("sysctl -w net/../kernel/panic=1", "net.*"),
        ("sysctl -w net.ipv4..ip_forward=1", "net.*"),
        ("sysctl -w net.ipv4.ip_forward=1 kernel.panic=1", "net.*"),
        ("sysctl -a", "sysctl"),
        ("cat /etc/shadow", "/proc/net"),
        ("cat /proc/net/../../etc/shadow", "/proc/net"),
        ("cat /proc/1/environ", "/proc/net"),
        ("iptables --modprobe=/tmp/x -L", "--modprobe"),
        ("tc -batch /tmp/x", "tc -batch"),
        ("tc exec bpf", "tc exec"),
        ("arp -f /etc/shadow", "arp -f"),
        ("ss -N other", "ss -N"),
        ("python3 -c 'import os'", "not an allowed tool"),
        ("ip 'unterminated", "cannot split"),
        ("ip " + "x" * COMMAND_MAX_CHARS, "longer than"),
    ],
)
def test_refused_commands(command: str, reason_part: str) -> None:
    argv, reason = check_command(command)
    assert argv is None and reason is not None and reason_part in reason, reason
