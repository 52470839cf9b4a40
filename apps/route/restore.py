"""Putting a released route network back to its snapshot (:mod:`apps.route.snapshot`), and
checking that it is: the restore and verification hooks of the route pool
(:class:`apps.route.pool.RoutePool`).
"""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from apps.route.netlink import flush_learned_state, flush_netfilter
from apps.route.network import RouteNetwork, enter_netns
from apps.route.snapshot import (
    DUMP_SCRIPT,
    RESTORE_TIMEOUT_S,
    SEP,
    NodeSnapshot,
    Snapshot,
    normalize_dump,
    root_links,
    run_scripts,
    state_script,
)
from apps.route.sysctl import restore_sysctls


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


def _flush_untouched(net: RouteNetwork, machines: Iterable[str]) -> list[str]:
    """:func:`flush_learned_state` in each of ``machines`` (one helper thread, no process);
    returns the machines where it failed."""
    failed: list[str] = []

    def work() -> None:
        for machine in machines:
            try:
                enter_netns(net.pids[machine])
                flush_learned_state()
            except OSError:
                failed.append(machine)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join()
    return failed


def _pending(raw_links: str) -> bool:
    """True when a link line shows an interface up with carrier but not yet operational."""
    for line in raw_links.splitlines():
        match = re.match(r"^\d+: [^<]*<([^>]*)>.*\bstate (\S+)", line)
        if match and {"UP", "LOWER_UP"} <= set(match.group(1).split(",")):
            if match.group(2) not in ("UP", "UNKNOWN"):
                return True
    return False


@dataclass
class Restored:
    """What :func:`restore_machines` did.

    Attributes:
        problems: what the restore already saw differ or fail (empty: nothing): a timed-out
            script, ``net.*`` sysctls still different or newly readable, a netfilter flush
            that left something, a machine whose learned state could not be flushed.
        dumps: machine -> the state its restore script (or, after a sysctl was written, a
            second dump) printed last, for :func:`verify_machines`.
    """

    problems: list[str] = field(default_factory=list)
    dumps: dict[str, str] = field(default_factory=dict)


def restore_machines(net: RouteNetwork, snapshot: Snapshot, machines: Iterable[str]) -> Restored:
    """Restore ``machines`` of ``net`` to ``snapshot`` (one :func:`restore_script` per
    machine, all in parallel; before it, in a helper thread moved into the machine's
    namespace, every nftables table and conntrack entry is deleted, and after it the
    ``net.*`` sysctls are restored there), and flush the learned state of every other machine
    meanwhile. Nothing raises for a failed restore; it is a problem in the result.
    """
    wanted = sorted(set(machines) & set(snapshot.nodes))
    restored = Restored()

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

    results = run_scripts(
        net,
        {m: restore_script(snapshot.nodes[m]) for m in wanted},
        after=sysctls_then_dump,
        before=delete_tables,
    )
    flusher.join()
    problems, dumps = restored.problems, restored.dumps
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
    for machine in flush_failed:
        problems.append(f"{machine}: learned neighbour entries could not be flushed")
    return restored


def verify_machines(
    net: RouteNetwork, snapshot: Snapshot, dumps: dict[str, str]
) -> tuple[list[str], list[str]]:
    """Compare the printed state of restored machines (``dumps``: machine -> what its
    restore printed, :class:`Restored`) and the root-namespace side of ``net`` with
    ``snapshot``; a machine that differs is printed once more before it counts.

    Returns (the differences -- empty: verified, the machines whose links are still coming
    up). Raises ``OSError``/``subprocess.SubprocessError`` when a machine cannot be read.
    """
    problems: list[str] = []
    pending: list[str] = []
    dumps = dict(dumps)
    differing = {m: _compare(snapshot.nodes[m], text) for m, text in dumps.items()}
    # machines restored in parallel race on veth carriers (r0's transit side may come up
    # after r1 printed its own side): what differs is printed once more before it counts
    again = [m for m, found in differing.items() if found]
    if again:
        for machine, (_s, out, _a) in run_scripts(net, dict.fromkeys(again, DUMP_SCRIPT)).items():
            dumps[machine] = out
            differing[machine] = _compare(snapshot.nodes[machine], out)
    for machine, found in differing.items():
        problems += [f"{machine}: {item}" for item in found]
        if _pending(dumps[machine].split(SEP + "\n")[0]):
            pending.append(machine)
    root = root_links(net.topology.prefix)
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

