"""A per-process pool of built route networks, restored and verified between episodes.

Building a Mininet network costs 0.4-0.7 s (2x2 to 4x4) and tearing it down as much again
(``docs/route.md``, Figures). A :class:`RoutePool` keeps built networks per topology shape
``(num_switches, hosts_per_switch, num_routers)``; an episode leases one, and at ``close()`` the
network is restored to the state it had right after its build and **verified** against a
snapshot taken then. A network that fails verification is torn down (counted in
:attr:`PoolStats.rebuilds`), so the next episode of that shape gets a fresh build.

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

Environment: ``NETARENA_ROUTE_POOL`` = the number of idle networks kept per shape (unset or
``0``: no pool, every episode builds and tears down its own network, the behaviour before the
pool existed).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import multiprocessing.util
import os
import re
import shlex
import socket
import struct
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from evaluator.app import EmulatorError

from apps.route.network import RouteNetwork, list_interfaces, read_sysctls
from apps.route.network import enter_netns as _enter_netns
from apps.route.topology import RouteTopology

#: Environment variable: idle networks kept per shape (0 or unset: the pool is off).
POOL_ENV = "NETARENA_ROUTE_POOL"
#: Longest time one restore script may take before the network counts as failed (seconds).
RESTORE_TIMEOUT_S = 10.0
#: Separator between the sections a state script prints.
SEP = "@@netarena@@"

#: Built-in chains of each iptables table (iptables(8), "TABLES"), for blank restore input.
BUILTIN_CHAINS = {
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "raw": ("PREROUTING", "OUTPUT"),
    "security": ("INPUT", "FORWARD", "OUTPUT"),
}

#: What the state dump shows, per family: ``ip -o -d`` in batch mode prints links, addresses,
#: routes of every table, rules, neighbour entries, multicast addresses (and, for IPv4, the
#: route cache).
SHOW4 = (
    "link show",
    "address show",
    "route show table all",
    "rule show",
    "neighbour show nud all",
    "neighbour show proxy",
    "maddress show",
    "route show table all cache",
)
SHOW6 = (
    "address show",
    "route show table all",
    "rule show",
    "neighbour show nud all",
    "neighbour show proxy",
    "maddress show",
)
#: iptables-save output that is not a pristine (empty) table: a rule, a DROP policy or a user
#: chain (``sh`` case patterns).
DIRTY_IPTABLES = '*"-A "*|*" DROP ["*|*" - ["*'


def _heredoc(tag: str, body: str) -> str:
    return f"<<'{tag}'\n{body}\n{tag}\n"


def state_script(
    fix4: tuple[str, ...] = (),
    fix6: tuple[str, ...] = (),
    keep_links: str | None = None,
    tc_expected: str | None = None,
    tc_fix: tuple[str, ...] = (),
    fix_iptables: bool = False,
) -> str:
    """The ``sh`` script that prints a node's state in five sections separated by :data:`SEP`
    (IPv4 ``ip`` batch, IPv6 ``ip`` batch, qdiscs, iptables-save, ip6tables-save), after
    optional repairs that share its processes.

    Args:
        fix4 / fix6: ``ip`` batch commands run (errors ignored) before the shows of the same
            ``ip -4`` / ``ip -6`` process.
        keep_links: when given, every interface not named in it (space-separated) is deleted
            first (the namespace's interfaces are read from ``/proc/net/dev``, no process).
        tc_expected / tc_fix: when the qdisc listing differs from ``tc_expected``, run the
            ``tc`` batch ``tc_fix`` and list again.

        fix_iptables: when an iptables or ip6tables table holds a rule, a DROP policy or a
            user chain, blank every table that exists (empty, ACCEPT policies) and list again.

    Without arguments it only prints (the snapshot and the re-check use it).
    """
    lines = []
    feed4 = "\n".join([*fix4, *SHOW4])
    if keep_links is not None:
        lines += [
            "{ while IFS= read -r line; do case $line in *:*) ;; *) continue;; esac",
            "  name=${line%%:*}; name=${name##* }",
            f'  case " {keep_links} " in *" $name "*) ;; *) echo "link delete dev $name";; esac',
            "done < /proc/net/dev",
            "cat " + _heredoc("NAEOF", feed4).rstrip("\n"),
            "} | ip -4 -o -d -force -batch - 2>/dev/null",
        ]
    else:
        lines.append("ip -4 -o -d -force -batch - 2>/dev/null " + _heredoc("NAEOF", feed4))
    lines.append(f"echo {SEP}")
    lines.append(
        "ip -6 -o -d -force -batch - 2>/dev/null " + _heredoc("NAEOF", "\n".join([*fix6, *SHOW6]))
    )
    lines.append(f"echo {SEP}")
    lines.append("q=$(tc qdisc show 2>&1)")
    if tc_expected is not None:
        lines += [
            f'if [ "$q" != {shlex.quote(tc_expected)} ]; then',
            "  tc -force -batch - >/dev/null 2>&1 " + _heredoc("NAEOF", "\n".join(tc_fix)),
            "  q=$(tc qdisc show 2>&1)",
            "fi",
        ]
    lines += ["printf '%s\\n' \"$q\"", f"echo {SEP}"]
    blank = {
        table: "\n".join([f"*{table}", *(f":{c} ACCEPT [0:0]" for c in chains), "COMMIT"])
        for table, chains in BUILTIN_CHAINS.items()
    }
    cases = "\n".join(f"  {t}) printf '%s\\n' {shlex.quote(text)};;" for t, text in blank.items())
    if fix_iptables:
        lines += [
            "blank() { printf '%s\\n' \"$1\" | while IFS= read -r l; do case $l in",
            "  '*'*) case ${l#?} in",
            cases,
            "  esac;; esac; done; }",
        ]
    for tool in ("iptables", "ip6tables"):
        lines.append(f"s=$({tool}-save 2>&1)")
        if fix_iptables:
            lines += [
                f"case $s in {DIRTY_IPTABLES})",
                f'  blank "$s" | {tool}-restore >/dev/null 2>&1; s=$({tool}-save 2>&1);;',
                "esac",
            ]
        lines.append("printf '%s\\n' \"$s\"")
        if tool == "iptables":
            lines.append(f"echo {SEP}")
    return "\n".join(lines) + "\n"


#: Prints a node's state without changing it (:func:`state_script` without repairs).
DUMP_SCRIPT = state_script()

#: What the verification compares with the snapshot besides the ``ip`` shows of
#: :data:`SHOW4`/:data:`SHOW6` (named ``ip -4 <show>``/``ip -6 <show>``): see
#: :func:`verification_reads`.
OTHER_READS = (
    "tc qdisc show",  # DUMP_SCRIPT
    "iptables-save",  # DUMP_SCRIPT
    "ip6tables-save",  # DUMP_SCRIPT
    "net.* sysctls",  # restore_sysctls: every readable one, and which are readable
    "nf_conntrack",  # flush_netfilter: no entry left
    "root-namespace links",  # _root_links
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


def pool_size_from_env() -> int:
    """Idle networks per shape from ``NETARENA_ROUTE_POOL`` (0 when unset or not a number)."""
    try:
        return max(0, int(os.environ.get(POOL_ENV, "0") or "0"))
    except ValueError:
        return 0


def normalize_dump(text: str) -> list[str]:
    """Sections of :data:`DUMP_SCRIPT` output with timing noise removed.

    Removed: operational state words (``state UP`` follows the carrier through the kernel's
    link-watch, up to 1 s late), address lifetimes and the IPv6 ``tentative`` flag (duplicate
    address detection), the kernel's ``local fe80::`` routes (added when that detection ends),
    IPv6 multicast neighbour entries (``NOARP``, made by MLD) and link-local ones learned
    from neighbour discovery (the restore flushes them; traffic makes them again at any
    time), multicast reference counts,
    the transient ``Peer netns reference`` note, iptables-save comments and counters. Empty
    tables are kept: the restore deletes every nftables table (:func:`flush_netfilter`), so a
    table an episode created, even an empty one, would tell the next episode that iptables
    ran there. Route, address and neighbour lines are compared as sets: their listing order
    follows insertion order.
    """
    parts = (text + "\n").split(SEP + "\n")
    parts += [""] * (5 - len(parts))
    # listing order follows insertion order (a restored route is listed last): compare sets
    return [
        "\n".join(sorted(_normalize_ip_lines(parts[0]))),
        "\n".join(sorted(_normalize_ip_lines(parts[1]))),
        parts[2].strip(),
        _normalize_iptables(parts[3]),
        _normalize_iptables(parts[4]),
    ]


def _normalize_ip_lines(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        line = re.sub(r"\bstate \S+ ", "", line)
        line = re.sub(r"\b(valid_lft|preferred_lft) \S+", "", line)
        line = re.sub(r"\b(tentative|linkdown) ", "", line)
        line = re.sub(r" users \d+", "", line)  # multicast membership reference counts
        if re.match(r"^ff0[0-9a-f]:\S* dev .* NOARP", line):
            continue
        if re.match(r"^fe80::\S* dev \S+ lladdr \S+ (router )?(REACHABLE|STALE|DELAY|PROBE)", line):
            continue  # learned from neighbour discovery at any time (the restore flushed them)
        if re.match(r"^(unicast )?local fe80::\S* dev ", line):
            continue
        if line.startswith("Error: Peer netns reference is invalid"):
            continue  # ip -d link's transient note on a veth peer in another namespace
        lines.append(line.rstrip())
    return lines


def _normalize_iptables(text: str) -> str:
    tables: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith("*"):
            tables.append([line])
        elif tables:
            tables[-1].append(re.sub(r" \[\d+:\d+\]$", "", line))
    return "\n".join("\n".join(table) for table in tables)


@dataclass
class NodeSnapshot:
    """Pristine state of one node: the normalized dump, sysctls and what restore re-applies."""

    dump: list[str]
    sysctls: dict[str, str]
    links: list[tuple[str, str, str, str, bool]]  # name, mac, mtu, qlen, noarp
    addresses: list[str]  # "address add" arguments (IPv4)
    addresses6: list[str]  # "address add" arguments (IPv6 link-local, and ::1)
    routes: list[str]  # non-kernel IPv4 routes ("route add" arguments)
    rules: list[str]  # IPv4 rules other than pref 0 ("rule add" arguments)
    rules6: list[str]
    # iptables-save texts ("" when no table exists, as after every build): restore blanks the
    # tables, so a snapshot holding rules would fail verification and be rebuilt
    iptables: str
    ip6tables: str
    tc_raw: str = ""  # "tc qdisc show" output as printed
    # link name -> "link set" words that put back its other attributes (group, mode, flags,
    # broadcast address, GSO/GRO limits: :func:`_link_attributes`)
    link_attrs: dict[str, str] = field(default_factory=dict)


@dataclass
class Snapshot:
    """Pristine state of a whole network, taken right after its build."""

    nodes: dict[str, NodeSnapshot]
    root_links: dict[str, tuple[str, ...]]
    taken_s: float = 0.0


@dataclass
class PoolStats:
    """Counters of a :class:`RoutePool` (monotonic over its life).

    Attributes:
        built: networks built (first builds and rebuilds).
        reused: leases served by an idle, verified network.
        restored: releases whose restore verified (the network went back to the pool or was
            destroyed only because the pool was full).
        rebuilds: releases whose verification failed: the network was destroyed, so the next
            lease of its shape builds a new one.
        destroyed: networks torn down (failed, surplus or at shutdown).
        last_restore_s: seconds the last restore + verification took.
        failures: the last few verification failures (machine: what differed).
    """

    built: int = 0
    reused: int = 0
    restored: int = 0
    rebuilds: int = 0
    destroyed: int = 0
    last_restore_s: float = 0.0
    failures: list[str] = field(default_factory=list)


RTM_DELNEIGH = 29
RTM_GETNEIGH = 30
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NDA_DST = 1
#: Neighbour states a command made (``nud permanent``/``noarp``): not traffic's, kept.
NUD_NOARP_OR_PERMANENT = 0x40 | 0x80


def flush_learned_state() -> int:
    """Delete the neighbour entries traffic made and flush the route caches of the calling
    thread's network namespace; return the neighbour entries deleted.

    A machine no command ran on still learns from traffic: ARP entries for whatever address
    a misconfigured neighbour used (they stay ``STALE`` until the table grows past
    ``gc_thresh1``), and path-MTU exceptions after a too-small MTU elsewhere. Uses one
    rtnetlink socket (rtnetlink(7): ``RTM_GETNEIGH`` dump, ``RTM_DELNEIGH``) and
    ``/proc/sys/net/ipv{4,6}/route/flush``; no process.
    """
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    deleted = 0
    try:
        sock.settimeout(2.0)
        ndmsg = struct.pack("=BxxxiHBB", socket.AF_UNSPEC, 0, 0, 0, 0)
        sock.send(struct.pack("=IHHII", 16 + len(ndmsg), RTM_GETNEIGH,
                              NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + ndmsg)  # fmt: skip
        entries: list[tuple[int, int, bytes]] = []
        done = False
        while not done:
            data = sock.recv(65536)
            offset = 0
            while offset + 16 <= len(data):
                length, kind, _flags, _seq, _pid = struct.unpack_from("=IHHII", data, offset)
                if length < 16:
                    break
                if kind in (NLMSG_DONE, NLMSG_ERROR):
                    done = True
                    break
                family, ifindex, state, _f, _t = struct.unpack_from("=BxxxiHBB", data, offset + 16)
                attr = offset + 28
                while attr + 4 <= offset + length:
                    attr_len, attr_type = struct.unpack_from("=HH", data, attr)
                    if attr_len < 4:
                        break
                    if attr_type == NDA_DST and not state & NUD_NOARP_OR_PERMANENT:
                        entries.append((family, ifindex, data[attr + 4 : attr + attr_len]))
                    attr += (attr_len + 3) & ~3
                offset += (length + 3) & ~3
        for seq, (family, ifindex, dst) in enumerate(entries, start=2):
            body = struct.pack("=BxxxiHBB", family, ifindex, 0, 0, 0)
            body += struct.pack("=HH", 4 + len(dst), NDA_DST) + dst
            body += b"\0" * (-len(body) % 4)
            sock.send(struct.pack("=IHHII", 16 + len(body), RTM_DELNEIGH, NLM_F_REQUEST,
                                  seq, 0) + body)  # fmt: skip
            deleted += 1
    finally:
        sock.close()
    for family in ("ipv4", "ipv6"):
        with contextlib.suppress(OSError):
            with open(f"/proc/sys/net/{family}/route/flush", "wb", buffering=0) as handle:
                handle.write(b"1")
    return deleted


def _flush_untouched(net: RouteNetwork, machines: Iterable[str]) -> list[str]:
    """:func:`flush_learned_state` in each of ``machines`` (one helper thread, no process);
    returns the machines where it failed."""
    failed: list[str] = []

    def work() -> None:
        for machine in machines:
            try:
                _enter_netns(net.pids[machine])
                flush_learned_state()
            except OSError:
                failed.append(machine)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join()
    return failed


def _sysctl_order(path: str) -> int:
    # ip_forward rewrites every interface's forwarding; all/ and default/ are inherited
    if path.endswith("/ipv4/ip_forward"):
        return 0
    if "/conf/all/" in path or "/conf/default/" in path:
        return 1
    return 2


def read_sysctl_paths(paths: Iterable[str]) -> dict[str, str]:
    """The values of ``paths`` (sysctl files) in the calling thread's namespace; unreadable
    or missing paths are left out."""
    values: dict[str, str] = {}
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            values[path] = os.read(fd, 65536).decode(errors="replace")
        except OSError:
            continue
        finally:
            os.close(fd)
    return values


def restore_sysctls(want: dict[str, str]) -> tuple[list[str], bool]:
    """Write back every sysctl of the calling thread's namespace that differs from ``want``,
    then read them again.

    Every readable ``net.*`` sysctl is read (:func:`read_sysctls`), not only the snapshot's
    paths: a path readable now that the snapshot could not read is state no write can take
    back -- an IPv6 ``stable_secret`` is unreadable until written and cannot be unset after
    (the allow-list refuses writing it; this catches it however it was written) -- and is
    reported, so the network is rebuilt. (A path of an interface the snapshot lacks would be
    one too, but the restore deleted such interfaces before this runs.)

    Returns (the paths that still differ or should not be readable -- empty: verified,
    whether anything was written).
    """
    have = read_sysctls()
    unexpected = [f"{path} is readable (written: it cannot be unset)" for path in sorted(have)
                  if path not in want]  # fmt: skip
    wrong = [path for path, value in want.items() if have.get(path) != value]
    if not wrong:
        return unexpected, False
    for path in sorted(wrong, key=_sysctl_order):
        with contextlib.suppress(OSError):
            with open(path, "wb", buffering=0) as handle:
                handle.write(want[path].encode())
    have = read_sysctl_paths(want)
    return [path for path, value in want.items() if have.get(path) != value] + unexpected, True


NETLINK_NETFILTER = 12
NFNL_SUBSYS_CTNETLINK = 1
NFNL_SUBSYS_NFTABLES = 10
NFNL_MSG_BATCH_BEGIN = 0x10
NFNL_MSG_BATCH_END = 0x11
NFT_MSG_DELTABLE = 2
IPCTNL_MSG_CT_DELETE = 2
NLM_F_ACK = 0x4


def _nfnl_message(kind: int, flags: int, seq: int, res_id: int = 0) -> bytes:
    """A netfilter netlink message without attributes: ``nlmsghdr`` + ``nfgenmsg`` (family
    ``AF_UNSPEC``: every family; ``res_id`` in network byte order)."""
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack("!H", res_id)
    return struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body


def _nfnl_acks(sock: socket.socket, seqs: set[int]) -> dict[int, int]:
    """Read netlink acknowledgements until every one of ``seqs`` came: seq -> error (0: ok)."""
    acks: dict[int, int] = {}
    while not seqs <= set(acks):
        data = sock.recv(65536)
        offset = 0
        while offset + 16 <= len(data):
            length, kind, _flags, seq, _pid = struct.unpack_from("=IHHII", data, offset)
            if length < 16:
                break
            if kind == NLMSG_ERROR:
                acks[seq] = struct.unpack_from("=i", data, offset + 16)[0]
            offset += (length + 3) & ~3
    return acks


def flush_netfilter() -> list[str]:
    """Delete every nftables table and every connection-tracking entry of the calling
    thread's network namespace; return what failed (empty: done).

    iptables-nft keeps each iptables/ip6tables table as an nftables table, which it cannot
    delete itself: a table an episode created stayed, empty, and showed in the next
    episode's ``iptables-save``. One ``NFT_MSG_DELTABLE`` without a name (what ``nft flush
    ruleset`` sends) deletes them all, in a batch; an ``IPCTNL_MSG_CT_DELETE`` without a
    tuple flushes conntrack, whose entries carry marks rules set (``CONNMARK``). No process.
    A fresh node has no table, so the snapshot's state is none.
    """
    failed = []
    # a kernel without netfilter netlink or nf_tables has no nftables table to delete
    absent = -errno.EOPNOTSUPP
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    except OSError:
        acks = {2: absent, 4: absent}
    else:
        try:
            sock.settimeout(2.0)
            batch = _nfnl_message(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 1, NFNL_SUBSYS_NFTABLES)
            batch += _nfnl_message((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELTABLE,
                                   NLM_F_REQUEST | NLM_F_ACK, 2)  # fmt: skip
            batch += _nfnl_message(NFNL_MSG_BATCH_END, NLM_F_REQUEST, 3, NFNL_SUBSYS_NFTABLES)
            sock.send(batch)
            sock.send(_nfnl_message((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE,
                                    NLM_F_REQUEST | NLM_F_ACK, 4))  # fmt: skip
            acks = _nfnl_acks(sock, {2, 4})
        finally:
            sock.close()
    if acks[2] and acks[2] != absent:
        failed.append(f"nftables tables not deleted: {os.strerror(-acks[2])}")
    try:
        with open("/proc/thread-self/net/nf_conntrack", "rb") as handle:
            if handle.readline():
                failed.append(f"conntrack entries left ({os.strerror(-acks[4] or 0)})")
    except FileNotFoundError:
        pass  # no connection tracking in this kernel
    return failed


def _run_scripts(
    net: RouteNetwork,
    scripts: dict[str, str],
    after: Callable[[str], object] | None = None,
    before: Callable[[str], object] | None = None,
) -> dict[str, tuple[int, str, object]]:
    """Run ``sh`` with one script per machine in that machine's namespace, all in parallel;
    then, in the same helper thread moved into that namespace, ``after(machine)``. With
    ``before``, the helper thread first moves into the namespace and runs ``before(machine)``
    (for its effect; what it returns is dropped, what it raises replaces ``after``'s result
    and ``after`` is not run).

    Returns machine -> (exit status, stdout, what ``after`` returned or raised).
    """
    results: dict[str, tuple[int, str, object]] = {}

    def run(machine: str, script: str) -> None:
        failed: Exception | None = None
        if before is not None:
            try:
                _enter_netns(net.pids[machine])
                before(machine)
            except Exception as exc:  # noqa: BLE001 - reported as a failed verification
                failed = exc
        proc = subprocess.Popen(
            ["nsenter", f"--net=/proc/{net.pids[machine]}/ns/net", "--", "sh", "-s"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            out, _ = proc.communicate(script, timeout=RESTORE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            results[machine] = (124, "", None)
            return
        extra: object = failed
        if after is not None and failed is None:
            try:
                _enter_netns(net.pids[machine])
                extra = after(machine)
            except Exception as exc:  # noqa: BLE001 - reported as a failed verification
                extra = exc
        results[machine] = (proc.returncode, out, extra)

    threads = [
        threading.Thread(target=run, args=(machine, script), daemon=True)
        for machine, script in scripts.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _root_links(prefix: str) -> dict[str, tuple[str, ...]]:
    """Root-namespace interfaces of ``prefix``: name -> (ifindex, MAC, MTU, flags, master,
    carrier), read from ``/sys/class/net`` (switch bridges and the switch side of veths)."""
    state: dict[str, tuple[str, ...]] = {}
    for name in list_interfaces():
        if not name.startswith(prefix):
            continue
        base = Path("/sys/class/net") / name
        try:
            values = tuple(
                (base / key).read_text().strip() for key in ("ifindex", "address", "mtu", "flags")
            )
            master = (
                os.path.basename(os.readlink(base / "master")) if (base / "master").exists() else ""
            )
            try:
                carrier = (base / "carrier").read_text().strip()
            except OSError:
                carrier = "?"
        except OSError:
            state[name] = ("gone",)
            continue
        state[name] = (*values, master, carrier)
    return state


def _parse_snapshot(dump_text: str, parse_text: str, sysctls: dict[str, str]) -> NodeSnapshot:
    sections = (parse_text + "\n").split(SEP + "\n")
    sections += [""] * (6 - len(sections))
    links = []
    link_attrs = {}
    for line in sections[0].splitlines():
        match = re.match(r"^\d+: ([^:@]+)[@:].*\bmtu (\d+)", line)
        if match is None:
            continue
        link_attrs[match.group(1)] = _link_attributes(line)
        mac = re.search(r"link/\S+ (\S+)", line)
        qlen = re.search(r"\bqlen (\d+)", line)
        flags = re.search(r"<([^>]*)>", line)
        links.append(
            (
                match.group(1),
                mac.group(1) if mac else "",
                match.group(2),
                qlen.group(1) if qlen else "",
                bool(flags and "NOARP" in flags.group(1).split(",")),
            )
        )
    addresses = []
    addresses6 = []
    for line in sections[1].splitlines():
        match = re.match(r"^\d+: (\S+)\s+(inet6?) (\S+)(.*?)\\", line + "\\")
        if match is None:
            continue
        dev, family, cidr, rest = match.groups()
        if family == "inet6":
            scope = re.search(r"\bscope (host|link)\b", rest)
            if scope:  # the kernel's own: fe80:: link-local, ::1 on lo
                addresses6.append(f"{cidr} scope {scope.group(1)} dev {dev}")
            continue
        words = rest.split()
        extra = []
        for key in ("brd", "scope"):
            if key in words:
                extra += [key, words[words.index(key) + 1]]
        addresses.append(" ".join([cidr, *extra, "dev", dev]))
    routes = [
        re.sub(r"\b(linkdown|dead) ?", "", line).strip()
        for line in sections[2].splitlines()
        if line.strip() and "proto kernel" not in line
    ]
    rules = _rules(sections[3])
    rules6 = _rules(sections[4])
    ipt = sections[5].split(SEP)[0] if SEP in sections[5] else sections[5]
    iptables, _, ip6tables = (ipt + "\n@@6@@\n").partition("@@6@@\n")
    return NodeSnapshot(
        dump=normalize_dump(dump_text),
        sysctls=sysctls,
        links=links,
        addresses=addresses,
        addresses6=addresses6,
        routes=routes,
        rules=rules,
        rules6=rules6,
        iptables=_strip_comments(iptables),
        ip6tables=_strip_comments(ip6tables.replace("@@6@@", "")),
        link_attrs=link_attrs,
    )


#: Interface flags ``ip link set`` turns on and off by a keyword (``ip link`` prints them).
_LINK_FLAG_WORDS = {"MULTICAST": "multicast", "DYNAMIC": "dynamic"}


def _link_attributes(line: str) -> str:
    """The ``link set`` words that put back a link's attributes besides those every restore
    resets (MAC, MTU, queue length, ARP, promiscuity, all-multicast, master, up), read from
    its ``ip -o -d link`` line: group, link mode, the multicast, dynamic and trailers flags,
    broadcast address and GSO/GRO limits."""
    words = []
    group = re.search(r"\bgroup (\S+)", line)
    if group:
        words.append(f"group {group.group(1)}")
    mode = re.search(r"\bmode (DEFAULT|DORMANT|TESTING)\b", line)
    if mode:
        words.append(f"mode {mode.group(1).lower()}")
    flags_match = re.search(r"<([^>]*)>", line)
    flags = set(flags_match.group(1).split(",")) if flags_match else set()
    words += [
        f"{word} {'on' if flag in flags else 'off'}" for flag, word in _LINK_FLAG_WORDS.items()
    ]
    words.append("trailers off" if "NOTRAILERS" in flags else "trailers on")
    brd = re.search(r"link/\S+ \S+ brd (\S+)", line)
    if brd:
        words.append(f"broadcast {brd.group(1)}")
    for key in ("gso_max_size", "gso_max_segs", "gro_max_size"):
        value = re.search(rf"\b{key} (\d+)", line)
        if value:
            words.append(f"{key} {value.group(1)}")
    return " ".join(words)


def _strip_comments(text: str) -> str:
    return "\n".join(x for x in text.splitlines() if x.strip() and not x.startswith("#"))


def _rules(text: str) -> list[str]:
    rules = []
    for line in text.splitlines():
        match = re.match(r"^(\d+):\s+(.*)$", line.strip())
        if match is None or match.group(1) == "0":
            continue
        rest = re.sub(r"\s*\[detached\]", "", match.group(2))
        rules.append(f"pref {match.group(1)} {rest}")
    return rules


#: Extra sections read once at snapshot time to build the restore commands.
PARSE_SCRIPT = f"""
ip -o -d link show 2>&1
echo {SEP}
ip -o address show 2>&1
echo {SEP}
ip -4 route show table all 2>&1
echo {SEP}
ip -d -4 rule show 2>&1
echo {SEP}
ip -d -6 rule show 2>&1
echo {SEP}
iptables-save 2>&1
echo @@6@@
ip6tables-save 2>&1
"""


def restore_script(node: NodeSnapshot) -> str:
    """The ``sh`` script that puts one node back into ``node``'s state and prints the state
    (:func:`state_script`'s sections): five processes when nothing but addresses, routes,
    rules and links differ.

    Repairs: delete links the snapshot does not have; reset every snapshot link (MAC, MTU,
    queue length, ARP, promiscuity, no master, up; group, mode, flags, broadcast address,
    GSO/GRO limits; no alias); flush the IPv4 routes of every table, the IPv4 addresses,
    rules, neighbour and proxy entries and re-add the snapshot's (the pref 0 rule too); flush
    the route cache; delete global IPv6 addresses, re-add the link-local ones and ``::1``,
    flush the IPv6 routes an ``ip``/``route`` command adds (``proto boot``/``static``, any
    table), restore the IPv6 rules, flush IPv6 neighbour and proxy entries; when the qdiscs
    differ, delete root, ingress and clsact qdiscs; blank iptables/ip6tables tables that
    still hold anything (the restore deleted them first: :func:`flush_netfilter`, with
    conntrack). The ``net.*`` sysctls are restored in-process (:func:`restore_sysctls`).
    """
    batch = []
    for name, mac, mtu, qlen, noarp in node.links:
        batch.append(f"link set dev {name} nomaster")
        words = [f"link set dev {name}"]
        if mac and name != "lo":
            words.append(f"address {mac}")
        words.append(f"mtu {mtu}")
        if qlen:
            words.append(f"txqueuelen {qlen}")
        words.append("arp off" if noarp else "arp on")
        words += ["promisc off", "allmulticast off", "up"]
        batch.append(" ".join(words))
        # separate commands: an attribute the kernel refuses must not undo the reset above
        if node.link_attrs.get(name):
            batch.append(f"link set dev {name} {node.link_attrs[name]}")
        batch.append(f'link set dev {name} alias ""')
    batch.append("neighbour flush proxy")
    batch.append("route flush table all")
    batch += [f"address flush dev {name}" for name, *_ in node.links]
    batch += [f"address add {address}" for address in node.addresses]
    batch += [f"route add {route}" for route in node.routes]
    batch.append("rule flush")
    batch += [f"rule add {rule}" for rule in node.rules]
    batch += [RULE_ZERO, "neighbour flush all nud all", "route flush cache"]
    batch6 = [f"address flush dev {name} scope global" for name, *_ in node.links]
    batch6 += [f"address add {address}" for address in node.addresses6]
    # the kernel's ::1 has no prefix route; one added again gets a main-table route
    batch6 += [
        f"route del {address.split()[0]} dev lo table main proto kernel"
        for address in node.addresses6
        if " scope host " in address
    ]
    batch6 += [f"route flush table all proto {proto}" for proto in ("boot", "static")]
    batch6 += ["rule flush", *(f"rule add {rule}" for rule in node.rules6), RULE_ZERO]
    batch6 += ["neighbour flush proxy", "neighbour flush all nud all"]
    tc = []
    for name, *_ in node.links:
        tc += [f"qdisc del dev {name} root", f"qdisc del dev {name} ingress"]
        tc += [f"qdisc del dev {name} clsact"]
    script = state_script(
        fix4=tuple(batch),
        fix6=tuple(batch6),
        keep_links=" ".join(name for name, *_ in node.links),
        tc_expected=node.tc_raw,
        tc_fix=tuple(tc),
        fix_iptables=True,
    )
    return script


#: The rule every namespace starts with (``ip rule del pref 0`` deletes it; an existing one
#: makes the add fail, which the batch ignores).
RULE_ZERO = "rule add pref 0 lookup local protocol kernel"


def take_snapshot(net: RouteNetwork) -> Snapshot:
    """Snapshot every node of a freshly built ``net`` (one process per node, in parallel).

    Raises:
        EmulatorError: a node's state could not be read.
    """
    started = time.perf_counter()
    script = DUMP_SCRIPT + f"echo {SEP}\n" + PARSE_SCRIPT
    results = _run_scripts(
        net, dict.fromkeys(net.topology.machines(), script), after=lambda _m: read_sysctls()
    )
    nodes = {}
    for machine, (status, out, sysctls) in results.items():
        if status != 0 or not isinstance(sysctls, dict) or not sysctls:
            raise EmulatorError(f"cannot snapshot {machine} (status {status}, {sysctls!r:.80})")
        parts = out.split(SEP + "\n")
        dump_text = (SEP + "\n").join(parts[:5])
        parse_text = (SEP + "\n").join(parts[5:])
        nodes[machine] = _parse_snapshot(dump_text, parse_text, sysctls)
        nodes[machine].tc_raw = parts[2].rstrip("\n")
    return Snapshot(
        nodes=nodes,
        root_links=_root_links(net.topology.prefix),
        taken_s=time.perf_counter() - started,
    )


def _pending(raw_links: str) -> bool:
    """True when a link line shows an interface up with carrier but not yet operational."""
    for line in raw_links.splitlines():
        match = re.match(r"^\d+: [^<]*<([^>]*)>.*\bstate (\S+)", line)
        if match and {"UP", "LOWER_UP"} <= set(match.group(1).split(",")):
            if match.group(2) not in ("UP", "UNKNOWN"):
                return True
    return False


def restore_and_verify(
    net: RouteNetwork, snapshot: Snapshot, machines: Iterable[str]
) -> tuple[list[str], list[str]]:
    """Restore ``machines`` of ``net`` to ``snapshot`` and verify them and the root side.

    Returns (differences found after the restore -- empty: verified, machines whose links
    are still coming up). Nothing raises for a failed restore; a difference is reported.
    """
    wanted = sorted(set(machines) & set(snapshot.nodes))
    problems: list[str] = []
    pending: list[str] = []

    def sysctls_then_dump(machine: str) -> tuple[list[str], str | None]:
        # a written sysctl can change what the script printed (IPv6 forwarding adds anycast
        # routes, disable_ipv6 removes addresses): then print the state again
        leftover, wrote = restore_sysctls(snapshot.nodes[machine].sysctls)
        if not wrote:
            return leftover, None
        proc = subprocess.run(
            ["nsenter", f"--net=/proc/{net.pids[machine]}/ns/net", "--", "sh", "-s"],
            input=DUMP_SCRIPT,
            capture_output=True,
            text=True,
            timeout=RESTORE_TIMEOUT_S,
            check=False,
        )
        return leftover, proc.stdout

    # the other machines' learned state is flushed meanwhile (no process; nothing the
    # restore does makes another machine learn an entry)
    others = sorted(set(snapshot.nodes) - set(wanted))
    flush_failed: list[str] = []
    flusher = threading.Thread(
        target=lambda: flush_failed.extend(_flush_untouched(net, others)), daemon=True
    )
    flusher.start()
    netfilter: dict[str, list[str]] = {}

    def delete_tables(machine: str) -> None:
        # before the script, so that its iptables-save prints the state after the deletion;
        # a snapshot holding tables (never after a build) keeps them: the script blanks them
        node = snapshot.nodes[machine]
        if not node.iptables and not node.ip6tables:
            netfilter[machine] = flush_netfilter()

    results = _run_scripts(
        net,
        {m: restore_script(snapshot.nodes[m]) for m in wanted},
        after=sysctls_then_dump,
        before=delete_tables,
    )
    flusher.join()
    dumps: dict[str, str] = {}
    for machine in wanted:
        status, out, after = results[machine]
        if status == 124:
            problems.append(f"{machine}: restore timed out")
            continue
        if isinstance(after, tuple):
            leftover, dumped_again = after
            dumps[machine] = dumped_again if dumped_again is not None else out
            if leftover:
                problems.append(f"{machine}: sysctls differ: {leftover!r:.300}")
        else:  # the exception of the netfilter flush or of the sysctl restore
            dumps[machine] = out
            problems.append(f"{machine}: restore failed: {after!r:.300}")
        problems += [f"{machine}: {item}" for item in netfilter.get(machine, [])]
    differing = {m: _compare(snapshot.nodes[m], text) for m, text in dumps.items()}
    # machines restored in parallel race on veth carriers (r0's transit side may come up
    # after r1 printed its own side): what differs is printed once more before it counts
    again = [m for m, found in differing.items() if found]
    if again:
        for machine, (_s, out, _a) in _run_scripts(net, dict.fromkeys(again, DUMP_SCRIPT)).items():
            dumps[machine] = out
            differing[machine] = _compare(snapshot.nodes[machine], out)
    for machine, found in differing.items():
        problems += [f"{machine}: {item}" for item in found]
        if _pending(dumps[machine].split(SEP + "\n")[0]):
            pending.append(machine)
    for machine in flush_failed:
        problems.append(f"{machine}: learned neighbour entries could not be flushed")
    root = _root_links(net.topology.prefix)
    if root != snapshot.root_links:
        changed = sorted(
            name
            for name in set(root) | set(snapshot.root_links)
            if root.get(name) != snapshot.root_links.get(name)
        )
        problems.append(f"root namespace links differ: {changed[:5]}")
    return problems, pending


def _compare(node: NodeSnapshot, out: str) -> list[str]:
    """Differences between a printed state (:func:`state_script` output) and ``node``."""
    dump = normalize_dump(out)
    return [
        f"section {index} differs: {_first_diff(got, want)}"
        for index, (got, want) in enumerate(zip(dump, node.dump, strict=True))
        if got != want
    ]


def _first_diff(got: str, want: str) -> str:
    got_lines, want_lines = got.splitlines(), want.splitlines()
    extra = [x for x in got_lines if x not in want_lines]
    missing = [x for x in want_lines if x not in got_lines]
    return f"extra {extra[:2]} missing {missing[:2]}"


class RoutePool:
    """Built networks per shape, leased to one episode at a time (thread-safe).

    Args:
        max_idle: idle networks kept per shape; a released network beyond that is destroyed.

    A network is either idle (in the pool) or leased (owned by exactly one caller): the lease
    pops it from the idle list under a lock, so two episodes never share a network.
    """

    def __init__(self, max_idle: int = 2) -> None:
        if max_idle < 0:
            raise ValueError("max_idle must be >= 0")
        self.max_idle = max_idle
        self.stats = PoolStats()
        self._lock = threading.Lock()
        self._idle: dict[tuple[int, int, int], list[RouteNetwork]] = {}
        self._leased: set[int] = set()
        self._snapshots: dict[int, Snapshot] = {}
        self._closed = False
        _ALL_POOLS.add(self)
        _register_exit_hooks()

    @staticmethod
    def shape_key(topology: RouteTopology) -> tuple[int, int, int]:
        """Pool key of a topology: ``(num_switches, hosts_per_switch, num_routers)``."""
        return (topology.num_switches, topology.hosts_per_switch, topology.num_routers)

    def idle_count(self) -> int:
        """Idle networks over all shapes."""
        with self._lock:
            return sum(len(nets) for nets in self._idle.values())

    def acquire(self, topology: RouteTopology) -> RouteNetwork:
        """Lease a pristine network of ``topology``'s shape: an idle one, else a new build.

        Raises:
            EmulatorError / DependencyMissingError: as :meth:`RouteNetwork.start`; or the pool
                was shut down.
        """
        key = self.shape_key(topology)
        with self._lock:
            if self._closed:
                raise EmulatorError("the route network pool was shut down")
            idle = self._idle.get(key, [])
            net = idle.pop() if idle else None
            if net is not None:
                self._leased.add(id(net))
                self.stats.reused += 1
        if net is not None:
            net.touched.clear()
            return net
        net = RouteNetwork(RouteTopology(*key)).start()
        try:
            snapshot = take_snapshot(net)
        except Exception:
            net.stop()
            raise
        net.touched.clear()
        with self._lock:
            self.stats.built += 1
            self._leased.add(id(net))
            self._snapshots[id(net)] = snapshot
        return net

    def release(self, net: RouteNetwork) -> bool:
        """Restore and verify a leased ``net``, and keep it idle or destroy it.

        Returns True when the network went back to the pool. A verification failure destroys
        it (``stats.rebuilds``); so does a full pool or a shut-down pool. Releasing a network
        that is not leased from this pool does nothing (idempotent).
        """
        with self._lock:
            if id(net) not in self._leased:
                return False
            self._leased.discard(id(net))
            snapshot = self._snapshots.get(id(net))
        if snapshot is None or not net.running:
            self._destroy(net)
            return False
        started = time.perf_counter()
        touched = set(net.touched)
        try:
            problems, pending = restore_and_verify(net, snapshot, touched)
            if not problems:
                for machine in pending:
                    net.wait_links_settled(machine)
        except (OSError, subprocess.SubprocessError, KeyError) as exc:
            problems = [f"restore failed: {type(exc).__name__}: {exc}"]
        elapsed = time.perf_counter() - started
        with self._lock:
            self.stats.last_restore_s = elapsed
            if problems:
                self.stats.rebuilds += 1
                self.stats.failures = (self.stats.failures + problems[:3])[-12:]
            else:
                self.stats.restored += 1
            keep = not problems and not self._closed
            idle = self._idle.setdefault(self.shape_key(net.topology), [])
            if keep and len(idle) < self.max_idle:
                net.touched.clear()
                idle.append(net)
                return True
        self._destroy(net)
        return False

    def _destroy(self, net: RouteNetwork) -> None:
        with self._lock:
            self._snapshots.pop(id(net), None)
            self.stats.destroyed += 1
        net.stop()

    def shutdown(self) -> None:
        """Destroy every idle network; leased ones are destroyed when released."""
        with self._lock:
            self._closed = True
            nets = [net for nets in self._idle.values() for net in nets]
            self._idle.clear()
        for net in nets:
            self._destroy(net)

    def forget_after_fork(self) -> None:
        """In a forked child: drop every network without touching it (they are the parent's).

        The child closes its copies of their prefix-lock descriptors, so that the parent's
        death still releases the locks.
        """
        nets = [net for nets in self._idle.values() for net in nets]
        self._idle = {}
        self._leased = set()
        self._snapshots = {}
        self._lock = threading.Lock()
        for net in nets:
            net.forget()


_DEFAULT: RoutePool | None = None
#: Every pool of this process, shut down at interpreter exit.
_ALL_POOLS: weakref.WeakSet[RoutePool] = weakref.WeakSet()
_DEFAULT_LOCK = threading.Lock()


def default_pool(create: bool = False) -> RoutePool | None:
    """The process's pool when ``NETARENA_ROUTE_POOL`` > 0 or ``create`` (created on first
    use, keeping the variable's number of idle networks per shape, or 2), else None.

    The pool is shut down at interpreter exit, and a forked child starts without one.
    """
    global _DEFAULT
    size = pool_size_from_env()
    if size <= 0 and not create:
        return None
    size = size if size > 0 else 2
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = RoutePool(max_idle=size)
        return _DEFAULT


def shutdown_default_pool() -> None:
    """Destroy the process's pool's networks (the next lease creates a new pool)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        pool, _DEFAULT = _DEFAULT, None
    if pool is not None:
        pool.shutdown()


def _shutdown_all() -> None:
    shutdown_default_pool()
    for pool in list(_ALL_POOLS):
        with contextlib.suppress(Exception):
            pool.shutdown()


_HOOKED_PID = 0


def _register_exit_hooks() -> None:
    """Shut every pool down when this process ends: at interpreter exit (``atexit``), and in
    a :mod:`multiprocessing` child, which leaves through ``os._exit`` without running
    ``atexit`` handlers but runs ``multiprocessing.util`` finalizers first. A process killed
    outright leaves its networks to :func:`~apps.route.network.cleanup_stale_prefixes` (its
    prefix locks die with it)."""
    global _HOOKED_PID
    if _HOOKED_PID == os.getpid():
        return
    _HOOKED_PID = os.getpid()
    multiprocessing.util.Finalize(None, _shutdown_all, exitpriority=50)


def _after_fork_in_child() -> None:
    global _DEFAULT
    _DEFAULT = None
    for pool in list(_ALL_POOLS):
        with contextlib.suppress(Exception):
            pool.forget_after_fork()
    _ALL_POOLS.clear()


atexit.register(_shutdown_all)
os.register_at_fork(after_in_child=_after_fork_in_child)
