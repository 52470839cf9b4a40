"""Hostile agents: the host and every other episode stay untouched.

Two episodes run side by side in this process; the agent of episode A tries to escape or to
reach episode B. Refused commands must be refused; allowed ones must only affect A's node.
The sandbox layer is also tested directly with commands the allow-list would never pass
(defence in depth: read-only filesystem, private /proc, no capabilities beyond networking,
timeouts, output caps).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest

from apps.route.app import RouteApp
from apps.route.commands import run_sandboxed
from apps.route.episode import RouteEpisode
from tests.apps.route.helpers import host_footprint, require_emulator

pytestmark = [pytest.mark.root, pytest.mark.netns]

APP = RouteApp(switches=(2, 2), hosts=(2, 2), healthy_share=0.0)


@pytest.fixture(autouse=True)
def _emulator() -> None:
    require_emulator()


def _cmd(command: str, machine: str = "r0") -> str:
    return json.dumps({"machine": machine, "command": command})


def _host_state() -> dict[str, object]:
    footprint = host_footprint()
    return {
        "interfaces": footprint["all_interfaces"],
        "iptables": footprint["iptables_rules"],
        "forward_policy": subprocess.run(
            ["iptables", "-S", "FORWARD"], capture_output=True, text=True, check=False
        ).stdout.splitlines()[:1],
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text(),
        "kernel_panic": Path("/proc/sys/kernel/panic").read_text(),
        "hostname": Path("/proc/sys/kernel/hostname").read_text(),
    }


def test_hostile_commands_leave_host_and_other_episode_untouched() -> None:
    query_a, query_b = APP.generate(2, seed=31, level=1)
    host_iface = next(i for i in sorted(os.listdir("/sys/class/net")) if i != "lo")
    before_host = _host_state()
    episode_a, episode_b = APP.episode(query_a, max_steps=50), APP.episode(query_b)
    assert isinstance(episode_a, RouteEpisode) and isinstance(episode_b, RouteEpisode)
    with episode_a, episode_b:
        episode_a.reset()
        episode_b.reset()
        net_b = episode_b.network
        b_prefix = net_b.topology.prefix
        b_state = {m: net_b.fingerprint(m) for m in net_b.topology.machines()}
        b_reach = net_b.pingall().reachable
        refused = [
            "rm -rf /",
            "ip route; rm -rf /",
            "ip route && reboot",
            "ip link set lo up $(reboot)",
            "bash -c 'ip link del eth0'",
            "nsenter -t 1 -n ip link set eth0 down",
            f"ip netns exec {b_prefix}r0 ip link set {b_prefix}r0-eth1 down",
            "sysctl -w kernel.panic=1",
            "sysctl kernel.hostname=pwned",
            "cat /etc/shadow",
            "sudo ip link del eth0",
        ]
        for command in refused:
            step = episode_a.step(_cmd(command))
            assert "refused" in step.observation, command
            assert step.info["error"] == "refused"
        # another episode's machines are not machines of this episode
        step = episode_a.step(_cmd("ip link set lo down", machine=f"{b_prefix}r0"))
        assert "unknown machine" in step.observation
        # allowed tools, aimed outwards: they only see A's namespace
        for command in [
            f"ip link del {host_iface}",
            f"ip link set {b_prefix}r0-eth1 down",
            f"ifconfig {b_prefix}h1-eth0 down",
            "iptables -P FORWARD DROP",
            "iptables -A INPUT -j DROP",
            "sysctl -w net.ipv4.ip_forward=0",
            "ip link add evil0 type veth peer name evil1",
            "ip link set evil0 netns 1",
        ]:
            episode_a.step(_cmd(command))
        a_router = episode_a.network.topology.router
        assert "evil0" in episode_a.network.exec(a_router, ["ip", "link"])[1]
        assert episode_a.network.exec(a_router, ["sysctl", "-n", "net.ipv4.ip_forward"])[1] == "0"
        assert {m: net_b.fingerprint(m) for m in net_b.topology.machines()} == b_state
        assert net_b.pingall().reachable == b_reach
        assert "evil0" not in os.listdir("/sys/class/net")
    assert _host_state() == before_host


def test_sandbox_layer_itself_is_read_only_private_and_bounded() -> None:
    query = APP.generate(1, seed=32)[0]
    canary_etc = Path(f"/etc/netarena-canary-{secrets.token_hex(4)}")
    canary_tmp = Path(f"/tmp/netarena-canary-{secrets.token_hex(4)}")
    canary_etc.write_text("x")
    canary_tmp.write_text("x")
    host_before = _host_state()
    episode = APP.episode(query)
    assert isinstance(episode, RouteEpisode)
    try:
        with episode:
            episode.reset()
            pid = episode.network.pid_of(episode.network.topology.router)
            rm = run_sandboxed(
                pid, ["rm", "-rf", str(canary_etc), str(canary_tmp), "/etc/hosts", "/usr/bin/ip"]
            )
            assert rm.status != 0 and "Read-only" in rm.output
            assert canary_etc.exists() and canary_tmp.exists()
            # only the /etc files the tools read are there at all
            assert run_sandboxed(pid, ["ls", str(canary_etc)]).status != 0
            shadow = run_sandboxed(pid, ["cat", "/etc/shadow"])
            assert "root:" not in shadow.output  # masked (empty or unreadable)
            procs = run_sandboxed(pid, ["ls", "/proc"]).output.split()
            assert max(int(p) for p in procs if p.isdigit()) < 10  # own PID namespace
            home = run_sandboxed(pid, ["ls", "/root", "/work", "/home"])
            assert home.status != 0
            for key in ("kernel.panic=0", "kernel.printk=7", "vm.swappiness=1"):
                sysctl = run_sandboxed(pid, ["sysctl", "-w", key])
                assert sysctl.status != 0, sysctl.output
            sysrq = run_sandboxed(pid, ["tee", "/proc/sysrq-trigger"])
            assert sysrq.status != 0
            assert run_sandboxed(pid, ["ip", "netns", "add", "x"]).status != 0
            escape = run_sandboxed(pid, ["nsenter", "-t", "1", "-n", "ip", "link"])
            assert escape.status != 0
            slow = run_sandboxed(pid, ["sleep", "30"], timeout_s=0.5)
            assert slow.timed_out and slow.status is None and slow.elapsed_s < 5
            flood = run_sandboxed(pid, ["cat", "/dev/zero"], output_cap_bytes=1000)
            assert flood.truncated and len(flood.output) < 1200
            sysctl_net = run_sandboxed(pid, ["sysctl", "-w", "net.ipv4.ip_forward=0"])
            assert sysctl_net.status == 0  # net.* of the node's own namespace is writable
    finally:
        canary_etc.unlink()
        canary_tmp.unlink()
    assert _host_state() == host_before
