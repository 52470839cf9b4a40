"""The route network pool: restore + verification between episodes, rebuilds, isolation.

Every fault method on every kind of machine (core router, edge router, hosts), the
distractors and agent-like changes outside the fault catalogue are made on a pooled network;
after the network is released and leased again, every machine's full state (links, IPv4 and
IPv6 addresses, routes of every table, rules, neighbour entries, multicast addresses, route
cache, qdiscs, iptables and ip6tables, every ``net.*`` sysctl) and the root-namespace side of
the network must equal the snapshot taken after the build, and pingall must be full. Changes
that restore cannot undo (a deleted or renamed veth) must be caught and rebuilt.
"""

from __future__ import annotations

import json
import random
import threading

import pytest

from apps.route.app import RouteApp
from apps.route.distractors import DISTRACTOR_KINDS, make_distractor
from apps.route.episode import RouteEpisode
from apps.route.faults import METHODS, make_fault, with_prefix
from apps.route.network import RouteNetwork, list_interfaces
from apps.route.pool import POOL_ENV, RoutePool, default_pool, shutdown_default_pool
from apps.route.replies import DONE_REPLY
from apps.route.snapshot import DUMP_SCRIPT, normalize_dump, root_links, run_scripts
from apps.route.sysctl import read_sysctls
from apps.route.topology import RouteTopology
from evaluator.runner import run_episode
from evaluator.testing import ScriptedClient
from tests.apps.route.helpers import apply_commands, host_footprint, leaked, require_emulator

pytestmark = [pytest.mark.root, pytest.mark.netns]


@pytest.fixture(autouse=True)
def _emulator() -> None:
    require_emulator()


def _full_state(net: RouteNetwork) -> dict[str, object]:
    """Every machine's dump and sysctls, read independently of the restore path."""
    results = run_scripts(
        net, dict.fromkeys(net.topology.machines(), DUMP_SCRIPT), after=lambda _m: read_sysctls()
    )
    state: dict[str, object] = {
        machine: (normalize_dump(out), sysctls) for machine, (_s, out, sysctls) in results.items()
    }
    state["root"] = root_links(net.topology.prefix)
    return state


def _pristine(pool: RoutePool, net: RouteNetwork) -> dict[str, object]:
    snapshot = pool.record(net)
    assert snapshot is not None
    state: dict[str, object] = {
        machine: (node.dump, node.sysctls) for machine, node in snapshot.nodes.items()
    }
    state["root"] = snapshot.root_links
    return state


def _differences(state: object, pristine: object) -> list[str]:
    if not isinstance(state, tuple) or not isinstance(pristine, tuple):
        return [f"{state!r:.300} != {pristine!r:.300}"]
    found = []
    for got, want in zip(state[0], pristine[0], strict=True):
        got_lines, want_lines = set(got.splitlines()), set(want.splitlines())
        found += [f"+{x}" for x in sorted(got_lines - want_lines)]
        found += [f"-{x}" for x in sorted(want_lines - got_lines)]
    found += [
        f"{path}: {state[1].get(path)!r} != {pristine[1].get(path)!r}"
        for path in sorted(set(state[1]) | set(pristine[1]))
        if state[1].get(path) != pristine[1].get(path)
    ]
    return found


def _assert_pristine(pool: RoutePool, net: RouteNetwork, where: str) -> None:
    state, pristine = _full_state(net), _pristine(pool, net)
    differing = {
        key: _differences(state[key], pristine[key])[:4]
        for key in pristine
        if state[key] != pristine[key]
    }
    assert not differing, (where, differing, pool.stats.failures)
    healed = net.pingall()
    assert healed.lost == 0, (where, healed.render())


def _cycle(pool: RoutePool, net: RouteNetwork, where: str) -> RouteNetwork:
    """Release ``net`` (restore + verify) and lease the same shape again: the same network."""
    rebuilds = pool.stats.rebuilds
    assert pool.release(net), (where, pool.stats.failures)
    assert pool.stats.rebuilds == rebuilds
    again = pool.acquire(net.topology)
    assert again is net, where
    _assert_pristine(pool, again, where)
    return again


@pytest.mark.slow
def test_every_fault_and_agent_change_is_restored_to_the_snapshot_on_every_machine() -> None:
    rng = random.Random(1515)
    shape = RouteTopology(4, 2, 2)  # a core router r0, an edge router r1, hosts
    logical = shape.with_prefix("{p}")
    machines = ["r0", "r1", "h1", "h8"]
    pool = RoutePool(max_idle=1)
    net = pool.acquire(shape)
    try:
        _assert_pristine(pool, net, "fresh")
        # distractors (veths left down, routes, blackholes, rules, iptables)
        for serial, kind in enumerate(DISTRACTOR_KINDS):
            machine = "h2" if kind == "unused_route" else machines[serial % len(machines)]
            extra = make_distractor(kind, machine, logical, rng, serial)
            apply_commands(net, machine, [extra["command"]])
        net = _cycle(pool, net, "distractors")
        # every method, on every kind of machine it applies to, at once (different machines)
        for label, methods in METHODS.items():
            for method, (_name, kinds) in methods.items():
                targets = [m for m in machines if m[0].upper() in kinds]
                for machine in targets:
                    fault = make_fault(label, method, machine, logical, rng)
                    apply_commands(net, machine, fault["inject"])
                assert net.pingall(timeout_s=0.1, attempts=1).lost > 0, (label, method)
                net = _cycle(pool, net, f"{label}-{method} on {targets}")
        # agent-like changes outside the fault catalogue
        p = net.topology.prefix
        agent = {
            "h1": [
                f"ip neigh add 192.168.1.77 lladdr 02:00:00:00:00:77 dev {p}h1-eth0 nud permanent",
                f"tc qdisc add dev {p}h1-eth0 root tbf rate 1mbit burst 1600 latency 1s",
                "sysctl -w net.ipv4.icmp_echo_ignore_all=1",
                f"ip -6 addr add 2001:db8::1/64 dev {p}h1-eth0",
                f"ip link set dev {p}h1-eth0 address 02:00:00:00:01:01",
                f"ip link set dev {p}h1-eth0 txqueuelen 7 promisc on",
            ],
            "r0": [
                "ip rule add from 192.168.1.0/24 lookup 42 pref 1234",
                "ip route add 10.170.0.0/16 via 192.168.1.101 table 42",
                "iptables -t nat -N NETARENA",
                "iptables -t nat -A POSTROUTING -o lo -j MASQUERADE",
                "iptables -t mangle -A PREROUTING -j MARK --set-mark 7",
                "ip6tables -A INPUT -j DROP",
                "sysctl -w net.ipv4.conf.all.rp_filter=2",
                f"sysctl -w net.ipv4.conf.{p}r0-eth1.arp_ignore=8",
                f"ip addr add 192.168.1.9/24 dev {p}r0-eth1",
                "ip link add junk0 type veth peer name junk1",
                "ip link add brj type bridge",
                "ip link set junk0 master brj",
                f"ip link set {p}r0-eth3 mtu 1400",
                "ip route add blackhole 10.171.0.0/16 metric 7",
            ],
            "r1": [
                f"ip neigh replace 10.0.1.1 lladdr 02:00:00:00:00:01 dev {p}r1-eth100",
                "ip -6 rule add from 2001:db8::/32 lookup 7 pref 77",
                "sysctl -w net.ipv6.conf.all.forwarding=1",
                f"tc qdisc add dev {p}r1-eth100 ingress",
            ],
            "h8": [
                f"ip link set {p}h8-eth0 arp off",
                "ip route add 10.172.0.0/16 dev lo",
                "sysctl -w net.ipv4.ip_default_ttl=5",
            ],
        }
        for machine, commands in agent.items():
            apply_commands(net, machine, commands)
        net = _cycle(pool, net, "agent-like changes")
        assert pool.stats.rebuilds == 0 and pool.stats.built == 1
    finally:
        pool.release(net)
        pool.shutdown()


@pytest.mark.slow
def test_a_deleted_or_renamed_veth_is_caught_and_the_network_rebuilt() -> None:
    pool = RoutePool(max_idle=1)
    shape = RouteTopology(2, 2)
    net = pool.acquire(shape)
    prefix = net.topology.prefix
    apply_commands(net, "h1", [f"ip link del {prefix}h1-eth0"])
    assert not pool.release(net)
    assert pool.stats.rebuilds == 1 and pool.stats.destroyed == 1
    assert not [i for i in list_interfaces() if i.startswith(prefix)]
    fresh = pool.acquire(shape)
    assert fresh is not net and pool.stats.built == 2
    assert fresh.pingall().lost == 0
    p = fresh.topology.prefix
    apply_commands(
        fresh, "h2", [f"ip link set {p}h2-eth0 down", f"ip link set {p}h2-eth0 name zz0"]
    )
    assert not pool.release(fresh)
    assert pool.stats.rebuilds == 2
    # an agent deleting its veth through the sandbox: the episode ends normally, the
    # network is rebuilt, the next episode of the shape is healthy and solved
    app = RouteApp(switches=(2, 2), hosts=(2, 2), healthy_share=0.0, pool=pool)
    first, second = app.generate(2, seed=1516, level=1)
    reply = json.dumps({"machine": "h1", "command": "ip link del h1-eth0"})
    episode = app.episode(first)
    assert isinstance(episode, RouteEpisode)
    with episode:
        episode.reset()
        episode.step(reply.replace("h1-eth0", f"{episode.network.topology.prefix}h1-eth0"))
        episode.step(DONE_REPLY)
    assert pool.stats.rebuilds == 3
    result = run_episode(
        app,
        second,
        ScriptedClient(lambda messages, _e: app.oracle_reply(second.ground_truth, messages)),
    )
    assert result.correct and result.safe
    pool.shutdown()
    assert pool.idle_count() == 0


@pytest.mark.slow
def test_two_episodes_at_once_never_share_a_network_and_shutdown_leaves_nothing() -> None:
    before = host_footprint()
    pool = RoutePool(max_idle=2)
    app = RouteApp(switches=(2, 2), hosts=(2, 2), healthy_share=0.0, pool=pool)
    queries = app.generate(8, seed=1517, level=1)
    in_use: set[str] = set()
    clashes: list[str] = []
    results = []
    lock = threading.Lock()

    def worker(batch: list) -> None:
        for query in batch:
            episode = app.episode(query)
            assert isinstance(episode, RouteEpisode)
            with episode:
                episode.reset()
                prefix = episode.network.topology.prefix
                with lock:
                    if prefix in in_use:
                        clashes.append(prefix)
                    in_use.add(prefix)
                for step in query.ground_truth["repair"]:
                    command = with_prefix(step["command"], prefix)
                    episode.step(json.dumps({"machine": step["machine"], "command": command}))
                verdict = episode.verdict()
                with lock:
                    in_use.discard(prefix)
                    results.append(verdict.correct)

    threads = [threading.Thread(target=worker, args=(queries[i::2],)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not clashes
    assert results == [True] * len(queries)
    assert pool.stats.reused >= len(queries) - 2 * 2, pool.stats  # networks were reused
    assert pool.stats.built <= 4 and pool.stats.rebuilds == 0, pool.stats
    assert pool.idle_count() >= 1
    pool.shutdown()
    with pytest.raises(Exception, match="shut down"):
        pool.acquire(RouteTopology(2, 2))
    after = host_footprint()
    for key in ("interfaces", "bridges", "mininet_shells", "mininet_namespaces", "locks"):
        assert not leaked(before, after, key), (key, before[key], after[key])
    assert not leaked(before, after, "open_fds")


def test_the_pool_is_off_unless_the_environment_sizes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    shutdown_default_pool()
    monkeypatch.delenv(POOL_ENV, raising=False)
    assert default_pool() is None
    monkeypatch.setenv(POOL_ENV, "0")
    assert default_pool() is None
    monkeypatch.setenv(POOL_ENV, "3")
    pool = default_pool()
    assert pool is not None and pool.max_idle == 3 and default_pool() is pool
    shutdown_default_pool()
    monkeypatch.setenv(POOL_ENV, "many")
    assert default_pool() is None
    forced = default_pool(create=True)
    assert forced is not None and forced.max_idle == 2
    shutdown_default_pool()
