"""The route *scripted* agent: the strongest program without a model that its authors could write
against the public fault catalogue (:mod:`apps.route.faults`), used to measure the benchmark.

It knows what the public generator does: every fault sits on one machine, a query has one or
two faults on different machines, and every fault is one of the catalogue's methods -- links
down, MTU 68 or ARP off; addresses flushed, replaced or cut by a mask; forwarding off globally
or per interface; FORWARD/INPUT/OUTPUT DROP or REJECT rules; ``ip rule`` prohibit or lookup of
an unreachable table; a token-bucket shaper; a deleted, replaced, more specific or blackholed
route; a host's default route pointed elsewhere. It also knows which changes are distractors
(prefixes in 10.160.0.0/11, spare veths) and leaves them alone to save steps.

How it works, one command per step, a pure function of the chat history:

1. A network whose initial pingall lost nothing is declared healthy at once.
2. The intended plan (addresses, routes) is read from the first observation.
3. The newest pingall localises the faults: a host whose losses exceed its subnet-mates' is a
   suspect (a router fault hurts a whole subnet alike); routers are ranked by the share of
   the pairs whose path crosses them that fail.
4. Each suspect gets a fixed checklist of reads (``ip addr``, ``ip route``, ``iptables-save``,
   ``ip rule``, ``ip netconf``, ``tc qdisc``), ordered by what its loss pattern suggests;
   every read is diffed against the plan and the catalogue, and the derived repairs are sent
   before the next read. A machine that yielded a repair is done (one fault per machine).
5. It stops when nothing is left to read (the episode ends by itself once pingall is full).

What it cannot do is what it was not written for: faults outside the public catalogue
(neighbour entries, policy routing to other tables, ingress filters, ...), other topologies
or observation formats -- the held-out packs of docs/writing-a-variant-pack.md.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from apps.route.prompt import OUTPUT_MARKER, PINGALL_MARKER, PREFIX_LINE_RE
from apps.route.reference import fix_iptables, fix_qdiscs
from apps.route.replies import DONE_REPLY, HEALTHY_REPLY, command_reply, parse_reply

ADDR = "ip addr show"
ROUTE = "ip route show"
IPTABLES = "iptables-save"
RULE = "ip rule show"
NETCONF = "ip netconf show"
QDISC = "tc qdisc show"

#: Distractor address space of the public generator (never part of the plan).
DISTRACTOR_NET = ipaddress.ip_network("10.160.0.0/11")
#: Address space of the plan: subnets and transit links.
PLAN_NETS = (ipaddress.ip_network("192.168.0.0/16"), ipaddress.ip_network("10.0.0.0/16"))
#: ``ip rule`` preferences of a fresh namespace.
DEFAULT_RULE_PREFS = frozenset({"0", "32766", "32767"})

_PING_HEADER = "*** Ping: testing ping reachability"


# ---------------------------------------------------------------- the plan (first observation)
@dataclass
class Machine:
    """What the plan says about one machine (names without the episode prefix)."""

    name: str
    interfaces: dict[str, str] = field(default_factory=dict)  # full interface name -> CIDR
    routes: list[str] = field(default_factory=list)  # gateway routes, ``ip route`` arguments
    subnet: int | None = None  # hosts: their subnet number


@dataclass
class Plan:
    """The intended network of the first observation."""

    prefix: str
    machines: dict[str, Machine]
    owner: dict[int, str]  # subnet -> router name

    def is_router(self, name: str) -> bool:
        return name.startswith("r")

    def hosts_of(self, subnet: int) -> list[str]:
        return sorted(
            (m.name for m in self.machines.values() if m.subnet == subnet),
            key=lambda n: int(n[1:]),
        )

    def path(self, a: str, b: str) -> set[str]:
        """Routers a packet from ``a`` to ``b`` crosses (its endpoints included if routers)."""
        routers: set[str] = set()
        for end in (a, b):
            machine = self.machines.get(end)
            if machine is None:
                continue
            if self.is_router(end):
                routers.add(end)
            elif machine.subnet is not None:
                routers.add(self.owner.get(machine.subnet, "r0"))
        if len(routers) > 1:
            routers.add("r0")
        return routers


_ROUTER_RE = re.compile(r"^Router (\S+):$")
_ROUTER_INTF_RE = re.compile(r"^\s+(\S+) (\d+\.\d+\.\d+\.\d+/\d+) -> (switch|router) (\S+)")
_ROUTE_RE = re.compile(r"^\s+route: (.+)$")
_HOST_RE = re.compile(r"^\s+(\S+): (\S+) (\d+\.\d+\.(\d+)\.\d+/\d+) on (\S+)$")


def read_plan(first_observation: str) -> Plan:
    """The plan printed under "Topology and intended addressing" (empty when absent)."""
    match = PREFIX_LINE_RE.search(first_observation)
    prefix = match.group(1) if match else ""
    machines: dict[str, Machine] = {}
    owner: dict[int, str] = {}
    current: Machine | None = None
    for line in first_observation.splitlines():
        if (m := _ROUTER_RE.match(line)) is not None:
            name = m.group(1).removeprefix(prefix)
            current = machines.setdefault(name, Machine(name))
        elif current is not None and (m := _ROUTER_INTF_RE.match(line)) is not None:
            current.interfaces[m.group(1)] = m.group(2)
            if m.group(3) == "switch":
                owner[int(m.group(2).split(".")[2])] = current.name
        elif current is not None and (m := _ROUTE_RE.match(line)) is not None:
            current.routes.append(m.group(1))
        elif (m := _HOST_RE.match(line)) is not None:
            name = m.group(1).removeprefix(prefix)
            machines[name] = Machine(name, {m.group(2): m.group(3)}, [], int(m.group(4)))
            current = None
    for machine in machines.values():
        if machine.subnet is not None:
            gateway = f"192.168.{machine.subnet}.1"
            intf = next(iter(machine.interfaces))
            machine.routes = [f"default via {gateway} dev {intf}"]
    return Plan(prefix, machines, owner)


# ---------------------------------------------------------------------- pingall observations
def read_pingall(text: str, prefix: str) -> set[tuple[str, str]] | None:
    """Failing ``(src, dst)`` pairs (unprefixed) of the last pingall in ``text``, or None."""
    if _PING_HEADER not in text:
        return None
    block = text.rsplit(_PING_HEADER, 1)[1]
    rows: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("***"):
            break
        if " -> " in line:
            src, cells = line.split(" -> ", 1)
            rows.append((src.strip().removeprefix(prefix), cells.split()))
    nodes = [src for src, _ in rows]
    failing: set[tuple[str, str]] = set()
    for src, row in rows:
        others = [n for n in nodes if n != src]
        for dst, cell in zip(others, row, strict=False):
            if cell == "X":
                failing.add((src, dst))
    return failing


# --------------------------------------------------------------------------- the history
@dataclass
class Step:
    machine: str | None
    command: str | None
    output: str


def _history(history: list[dict[str, Any]], prefix: str) -> list[Step]:
    steps: list[Step] = []
    for i, message in enumerate(history):
        if message.get("role") != "assistant":
            continue
        parsed = parse_reply(message.get("content"))
        observation = ""
        if i + 1 < len(history) and history[i + 1].get("role") == "user":
            observation = str(history[i + 1].get("content") or "")
        output = ""
        if OUTPUT_MARKER in observation:
            output = observation.split(OUTPUT_MARKER, 1)[1].split(PINGALL_MARKER, 1)[0]
        machine = parsed.machine.removeprefix(prefix) if parsed.machine else None
        steps.append(Step(machine, parsed.command, output))
    return steps


# ------------------------------------------------------------------------- diffs -> repairs
def _in_plan_space(destination: str) -> bool:
    if destination == "default":
        return True
    try:
        network = ipaddress.ip_network(destination, strict=False)
    except ValueError:
        return False
    if network.overlaps(DISTRACTOR_NET):
        return False
    return any(network.overlaps(space) for space in PLAN_NETS)


def _routes_through(machine: Machine, interface: str) -> list[str]:
    return [f"ip route replace {r}" for r in machine.routes if r.split(" dev ")[-1] == interface]


def fixes_for_addresses(machine: Machine, output: str) -> list[str]:
    """Repairs for what ``ip addr show`` on ``machine`` shows against the plan."""
    fixes: list[str] = []
    for block in re.split(r"^\d+: ", output, flags=re.M):
        header = re.match(r"([^:@\s]+)(?:@\S+)?: <([^>]*)> mtu (\d+)", block)
        if not header or header.group(1) not in machine.interfaces:
            continue
        name, flags, mtu = header.group(1), header.group(2).split(","), int(header.group(3))
        planned = machine.interfaces[name]
        lost_routes = False
        if "UP" not in flags:
            fixes.append(f"ip link set {name} up")
            lost_routes = True
        if mtu < 1500:
            fixes.append(f"ip link set {name} mtu 1500")
        if "NOARP" in flags:
            fixes.append(f"ip link set {name} arp on")
        inet = re.findall(r"^\s+inet (\S+)", block, flags=re.M)
        if planned not in inet:
            fixes.append(f"ip addr add {planned} brd + dev {name}")
            lost_routes = True
        wrong = [address for address in inet if address != planned]
        fixes += [f"ip addr del {address} dev {name}" for address in wrong]
        if lost_routes or wrong:
            fixes += _routes_through(machine, name)
    return fixes


def _parse_route(line: str) -> tuple[str, dict[str, str], str]:
    """(destination, fields, route type) of one ``ip route`` line."""
    tokens = line.split()
    kind = "unicast"
    if tokens and tokens[0] in ("blackhole", "unreachable", "prohibit", "throw"):
        kind = tokens.pop(0)
    destination = tokens[0] if tokens else ""
    fields = dict(zip(tokens[1::2], tokens[2::2], strict=False))
    return destination, fields, kind


def fixes_for_routes(machine: Machine, output: str) -> list[str]:
    """Repairs for what ``ip route show`` on ``machine`` shows against the plan."""
    planned: dict[str, tuple[str | None, str]] = {}  # destination -> (via, dev)
    for intf, cidr in machine.interfaces.items():
        planned[str(ipaddress.ip_network(cidr, strict=False))] = (None, intf)
    for route in machine.routes:
        destination, fields, _ = _parse_route(route)
        planned[destination] = (fields.get("via"), fields.get("dev", ""))
    present: set[str] = set()
    deletes: list[str] = []
    connected: set[str] = set()
    for line in output.splitlines():
        line = line.strip()
        if not line:
            continue
        destination, fields, kind = _parse_route(line)
        if not _in_plan_space(destination):
            continue
        want = planned.get(destination)
        good = (
            kind == "unicast"
            and want is not None
            and fields.get("via") == want[0]
            and fields.get("dev") == want[1]
            and "metric" not in fields
        )
        if good:
            present.add(destination)
            if want is not None and want[0] is None:
                connected.add(want[1])
            continue
        if fields.get("proto") == "kernel":
            continue  # made for a wrong address: goes with it (fixes_for_addresses)
        if want is not None and kind == "unicast" and "metric" in fields:
            continue  # a worse-metric duplicate carries nothing once the plan's route is back
        selector = [destination] if kind == "unicast" else [kind, destination]
        for key in ("via", "dev", "metric"):
            if key in fields:
                selector += [key, fields[key]]
        if want is not None and kind == "unicast":
            continue  # replaced below in one step
        deletes.append("ip route del " + " ".join(selector))
    # a connected route the kernel made for an address the plan does not have: the address is
    # wrong, which the address repair fixes (with the routes through the interface)
    kernel_anomaly = set()
    routed = set()
    for line in output.splitlines():
        destination, fields, kind = _parse_route(line.strip())
        routed.add(destination)
        dev = fields.get("dev", "")
        if fields.get("proto") == "kernel" and planned.get(destination) != (None, dev):
            kernel_anomaly.add(dev)
    adds: list[str] = []
    for destination, (via, dev) in planned.items():
        if destination in present:
            continue
        if via is None:
            if destination not in routed or dev in kernel_anomaly:
                continue  # the address is missing or wrong: fixes_for_addresses repairs it
            source = machine.interfaces[dev].split("/")[0]
            adds.append(f"ip route replace {destination} dev {dev} proto kernel scope link "
                        f"src {source}")
        elif dev in connected:
            # (through a broken interface the address repair re-adds it)
            adds.append(f"ip route replace {destination} via {via} dev {dev}")
    return adds + deletes


def _is_distractor_rule(rule: str) -> bool:
    for match in re.finditer(r"-[sd] (\d+\.\d+\.\d+\.\d+/\d+)", rule):
        if ipaddress.ip_network(match.group(1), strict=False).overlaps(DISTRACTOR_NET):
            return True
    return False


def fixes_for_iptables(output: str) -> list[str]:
    """Repairs for ``iptables-save`` (:func:`apps.route.reference.fix_iptables`), the
    distractors' rules for 10.160.0.0/11 left alone."""
    return [fix for fix in fix_iptables(output) if not _is_distractor_rule(fix)]


def fixes_for_rules(output: str) -> list[str]:
    """Repairs for ``ip rule show``: rules the catalogue adds (not the three defaults, not the
    distractors' ``from 10.160.0.0/11`` rules) are deleted."""
    fixes: list[str] = []
    for line in output.splitlines():
        match = re.match(r"^(\d+):\s+(.*)$", line.strip())
        if not match or match.group(1) in DEFAULT_RULE_PREFS:
            continue
        source = re.search(r"from (\S+)", match.group(2))
        if source and source.group(1) != "all" and not _in_plan_space(source.group(1)):
            continue
        fixes.append(f"ip rule del pref {match.group(1)}")
    return fixes


def fixes_for_netconf(machine: Machine, output: str) -> list[str]:
    """Repairs for ``ip netconf show``: forwarding back on (a router's interfaces)."""
    off = re.findall(r"^(?:ipv4|inet) (\S+) forwarding off", output, flags=re.M)
    if not off:
        return []
    if "all" in off:
        return ["sysctl -w net.ipv4.ip_forward=1"]
    return [f"sysctl -w net.ipv4.conf.{intf}.forwarding=1" for intf in off
            if intf in machine.interfaces]


def fixes_for_qdiscs(machine: Machine, output: str) -> list[str]:
    """Repairs for ``tc qdisc show``: a shaper on a plan interface is removed."""
    return fix_qdiscs(output, machine.interfaces)


def fixes_for(read: str, machine: Machine, output: str) -> list[str]:
    """The repairs a read's output calls for on ``machine``."""
    if read == ADDR:
        return fixes_for_addresses(machine, output)
    if read == ROUTE:
        return fixes_for_routes(machine, output)
    if read == IPTABLES:
        return fixes_for_iptables(output)
    if read == RULE:
        return fixes_for_rules(output)
    if read == NETCONF:
        return fixes_for_netconf(machine, output)
    return fixes_for_qdiscs(machine, output)


# --------------------------------------------------------------------------- localisation
def suspects(plan: Plan, failing: set[tuple[str, str]]) -> list[tuple[str, tuple[str, ...]]]:
    """Machines to inspect, most suspect first, each with its reads in order."""
    def lost_with(node: str) -> set[str]:
        return {b for a, b in failing if a == node} | {a for a, b in failing if b == node}

    found: list[tuple[float, str, tuple[str, ...]]] = []
    reads: tuple[str, ...]
    explained: set[str] = set()
    for machine in plan.machines.values():
        if machine.subnet is None:
            continue
        mates = [h for h in plan.hosts_of(machine.subnet) if h != machine.name]
        mine = lost_with(machine.name)
        if not mine:
            continue
        counts = sorted(len(lost_with(m)) for m in mates)
        typical = counts[len(counts) // 2] if counts else 0
        score = len(mine) - typical
        if score <= 0:
            continue
        explained.add(machine.name)
        outside = mine - set(mates)
        lost_mates = mine & set(mates)
        outside_subnets = {plan.machines[n].subnet for n in outside if n in plan.machines}
        if mates and lost_mates == set(mates):
            reads = (ADDR, QDISC, ROUTE, IPTABLES)
        elif len(outside_subnets) <= 1 and not lost_mates:
            reads = (IPTABLES, ROUTE, ADDR, QDISC)
        else:
            reads = (ROUTE, ADDR, IPTABLES, QDISC)
        found.append((1000.0 + score, machine.name, reads))
    through: dict[str, list[int]] = {}
    nodes = set(plan.machines)
    for a in nodes:
        for b in nodes:
            if a == b or a in explained or b in explained:
                continue
            bad = (a, b) in failing
            for router in plan.path(a, b):
                tally = through.setdefault(router, [0, 0])
                tally[0 if bad else 1] += 1
    for router, (bad_count, good_count) in through.items():
        if not bad_count:
            continue
        own_hosts = [h for s, r in plan.owner.items() if r == router for h in plan.hosts_of(s)]
        cut_off = any((h, router) in failing for h in own_hosts)
        reads = ((ADDR, QDISC, IPTABLES, ROUTE, RULE, NETCONF) if cut_off
                 else (IPTABLES, NETCONF, RULE, ROUTE, ADDR, QDISC))
        found.append((bad_count / (bad_count + good_count) + bad_count / 1e6, router, reads))
    found.sort(key=lambda item: -item[0])
    return [(name, reads) for _score, name, reads in found]


# ------------------------------------------------------------------------------ the agent
def scripted_reply(history: list[dict[str, Any]]) -> str:
    """The next reply of the scripted agent (see the module docstring); never raises."""
    first = next((str(m.get("content") or "") for m in history if m.get("role") == "user"), "")
    plan = read_plan(first)
    initial = read_pingall(first.split("Initial pingall:", 1)[-1], plan.prefix)
    if initial is not None and not initial and len(history) <= 1:
        return HEALTHY_REPLY
    if not plan.machines:
        return DONE_REPLY
    steps = _history(history, plan.prefix)
    current = initial or set()
    for message in history[1:]:
        if message.get("role") == "user":
            seen = read_pingall(str(message.get("content") or ""), plan.prefix)
            if seen is not None:
                current = seen
    if not current:
        return DONE_REPLY
    read_done: set[tuple[str, str]] = set()
    for position, step in enumerate(steps):
        if step.machine is None or step.command is None:
            continue
        machine = plan.machines.get(step.machine)
        if machine is None:
            continue
        if step.command in (ADDR, ROUTE, IPTABLES, RULE, NETCONF, QDISC):
            read_done.add((step.machine, step.command))
            fixes = fixes_for(step.command, machine, step.output)
            sent_after = {(s.machine, s.command) for s in steps[position + 1:]}
            for fix in fixes:
                if (step.machine, fix) not in sent_after:
                    return command_reply(plan.prefix + step.machine, fix)
    for name, reads in suspects(plan, current):
        for read in reads:
            if (name, read) not in read_done:
                return command_reply(plan.prefix + name, read)
    return DONE_REPLY
