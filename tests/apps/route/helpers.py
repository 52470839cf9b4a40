"""Shared helpers of the route tests: capability checks and in-process agents."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from apps.route.faults import with_prefix
from apps.route.network import RouteNetwork
from tests.conftest import require, require_root, require_tool


def require_emulator() -> None:
    """Skip locally / fail under CI unless root, Mininet, bwrap and nsenter are present."""
    require_root()
    require_tool("mnexec")
    require_tool("bwrap")
    require_tool("nsenter")
    require(
        Path("/usr/lib/python3/dist-packages/mininet/net.py").exists(),
        "Debian's python3-mininet package (apt mininet) is not installed",
    )


def host_footprint() -> dict[str, object]:
    """What an episode could leak on the host, as comparable values.

    Interfaces/bridges/veths carrying an episode prefix, Mininet node shells, network
    namespaces held by processes, prefix lock files, this process's open descriptors (a probe
    socket would pin a namespace) and root-namespace iptables rules.
    """
    prefixed = re.compile(r"^n[0-9a-z]{3}_")
    interfaces = sorted(os.listdir("/sys/class/net"))
    ours = [i for i in interfaces if prefixed.match(i)]
    bridges = [i for i in ours if os.path.isdir(f"/sys/class/net/{i}/bridge")]
    namespaces: set[str] = set()
    shells = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            if b"mininet:n" in cmdline:
                shells.append(entry)
                namespaces.add(os.readlink(f"/proc/{entry}/ns/net"))
        except OSError:
            continue
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False)
    lock_dir = Path("/run/netarena-route")
    locks = sorted(p.name for p in lock_dir.glob("*.lock")) if lock_dir.is_dir() else []
    return {
        "interfaces": ours,
        "bridges": bridges,
        "mininet_shells": shells,
        "mininet_namespaces": sorted(namespaces),
        "locks": locks,
        "open_fds": len(os.listdir("/proc/self/fd")),
        "iptables_rules": sorted(x for x in rules.stdout.splitlines() if x.startswith("-A")),
        "all_interfaces": interfaces,
    }


def run_oracle_episode_in_subprocess(query_data: dict[str, object]) -> dict[str, object]:
    """Worker for process pools: run one oracle episode of ``query_data`` (``Query.to_dict``).

    Returns the prefix used, the verdict figures and the process id.
    """
    from apps.route.app import RouteApp
    from evaluator.runner import run_episode
    from evaluator.testing import ScriptedClient
    from evaluator.types import Query

    app = RouteApp()
    query = Query.from_dict(query_data)
    result = run_episode(
        app, query, ScriptedClient(lambda m, _e: app.oracle_reply(query.ground_truth, m))
    )
    return {
        "pid": os.getpid(),
        "prefix": result.details["prefix"],
        "correct": result.correct,
        "safe": result.safe,
        "steps": result.steps,
    }


def start_network_and_hang(queue: object) -> None:
    """Worker: start a 2x2 network, report its prefix on ``queue``, then hang until killed."""
    import time

    from apps.route.network import RouteNetwork
    from apps.route.topology import RouteTopology

    net = RouteNetwork(RouteTopology(2, 2)).start()
    queue.put(net.topology.prefix)  # type: ignore[attr-defined]
    time.sleep(600)


def leaked(before: dict[str, object], after: dict[str, object], key: str) -> object:
    """What ``after[key]`` holds that ``before[key]`` did not: the leak of the code in between.

    Lists compare as sets (a stale lock or interface left by an earlier test and reaped in
    between is not a leak of this one); counts compare as the increase. An empty list or 0
    means nothing leaked.
    """
    old, new = before[key], after[key]
    if isinstance(old, list) and isinstance(new, list):
        return sorted(set(new) - set(old))
    assert isinstance(old, int) and isinstance(new, int), key
    return max(0, new - old)


def apply_commands(net: RouteNetwork, machine: str, commands: list[str]) -> None:
    """Run ``commands`` (unprefixed names) on ``machine`` of ``net``; each must exit 0."""
    prefix = net.topology.prefix
    for command in commands:
        status, output = net.exec(prefix + machine, shlex.split(with_prefix(command, prefix)))
        assert status == 0, f"{machine}: {command}: {output}"
