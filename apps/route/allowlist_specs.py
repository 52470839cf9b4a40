"""The route allow-list's table: one row (:class:`CommandSpec`) per allowed tool.

A row says how the tool reads its arguments (``style``), every option it has that matters
(:class:`Option`: spellings, the kind of value it takes, whether it is refused and why),
its objects and sub-commands (``ip``, ``tc``: :class:`IpObject`), what may follow the
options (:class:`Operands`), and the state it writes (:class:`Write`, named by
:data:`STATE_KINDS`). :mod:`apps.route.allowlist` walks a command against its row; nothing
here runs. How to add a command, and what the allow-list guarantees: see that module.

Each option is listed once, with all its spellings. The order matters only to the refusal of an
abbreviation, which names the first option it begins: ``ip`` and ``tc`` options and objects are
in iproute2's lookup order (``ip -ba`` is ``-batch``), getopt tools' in the order of their
long-option tables. Sources: the iproute2 6.1 ``ip(8)``, ``tc(8)``, ``ss(8)``
manuals and ``ip/ip.c``, ``tc/tc.c``; net-tools 2.10 ``arp(8)``, ``route(8)``,
``netstat(8)``, ``ifconfig(8)``; iptables 1.8.9 ``iptables(8)``,
``iptables-extensions(8)``, ``iptables-save(8)``; procps-ng 4 ``sysctl(8)``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from apps.route.allowlist_grammar import (
    CHAIN,
    IFNAME,
    PLAIN_VALUE,
    SYSCTL_KEY,
    CommandSpec,
    IpObject,
    Matching,
    OneOf,
    Operands,
    ProcPath,
    SysctlKey,
    Text,
    Write,
    flags,
    known,
    opt,
    refuse,
)

# fmt: off
# The tables are laid out by hand, one option or object per item, several to a line.

# --- state ---------------------------------------------------------------------------------
#: Kinds of node state, named as the network pool's coverage (``apps.route.pool.POOL_COVERAGE``)
#: and the step fingerprint's (``apps.route.network.FINGERPRINT_READS``) name them.
STATE_KINDS: dict[str, str] = {
    "link": "links: created, deleted and renamed ones, and every attribute of the existing "
    "ones (MAC, MTU, flags, master, alias, group, GSO/GRO limits, broadcast address, queue "
    "length, IPv6 address generation mode)",
    "address4": "IPv4 addresses, their labels, peers and broadcast addresses",
    "address6": "IPv6 addresses",
    "route4": "IPv4 routes of every table, the local table included",
    "route6": "IPv6 routes of every table, the local table included",
    "rule4": "IPv4 policy-routing rules, pref 0 included",
    "rule6": "IPv6 policy-routing rules, pref 0 included",
    "neighbour4": "IPv4 neighbour (ARP) entries: permanent, noarp and any other state",
    "neighbour6": "IPv6 neighbour entries",
    "proxy4": "IPv4 proxy neighbour entries (ip neigh add proxy, arp -s ... pub)",
    "proxy6": "IPv6 proxy neighbour entries",
    "qdisc": "queueing disciplines (root, ingress, clsact) and the classes under them",
    "iptables": "IPv4 netfilter state of every iptables table: tables, chains, rules, policies",
    "ip6tables": "IPv6 netfilter state of every ip6tables table",
    "conntrack": "connection-tracking entries of probe traffic and the marks rules put on them",
    "sysctl": "every net.* sysctl of the namespace, stable_secret included",
}
#: ``ip``/``tc`` sub-commands that only read.
READ_ONLY_VERBS = frozenset({"show", "list", "lst", "ls", "get", "help"})


def _verbs(words: str) -> frozenset[str]:
    return frozenset(words.split())


# --- ip ----------------------------------------------------------------------------------
_NETNS = "other network namespaces are out of reach"
_BPF = "it loads BPF programs from files"
#: Address families ``ip -f`` accepts. Not ``mpls``: MPLS routes are no part of these tasks and
#: a reused network's restore does not cover them (docs/route.md, "Network pool").
IP_FAMILIES = ("inet", "inet6", "link", "bridge")
_SHOW = "show list lst"
IP = CommandSpec(
    tool="ip",
    style="iproute",
    options=(  # ip/ip.c's order
        refuse("-loops", "-l", why="not needed"),
        opt("-family", "-f", value=OneOf(IP_FAMILIES, "not mpls: MPLS is no part of these tasks")),
        opt("-stats", "-s", "-statistics"),
        opt("-details", "-d"),
        *known("-resolve"),
        opt("-oneline", "-o"),
        opt("-timestamp", "-t"),
        opt("-tshort", "-ts"),
        *known("-Version"),
        refuse("-force", why="only useful with -batch"),
        refuse("-batch", "-b", why="it reads commands from a file"),
        opt("-brief", "-br"),
        refuse("-rcvbuf", "-rc", why="not needed"),
        opt("-color", "-c"),
        *known("-help"),
        refuse("-netns", "-n", why=_NETNS),
        opt("-Numeric", "-N"),
        refuse("-all", "-a", why="it runs a command in every namespace"),
        opt("-json", "-j"),
        opt("-pretty", "-p"),
        opt("-iec"),
        opt("-human", "-h"),
        *flags("-4", "-6", "-0"),
    ),
    objects=(  # ip/ip.c's order
        IpObject("address", _verbs(f"{_SHOW} add del delete change replace flush"),
                 writes=("address4", "address6")),
        IpObject("addrlabel"),
        IpObject("maddress", _verbs(_SHOW)),
        IpObject("route", _verbs(f"{_SHOW} get add del delete change replace append prepend "
                                 "flush"), writes=("route4", "route6")),
        IpObject("rule", _verbs(f"{_SHOW} add del delete flush"), writes=("rule4", "rule6")),
        IpObject("neighbor", _verbs(f"{_SHOW} get add del delete change replace flush"),
                 writes=("neighbour4", "neighbour6", "proxy4", "proxy6")),
        IpObject("neighbour", alias_of="neighbor"),
        *(IpObject(name) for name in ("ntable", "ntbl")),
        IpObject("link", _verbs(f"{_SHOW} set add del delete change"), writes=("link",)),
        *(IpObject(name) for name in ("l2tp", "fou", "ila", "macsec", "tunnel", "tunl",
                                      "tuntap", "tap", "token", "tcpmetrics", "tcp_metrics")),
        IpObject("monitor", refused="it never ends"),
        IpObject("xfrm", refused="IPsec state is not part of these tasks"),
        IpObject("mroute"),
        IpObject("mrule"),
        IpObject("netns", refused=_NETNS),
        IpObject("netconf", _verbs(_SHOW)),
        IpObject("vrf", refused="it runs programs (vrf exec)"),
        IpObject("sr"),
        IpObject("nexthop"),
        IpObject("mptcp", refused="not part of these tasks"),
        *(IpObject(name) for name in ("ioam", "stats", "help")),
    ),
    keywords={
        "netns": _NETNS, "link-netns": _NETNS, "link-netnsid": _NETNS, "netnsid": _NETNS,
        "exec": "it runs programs", "object": "it loads files", "pinned": "it loads files",
        "xdp": _BPF, "xdpgeneric": _BPF, "xdpdrv": _BPF, "xdpoffload": _BPF, "bpf": _BPF,
        "file": "it reads files", "batch": "it reads files",
    },
    example="ip addr show",
    writes=(
        # PF_BRIDGE/link requests of the other families fall back to the generic link handlers
        Write("ip -f {}", ("link",), values=("link", "bridge"), probe="ip -f {} link set lo up",
              candidates_of="-family", skip=("inet", "inet6")),
    ),
)

# --- tc ----------------------------------------------------------------------------------
TC = CommandSpec(
    tool="tc",
    style="iproute",
    options=(  # tc/tc.c's order
        opt("-stats", "-s", "-statistics"),
        opt("-details", "-d"),
        opt("-raw"),
        opt("-pretty", "-p"),
        opt("-graph", "-g"),
        *known("-Version"),
        opt("-iec"),
        *known("-help"),
        refuse("-force", why="only useful with -batch"),
        refuse("-batch", "-b", why="it reads commands from a file"),
        refuse("-netns", "-n", why=_NETNS),
        refuse("-names", "-cf", "-conf", why="it reads a file"),
        *known("-timestamp", "-tshort", "-oneline", "-brief"),
        opt("-json", "-j"),
        *known("-color", "-echo"),
        refuse("-nm", why="it reads a file"),
    ),
    objects=(  # tc/tc.c's order
        IpObject("qdisc", _verbs("show list ls add del delete change replace"), writes=("qdisc",)),
        IpObject("class", _verbs("show list ls add del delete change replace"), writes=("qdisc",)),
        IpObject("filter", _verbs("show list ls")),
        *(IpObject(name) for name in ("chain", "actions", "action", "monitor")),
        IpObject("exec", refused="it runs programs"),
        IpObject("help"),
    ),
    keywords={
        "bpf": _BPF, "object-file": "it loads files", "object-pinned": "it loads files",
        "obj": "it loads files", "pinned": "it loads files", "exec": "it runs programs",
        "distribution": "it reads a distribution table from a file", "file": "it reads files",
    },
    example="tc qdisc show",
)

# --- getopt tools --------------------------------------------------------------------------
_FAMILIES = OneOf(("inet", "inet6", "link", "unix", "netlink", "packet", "vsock", "tipc", "xdp",
                   "mptcp"))
_SS_QUERY = Matching(re.compile(r"^[a-z0-9_,|!]+$"))
SS = CommandSpec(
    tool="ss",
    style="getopt",
    options=(
        opt("n", "numeric"), opt("r", "resolve"), opt("a", "all"), opt("l", "listening"),
        opt("o", "options"), opt("e", "extended"), opt("m", "memory"), opt("i", "info"),
        opt("p", "processes"), opt("threads"), *known("bpf"),
        refuse("E", "events", why="it never ends"),
        refuse("Z", "context", why="not needed"), refuse("z", "contexts", why="not needed"),
        opt("s", "summary"), opt("t", "tcp"), opt("S", "sctp"), opt("u", "udp"),
        opt("d", "dccp"), opt("w", "raw"), opt("x", "unix"),
        *flags("tipc", "vsock", "xdp", "mptcp"),
        opt("0", "packet"), opt("4", "ipv4"), opt("6", "ipv6"),
        opt("f", "family", value=_FAMILIES), opt("A", "query", value=_SS_QUERY),
        refuse("socket", why="not needed"),
        refuse("D", "diag", why="it writes to a file"),
        refuse("F", "filter", why="it reads a filter from a file"),
        refuse("N", "net", why=_NETNS),
        refuse("K", "kill", why="it kills sockets"),
        opt("H", "no-header"), opt("O", "oneline"), refuse("cgroup", why="not needed"),
        *flags("inet-sockopt", "bpf-maps"), *known("help", "version"), *flags("udplite"),
    ),
    read_only=True,
)

_HW_TYPES = ("ether", "loop", "arcnet", "ax25", "netrom", "infiniband")
ARP = CommandSpec(
    tool="arp",
    style="getopt",
    options=(
        opt("a", "all"), opt("d", "delete"), refuse("f", "file", why="it reads a file"),
        opt("n", "numeric"), opt("s", "set"), opt("A", "p", "protocol", value=OneOf(("inet",))),
        opt("hw-type", value=OneOf(_HW_TYPES[:2])), opt("H", "t", value=OneOf(_HW_TYPES)),
        opt("i", "device", value=IFNAME), opt("v", "verbose"), *known("version", "help"),
        opt("D", "use-device"), opt("e"),
    ),
    writes=(Write("arp -s/-d", ("neighbour4", "proxy4"),
                  probe="arp -s 10.0.0.1 02:00:00:00:00:01"),),
)

NETSTAT = CommandSpec(
    tool="netstat",
    style="getopt",
    options=(
        opt("r", "route"), opt("n", "numeric"), opt("i", "interfaces"), opt("a", "all"),
        opt("l", "listening"), opt("t", "tcp"), opt("u", "udp"), opt("w", "raw"),
        opt("x", "unix"), opt("p", "programs"), opt("s", "statistics"), opt("e", "extend"),
        opt("o", "timers"), opt("g", "groups"), opt("W", "wide"), opt("v", "verbose"),
        refuse("c", "continuous", why="it never ends"), opt("F", "fib"), opt("C", "cache"),
        opt("A", "protocol", value=OneOf(("inet", "inet6", "unix"))),
        *known("masquerade", "symbolic", "help", "version"), opt("4", "inet"), opt("6", "inet6"),
        *flags("numeric-hosts", "numeric-ports", "numeric-users"),
    ),
    operands=Operands(kind=None),
    read_only=True,
)

ROUTE = CommandSpec(
    tool="route",
    style="getopt",
    options=(
        opt("n", "numeric"), opt("e", "extend"), opt("v", "verbose"), opt("F", "fib"),
        opt("C", "cache"), *known("help", "version"), opt("A", value=OneOf(("inet", "inet6"))),
        *flags("4", "6"),
    ),
    # route add -net 10.0.0.0/8 dev x: -net/-host are words of the route, not options
    operands=Operands(words=frozenset({"-net", "-host"}),
                      options_end=frozenset({"add", "del", "delete"})),
    writes=(Write("route add/del", ("route4", "route6"),
                  probe="route add -net 10.0.0.0/8 dev lo"),),
)

IFCONFIG = CommandSpec(
    tool="ifconfig",
    style="words",
    options=flags("-a", "-s", "-v"),
    operands=Operands(
        words=frozenset({"-arp", "-promisc", "-allmulti", "-pointopoint", "-multicast"})
    ),
    writes=(Write("ifconfig", ("link", "address4", "address6"), probe="ifconfig lo mtu 1400"),),
)

#: The tables ``iptables -t`` and ``ip6tables -t`` accept (every table iptables(8) names).
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw", "security")
_TABLES = OneOf(IPTABLES_TABLES)
_MATCHES = OneOf(("icmp", "tcp", "udp", "state", "conntrack", "comment", "multiport", "iprange",
                  "limit", "mac", "mark", "addrtype", "length", "pkttype", "physdev"))
_PROTOCOL = Matching(re.compile(r"^!?[a-z0-9]+$"))
IPTABLES = CommandSpec(
    tool="iptables",
    style="getopt",
    options=(  # -L -S -F -Z -X take an optional chain: an operand
        opt("A", "append", value=CHAIN), opt("C", "check", value=CHAIN),
        opt("D", "delete", value=CHAIN), opt("X", "delete-chain"),
        opt("d", "destination", "dst", value=PLAIN_VALUE), opt("x", "exact"),
        opt("F", "flush"), opt("f", "fragment"), opt("g", "goto", value=CHAIN),
        opt("i", "in-interface", value=IFNAME), opt("I", "insert", value=CHAIN),
        opt("4", "ipv4"), opt("6", "ipv6"), opt("j", "jump", value=CHAIN),
        opt("line-numbers"), opt("L", "list"), opt("S", "list-rules"),
        opt("m", "match", value=_MATCHES), refuse("M", "modprobe", why="it runs a program"),
        opt("N", "new-chain", value=CHAIN), opt("n", "numeric"),
        opt("o", "out-interface", value=IFNAME), opt("P", "policy", value=CHAIN),
        opt("p", "protocol", value=_PROTOCOL), opt("E", "rename-chain", value=CHAIN),
        opt("R", "replace", value=CHAIN), refuse("c", "set-counters", why="not needed"),
        opt("s", "source", "src", value=PLAIN_VALUE), opt("t", "table", value=_TABLES),
        opt("v", "verbose"), *known("version"), opt("w", "wait"),
        refuse("W", "wait-interval", why="not needed"), opt("Z", "zero"), *known("help"),
        opt("syn"),
        # match and target options of the allowed extensions
        *(opt(name, value=PLAIN_VALUE) for name in (
            "icmp-type", "dport", "sport", "destination-port", "source-port", "dports", "sports",
            "ports", "state", "ctstate")),
        opt("comment", value=Text()),
        *(opt(name, value=PLAIN_VALUE) for name in (
            "src-range", "dst-range", "limit", "limit-burst", "mac-source", "mark", "src-type",
            "dst-type", "length", "pkt-type", "reject-with", "log-prefix", "log-level",
            "to-source", "to-destination", "set-mark")),
        opt("physdev-in", value=IFNAME), opt("physdev-out", value=IFNAME),
    ),
    operands=Operands(words=frozenset({"!"})),
    writes=(Write("iptables -t {}", ("iptables", "conntrack"), values=IPTABLES_TABLES,
                  probe="iptables -t {} -N X", candidates_of="t"),),
)
IP6TABLES = replace(
    IPTABLES,
    tool="ip6tables",
    writes=(Write("ip6tables -t {}", ("ip6tables", "conntrack"), values=IPTABLES_TABLES,
                  probe="ip6tables -t {} -N X", candidates_of="t"),),
)

IPTABLES_SAVE = CommandSpec(
    tool="iptables-save",
    style="getopt",
    options=(
        opt("c", "counters"), *known("dump"), opt("t", "table", value=_TABLES),
        refuse("M", "modprobe", why="it runs a program"),
        refuse("f", "file", why="it writes to a file"), *known("version", "help"),
    ),
    operands=Operands(kind=None),
    read_only=True,
)

#: ``net.*`` sysctls an agent may read but never write (the last segment of the key), with the
#: reason shown.
SYSCTL_WRITE_REFUSED = {
    "stable_secret": "an IPv6 stable_secret cannot be unset once written, so it would outlive the "
    "episode and reach the next one on a reused network; it plays no part in these tasks",
}
#: The top levels of ``/proc/sys``: the sysctl trees a key could name.
SYSCTL_TREES = ("abi", "crypto", "debug", "dev", "fs", "kernel", "net", "user", "vm")
_KEYS_ONLY = "only explicit net.* keys"
SYSCTL = CommandSpec(
    tool="sysctl",
    style="getopt",
    options=(
        refuse("a", "A", "X", "all", why=_KEYS_ONLY), opt("b", "binary"),
        *known("deprecated", "dry-run"), opt("e", "ignore"), opt("N", "names"),
        refuse("r", "pattern", why=_KEYS_ONLY), refuse("p", "f", "load", why="it reads a file"),
        opt("q", "quiet"), refuse("system", why="it reads files"), opt("n", "values"),
        opt("w", "write", writes=True), *known("help", "version"),
    ),
    operands=Operands(
        kind=SysctlKey(SYSCTL_KEY, SYSCTL_WRITE_REFUSED),
        required="sysctl: only net.* keys are allowed (e.g. net.ipv4.ip_forward)",
    ),
    option_hint="sysctl: only -w -n -e -q -N with explicit net.* keys are allowed",
    writes=(Write("sysctl -w {}.*", ("sysctl",), values=("net",), probe="sysctl -w {}.a.b=1",
                  candidates=SYSCTL_TREES),),
)

_PROC_NET = ProcPath(("/proc/net", "/proc/sys/net"))
CAT = CommandSpec(
    tool="cat",
    style="getopt",
    operands=Operands(kind=_PROC_NET, required="cat needs a file under /proc/net or /proc/sys/net"),
    option_hint=_PROC_NET.refusal("cat", ""),
    read_only=True,
)

# --- the table -----------------------------------------------------------------------------
#: Every allowed tool's row, by name (the order :data:`ALLOWED_TOOLS` lists them in).
TOOLS: dict[str, CommandSpec] = {
    spec.tool: spec
    for spec in (
        IP, IFCONFIG, ROUTE, ARP, IPTABLES, IPTABLES_SAVE, IP6TABLES,
        replace(IPTABLES_SAVE, tool="ip6tables-save"), SYSCTL, TC, SS, NETSTAT, CAT,
    )
}
ALLOWED_TOOLS = tuple(TOOLS)

# fmt: on


def declared_writes(tools: Mapping[str, CommandSpec]) -> dict[str, tuple[str, ...]]:
    """Every write the rows of ``tools`` declare -> the kinds of state it writes: each
    ``iproute`` object with writing verbs (``ip address``) and each :class:`Write` value."""
    table: dict[str, tuple[str, ...]] = {}
    for spec in tools.values():
        table |= {f"{spec.tool} {obj.name}": obj.writes for obj in spec.objects if obj.writes}
        for write in spec.writes:
            table |= {write.label.format(value): write.kinds for value in write.values}
    return table


#: Every way the table lets a command change a node, with the kinds of state each one writes
#: (:data:`STATE_KINDS`). A reused network must get every one of them back (the pool's
#: restore and verification) and the step fingerprint must see each change:
#: ``tests/apps/route/test_state_coverage.py`` fails when the grammars allow a write this
#: table does not list (``write_surface`` derives those from the grammars), or list a kind
#: either of them does not cover.
WRITABLE_STATE: dict[str, tuple[str, ...]] = declared_writes(TOOLS)
