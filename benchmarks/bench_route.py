"""Benchmark of the route app's emulator costs (needs root and Mininet).

Prints medians, in seconds, for the 2x2 and 4x4 topologies (switches x hosts per switch):

* setup     -- claim a prefix, build and start the Mininet network, enable forwarding
* pingall   -- one full-mesh probe on a healthy network, and on a network with a fault
              (a lossy probe waits out its timeout twice)
* teardown  -- stop Mininet and remove every trace of the prefix
* reset by rebuild  -- teardown + setup
* reset by restore  -- re-apply the baseline configuration on every node and verify it
              (state fingerprint and net.* sysctls of every node); the alternative to a
              rebuild, measured here to decide between them (see docs/route.md)
* episode   -- a whole oracle episode through ``run_episode`` (level-1 and level-2 queries)

Usage: ``sudo .venv/bin/python benchmarks/bench_route.py [--reps N]``
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.route.app import RouteApp  # noqa: E402
from apps.route.faults import with_prefix  # noqa: E402
from apps.route.network import RouteNetwork  # noqa: E402
from apps.route.topology import RouteTopology  # noqa: E402
from evaluator.runner import run_episode  # noqa: E402
from evaluator.testing import ScriptedClient  # noqa: E402


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.3f}"


def _restore_script(net: RouteNetwork, machine: str) -> str:
    topo = net.topology
    lines = [
        "iptables -P INPUT ACCEPT",
        "iptables -P FORWARD ACCEPT",
        "iptables -P OUTPUT ACCEPT",
        "iptables -F",
        "iptables -X",
        "for t in nat mangle raw; do iptables -t $t -F; iptables -t $t -X; done",
        "ip rule flush",
        "ip rule add from all lookup main pref 32766",
        "ip rule add from all lookup default pref 32767",
    ]
    if machine == topo.router:
        intfs = [
            (topo.router_intf(i), f"{topo.router_ip(i)}/24")
            for i in range(1, topo.num_switches + 1)
        ]
    else:
        number = int(machine[len(topo.prefix) + 1 :])
        intfs = [(topo.intf(machine, 0), f"{topo.host_ip(number)}/24")]
    names = " ".join(["lo"] + [name for name, _ in intfs])
    lines.append(
        "for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do "
        f'case " {names} " in *" $l "*) ;; *) ip link del "$l";; esac; done'
    )
    for name, address in intfs:
        lines += [
            f"tc qdisc del dev {name} root 2>/dev/null",
            f"ip link set {name} up mtu 1500",
            f"ip addr flush dev {name}",
            f"ip addr add {address} brd + dev {name}",
        ]
    lines.append("ip route flush table main proto static; ip route flush table main proto boot")
    if machine == topo.router:
        lines.append("sysctl -qw net.ipv4.ip_forward=1")
    else:
        number = int(machine[len(topo.prefix) + 1 :])
        gateway = topo.router_ip(topo.host_subnet(number))
        lines += ["sysctl -qw net.ipv4.ip_forward=0", f"ip route replace default via {gateway}"]
    return "; ".join(lines)


def _snapshot(net: RouteNetwork) -> dict[str, list[str]]:
    state = {}
    for machine in net.topology.machines():
        parts = net.fingerprint_parts(machine)
        parts[0] = "\n".join(x for x in parts[0].splitlines() if "link/" not in x)  # no counters
        parts.append(net.exec(machine, ["sysctl", "-a", "--pattern", "^net\\.ipv4\\."])[1])
        state[machine] = parts
    return state


def restore(net: RouteNetwork, baseline: dict[str, list[str]]) -> tuple[bool, float]:
    """Re-apply the baseline configuration on every node.

    Returns (verified identical, seconds spent applying before verification).
    """
    started = time.perf_counter()
    for machine in net.topology.machines():
        net.exec(machine, ["sh", "-c", _restore_script(net, machine) + " >/dev/null 2>&1"])
    applied_s = time.perf_counter() - started
    return _snapshot(net) == baseline, applied_s


def bench_topology(switches: int, hosts: int, reps: int) -> None:
    setup, teardown, healthy, lossy, rebuild, restore_s, apply_s = [], [], [], [], [], [], []
    restore_ok = 0
    app = RouteApp(switches=(switches, switches), hosts=(hosts, hosts))
    queries = [q for q in app.generate(reps * 4, seed=7, level=1)][:reps]
    for rep in range(reps):
        net = RouteNetwork(RouteTopology(switches, hosts))
        net.start()
        setup.append(net.build_s)
        healthy.append(statistics.median([net.pingall().elapsed_s for _ in range(5)]))
        baseline = _snapshot(net)
        query = queries[rep]
        for fault in query.ground_truth["faults"]:
            for command in fault["inject"]:
                net.exec(
                    net.topology.prefix + fault.get("machine", "r0"),
                    shlex.split(with_prefix(command, net.topology.prefix)),
                )
        lossy.append(net.pingall().elapsed_s)
        started = time.perf_counter()
        verified, applied = restore(net, baseline)
        restore_ok += verified
        apply_s.append(applied)
        restore_s.append(time.perf_counter() - started)
        assert net.pingall().lost == 0
        started = time.perf_counter()
        net.stop()
        teardown.append(net.stop_s)
        again = RouteNetwork(RouteTopology(switches, hosts)).start()
        rebuild.append(time.perf_counter() - started)
        again.stop()
    print(
        f"{switches}x{hosts}: setup {_median(setup)} s | pingall healthy {_median(healthy)} s, "
        f"with a fault {_median(lossy)} s | teardown {_median(teardown)} s | "
        f"reset by rebuild {_median(rebuild)} s, by restore {_median(apply_s)} s "
        f"+ verify = {_median(restore_s)} s "
        f"(verified {restore_ok}/{reps})"
    )


def bench_episodes(reps: int) -> None:
    app = RouteApp()
    for level in (1, 2):
        walls, steps = [], []
        for query in app.generate(reps, seed=11, level=level):
            truth = query.ground_truth
            oracle = ScriptedClient(lambda m, _e, t=truth: app.oracle_reply(t, m))  # type: ignore[misc]
            result = run_episode(app, query, oracle)
            assert result.correct and result.safe
            walls.append(result.wall_s)
            steps.append(result.steps)
        print(
            f"oracle episode, level {level}, S,H in 2..4: median wall {_median(walls)} s, "
            f"median steps {statistics.median(steps)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    for switches, hosts in ((2, 2), (4, 4)):
        bench_topology(switches, hosts, args.reps)
    bench_episodes(args.reps)


if __name__ == "__main__":
    main()
