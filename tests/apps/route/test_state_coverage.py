"""Everything an agent can write is covered: by the network pool (gone in the next episode on a
reused network) and by the step fingerprint (a write is a state change).

The first tests need no emulator. The set of writes is derived from the allow-list's grammars
(``allowlist.write_surface``) and must be exactly the table ``allowlist.WRITABLE_STATE``; every
kind of state that table names must have an entry in ``pool.POOL_COVERAGE`` whose reads are
ones the pool's verification makes, and one in ``network.FINGERPRINT_READS`` whose parts the
fingerprint has. So a grammar that grows (a new ``ip`` object or verb, a tool, an iptables
table, a sysctl tree, an address family) fails here until the table, the pool and the
fingerprint cover the new write.

The emulated tests write every kind through the allow-list and the sandbox, as an agent's step
does, on a pooled network; after the release, the next lease (the same network when the pool
restored it, a new one when it rebuilt it) shows none of it, and every machine's state equals
the snapshot. The regression of the channel that was found: an IPv6 ``stable_secret`` written
in one episode and read back in the next on the same pooled network.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest

from apps.route import allowlist_specs
from apps.route.allowlist import (
    STATE_KINDS,
    WRITABLE_STATE,
    check_command,
    write_surface,
)
from apps.route.allowlist_grammar import CommandSpec, OneOf, SysctlKey
from apps.route.allowlist_specs import IP_FAMILIES, IPTABLES_TABLES
from apps.route.app import RouteApp
from apps.route.commands import run_sandboxed
from apps.route.episode import RouteEpisode
from apps.route.network import FINGERPRINT_COMMANDS, FINGERPRINT_READS, RouteNetwork
from apps.route.pool import POOL_COVERAGE, RoutePool, verification_reads
from apps.route.replies import DONE_REPLY
from apps.route.snapshot import DUMP_SCRIPT, SHOW4, SHOW6, normalize_dump, run_scripts
from apps.route.sysctl import read_sysctls
from apps.route.topology import RouteTopology
from tests.apps.route.helpers import require_emulator


# --- the table, the pool and the fingerprint against the grammars (no emulator) -----------
def test_the_table_lists_exactly_the_writes_the_grammars_allow() -> None:
    surface = write_surface()
    assert surface == set(WRITABLE_STATE), (
        f"allowed but not in WRITABLE_STATE: {sorted(surface - set(WRITABLE_STATE))}; "
        f"listed but no longer allowed: {sorted(set(WRITABLE_STATE) - surface)}"
    )
    assert {kind for kinds in WRITABLE_STATE.values() for kind in kinds} == set(STATE_KINDS)


def test_the_pool_verifies_and_restores_every_writable_kind() -> None:
    reads = verification_reads()
    for kind in STATE_KINDS:
        assert kind in POOL_COVERAGE, f"the pool does not cover {kind}"
        coverage = POOL_COVERAGE[kind]
        assert coverage.reads and coverage.restore, kind
        assert set(coverage.reads) <= reads, (kind, set(coverage.reads) - reads)
    assert set(POOL_COVERAGE) == set(STATE_KINDS)
    # what verification_reads names is what the dump script runs
    for show in (*SHOW4, *SHOW6):
        assert show in DUMP_SCRIPT
    for command in ("tc qdisc show", "iptables-save", "ip6tables-save"):
        assert command in DUMP_SCRIPT


def test_the_step_fingerprint_shows_every_writable_kind() -> None:
    labels = {label for label, _command in FINGERPRINT_COMMANDS}
    for kind in STATE_KINDS:
        assert FINGERPRINT_READS.get(kind), f"the step fingerprint does not read {kind}"
        assert set(FINGERPRINT_READS[kind]) <= labels, kind
    assert set(FINGERPRINT_READS) == set(STATE_KINDS)


@pytest.mark.parametrize(
    ("change", "new_write"),
    [
        ("ip_verb", "ip maddress"),
        ("ip_object", "ip addrlabel"),
        ("tc_verb", "tc filter"),
        ("tool", "bridge"),
        ("table", "iptables -t broute"),
        ("family", "ip -f mpls"),
        ("sysctl_tree", "sysctl -w kernel.*"),
        ("arp_flags", None),
    ],
)
def test_a_grammar_that_grows_is_caught(
    monkeypatch: pytest.MonkeyPatch, change: str, new_write: str | None
) -> None:
    """The derivation sees each way the allow-list could grow past the table."""
    tools = allowlist_specs.TOOLS
    if change in ("ip_verb", "ip_object", "tc_verb"):
        tool, name, verbs = {
            "ip_verb": ("ip", "maddress", {"show", "add", "del"}),
            "ip_object": ("ip", "addrlabel", {"list", "add"}),
            "tc_verb": ("tc", "filter", {"show", "add"}),
        }[change]
        objects = tuple(replace(obj, verbs=frozenset(verbs)) if obj.name == name else obj
                        for obj in tools[tool].objects)  # fmt: skip
        monkeypatch.setitem(tools, tool, replace(tools[tool], objects=objects))
    elif change == "tool":
        monkeypatch.setitem(tools, "bridge", CommandSpec("bridge", "getopt"))
    elif change in ("table", "family"):
        tool, option, values = (
            ("iptables", "t", (*IPTABLES_TABLES, "broute")) if change == "table"
            else ("ip", "-family", (*IP_FAMILIES, "mpls"))
        )  # fmt: skip
        options = tuple(replace(opt, value=OneOf(values)) if option in opt.names else opt
                        for opt in tools[tool].options)  # fmt: skip
        monkeypatch.setitem(tools, tool, replace(tools[tool], options=options))
    elif change == "sysctl_tree":
        sysctl = tools["sysctl"]
        assert isinstance(sysctl.operands.kind, SysctlKey)
        keys = replace(sysctl.operands.kind, pattern=re.compile(r"^[a-z]+(\.[a-z0-9_]+)+(=\S*)?$"))
        operands = replace(sysctl.operands, kind=keys)
        monkeypatch.setitem(tools, "sysctl", replace(sysctl, operands=operands))
    else:
        # a read-only tool that starts to write: arp without -s and -d is read-only, so
        # taking -s away removes the write, and the table is then too wide
        arp = tools["arp"]
        options = tuple(opt for opt in arp.options if not {"s", "d", "D"} & set(opt.names))
        monkeypatch.setitem(tools, "arp", replace(arp, options=options))
    surface = write_surface()
    if new_write is None:
        assert set(WRITABLE_STATE) - surface == {"arp -s/-d"}
    else:
        assert new_write in surface and new_write not in WRITABLE_STATE


# --- emulated: every kind written by an agent is gone in the next pooled episode -----------
@dataclass(frozen=True)
class Write:
    """Agent commands (``{p}``: the prefix) on ``machine`` that write one kind of state;
    ``readback`` (an allowed command) shows each of ``markers`` after them, and not in the
    next lease -- or, with ``deletes``, the markers are there before, gone after the
    commands and back in the next lease. ``outcome``: the pool ``restored`` the network or
    ``rebuilt`` it. ``traffic``: probe once after the commands (state made by traffic).
    ``step_change``: the step fingerprint shows the write (all but an empty iptables table,
    which filters nothing)."""

    kind: str
    machine: str
    commands: tuple[str, ...]
    readback: str
    markers: tuple[str, ...]
    deletes: bool = False
    outcome: str = "restored"
    traffic: bool = False
    step_change: bool = True


WRITES = [
    # links: attributes of an existing link, links created, a master, a rename
    Write("link", "h1", ("ip link set dev {p}h1-eth0 alias leaky",), "ip -d link show",
          ("alias leaky",)),
    Write("link", "h1", ("ip link set dev lo group 9",), "ip link show dev lo", ("group 9",)),
    Write("link", "h1", ("ip link set {p}h1-eth0 gso_max_size 30000 gro_max_size 30000",),
          "ip -d link show dev {p}h1-eth0", ("gso_max_size 30000", "gro_max_size 30000")),
    Write("link", "h1", ("ip link set {p}h1-eth0 broadcast 02:ff:ff:ff:ff:fe dynamic on",),
          "ip link show dev {p}h1-eth0", ("brd 02:ff:ff:ff:ff:fe", "DYNAMIC")),
    Write("link", "h1", ("ifconfig {p}h1-eth0 -multicast",), "ip link show dev {p}h1-eth0",
          ("MULTICAST",), deletes=True),
    Write("link", "h1", ("ip -f bridge link set dev {p}h1-eth0 alias viabridge",),
          "ip -d link show", ("alias viabridge",)),
    Write("link", "h1", ("ip link set dev {p}h1-eth0 addrgenmode none",),
          "ip -d link show dev {p}h1-eth0", ("addrgenmode none",)),
    Write("link", "h1", ("ip link add leakbr type bridge", "ip link set {p}h1-eth0 master leakbr",
                         "ip link add leak0 type veth peer name leak1"),
          "ip -d link show", ("leakbr", "master leakbr", "leak0@leak1")),
    Write("link", "h1", ("ip link add link {p}h1-eth0 name leakmv type macvlan mode bridge",
                         "ip link add leakvx type vxlan id 42 dstport 4789 dev {p}h1-eth0"),
          "ip link show", ("leakmv", "leakvx")),
    Write("link", "h1", ("ip link set {p}h1-eth0 down", "ip link set {p}h1-eth0 name leakname"),
          "ip link show", ("leakname",), outcome="rebuilt"),
    # addresses
    Write("address4", "h1", ("ip addr add 10.77.0.1/24 dev {p}h1-eth0 label {p}h1-eth0:lk",
                             "ifconfig {p}h1-eth0:3 10.44.0.1 netmask 255.255.255.0"),
          "ip -4 addr show", ("10.77.0.1/24", "10.44.0.1/24")),
    Write("address6", "h1", ("ip -6 addr add 2001:db8::5/64 dev {p}h1-eth0",
                             "ifconfig {p}h1-eth0 add 2001:db8:9::1/64"),
          "ip -6 addr show", ("2001:db8::5/64", "2001:db8:9::1/64")),
    Write("address6", "h1", ("ip -6 addr del ::1/128 dev lo",), "ip -6 addr show dev lo",
          ("::1/128",), deletes=True),
    Write("address6", "h1", ("ip -6 addr add fe80::5/64 dev {p}h1-eth0",), "ip -6 addr show",
          ("fe80::5/64",), outcome="rebuilt"),
    # routes of every table, the local one included
    Write("route4", "h1", ("ip route add local 10.50.0.1 dev lo table local",
                           "ip route add 10.51.0.0/16 dev lo table 200",
                           "route add -net 10.45.0.0/16 dev {p}h1-eth0 reject"),
          "ip route show table all", ("local 10.50.0.1", "10.51.0.0/16", "10.45.0.0/16")),
    Write("route4", "h1", ("ip route del local 127.0.0.1 dev lo table local",),
          "ip route show table local", ("local 127.0.0.1 ",), deletes=True),
    Write("route6", "h1", ("ip -6 route add 2001:db8:5::/64 dev {p}h1-eth0",
                           "ip -6 route add local 2001:db8:6::1 dev lo table local",
                           "ip -6 route add 2001:db8:7::/64 dev {p}h1-eth0 table 300 proto static",
                           "route -A inet6 add 2001:db8:8::/64 dev {p}h1-eth0"),
          "ip -6 route show table all",
          ("2001:db8:5::/64", "local 2001:db8:6::1", "2001:db8:7::/64", "2001:db8:8::/64")),
    Write("route6", "h1", ("ip -6 route add 2001:db8:4::/64 dev {p}h1-eth0 proto 99",),
          "ip -6 route show table all", ("2001:db8:4::/64",), outcome="rebuilt"),
    # rules
    Write("rule4", "r0", ("ip rule add from 10.1.0.0/16 lookup 42 pref 1234",),
          "ip rule show", ("1234:",)),
    Write("rule4", "h1", ("ip rule del pref 0",), "ip rule show", ("from all lookup local",),
          deletes=True),
    Write("rule6", "h1", ("ip -6 rule add from 2001:db8::/32 lookup 7 pref 77",
                          "ip -6 rule del pref 32766"),
          "ip -6 rule show", ("77:",)),
    Write("rule6", "h1", ("ip -6 rule del pref 0",), "ip -6 rule show",
          ("from all lookup local",), deletes=True),
    # neighbour and proxy entries
    Write("neighbour4", "h1", (
        "ip neigh add 192.168.1.77 lladdr 02:00:00:00:00:77 dev {p}h1-eth0 nud permanent",
        "ip neigh add 192.168.1.76 lladdr 02:00:00:00:00:76 dev {p}h1-eth0 nud noarp",
        "arp -s 192.168.1.78 02:00:00:00:00:78"),
          "ip neigh show nud all", ("192.168.1.77", "192.168.1.76", "192.168.1.78")),
    Write("neighbour6", "h1", (
        "ip -6 neigh add 2001:db8::7 lladdr 02:00:00:00:00:07 dev {p}h1-eth0 nud permanent",),
          "ip -6 neigh show nud all", ("2001:db8::7",)),
    Write("proxy4", "h1", ("ip neigh add proxy 10.9.9.9 dev {p}h1-eth0",
                           "arp -i {p}h1-eth0 -s 192.168.1.79 02:00:00:00:00:79 pub"),
          "ip neigh show proxy", ("10.9.9.9", "192.168.1.79")),
    Write("proxy6", "h1", ("ip -6 neigh add proxy 2001:db8::99 dev {p}h1-eth0",),
          "ip -6 neigh show proxy", ("2001:db8::99",)),
    # qdiscs and classes
    Write("qdisc", "h1", ("tc qdisc add dev {p}h1-eth0 root handle 1: htb default 10",
                          "tc class add dev {p}h1-eth0 parent 1: classid 1:10 htb rate 1mbit",
                          "tc qdisc add dev lo root tbf rate 1mbit burst 1600 latency 1s",
                          "tc qdisc add dev {p}h1-eth0 ingress"),
          "tc class show dev {p}h1-eth0", ("class htb 1:10",)),
    Write("qdisc", "h1", ("tc qdisc add dev {p}h1-eth0 clsact",),
          "tc qdisc show", ("clsact",)),
    # every iptables and ip6tables table, even left empty
    Write("iptables", "h1", tuple(f"iptables -t {t} -N LEAK{t.upper()}"
                                  for t in ("filter", "nat", "mangle", "raw", "security")),
          "iptables-save", ("*filter", "*nat", "*mangle", "*raw", "*security", ":LEAKNAT")),
    Write("iptables", "h1", ("iptables -t security -P OUTPUT ACCEPT",), "iptables-save",
          ("*security",), step_change=False),
    Write("ip6tables", "h1", tuple(f"ip6tables -t {t} -N LEAK6{t.upper()}"
                                   for t in ("filter", "nat", "mangle", "raw", "security")),
          "ip6tables-save", ("*filter", "*nat", "*mangle", "*raw", "*security", ":LEAK6RAW")),
    Write("ip6tables", "h1", ("ip6tables -t raw -P OUTPUT ACCEPT",), "ip6tables-save",
          ("*raw",), step_change=False),
    # connection tracking: rules mark the entries probe traffic makes
    Write("conntrack", "r0", ("iptables -t mangle -A PREROUTING -j CONNMARK --set-mark 77",
                              "iptables -A INPUT -m conntrack --ctstate NEW -j ACCEPT"),
          "cat /proc/net/nf_conntrack", ("mark=77",), traffic=True),
    # sysctls, IPv6 ones included
    Write("sysctl", "h1", ("sysctl -w net.core.somaxconn=1234",
                           "sysctl -w net.ipv4.tcp_fastopen_key="
                           "00000001-00000002-00000003-00000004",
                           "sysctl -w net.ipv6.conf.{p}h1-eth0.hop_limit=7",
                           "sysctl -w net.ipv6.conf.all.forwarding=1",
                           "sysctl -w net.unix.max_dgram_qlen=77"),
          "sysctl -n net.core.somaxconn net.ipv4.tcp_fastopen_key "
          "net.ipv6.conf.{p}h1-eth0.hop_limit net.ipv6.conf.all.forwarding "
          "net.unix.max_dgram_qlen",
          ("1234", "00000001-00000002-00000003-00000004", "\n7\n", "\n1\n", "77")),
    Write("sysctl", "h1", ("sysctl -w net.ipv6.conf.{p}h1-eth0.disable_ipv6=1",),
          "ip -6 addr show dev {p}h1-eth0", ("inet6 fe80::",), deletes=True),
]  # fmt: skip


def _agent(net: RouteNetwork, machine: str, command: str) -> str:
    """Run ``command`` as an agent's step does (allow-list, sandbox) and return its output."""
    prefix = net.topology.prefix
    argv, refusal = check_command(command.replace("{p}", prefix))
    assert argv is not None, (command, refusal)
    result = run_sandboxed(net.pid_of(prefix + machine), argv)
    assert not result.timed_out, command
    return "\n" + result.output + "\n"


def _not_pristine(pool: RoutePool, net: RouteNetwork) -> dict[str, list[str]]:
    """Machines whose state (the pool's dump, normalized, and every net.* sysctl) differs
    from the snapshot taken at the build, with what differs."""
    snapshot = pool.record(net)
    assert snapshot is not None
    results = run_scripts(
        net, dict.fromkeys(net.topology.machines(), DUMP_SCRIPT), after=lambda _m: read_sysctls()
    )
    found: dict[str, list[str]] = {}
    for machine, (_status, out, sysctls) in results.items():
        node = snapshot.nodes[machine]
        dump = normalize_dump(out)
        differing = [f"section {i}" for i, (a, b) in enumerate(zip(dump, node.dump, strict=True))
                     if a != b]  # fmt: skip
        assert isinstance(sysctls, dict)
        differing += sorted(k for k in set(sysctls) | set(node.sysctls)
                            if sysctls.get(k) != node.sysctls.get(k))  # fmt: skip
        if differing:
            found[machine] = differing[:5]
    return found


@pytest.fixture
def pool() -> Iterator[RoutePool]:
    require_emulator()
    pool = RoutePool(max_idle=1)
    yield pool
    pool.shutdown()


def test_every_kind_has_an_emulated_write() -> None:
    assert {write.kind for write in WRITES} == set(STATE_KINDS)


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_whatever_an_agent_writes_is_gone_in_the_next_pooled_episode(pool: RoutePool) -> None:
    shape = RouteTopology(2, 2, 1)
    net = pool.acquire(shape)
    failures: list[str] = []
    for write in WRITES:
        where = f"{write.kind}: {write.commands}"
        before = _agent(net, write.machine, write.readback)
        if write.deletes:
            assert all(m in before for m in write.markers), (where, before)
        fingerprint = net.fingerprint_parts(net.topology.prefix + write.machine)
        for command in write.commands:
            _agent(net, write.machine, command)
        if write.traffic:
            net.pingall(attempts=1)
        written = _agent(net, write.machine, write.readback)
        took = [m for m in write.markers if (m in written) != write.deletes]
        assert took == list(write.markers), (where, "the write did not take", written)
        changed = net.fingerprint_parts(net.topology.prefix + write.machine) != fingerprint
        assert changed == write.step_change, (where, "the step fingerprint saw no change")
        rebuilds = pool.stats.rebuilds
        kept = pool.release(net)
        outcome = "restored" if kept else "rebuilt"
        if outcome != write.outcome:
            failures.append(f"{where}: {outcome}, expected {write.outcome}: {pool.stats.failures}")
        again = pool.acquire(shape)
        assert (again is net) == kept and pool.stats.rebuilds == rebuilds + (not kept)
        net = again
        after = _agent(net, write.machine, write.readback)
        left = [m for m in write.markers if (m in after) != write.deletes]
        if left:
            failures.append(f"{where}: {left} survived into the next lease: {after!r:.300}")
        differing = _not_pristine(pool, net)
        if differing:
            failures.append(f"{where}: not the snapshot's state: {differing}")
    pool.release(net)
    assert not failures, "\n".join(failures)


# --- the regression: stable_secret ----------------------------------------------------------
def _step(episode: RouteEpisode, machine: str, command: str) -> str:
    prefix = episode.network.topology.prefix
    reply = json.dumps({"machine": machine, "command": command.replace("{p}", prefix)})
    return episode.step(reply).observation


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_a_stable_secret_cannot_be_passed_to_the_next_episode(pool: RoutePool) -> None:
    """An agent writes an IPv6 stable_secret in one episode and reads it in the next on the
    same pooled network: the write is refused with its reason, so the network is reused and
    the next episode reads nothing."""
    app = RouteApp(switches=(2, 2), hosts=(2, 2), healthy_share=0.0, pool=pool)
    first, second = app.generate(2, seed=2201, level=1)
    writes = [
        "sysctl -w net.ipv6.conf.{p}h1-eth0.stable_secret=2001:db8::4242",
        "sysctl net.ipv6.conf.default.stable_secret=2001:db8::4343",
        "sysctl -w net/ipv6/conf/lo/stable_secret=2001:db8::4444",
    ]
    episode = app.episode(first)
    assert isinstance(episode, RouteEpisode)
    with episode:
        episode.reset()
        network = episode.network
        for command in writes:
            observation = _step(episode, "h1", command)
            assert "refused" in observation and "cannot be unset" in observation, observation
        _step(episode, "h1", DONE_REPLY)
    assert pool.stats.rebuilds == 0
    reads = [
        "cat /proc/sys/net/ipv6/conf/{p}h1-eth0/stable_secret",
        "cat /proc/sys/net/ipv6/conf/default/stable_secret",
        "cat /proc/sys/net/ipv6/conf/lo/stable_secret",
    ]
    episode = app.episode(second)
    assert isinstance(episode, RouteEpisode)
    with episode:
        episode.reset()
        assert episode.network is network and pool.stats.reused == 1  # the same network
        for command in reads:
            observation = _step(episode, "h1", command)
            assert "Input/output error" in observation, observation
            assert "2001:db8" not in observation.split("Pingall after")[0], observation


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_a_stable_secret_written_past_the_allow_list_makes_the_pool_rebuild(
    pool: RoutePool,
) -> None:
    """Should a stable_secret be written anyway (here by the evaluator, past the allow-list),
    the step fingerprint sees it and the pool's verification fails on it: the network is
    rebuilt, and the next lease reads nothing."""
    shape = RouteTopology(2, 2, 1)
    net = pool.acquire(shape)
    prefix = net.topology.prefix
    h1 = prefix + "h1"
    before = net.fingerprint_parts(h1)
    for key in (f"{prefix}h1-eth0", "default"):
        status, output = net.exec(
            h1, ["sysctl", "-w", f"net.ipv6.conf.{key}.stable_secret=2001:db8::4242"]
        )
        assert status == 0, output
    secret = f"cat /proc/sys/net/ipv6/conf/{prefix}h1-eth0/stable_secret"
    assert "2001:0db8" in _agent(net, "h1", secret)
    assert net.fingerprint_parts(h1)[-1] != before[-1]  # the sysctls part
    assert not pool.release(net)
    assert pool.stats.rebuilds == 1 and "stable_secret" in " ".join(pool.stats.failures)
    fresh = pool.acquire(shape)
    assert fresh is not net
    p = fresh.topology.prefix
    for path in (f"{p}h1-eth0", "default"):
        output = _agent(fresh, "h1", f"cat /proc/sys/net/ipv6/conf/{path}/stable_secret")
        assert "Input/output error" in output and "2001:0db8" not in output, output
    assert fresh.pingall().lost == 0
    pool.release(fresh)
