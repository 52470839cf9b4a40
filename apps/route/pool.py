"""A per-process pool of built route networks, restored and verified between episodes.

Building a Mininet network costs 0.4-0.7 s (2x2 to 4x4) and tearing it down as much again
(``docs/route.md``, Figures). A :class:`RoutePool` keeps built networks per topology shape
``(num_switches, hosts_per_switch, num_routers)``; an episode leases one, and at ``close()`` the
network is restored to the state it had right after its build and **verified** against a
snapshot taken then. A network that fails verification is torn down (counted in
:attr:`evaluator.reset_pool.ResetStats.rebuilds`), so the next episode of that shape gets a
fresh build.

Why restoring only the machines an episode ran commands on is enough (see docs/route.md, "Reset
decision"): every command -- distractor, fault injection, agent command -- runs inside one
node's network namespace (``nsenter --net``), and a network namespace owns its own links,
addresses, routes, rules, neighbour entries, qdiscs, netfilter tables and ``net.*`` sysctls.
The exceptions are link operations on a veth, whose peer lives in another namespace: deleting
it (or moving it, or renaming it and deleting the renamed one) removes the peer too, and
setting it down drops the peer's carrier. The verification catches both: the touched node's
link listing (names, ifindex of the veth peer, MAC, flags) must equal the snapshot, and so must
the root-namespace side of the network (every prefixed switch port and bridge: ifindex, MAC,
MTU, flags, master, carrier), read from ``/sys/class/net`` without a process. Machines no
command ran on still learn from traffic (neighbour entries, path-MTU exceptions): that state is
flushed on every machine at every release, in-process (rtnetlink).

Cost: one process tree per touched machine (``nsenter`` + ``sh``, whose ``ip``/``tc``/
``iptables`` processes both repair and print the state), all machines in parallel; the
``net.*`` sysctls are read and written by a helper thread moved into the machine's namespace.
The modules: :mod:`apps.route.snapshot` (what a machine's state is, the snapshot),
:mod:`apps.route.restore` (the restore and the comparison), :mod:`apps.route.sysctl` and
:mod:`apps.route.netlink` (what is done in-process); the lease cycle, statistics and the exit
and fork hooks are the engine's reset pool (:mod:`evaluator.reset_pool`).

Switch: ``NETARENA_ROUTE_POOL=<n>`` keeps ``n`` idle networks per shape per process; ``0`` or
unset: no pool, every episode builds and tears down its own network (the route tests count
host interfaces, node shells and prefix locks right after closing episodes, which a process
holding idle networks would fail: docs/route.md, "Reset decision").
"""

from __future__ import annotations

from dataclasses import dataclass

from evaluator.reset_pool import PoolRegistry, ResetPool, pool_env, pool_size

from apps.route.network import RouteNetwork
from apps.route.restore import restore_machines, verify_machines
from apps.route.snapshot import DUMP_SCRIPT, SHOW4, SHOW6, Snapshot, run_scripts, take_snapshot
from apps.route.topology import RouteTopology

#: Environment variable: idle networks kept per shape (0 or unset: the pool is off).
POOL_ENV = pool_env("route")
#: Idle networks per shape of a pool asked for when the variable does not size one.
POOL_SIZE = 2
#: Whether the pool is on when :data:`POOL_ENV` is unset.
ON_BY_DEFAULT = False

#: What the verification compares with the snapshot besides the ``ip`` shows of
#: :data:`SHOW4`/:data:`SHOW6` (named ``ip -4 <show>``/``ip -6 <show>``): see
#: :func:`verification_reads`.
OTHER_READS = (
    "tc qdisc show",  # DUMP_SCRIPT
    "iptables-save",  # DUMP_SCRIPT
    "ip6tables-save",  # DUMP_SCRIPT
    "net.* sysctls",  # sysctl.restore_sysctls: every readable one, and which are readable
    "nf_conntrack",  # netlink.flush_netfilter: no entry left
    "root-namespace links",  # snapshot.root_links
)


def verification_reads() -> frozenset[str]:
    """Everything the release's verification reads and compares, by name: ``ip -4 <show>``
    for each of :data:`SHOW4`, ``ip -6 <show>`` for each of :data:`SHOW6`, and
    :data:`OTHER_READS`."""
    return frozenset(
        [*(f"ip -4 {show}" for show in SHOW4), *(f"ip -6 {show}" for show in SHOW6), *OTHER_READS]
    )


@dataclass(frozen=True)
class Coverage:
    """How a released network gets one kind of agent-writable state back.

    Attributes:
        reads: what the verification compares with the snapshot (names of
            :func:`verification_reads`); any difference left after the restore rebuilds.
        restore: what the restore does; "rebuild" names what it cannot take back.
    """

    reads: tuple[str, ...]
    restore: str


#: Every kind of state an allowed command can write (``apps.route.allowlist.STATE_KINDS``)
#: and how the pool covers it. ``tests/apps/route/test_state_coverage.py`` checks that every
#: kind the allow-list lets a command write is here, that every read is one the verification
#: makes, and, on Mininet, that each kind written by an agent is gone in the next episode.
POOL_COVERAGE: dict[str, Coverage] = {
    "link": Coverage(
        ("ip -4 link show", "root-namespace links", "net.* sysctls"),
        "links the snapshot lacks deleted (veth, bridge, macvlan, ...); every snapshot link "
        "reset: MAC, MTU, queue length, ARP, promiscuity, all-multicast, no master, up, "
        "group, mode, multicast/dynamic/trailers flags, broadcast address, GSO/GRO limits, no "
        "alias (the IPv6 address mode is a sysctl); rebuild: a deleted or renamed veth",
    ),
    "address4": Coverage(("ip -4 address show",), "flushed, the snapshot's re-added"),
    "address6": Coverage(
        ("ip -6 address show", "ip -6 maddress show"),
        "global ones deleted, link-local ones and ::1 re-added; rebuild: another link-local "
        "or a site-local address",
    ),
    "route4": Coverage(
        ("ip -4 route show table all", "ip -4 route show table all cache"),
        "every table flushed (local included), the snapshot's and the addresses' re-added",
    ),
    "route6": Coverage(
        ("ip -6 route show table all",),
        "routes of proto boot and static (what ip and route add) flushed in every table; "
        "rebuild: one added with another proto",
    ),
    "rule4": Coverage(("ip -4 rule show",), "flushed, the snapshot's and pref 0 re-added"),
    "rule6": Coverage(("ip -6 rule show",), "flushed, the snapshot's and pref 0 re-added"),
    "neighbour4": Coverage(("ip -4 neighbour show nud all",), "flushed (every state)"),
    "neighbour6": Coverage(("ip -6 neighbour show nud all",), "flushed (every state)"),
    "proxy4": Coverage(("ip -4 neighbour show proxy",), "flushed"),
    "proxy6": Coverage(("ip -6 neighbour show proxy", "ip -6 maddress show"), "flushed"),
    "qdisc": Coverage(
        ("tc qdisc show",), "root, ingress and clsact qdiscs deleted (their classes with them)"
    ),
    "iptables": Coverage(("iptables-save",), "every nftables table deleted"),
    "ip6tables": Coverage(("ip6tables-save",), "every nftables table deleted"),
    "conntrack": Coverage(("nf_conntrack",), "flushed"),
    "sysctl": Coverage(
        ("net.* sysctls",),
        "every one that differs written back; rebuild: one that became readable (an IPv6 "
        "stable_secret written: it cannot be unset)",
    ),
}



class RoutePool(ResetPool[RouteTopology, RouteNetwork, Snapshot]):
    """Built route networks per shape ``(num_switches, hosts_per_switch, num_routers)``,
    leased to one episode at a time (:class:`evaluator.reset_pool.ResetPool`; thread-safe).

    Args:
        max_idle: idle networks kept per shape; a verified network beyond that is destroyed.

    Hooks: a build starts a :class:`RouteNetwork` and snapshots it (:func:`take_snapshot`);
    a lease clears its :attr:`RouteNetwork.touched`; the restore puts back the touched
    machines and flushes the learned state of the others (:func:`restore_machines`); the
    verification compares what the restore printed and the root-namespace links with the
    snapshot, then waits for links coming up (:func:`verify_machines`). Releases restore
    synchronously.
    """

    def __init__(self, max_idle: int = POOL_SIZE) -> None:
        super().__init__("route network", max_idle=max_idle)
        self._printed: dict[int, dict[str, str]] = {}

    @staticmethod
    def shape_key(topology: RouteTopology) -> tuple[int, int, int]:
        """Pool key of a topology: ``(num_switches, hosts_per_switch, num_routers)``."""
        return (topology.num_switches, topology.hosts_per_switch, topology.num_routers)

    def _key(self, request: RouteTopology) -> tuple[int, int, int]:
        return self.shape_key(request)

    def _build(self, request: RouteTopology) -> tuple[RouteNetwork, Snapshot]:
        net = RouteNetwork(RouteTopology(*self.shape_key(request))).start()
        try:
            return net, take_snapshot(net)
        except BaseException:
            net.stop()
            raise

    def _attach(self, env: RouteNetwork, record: Snapshot) -> None:
        env.touched.clear()

    def _restore(self, env: RouteNetwork, record: Snapshot) -> list[str]:
        if not env.running:
            return ["the network is not running"]
        restored = restore_machines(env, record, set(env.touched))
        self._printed[id(env)] = restored.dumps
        return restored.problems

    def _verify(self, env: RouteNetwork, record: Snapshot) -> list[str]:
        dumps = self._printed.pop(id(env), None)
        if dumps is None:  # verify() without a restore: print the touched machines now
            touched = dict.fromkeys(sorted(env.touched & set(record.nodes)), DUMP_SCRIPT)
            dumps = {m: out for m, (_s, out, _a) in run_scripts(env, touched).items()}
        problems, pending = verify_machines(env, record, dumps)
        if not problems:
            for machine in pending:
                env.wait_links_settled(machine)
        return problems

    def _destroy(self, env: RouteNetwork, timeout_s: float | None) -> None:
        self._printed.pop(id(env), None)
        env.stop()

    def _forget(self, env: RouteNetwork) -> None:
        env.forget()

    def _describe(self, env: RouteNetwork) -> str:
        return env.topology.prefix or "route network"


_DEFAULT: PoolRegistry[RoutePool] = PoolRegistry()


def default_pool(create: bool = False) -> RoutePool | None:
    """The process's pool when ``NETARENA_ROUTE_POOL`` > 0 or ``create`` (created on first
    use, keeping the variable's number of idle networks per shape, or :data:`POOL_SIZE`),
    else None. It is shut down at process exit; a forked child starts without one."""
    size = pool_size("route", on_by_default=ON_BY_DEFAULT, size=POOL_SIZE)
    if size <= 0 and not create:
        return None
    return _DEFAULT.get("default", lambda: RoutePool(max_idle=size if size > 0 else POOL_SIZE))


def shutdown_default_pool() -> None:
    """Destroy the process's pool's networks (the next lease creates a new pool)."""
    for pool in _DEFAULT.pop_all():
        pool.shutdown()
