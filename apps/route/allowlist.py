"""Command allow-list of the route app: an explicit grammar per tool.

An agent command is refused unless every word of it is accounted for by the grammar of its
tool. The grammars are written as the tools themselves read their arguments, so that what we
check is what the tool will do:

* ``ip`` and ``tc`` (iproute2 6.1) read global options one word at a time; a word that is a
  *prefix* of an option name selects that option (``ip -ba`` is ``-batch``, ``ip --bat`` too,
  because a leading ``--`` is read as ``-``). We accept only the option spellings listed here,
  written in full; any other word starting with ``-`` is refused. Object names (``ip a``,
  ``ip r``, ``tc q``) are resolved by prefix in iproute2's own table order (``ip n`` is
  ``neighbor``, ``ip net`` is ``netns``, ``ip vr`` is ``vrf``) and then checked against the
  allowed objects. Sub-commands (``show``, ``add``, ...) must be written in full.
* ``ss``, ``arp``, ``netstat``, ``route``, ``iptables``, ``iptables-save`` and ``sysctl`` use
  ``getopt_long``: a word ``-abc`` is the short options ``-a -b -c`` (an option that takes an
  argument takes the rest of the word or the next word: ``arp -vf FILE`` is ``-v -f FILE``),
  and a long option may be abbreviated (``arp --fil``, ``iptables --modp``). We parse the
  clusters exactly so; every letter must be an allowed option and every argument a valid
  value. Long options must be written in full.
* ``cat`` reads only files under ``/proc/net`` and ``/proc/sys/net`` (no options).

Refused everywhere: control characters (NUL, escape, ...), shell syntax (no shell ever runs
the command; it is split with :func:`shlex.split`), ``--``, words that name files (starting
with ``/``, ``.`` or ``~``; except ``cat``'s paths), and every feature that reads or writes a
file, enters another namespace or runs a program (``-batch``, ``netns``, ``vrf exec``,
``tc exec``, BPF objects, ``--modprobe``, ``-f``/``--file``, ``-F``, ``-D``, ``-N``,
``sysctl -p``, netem ``distribution``).

Sources: the iproute2 6.1 ``ip(8)``, ``tc(8)``, ``ss(8)`` manuals and their ``matches()``
prefix rule; net-tools 2.10 ``arp(8)``, ``route(8)``, ``netstat(8)``, ``ifconfig(8)``;
iptables 1.8.9 ``iptables(8)``, ``iptables-extensions(8)``, ``iptables-save(8)``; procps-ng 4
``sysctl(8)``; glibc ``getopt_long(3)``.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

#: Longest accepted command (characters).
COMMAND_MAX_CHARS = 1_000

ALLOWED_TOOLS = (
    "ip", "ifconfig", "route", "arp", "iptables", "iptables-save", "ip6tables",
    "ip6tables-save", "sysctl", "tc", "ss", "netstat", "cat",
)  # fmt: skip

#: Shell metacharacters: a shell never sees the command, so these would only mislead.
_SHELL_CHARS = re.compile(r"[;&|<>`$\n\r\\]")
#: ``net.a.b`` or ``net/a/b``; segments cannot be empty or ``..`` (no way out of net.*).
_SYSCTL_KEY = re.compile(r"^net(?:(?:\.[A-Za-z0-9_-]+)+|(?:/[A-Za-z0-9_-]+)+)(=[^\s=]*)?$")
#: A plain operand: names, addresses (with /prefix), numbers, rates, MACs, ``+``.
_OPERAND = re.compile(r"^[A-Za-z0-9_.:+@/%,=!-]+$")
#: Interface names: IFNAMSIZ-1 characters the kernel accepts in practice.
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@+-]{1,15}$")
#: iptables chain / target names.
_CHAIN = re.compile(r"^[A-Za-z0-9_-]{1,29}$")


class CommandRefusedError(Exception):
    """A command the allow-list refuses; ``str(exc)`` is the observation shown to the agent."""


# helpers ----------------------------------------------------------------------------------
def _first_prefix_match(word: str, table: Sequence[str]) -> str | None:
    """iproute2's ``matches()`` lookup: the first entry of ``table`` that ``word`` begins."""
    for entry in table:
        if word and entry.startswith(word):
            return entry
    return None


def _check_operand(tool: str, word: str) -> None:
    """A free operand: no file names, only plain characters."""
    if word.startswith(("/", ".", "~")):
        raise CommandRefusedError(
            f"{tool}: {word!r} looks like a file name; commands cannot use files"
        )
    if not _OPERAND.match(word):
        raise CommandRefusedError(f"{tool}: {word!r} contains characters that are not allowed here")


def _refuse_keywords(tool: str, words: Sequence[str], keywords: dict[str, str]) -> None:
    """Refuse any word that is a keyword of ``keywords`` or an abbreviation (>= 3 chars) of one.

    iproute2 reads many keywords with ``matches()``, so ``obj`` and ``objec`` both mean
    ``object``; refusing abbreviations too closes that door. Keywords containing a dash
    (``link-netns``) are matched exactly, so that ``scope link`` stays usable.
    """
    for word in words:
        for keyword, why in keywords.items():
            abbreviation = "-" not in keyword and len(word) >= 3 and keyword.startswith(word)
            if word == keyword or abbreviation:
                raise CommandRefusedError(f"{tool} {keyword} is not allowed here ({why})")


def _iproute_options(
    tool: str,
    args: list[str],
    *,
    allowed: Mapping[str, Callable[[str], bool] | None],
    refused: Mapping[str, str],
    known: Sequence[str],
    listing: str,
    value_hint: str = "",
) -> int:
    """Check the global options of iproute2's ``ip`` or ``tc`` that lead ``args``; return the
    index of the first word that is not an option (the object).

    Options must be written in full (a leading ``--`` reads as ``-``) and be a key of
    ``allowed``, whose value checks the option's argument (None: the option takes none);
    ``refused`` maps options refused outright to the reason shown; ``known`` is the tool's
    own option table in lookup order, only to say what an abbreviation would have meant;
    ``listing`` names the allowed options in the refusal, and ``value_hint`` the values of an
    option whose argument is missing or refused.

    Raises:
        CommandRefusedError: ``--``, a refused, unknown or abbreviated option, or a missing or
            refused option argument.
    """
    i = 0
    while i < len(args) and args[i].startswith("-"):
        word = args[i]
        opt = word[1:] if word.startswith("--") else word
        i += 1
        if word == "--":
            raise CommandRefusedError(f"{tool}: '--' is not allowed here")
        if opt in refused:
            raise CommandRefusedError(f"{tool} {opt} is not allowed here ({refused[opt]})")
        if opt not in allowed:
            meant = _first_prefix_match(opt, known)
            hint = f" ({tool} would read it as {meant})" if meant and meant != opt else ""
            raise CommandRefusedError(
                f"{tool} {word} is not allowed here: options must be one of {listing}, "
                f"written in full{hint}"
            )
        validator = allowed[opt]
        if validator is not None:
            if i >= len(args) or not validator(args[i]):
                raise CommandRefusedError(f"{tool} {word} needs one of {value_hint}")
            i += 1
    return i


def _check_iproute_operands(tool: str, obj: str, rest: list[str], keywords: dict[str, str]) -> None:
    """Check the words after ``tool obj``'s sub-command (``rest[0]``, checked by the caller):
    no refused keyword (:func:`_refuse_keywords`, over all of ``rest``), no option, and only
    plain operands (:func:`_check_operand`).

    Raises:
        CommandRefusedError: the first word that breaks a rule.
    """
    _refuse_keywords(tool, rest, keywords)
    for word in rest[1:]:
        if word.startswith("-") and len(word) > 1:
            raise CommandRefusedError(
                f"{tool} {obj}: option {word!r} is not allowed after the object"
            )
        _check_operand(f"{tool} {obj}", word)


@dataclass(frozen=True)
class GetoptSpec:
    """What a ``getopt_long`` tool accepts.

    Attributes:
        flags: short options without argument that are allowed.
        with_arg: short options that take an argument -> validator of the argument.
        long_flags: long options (full names, without ``--``) without argument.
        long_with_arg: long options with an argument -> validator.
        refused: short or long options (``"f"``, ``"file"``) refused with a reason; also used
            to explain what an abbreviated long option would have meant.
        known_long: every long option name the tool has (to name what an abbreviation means).
    """

    flags: str
    with_arg: dict[str, Callable[[str], bool]]
    long_flags: frozenset[str]
    long_with_arg: dict[str, Callable[[str], bool]]
    refused: dict[str, str]
    known_long: tuple[str, ...] = ()


def _parse_getopt(tool: str, args: list[str], spec: GetoptSpec) -> list[str]:
    """Parse ``args`` as glibc ``getopt_long`` (with permutation) does; return the operands.

    Raises:
        CommandRefusedError: an option that is unknown, refused, abbreviated, or has a bad argument.
    """
    operands: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            raise CommandRefusedError(f"{tool}: '--' is not allowed here")
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            if name in spec.refused:
                raise CommandRefusedError(
                    f"{tool} --{name} is not allowed here ({spec.refused[name]})"
                )
            if name in spec.long_flags:
                if eq:
                    raise CommandRefusedError(f"{tool} --{name} takes no value")
                continue
            if name in spec.long_with_arg:
                if not eq:
                    if i >= len(args):
                        raise CommandRefusedError(f"{tool} --{name} needs a value")
                    value = args[i]
                    i += 1
                if not spec.long_with_arg[name](value):
                    raise CommandRefusedError(
                        f"{tool} --{name}: value {value!r} is not allowed here"
                    )
                continue
            names = (*spec.known_long, *spec.refused, *spec.long_flags, *spec.long_with_arg)
            meant = [n for n in names if name and len(n) > 1 and n.startswith(name)]
            if meant:
                raise CommandRefusedError(
                    f"{tool} --{name} is not allowed here: abbreviated options are refused "
                    f"(the tool would read it as --{meant[0]}); write allowed options in full"
                )
            raise CommandRefusedError(f"{tool} --{name} is not an allowed option")
        if word.startswith("-") and len(word) > 1:
            j = 1
            while j < len(word):
                letter = word[j]
                j += 1
                if letter in spec.refused:
                    combined = f" (in {word!r})" if len(word) > 2 else ""
                    raise CommandRefusedError(
                        f"{tool} -{letter} is not allowed here{combined}: {spec.refused[letter]}"
                    )
                if letter in spec.flags:
                    continue
                if letter in spec.with_arg:
                    value = word[j:]
                    j = len(word)
                    if not value:
                        if i >= len(args):
                            raise CommandRefusedError(f"{tool} -{letter} needs a value")
                        value = args[i]
                        i += 1
                    if not spec.with_arg[letter](value):
                        raise CommandRefusedError(
                            f"{tool} -{letter}: value {value!r} is not allowed here"
                        )
                    continue
                raise CommandRefusedError(
                    f"{tool} -{letter} is not an allowed option (in {word!r})"
                )
            continue
        operands.append(word)
    return operands


def _one_of(*values: str) -> Callable[[str], bool]:
    allowed = frozenset(values)
    return lambda value: value in allowed


def _matches(pattern: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda value: bool(pattern.match(value))


def _is_text(value: str) -> bool:
    return bool(value) and value.isprintable() and not value.startswith(("/", ".", "~", "-"))


def _is_operand(value: str) -> bool:
    return bool(_OPERAND.match(value)) and not value.startswith(("/", ".", "~", "-"))


# ip ------------------------------------------------------------------------------------
#: ``ip`` objects in iproute2 6.1's lookup order (``ip/ip.c``): a word selects the first
#: object it is a prefix of.
IP_OBJECTS = (
    "address", "addrlabel", "maddress", "route", "rule", "neighbor", "neighbour", "ntable",
    "ntbl", "link", "l2tp", "fou", "ila", "macsec", "tunnel", "tunl", "tuntap", "tap", "token",
    "tcpmetrics", "tcp_metrics", "monitor", "xfrm", "mroute", "mrule", "netns", "netconf",
    "vrf", "sr", "nexthop", "mptcp", "ioam", "stats", "help",
)  # fmt: skip
#: Allowed ``ip`` objects -> allowed sub-commands (full spellings and iproute2's aliases).
IP_VERBS: dict[str, frozenset[str]] = {
    "address": frozenset(
        {"show", "list", "lst", "add", "del", "delete", "change", "replace", "flush"}
    ),
    "route": frozenset(
        {
            "show",
            "list",
            "lst",
            "get",
            "add",
            "del",
            "delete",
            "change",
            "replace",
            "append",
            "prepend",
            "flush",
        }  # fmt: skip
    ),
    "rule": frozenset({"show", "list", "lst", "add", "del", "delete", "flush"}),
    "neighbor": frozenset(
        {"show", "list", "lst", "get", "add", "del", "delete", "change", "replace", "flush"}
    ),
    "link": frozenset({"show", "list", "lst", "set", "add", "del", "delete", "change"}),
    "netconf": frozenset({"show", "list", "lst"}),
    "maddress": frozenset({"show", "list", "lst"}),
}
_IP_OBJECT_ALIAS = {"neighbour": "neighbor"}
#: Objects that are never allowed, with the reason shown.
_IP_REFUSED_OBJECTS = {
    "netns": "other network namespaces are out of reach",
    "vrf": "it runs programs (vrf exec)",
    "monitor": "it never ends",
    "xfrm": "IPsec state is not part of these tasks",
    "mptcp": "not part of these tasks",
}
#: Address families ``ip -f`` accepts. Not ``mpls``: MPLS routes are no part of these tasks and
#: a reused network's restore does not cover them (docs/route.md, "Network pool").
IP_FAMILIES = ("inet", "inet6", "link", "bridge")
#: Global ``ip`` options written in full (a leading ``--`` is read as ``-``), -> takes a value.
IP_OPTIONS: dict[str, Callable[[str], bool] | None] = {
    **dict.fromkeys(
        (
            "-4",
            "-6",
            "-0",
            "-s",
            "-stats",
            "-statistics",
            "-d",
            "-details",
            "-o",
            "-oneline",
            "-br",
            "-brief",
            "-j",
            "-json",
            "-p",
            "-pretty",
            "-N",
            "-Numeric",
            "-c",
            "-color",
            "-h",
            "-human",
            "-iec",
            "-t",
            "-timestamp",
            "-ts",
            "-tshort",
        ),
    ),  # fmt: skip
    "-f": _one_of(*IP_FAMILIES),
    "-family": _one_of(*IP_FAMILIES),
}
#: iproute2 6.1 global options of ``ip`` (to say what an abbreviation would have meant).
_IP_ALL_OPTIONS = (
    "-loops", "-family", "-stats", "-statistics", "-details", "-resolve", "-oneline",
    "-timestamp", "-tshort", "-Version", "-force", "-batch", "-brief", "-rcvbuf", "-color",
    "-help", "-netns", "-Numeric", "-all", "-json", "-pretty", "-iec", "-human",
)  # fmt: skip
_IP_REFUSED_OPTIONS = {
    "-n": "other network namespaces are out of reach",
    "-netns": "other network namespaces are out of reach",
    "-b": "it reads commands from a file",
    "-batch": "it reads commands from a file",
    "-force": "only useful with -batch",
    "-a": "it runs a command in every namespace",
    "-all": "it runs a command in every namespace",
    "-l": "not needed",
    "-loops": "not needed",
    "-rc": "not needed",
    "-rcvbuf": "not needed",
}
#: Keywords refused anywhere in ``ip`` arguments: files, other namespaces, programs.
_IP_REFUSED_KEYWORDS = {
    "netns": "other network namespaces are out of reach",
    "link-netns": "other network namespaces are out of reach",
    "link-netnsid": "other network namespaces are out of reach",
    "netnsid": "other network namespaces are out of reach",
    "exec": "it runs programs",
    "object": "it loads files",
    "pinned": "it loads files",
    "xdp": "it loads BPF programs from files",
    "xdpgeneric": "it loads BPF programs from files",
    "xdpdrv": "it loads BPF programs from files",
    "xdpoffload": "it loads BPF programs from files",
    "bpf": "it loads BPF programs from files",
    "file": "it reads files",
    "batch": "it reads files",
}


def _check_ip(args: list[str]) -> None:
    i = _iproute_options(
        "ip",
        args,
        allowed=IP_OPTIONS,
        refused=_IP_REFUSED_OPTIONS,
        known=_IP_ALL_OPTIONS,
        listing=f"{', '.join(k for k in IP_OPTIONS if len(k) > 3)} (or their short forms)",
        value_hint=f"{', '.join(IP_FAMILIES)} (not mpls: MPLS is no part of these tasks)",
    )
    if i >= len(args):
        raise CommandRefusedError("ip needs an object, e.g. ip addr show")
    word = args[i]
    obj = _first_prefix_match(word, IP_OBJECTS)
    if obj is None:
        raise CommandRefusedError(f"ip: unknown object {word!r}")
    obj = _IP_OBJECT_ALIAS.get(obj, obj)
    if obj in _IP_REFUSED_OBJECTS:
        raise CommandRefusedError(f"ip {obj} is not allowed here ({_IP_REFUSED_OBJECTS[obj]})")
    if obj not in IP_VERBS:
        allowed = ", ".join(sorted(IP_VERBS))
        raise CommandRefusedError(f"ip {obj} is not allowed here; allowed objects: {allowed}")
    rest = args[i + 1 :]
    if rest:
        verb = rest[0]
        if verb.startswith("-"):
            raise CommandRefusedError(f"ip {obj}: options go before the object (ip -br {obj} show)")
        if verb != "help" and verb not in IP_VERBS[obj]:
            allowed = ", ".join(sorted(IP_VERBS[obj]))
            raise CommandRefusedError(
                f"ip {obj} {verb} is not allowed here: sub-commands must be written in full, "
                f"one of {allowed}"
            )
    _check_iproute_operands("ip", obj, rest, _IP_REFUSED_KEYWORDS)


# tc --------------------------------------------------------------------------------------
#: ``tc`` objects in iproute2 6.1's lookup order (``tc/tc.c``).
TC_OBJECTS = ("qdisc", "class", "filter", "chain", "actions", "action", "monitor", "exec", "help")
TC_VERBS: dict[str, frozenset[str]] = {
    "qdisc": frozenset({"show", "list", "ls", "add", "del", "delete", "change", "replace"}),
    "class": frozenset({"show", "list", "ls", "add", "del", "delete", "change", "replace"}),
    "filter": frozenset({"show", "list", "ls"}),
}
TC_OPTIONS = frozenset(
    {
        "-s",
        "-stats",
        "-statistics",
        "-d",
        "-details",
        "-p",
        "-pretty",
        "-j",
        "-json",
        "-iec",
        "-g",
        "-graph",
        "-raw",
    }  # fmt: skip
)
_TC_ALL_OPTIONS = (
    "-stats", "-details", "-raw", "-pretty", "-graph", "-Version", "-iec", "-help", "-force",
    "-batch", "-netns", "-names", "-cf", "-conf", "-timestamp", "-tshort", "-oneline",
    "-brief", "-json", "-color", "-echo", "-nm",
)  # fmt: skip
_TC_REFUSED_OPTIONS = {
    "-b": "it reads commands from a file",
    "-batch": "it reads commands from a file",
    "-force": "only useful with -batch",
    "-n": "other network namespaces are out of reach",
    "-netns": "other network namespaces are out of reach",
    "-cf": "it reads a file",
    "-conf": "it reads a file",
    "-nm": "it reads a file",
    "-names": "it reads a file",
}
_TC_REFUSED_KEYWORDS = {
    "bpf": "it loads BPF programs from files",
    "object-file": "it loads files",
    "object-pinned": "it loads files",
    "obj": "it loads files",
    "pinned": "it loads files",
    "exec": "it runs programs",
    "distribution": "it reads a distribution table from a file",
    "file": "it reads files",
}


def _check_tc(args: list[str]) -> None:
    i = _iproute_options(
        "tc",
        args,
        allowed=dict.fromkeys(TC_OPTIONS),
        refused=_TC_REFUSED_OPTIONS,
        known=_TC_ALL_OPTIONS,
        listing=", ".join(sorted(TC_OPTIONS)),
    )
    if i >= len(args):
        raise CommandRefusedError("tc needs an object, e.g. tc qdisc show")
    word = args[i]
    obj = _first_prefix_match(word, TC_OBJECTS)
    if obj is None:
        raise CommandRefusedError(f"tc: unknown object {word!r}")
    if obj == "exec":
        raise CommandRefusedError("tc exec is not allowed here (it runs programs)")
    if obj not in TC_VERBS:
        raise CommandRefusedError(
            f"tc {obj} is not allowed here; allowed objects: qdisc, class, filter"
        )
    rest = args[i + 1 :]
    if rest and rest[0] != "help" and rest[0] not in TC_VERBS[obj]:
        allowed = ", ".join(sorted(TC_VERBS[obj]))
        raise CommandRefusedError(
            f"tc {obj} {rest[0]} is not allowed here: sub-commands must be written in full, "
            f"one of {allowed}"
        )
    _check_iproute_operands("tc", obj, rest, _TC_REFUSED_KEYWORDS)


# getopt tools ------------------------------------------------------------------------------
_FAMILIES = _one_of("inet", "inet6", "link", "unix", "netlink", "packet", "vsock", "tipc", "xdp",
                    "mptcp")  # fmt: skip

SS_SPEC = GetoptSpec(
    flags="tuawlxnrepmios460HOSd",
    with_arg={"f": _FAMILIES, "A": _matches(re.compile(r"^[a-z0-9_,|!]+$"))},
    long_flags=frozenset(
        {
            "tcp",
            "udp",
            "all",
            "raw",
            "unix",
            "listening",
            "numeric",
            "resolve",
            "extended",
            "processes",
            "memory",
            "info",
            "options",
            "summary",
            "ipv4",
            "ipv6",
            "packet",
            "no-header",
            "oneline",
            "sctp",
            "dccp",
            "udplite",
            "xdp",
            "mptcp",
            "threads",
            "tipc",
            "vsock",
            "events",
            "inet-sockopt",
            "bpf-maps",
        }  # fmt: skip
    ),
    long_with_arg={"family": _FAMILIES, "query": _matches(re.compile(r"^[a-z0-9_,|!]+$"))},
    refused={
        "F": "it reads a filter from a file",
        "filter": "it reads a filter from a file",
        "D": "it writes to a file",
        "diag": "it writes to a file",
        "N": "other network namespaces are out of reach",
        "net": "other network namespaces are out of reach",
        "K": "it kills sockets",
        "kill": "it kills sockets",
        "Z": "not needed",
        "context": "not needed",
        "contexts": "not needed",
        "z": "not needed",
        "socket": "not needed",
        "cgroup": "not needed",
        "E": "it never ends",
        "events": "it never ends",
    },  # fmt: skip
    known_long=(
        "numeric",
        "resolve",
        "all",
        "listening",
        "options",
        "extended",
        "memory",
        "info",
        "processes",
        "threads",
        "bpf",
        "events",
        "context",
        "contexts",
        "summary",
        "tcp",
        "sctp",
        "udp",
        "dccp",
        "raw",
        "unix",
        "tipc",
        "vsock",
        "xdp",
        "mptcp",
        "packet",
        "ipv4",
        "ipv6",
        "family",
        "query",
        "socket",
        "diag",
        "filter",
        "net",
        "kill",
        "no-header",
        "oneline",
        "cgroup",
        "inet-sockopt",
        "bpf-maps",
        "help",
        "version",
    ),  # fmt: skip
)

ARP_SPEC = GetoptSpec(
    flags="anevdsD",
    with_arg={
        "i": _matches(_IFNAME),
        "H": _one_of("ether", "loop", "arcnet", "ax25", "netrom", "infiniband"),
        "t": _one_of("ether", "loop", "arcnet", "ax25", "netrom", "infiniband"),
        "A": _one_of("inet"),
        "p": _one_of("inet"),
    },
    long_flags=frozenset({"all", "numeric", "verbose", "delete", "set", "use-device"}),
    long_with_arg={
        "device": _matches(_IFNAME),
        "hw-type": _one_of("ether", "loop"),
        "protocol": _one_of("inet"),
    },
    refused={"f": "it reads a file", "file": "it reads a file"},
    known_long=(
        "all",
        "delete",
        "file",
        "numeric",
        "set",
        "protocol",
        "hw-type",
        "device",
        "verbose",
        "version",
        "help",
        "use-device",
    ),  # fmt: skip
)

NETSTAT_SPEC = GetoptSpec(
    flags="rnialtuwxpseogWCF46v",
    with_arg={"A": _one_of("inet", "inet6", "unix")},
    long_flags=frozenset(
        {
            "route",
            "numeric",
            "interfaces",
            "all",
            "listening",
            "tcp",
            "udp",
            "raw",
            "unix",
            "programs",
            "statistics",
            "extend",
            "timers",
            "groups",
            "wide",
            "verbose",
            "fib",
            "cache",
            "numeric-hosts",
            "numeric-ports",
            "numeric-users",
            "inet",
            "inet6",
        }  # fmt: skip
    ),
    long_with_arg={"protocol": _one_of("inet", "inet6", "unix")},
    refused={"c": "it never ends", "continuous": "it never ends"},
    known_long=(
        "route",
        "numeric",
        "interfaces",
        "all",
        "listening",
        "tcp",
        "udp",
        "raw",
        "unix",
        "programs",
        "statistics",
        "extend",
        "timers",
        "groups",
        "wide",
        "verbose",
        "continuous",
        "fib",
        "cache",
        "protocol",
        "masquerade",
        "symbolic",
        "help",
        "version",
    ),  # fmt: skip
)

ROUTE_SPEC = GetoptSpec(
    flags="neFCv46",
    with_arg={"A": _one_of("inet", "inet6")},
    long_flags=frozenset({"numeric", "extend", "verbose", "fib", "cache"}),
    long_with_arg={},
    refused={},
    known_long=("numeric", "extend", "verbose", "fib", "cache", "help", "version"),
)
#: Words ``route`` reads after ``add``/``del`` that begin with a dash.
_ROUTE_DASH_WORDS = frozenset({"-net", "-host"})

_IPT_MATCHES = frozenset(
    {
        "icmp",
        "tcp",
        "udp",
        "state",
        "conntrack",
        "comment",
        "multiport",
        "iprange",
        "limit",
        "mac",
        "mark",
        "addrtype",
        "length",
        "pkttype",
        "physdev",
    }  # fmt: skip
)
#: The tables ``iptables -t`` and ``ip6tables -t`` accept (every table iptables(8) names).
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw", "security")
_IPT_TABLES = _one_of(*IPTABLES_TABLES)
IPTABLES_SPEC = GetoptSpec(
    # -n -v -x -4 -6 -f (fragments; a flag in iptables) and -c (counters with -A... takes arg)
    flags="nvx46fw",
    with_arg={
        "A": _matches(_CHAIN),
        "C": _matches(_CHAIN),
        "D": _matches(_CHAIN),
        "R": _matches(_CHAIN),
        "I": _matches(_CHAIN),
        "N": _matches(_CHAIN),
        "E": _matches(_CHAIN),
        "P": _matches(_CHAIN),
        "t": _IPT_TABLES,
        "p": _matches(re.compile(r"^!?[a-z0-9]+$")),
        "s": _is_operand,
        "d": _is_operand,
        "i": _matches(_IFNAME),
        "o": _matches(_IFNAME),
        "j": _matches(_CHAIN),
        "g": _matches(_CHAIN),
        "m": _one_of(*_IPT_MATCHES),
    },  # fmt: skip
    long_flags=frozenset(
        {
            "numeric",
            "verbose",
            "exact",
            "line-numbers",
            "list",
            "list-rules",
            "flush",
            "zero",
            "delete-chain",
            "fragment",
            "ipv4",
            "ipv6",
            "syn",
            "wait",
        }  # fmt: skip
    ),
    long_with_arg={
        "append": _matches(_CHAIN),
        "check": _matches(_CHAIN),
        "delete": _matches(_CHAIN),
        "replace": _matches(_CHAIN),
        "insert": _matches(_CHAIN),
        "new-chain": _matches(_CHAIN),
        "rename-chain": _matches(_CHAIN),
        "policy": _matches(_CHAIN),
        "table": _IPT_TABLES,
        "protocol": _matches(re.compile(r"^!?[a-z0-9]+$")),
        "source": _is_operand,
        "destination": _is_operand,
        "src": _is_operand,
        "dst": _is_operand,
        "in-interface": _matches(_IFNAME),
        "out-interface": _matches(_IFNAME),
        "jump": _matches(_CHAIN),
        "goto": _matches(_CHAIN),
        "match": _one_of(*_IPT_MATCHES),
        # match and target options of the allowed extensions
        "icmp-type": _is_operand,
        "dport": _is_operand,
        "sport": _is_operand,
        "destination-port": _is_operand,
        "source-port": _is_operand,
        "dports": _is_operand,
        "sports": _is_operand,
        "ports": _is_operand,
        "state": _is_operand,
        "ctstate": _is_operand,
        "comment": _is_text,
        "src-range": _is_operand,
        "dst-range": _is_operand,
        "limit": _is_operand,
        "limit-burst": _is_operand,
        "mac-source": _is_operand,
        "mark": _is_operand,
        "src-type": _is_operand,
        "dst-type": _is_operand,
        "length": _is_operand,
        "pkt-type": _is_operand,
        "reject-with": _is_operand,
        "log-prefix": _is_operand,
        "log-level": _is_operand,
        "to-source": _is_operand,
        "to-destination": _is_operand,
        "set-mark": _is_operand,
        "physdev-in": _matches(_IFNAME),
        "physdev-out": _matches(_IFNAME),
    },  # fmt: skip
    refused={
        "M": "it runs a program",
        "modprobe": "it runs a program",
        "c": "not needed",
        "set-counters": "not needed",
        "W": "not needed",
        "wait-interval": "not needed",
    },  # fmt: skip
    known_long=(
        "append",
        "check",
        "delete",
        "delete-chain",
        "destination",
        "dst",
        "exact",
        "flush",
        "fragment",
        "goto",
        "in-interface",
        "insert",
        "ipv4",
        "ipv6",
        "jump",
        "line-numbers",
        "list",
        "list-rules",
        "match",
        "modprobe",
        "new-chain",
        "numeric",
        "out-interface",
        "policy",
        "protocol",
        "rename-chain",
        "replace",
        "set-counters",
        "source",
        "src",
        "table",
        "verbose",
        "version",
        "wait",
        "wait-interval",
        "zero",
        "help",
    ),  # fmt: skip
)
#: iptables commands whose chain argument is optional (``-L [chain]``).
_IPT_OPTIONAL_CHAIN = frozenset("LSFZX")

IPTABLES_SAVE_SPEC = GetoptSpec(
    flags="c",
    with_arg={"t": _IPT_TABLES},
    long_flags=frozenset({"counters"}),
    long_with_arg={"table": _IPT_TABLES},
    refused={
        "M": "it runs a program",
        "modprobe": "it runs a program",
        "f": "it writes to a file",
        "file": "it writes to a file",
    },  # fmt: skip
    known_long=("counters", "dump", "table", "modprobe", "file", "version", "help"),
)

SYSCTL_SPEC = GetoptSpec(
    flags="wneqNb",
    with_arg={},
    long_flags=frozenset({"write", "values", "names", "quiet", "ignore", "binary"}),
    long_with_arg={},
    refused={
        "p": "it reads a file",
        "load": "it reads a file",
        "f": "it reads a file",
        "system": "it reads files",
        "a": "only explicit net.* keys",
        "A": "only explicit net.* keys",
        "X": "only explicit net.* keys",
        "all": "only explicit net.* keys",
        "r": "only explicit net.* keys",
        "pattern": "only explicit net.* keys",
    },  # fmt: skip
    known_long=(
        "all",
        "binary",
        "deprecated",
        "dry-run",
        "ignore",
        "names",
        "pattern",
        "load",
        "quiet",
        "system",
        "values",
        "write",
        "help",
        "version",
    ),  # fmt: skip
)


def _check_iptables(tool: str, args: list[str]) -> None:
    """iptables: the getopt parse of every option, plus chain names after ``-L``/``-S``/..."""
    # -L -S -F -Z -X take an optional chain: as a flag in a cluster, or followed by a word
    spec = IPTABLES_SPEC
    flags = spec.flags + "".join(_IPT_OPTIONAL_CHAIN)
    spec = GetoptSpec(flags, spec.with_arg, spec.long_flags, spec.long_with_arg, spec.refused,
                      spec.known_long)  # fmt: skip
    operands = _parse_getopt(tool, args, spec)
    for word in operands:
        if word == "!":
            continue
        _check_operand(tool, word)


def _check_getopt_tool(tool: str, args: list[str], spec: GetoptSpec) -> list[str]:
    operands = _parse_getopt(tool, args, spec)
    for word in operands:
        _check_operand(tool, word)
    return operands


def _check_route(args: list[str]) -> None:
    # ``route add -net 10.0.0.0/8 dev x``: -net/-host are words of the route, not options
    head: list[str] = []
    tail: list[str] = []
    for index, word in enumerate(args):
        if word in ("add", "del", "delete"):
            head, tail = args[:index], args[index + 1 :]
            break
    else:
        head = args
    _check_getopt_tool("route", head, ROUTE_SPEC)
    for word in tail:
        if word.startswith("-") and word not in _ROUTE_DASH_WORDS:
            raise CommandRefusedError(
                f"route {word} is not allowed here (only -net and -host after add/del)"
            )
        if word not in _ROUTE_DASH_WORDS:
            _check_operand("route", word)


_IFCONFIG_NEGATIONS = frozenset({"-arp", "-promisc", "-allmulti", "-pointopoint", "-multicast"})


def _check_ifconfig(args: list[str]) -> None:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] not in ("-a", "-s", "-v"):
            raise CommandRefusedError(
                f"ifconfig {args[i]} is not an allowed option (allowed: -a -s -v)"
            )
        i += 1
    for word in args[i:]:
        if word.startswith("-") and word not in _IFCONFIG_NEGATIONS:
            raise CommandRefusedError(f"ifconfig {word} is not allowed here")
        if word not in _IFCONFIG_NEGATIONS:
            _check_operand("ifconfig", word)


#: ``net.*`` sysctls an agent may read but never write (the last segment of the key), with the
#: reason shown.
SYSCTL_WRITE_REFUSED = {
    "stable_secret": "an IPv6 stable_secret cannot be unset once written, so it would outlive the "
    "episode and reach the next one on a reused network; it plays no part in these tasks",
}


def _check_sysctl(args: list[str]) -> None:
    try:
        keys = _parse_getopt("sysctl", args, SYSCTL_SPEC)
    except CommandRefusedError as exc:
        raise CommandRefusedError(
            f"{exc}; sysctl: only -w -n -e -q -N with explicit net.* keys are allowed"
        ) from None
    if not keys or not all(_SYSCTL_KEY.match(k) for k in keys):
        raise CommandRefusedError("sysctl: only net.* keys are allowed (e.g. net.ipv4.ip_forward)")
    writes = any(
        word == "--write" or (word.startswith("-") and not word.startswith("--") and "w" in word)
        for word in args
    )
    for key in keys:
        name, eq, _value = key.partition("=")
        leaf = re.split(r"[./]", name)[-1]
        if leaf in SYSCTL_WRITE_REFUSED and (writes or eq):
            raise CommandRefusedError(
                f"sysctl: writing {leaf} is not allowed here ({SYSCTL_WRITE_REFUSED[leaf]})"
            )


def _check_cat(args: list[str]) -> None:
    if not args:
        raise CommandRefusedError("cat needs a file under /proc/net or /proc/sys/net")
    for path in args:
        norm = posixpath.normpath(path)
        if (
            path.startswith("-")
            or ".." in path.split("/")
            or not (norm.startswith("/proc/net/") or norm.startswith("/proc/sys/net/"))
            or not re.match(r"^[A-Za-z0-9_./:-]+$", path)
        ):
            raise CommandRefusedError("cat: only files under /proc/net and /proc/sys/net")


# what the grammars let a command change ------------------------------------------------------
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

#: Every way the grammars let a command change a node (the keys: :func:`write_surface`), and
#: the kinds of state (:data:`STATE_KINDS`) each one writes. A reused network must get every
#: one of them back (the pool's restore and verification) and the step fingerprint must see
#: each change: ``tests/apps/route/test_state_coverage.py`` fails when the grammars allow a
#: write this table does not list, or list a kind either of them does not cover.
WRITABLE_STATE: dict[str, tuple[str, ...]] = {
    "ip address": ("address4", "address6"),
    "ip route": ("route4", "route6"),
    "ip rule": ("rule4", "rule6"),
    "ip neighbor": ("neighbour4", "neighbour6", "proxy4", "proxy6"),
    "ip link": ("link",),
    # PF_BRIDGE/link requests of the other families fall back to the generic link handlers
    "ip -f link": ("link",),
    "ip -f bridge": ("link",),
    "tc qdisc": ("qdisc",),
    "tc class": ("qdisc",),
    **{
        f"{tool} -t {table}": (tool, "conntrack")
        for tool in ("iptables", "ip6tables")
        for table in IPTABLES_TABLES
    },
    "sysctl -w net.*": ("sysctl",),
    "arp -s/-d": ("neighbour4", "proxy4"),
    "route add/del": ("route4", "route6"),
    "ifconfig": ("link", "address4", "address6"),
}

#: ``ip``/``tc`` sub-commands that only read.
READ_ONLY_VERBS = frozenset({"show", "list", "lst", "ls", "get", "help"})
#: Allowed tools that change nothing (the options that would are refused: ``ss -K``,
#: ``iptables-save -f``, ...).
READ_ONLY_TOOLS = frozenset({"iptables-save", "ip6tables-save", "ss", "netstat", "cat"})
#: One command per getopt/ifconfig tool that writes when the grammar allows it.
_WRITE_PROBES = {
    "arp -s/-d": "arp -s 10.0.0.1 02:00:00:00:00:01",
    "route add/del": "route add -net 10.0.0.0/8 dev lo",
    "ifconfig": "ifconfig lo mtu 1400",
}
#: The top levels of ``/proc/sys``.
_SYSCTL_TREES = ("abi", "crypto", "debug", "dev", "fs", "kernel", "net", "user", "vm")


def write_surface() -> frozenset[str]:
    """Every way the current grammars let a command change a node, derived from them (not
    from :data:`WRITABLE_STATE`, which must list exactly these).

    ``ip``/``tc`` objects with a sub-command beyond :data:`READ_ONLY_VERBS`; ``ip -f`` families
    other than ``inet``/``inet6``; every iptables/ip6tables table; every sysctl tree whose keys
    pass; each of ``arp``, ``route``, ``ifconfig`` whose writing command passes; and any other
    allowed tool not declared read-only (:data:`READ_ONLY_TOOLS`), by its name.
    """
    surface = {f"ip {obj}" for obj, verbs in IP_VERBS.items() if verbs - READ_ONLY_VERBS}
    surface |= {f"ip -f {family}" for family in IP_FAMILIES if family not in ("inet", "inet6")}
    surface |= {f"tc {obj}" for obj, verbs in TC_VERBS.items() if verbs - READ_ONLY_VERBS}
    surface |= {
        f"{tool} -t {table}" for tool in ("iptables", "ip6tables") for table in IPTABLES_TABLES
    }
    surface |= {
        f"sysctl -w {tree}.*" for tree in _SYSCTL_TREES if _SYSCTL_KEY.match(f"{tree}.a.b=1")
    }
    surface |= {name for name, probe in _WRITE_PROBES.items() if check_command(probe)[0]}
    covered = {word.split()[0] for word in surface}
    surface |= {tool for tool in ALLOWED_TOOLS if tool not in READ_ONLY_TOOLS | covered}
    return frozenset(surface)


# entry point -------------------------------------------------------------------------------
def _has_control_characters(command: str) -> bool:
    return any(not ch.isprintable() for ch in command)


def check_command(command: str) -> tuple[list[str] | None, str | None]:
    """Split ``command`` and check it against the per-tool grammars.

    Never raises: returns ``(argv, None)`` when allowed, ``(None, reason)`` when refused (the
    reason is the observation shown to the agent).
    """
    try:
        return _check(command), None
    except CommandRefusedError as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - agent text must never crash an episode
        return None, f"command could not be checked ({type(exc).__name__})"


def _check(command: str) -> list[str]:
    if not isinstance(command, str):
        raise CommandRefusedError("the command must be a string")
    if len(command) > COMMAND_MAX_CHARS:
        raise CommandRefusedError(f"command longer than {COMMAND_MAX_CHARS} characters")
    if _SHELL_CHARS.search(command) or "$(" in command:
        raise CommandRefusedError(
            "shell syntax is not available (no ; && || | $( ) ` < > or backslashes): "
            "send exactly one command per step"
        )
    if _has_control_characters(command):
        raise CommandRefusedError(
            "control characters (NUL, escape, tab, ...) are not allowed in commands"
        )
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise CommandRefusedError(f"cannot split the command: {exc}") from None
    if not argv:
        raise CommandRefusedError("empty command")
    tool, args = argv[0], argv[1:]
    if tool == "sudo":
        raise CommandRefusedError("no sudo: commands already run with the privileges they need")
    if tool in ("ping", "ping6", "fping", "arping", "traceroute"):
        raise CommandRefusedError("no ping: the pingall result is provided after every step")
    if tool not in ALLOWED_TOOLS:
        raise CommandRefusedError(
            f"{tool!r} is not an allowed tool; allowed: {', '.join(ALLOWED_TOOLS)}"
        )
    if tool == "ip":
        _check_ip(args)
    elif tool == "tc":
        _check_tc(args)
    elif tool in ("iptables", "ip6tables"):
        _check_iptables(tool, args)
    elif tool in ("iptables-save", "ip6tables-save"):
        if _check_getopt_tool(tool, args, IPTABLES_SAVE_SPEC):
            raise CommandRefusedError(f"{tool} takes no operands")
    elif tool == "ss":
        _check_getopt_tool("ss", args, SS_SPEC)
    elif tool == "arp":
        _check_getopt_tool("arp", args, ARP_SPEC)
    elif tool == "netstat":
        if _check_getopt_tool("netstat", args, NETSTAT_SPEC):
            raise CommandRefusedError("netstat takes only options")
    elif tool == "route":
        _check_route(args)
    elif tool == "ifconfig":
        _check_ifconfig(args)
    elif tool == "sysctl":
        _check_sysctl(args)
    else:
        _check_cat(args)
    return argv
