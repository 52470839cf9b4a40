"""The state of a route network's machines: what a pooled network is restored to and verified
against (:mod:`apps.route.pool`).

A machine's state is printed by one ``sh`` script run in its network namespace
(:func:`state_script`: ``ip -4``/``ip -6`` batches, ``tc``, ``iptables-save``,
``ip6tables-save``), normalized (:func:`normalize_dump`), and recorded right after the build
with what the restore re-applies (:class:`NodeSnapshot`, :func:`take_snapshot`), beside every
readable ``net.*`` sysctl (:mod:`apps.route.sysctl`) and the root-namespace side of the network
(:func:`root_links`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evaluator.app import EmulatorError

from apps.route.network import RouteNetwork, enter_netns, list_interfaces
from apps.route.sysctl import read_sysctls

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


def normalize_dump(text: str) -> list[str]:
    """Sections of :data:`DUMP_SCRIPT` output with timing noise removed.

    Removed: operational state words (``state UP`` follows the carrier through the kernel's
    link-watch, up to 1 s late), address lifetimes and the IPv6 ``tentative`` flag (duplicate
    address detection), the kernel's ``local fe80::`` routes (added when that detection ends),
    IPv6 multicast neighbour entries (``NOARP``, made by MLD) and link-local ones learned
    from neighbour discovery (the restore flushes them; traffic makes them again at any
    time), multicast reference counts,
    the transient ``Peer netns reference`` note, iptables-save comments and counters. Empty
    tables are kept: the restore deletes every nftables table
    (:func:`apps.route.netlink.flush_netfilter`), so a table an episode created, even an
    empty one, would tell the next episode that iptables ran there. Route, address and
    neighbour lines are compared as sets: their listing order follows insertion order.
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



def run_scripts(
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
                enter_netns(net.pids[machine])
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
                enter_netns(net.pids[machine])
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


def root_links(prefix: str) -> dict[str, tuple[str, ...]]:
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



def take_snapshot(net: RouteNetwork) -> Snapshot:
    """Snapshot every node of a freshly built ``net`` (one process per node, in parallel).

    Raises:
        EmulatorError: a node's state could not be read.
    """
    started = time.perf_counter()
    script = DUMP_SCRIPT + f"echo {SEP}\n" + PARSE_SCRIPT
    results = run_scripts(
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
        root_links=root_links(net.topology.prefix),
        taken_s=time.perf_counter() - started,
    )

