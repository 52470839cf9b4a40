"""Fault catalogue of the routing app: paper Appendix C.2 and Table 5, on any node.

Five fault categories (the paper's), each injectable in several ways with ``ip``, ``iptables``,
``sysctl``, ``ifconfig`` and ``tc``, on any router or host and on any interface of it.
``kinds`` says where a method applies (``R`` routers, ``H`` hosts):

=====  ====================================================================  =====
label  methods                                                               kinds
=====  ====================================================================  =====
DR     1 ``sysctl net.ipv4.ip_forward=0``; 2 ``iptables -P FORWARD DROP``;   R
       3 ``ip rule add iif <if> prohibit``; 4 ``iptables -A FORWARD -s
       <subnet> -j DROP``; 5 ``sysctl net.ipv4.conf.<if>.forwarding=0``
       (forwarding off for traffic entering one interface); 6 ``iptables -I
       FORWARD -i <if> -j DROP``; 7 ``ip rule add iif <if> lookup <table>`` of a
       table whose only route is ``unreachable default``
DI     1 ``ifconfig <if> down``; 2 ``ip link set <if> down``; 3 MTU 68;      R H
       4 ``ip link set <if> arp off`` (no address resolution on the link)
RI     1 ``ip addr flush``; 2 flush + a random ``10.x.y.z/24``; 3 flush +    R H
       its own address with a mask that cuts the gateway or the hosts off
       (/30, /31, /32); 4 flush + another subnet's address (a router: the
       router address of another subnet it serves)
DT     1 iptables INPUT ``-s`` / OUTPUT ``-d`` DROP for a subnet; 2 the same  R H
       with REJECT; 3 the same for ICMP only; 4 delay on an interface
       (token-bucket shaper, see below)
WR     routers: a route is deleted and replaced by 1 a route out of another  R H
       interface; 2 a route via an unreachable gateway (``onlink``); 3 a
       route out of another interface with metric 5000-20000; 4 a route via
       a wrong next hop (a host of another subnet, or back to the peer
       router: a loop); 5 a more specific /27 out of a wrong interface;
       6 a more specific /27 blackhole. Hosts: 7 the default route via
       another host; 8 the default route via an unreachable gateway;
       9 the default route deleted; 10 a route for another subnet via
       another host
=====  ====================================================================  =====

The kernel drops gateway routes through an interface that goes down or loses its address, so
the repairs of DI 1-2 and RI re-add the plan's routes through that interface
(:meth:`RouteTopology.routes_through`).

Substitution for DT method 4: the paper adds ``tc netem delay 1000-5000ms``; ``sch_netem`` is not
built into these kernels. We keep the observable effect (packets through the interface arrive
seconds late, so pingall times out on them while traffic still flows) with a token-bucket
shaper that is built in: ``tc qdisc add dev <if> root tbf rate <R>bit burst 128 latency 30s``
with R = 784 000 / delay_ms bit/s, i.e. one 98-byte echo frame per ``delay_ms`` milliseconds.

Operands are chosen so that every fault really breaks pingall: RI method 3 uses only masks
that cut the interface off its peers; WR method 2 adds ``onlink`` (without it the kernel refuses
the unreachable gateway). In a two-fault query (levels 2-3) the faults sit on different
machines, so neither fault's injection or repair depends on the other. Repairs are applied in
reverse order of injection.

Each query also carries distractors, harmless configuration a correct fix leaves alone
(:mod:`apps.route.distractors`).

Each (label, method) is one row of :data:`FAULT_KINDS`: its name, the machine kinds and a small
maker that draws the operands from the query's generator and writes the commands;
:func:`make_fault` looks the row up and calls its maker.

The levels, topology shapes and the seeded draw of each query's faults and distractors are
:mod:`apps.route.queries`'s.

Commands are stored with the placeholder ``{p}`` for the episode's node-name prefix; machines
by their unprefixed names (``r0``, ``h3``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from apps.route.topology import RouteTopology

#: Label -> category name (paper Table 5).
FAULT_TYPES: dict[str, str] = {
    "DR": "disable_routing",
    "DI": "disable_interface",
    "RI": "remove_ip",
    "DT": "drop_traffic_to_from_subnet",
    "WR": "wrong_routing_table",
}

#: Placeholder for the episode prefix inside stored commands.
PREFIX_PLACEHOLDER = "{p}"
#: Frame size of a default ping echo (14 + 20 + 8 + 56 bytes), for the DT-4 rate.
ECHO_FRAME_BYTES = 98


def _name(node: str) -> str:
    """Unprefixed machine name -> its prefixed placeholder form."""
    return f"{PREFIX_PLACEHOLDER}{node}"


def _kind(machine: str) -> str:
    return "R" if machine.startswith("r") else "H"


def machine_interfaces(topo: RouteTopology, machine: str) -> list[tuple[str, str]]:
    """``[(interface, cidr)]`` of an unprefixed machine name (``r0``, ``h3``) in ``topo``."""
    return topo.interfaces(_name(machine))


def _subnet_of_cidr(cidr: str) -> int | None:
    parts = cidr.split(".")
    return int(parts[2]) if cidr.startswith("192.168.") else None


def _egress(topo: RouteTopology, machine: str, subnet: int) -> str:
    """Interface through which ``machine`` (a router) reaches ``subnet`` in the plan."""
    index = int(machine[1:])
    if topo.owner(subnet) == index:
        return topo.router_intf(subnet)
    if index == 0:
        return topo.transit_intfs(topo.owner(subnet))[0]
    return topo.transit_intfs(index)[1]


def _plan_route(topo: RouteTopology, machine: str, subnet: int) -> tuple[str, str] | None:
    """(delete selector, restore arguments) of ``machine``'s explicit route for ``subnet``."""
    index = int(machine[1:])
    cidr = topo.subnet_cidr(subnet)
    if topo.owner(subnet) == index:
        intf = topo.router_intf(subnet)
        return (
            f"{cidr} dev {intf}",
            f"{cidr} dev {intf} proto kernel scope link src {topo.router_ip(subnet)}",
        )
    if index == 0:
        t = topo.owner(subnet)
        route = f"{cidr} via {topo.transit_ips(t)[1]} dev {topo.transit_intfs(t)[0]}"
        return route, route
    return None


# fault makers -------------------------------------------------------------------------------
@dataclass(frozen=True)
class FaultSite:
    """Where one fault goes, as a maker sees it.

    Attributes:
        machine: unprefixed machine name (``r0``, ``h3``).
        topo: the query's topology with prefix ``{p}``.
        rng: the query's seeded generator; a maker draws its operands from it, in a fixed
            order (the generated queries depend on that order).
        interface: the interface of ``machine`` drawn for the fault (every fault draws one
            first, whether its method uses it or not).
        cidr: the planned address of ``interface`` (``192.168.k.1/24``, ``10.0.t.1/30``).
    """

    machine: str
    topo: RouteTopology
    rng: random.Random
    interface: str
    cidr: str

    @property
    def node(self) -> str:
        """The machine's node name with the prefix placeholder (``{p}r0``)."""
        return _name(self.machine)

    @property
    def subnets(self) -> list[int]:
        """The host subnets of the topology, ``1 .. S``."""
        return list(range(1, self.topo.num_switches + 1))

    def routes_through_interface(self) -> list[str]:
        """``ip route add`` commands of the plan's routes through :attr:`interface` (the kernel
        drops them when the interface goes down or loses its address)."""
        return [f"ip route add {r}" for r in self.topo.routes_through(self.node, self.interface)]


class Made(NamedTuple):
    """What a maker returns: the fault's ``params`` and its injection and repair commands."""

    params: dict[str, Any]
    inject: list[str]
    repair: list[str]


#: A fault maker: draws the operands of one method at a site and writes its commands.
Maker = Callable[[FaultSite], Made]


def _fixed(inject: list[str], repair: list[str]) -> Maker:
    """Maker of a method without operands."""

    def make(site: FaultSite) -> Made:
        return Made({}, list(inject), list(repair))

    return make


def _on_interface(
    inject: list[str], repair: list[str], *, reroute: bool = False, **params: Any
) -> Maker:
    """Maker of a method on the drawn interface: ``{interface}`` in the commands is filled in;
    ``reroute`` appends the plan's routes through the interface to the repair."""

    def make(site: FaultSite) -> Made:
        fill = {"interface": site.interface}
        routes = site.routes_through_interface() if reroute else []
        return Made(
            {**fill, **params},
            [command.format(**fill) for command in inject],
            [*(command.format(**fill) for command in repair), *routes],
        )

    return make


def _rule_prohibit_iif(site: FaultSite) -> Made:
    pref = site.rng.randint(1000, 30000)
    intf = site.interface
    return Made(
        {"interface": intf, "pref": pref},
        [f"ip rule add iif {intf} prohibit pref {pref}"],
        [f"ip rule del pref {pref}"],
    )


def _forward_drop_subnet(site: FaultSite) -> Made:
    k = site.rng.choice(site.subnets)
    return Made(
        {"subnet": k},
        [f"iptables -A FORWARD -s 192.168.{k}.0/24 -j DROP"],
        [f"iptables -D FORWARD -s 192.168.{k}.0/24 -j DROP"],
    )


def _rule_lookup_unreachable_table(site: FaultSite) -> Made:
    # traffic entering <if> is routed by a table whose only route is unreachable
    pref, table = site.rng.randint(1000, 30000), site.rng.randint(100, 250)
    intf = site.interface
    return Made(
        {"interface": intf, "pref": pref, "table": table},
        [
            f"ip route add unreachable default table {table}",
            f"ip rule add iif {intf} lookup {table} pref {pref}",
        ],
        [f"ip rule del pref {pref}", f"ip route del unreachable default table {table}"],
    )


#: Draws the wrong address an RI method adds after the flush (None: none), given the site, the
#: planned address and prefix length, and the params to extend.
WrongAddress = Callable[[FaultSite, str, str, dict[str, Any]], str | None]


def _no_address(site: FaultSite, address: str, length: str, params: dict[str, Any]) -> None:
    return None


def _random_address(site: FaultSite, address: str, length: str, params: dict[str, Any]) -> str:
    rng = site.rng
    return f"10.{rng.randint(100, 250)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}/24"


def _wrong_mask(site: FaultSite, address: str, length: str, params: dict[str, Any]) -> str:
    masks = (31, 32) if length == "30" else (30, 31, 32)
    mask = site.rng.choice(masks)
    params["mask"] = mask
    return f"{address}/{mask}"


def _other_subnet_address(
    site: FaultSite, address: str, length: str, params: dict[str, Any]
) -> str:
    # another subnet's address. A router takes the router address of another subnet it serves
    # itself (the paper's duplicate); otherwise an address no node pings (.200-.250), because
    # owning another node's probe address would make that pair look reachable and its repair
    # look like a loss.
    own = _subnet_of_cidr(site.cidr)
    mine = []
    if _kind(site.machine) == "R":
        mine = [k for k in site.topo.router_subnets(int(site.machine[1:])) if k != own]
    if mine:
        j = site.rng.choice(mine)
        wrong = f"192.168.{j}.1/24"
    else:
        j = site.rng.choice([k for k in site.subnets if k != own])
        wrong = f"192.168.{j}.{site.rng.randint(200, 250)}/24"
    params["duplicate_of"] = j
    return wrong


def _remove_ip(wrong_address: WrongAddress) -> Maker:
    """Maker of an RI method: flush the interface, then maybe add a wrong address."""

    def make(site: FaultSite) -> Made:
        intf, cidr = site.interface, site.cidr
        params: dict[str, Any] = {"interface": intf}
        address, length = cidr.split("/")
        inject = [f"ip addr flush dev {intf}"]
        # The repair adds the right address before removing the wrong one: a wrong address
        # can still carry some traffic (a router's own address with /31 answers pings), so
        # removing it first would be a step that loses reachable pairs.
        repair = [f"ip addr add {cidr} brd + dev {intf}"]
        routes = site.routes_through_interface()
        wrong = wrong_address(site, address, length, params)
        if wrong is not None:
            params["address"] = wrong
            inject.append(f"ip addr add {wrong} dev {intf}")
            repair.append(f"ip addr del {wrong} dev {intf}")
        # routes last: the wrong address's connected route may hold the same prefix
        return Made(params, inject, [*repair, *routes])

    return make


def _filter_subnet(target: str, proto: str = "") -> Maker:
    """Maker of DT 1-3: INPUT from and OUTPUT to a drawn subnet go to ``target``."""

    def make(site: FaultSite) -> Made:
        k = site.rng.choice(site.subnets)
        sub = f"192.168.{k}.0/24"
        rules = [f"INPUT -s {sub}{proto} -j {target}", f"OUTPUT -d {sub}{proto} -j {target}"]
        return Made(
            {"subnet": k},
            [f"iptables -A {rule}" for rule in rules],
            [f"iptables -D {rule}" for rule in rules],
        )

    return make


def _delay(site: FaultSite) -> Made:
    delay_ms = site.rng.randint(1000, 5000)
    rate_bit = math.ceil(ECHO_FRAME_BYTES * 8 * 1000 / delay_ms)
    intf = site.interface
    return Made(
        {"interface": intf, "delay_ms": delay_ms, "rate_bit": rate_bit},
        [f"tc qdisc add dev {intf} root tbf rate {rate_bit}bit burst 128 latency 30s"],
        [f"tc qdisc del dev {intf} root"],
    )


class RouteChoice(NamedTuple):
    """The route a router's WR fault corrupts: the subnet, its CIDR, the wrong interface
    drawn for it and the params so far (``subnet``, ``wrong_interface``)."""

    subnet: int
    cidr: str
    interface: str
    params: dict[str, Any]


#: Writes the wrong route of a router's WR method (``ip route`` arguments) for a choice.
WrongRoute = Callable[[FaultSite, RouteChoice], str]


def _choose_route(site: FaultSite, *, planned_only: bool) -> RouteChoice:
    """Draw the subnet whose route is corrupted (among those with an explicit plan route on
    the router when ``planned_only``), then an interface other than the plan's egress."""
    topo, machine = site.topo, site.machine
    subnets = site.subnets
    if planned_only:
        candidates = [k for k in subnets if _plan_route(topo, machine, k) is not None]
    else:
        candidates = subnets
    a = site.rng.choice(candidates)
    right = _egress(topo, machine, a)
    others = [i for i, _c in machine_interfaces(topo, machine) if i != right]
    other = site.rng.choice(others)
    return RouteChoice(a, topo.subnet_cidr(a), other, {"subnet": a, "wrong_interface": other})


def _replaced_route(wrong_route: WrongRoute) -> Maker:
    """Maker of WR 1-4: the plan's route for a subnet is deleted and a wrong one added."""

    def make(site: FaultSite) -> Made:
        choice = _choose_route(site, planned_only=True)
        wrong = wrong_route(site, choice)
        choice.params["wrong_route"] = wrong
        selector, restore = _plan_route(site.topo, site.machine, choice.subnet) or ("", "")
        return Made(
            choice.params,
            [f"ip route del {selector}", f"ip route add {wrong}"],
            [f"ip route del {wrong}", f"ip route add {restore}"],
        )

    return make


def _added_route(wrong_route: WrongRoute) -> Maker:
    """Maker of WR 5-6: a wrong route more specific than the plan's is added beside it."""

    def make(site: FaultSite) -> Made:
        choice = _choose_route(site, planned_only=False)
        wrong = wrong_route(site, choice)
        choice.params["wrong_route"] = wrong
        return Made(choice.params, [f"ip route add {wrong}"], [f"ip route del {wrong}"])

    return make


def _metric_route(site: FaultSite, choice: RouteChoice) -> str:
    metric = site.rng.randint(5000, 20000)
    choice.params["metric"] = metric
    return f"{choice.cidr} dev {choice.interface} metric {metric}"


def _wrong_next_hop(site: FaultSite, choice: RouteChoice) -> str:
    # a host of another subnet the router serves, else back to the peer router (a loop)
    topo, rng = site.topo, site.rng
    index = int(site.machine[1:])
    mine = [k for k in topo.router_subnets(index) if k != choice.subnet]
    if mine:
        b = rng.choice(mine)
        gateway = topo.host_ip(rng.choice(topo.hosts_of(b)))
    elif index == 0:
        gateway = topo.transit_ips(rng.randint(1, topo.num_routers - 1))[1]
    else:
        gateway = topo.transit_ips(index)[0]
    return f"{choice.cidr} via {gateway}"


def _host_gateway(site: FaultSite) -> tuple[int, str, list[int]]:
    """(subnet, planned gateway, the other hosts of the subnet) of a host."""
    number = int(site.machine[1:])
    subnet = site.topo.host_subnet(number)
    neighbours = [n for n in site.topo.hosts_of(subnet) if n != number]
    return subnet, site.topo.router_ip(subnet), neighbours


def _default_via_host(site: FaultSite) -> Made:
    _subnet, gateway, neighbours = _host_gateway(site)
    wrong_gw = site.topo.host_ip(site.rng.choice(neighbours))
    return Made(
        {"gateway": wrong_gw},
        [f"ip route replace default via {wrong_gw}"],
        [f"ip route replace default via {gateway}"],
    )


def _default_unreachable(site: FaultSite) -> Made:
    _subnet, gateway, _neighbours = _host_gateway(site)
    intf = site.topo.intf(site.node, 0)
    return Made(
        {"gateway": "10.255.255.254"},
        [f"ip route replace default via 10.255.255.254 dev {intf} onlink"],
        [f"ip route replace default via {gateway}"],
    )


def _default_deleted(site: FaultSite) -> Made:
    _subnet, gateway, _neighbours = _host_gateway(site)
    return Made(
        {}, [f"ip route del default via {gateway}"], [f"ip route add default via {gateway}"]
    )


def _subnet_via_host(site: FaultSite) -> Made:
    subnet, _gateway, neighbours = _host_gateway(site)
    b = site.rng.choice([k for k in site.subnets if k != subnet])
    wrong_gw = site.topo.host_ip(site.rng.choice(neighbours))
    wrong = f"{site.topo.subnet_cidr(b)} via {wrong_gw}"
    return Made(
        {"subnet": b, "wrong_route": wrong}, [f"ip route add {wrong}"], [f"ip route del {wrong}"]
    )


@dataclass(frozen=True)
class FaultKind:
    """One row of the fault catalogue (paper Appendix C.2, Table 5; see the module docstring).

    Attributes:
        label: the paper's label (``DR``, ``DI``, ``RI``, ``DT``, ``WR``).
        method: 1-based method number within the label.
        name: short name of the method (``ip_forward_off``), stored in the ground truth.
        kinds: machine kinds the method applies to (``R`` routers, ``H`` hosts).
        make: the maker that draws the operands and writes the commands.
    """

    label: str
    method: int
    name: str
    kinds: str
    make: Maker

    @property
    def type(self) -> str:
        """The label's category name (:data:`FAULT_TYPES`)."""
        return FAULT_TYPES[self.label]


_KINDS = (
    FaultKind("DR", 1, "ip_forward_off", "R",
              _fixed(["sysctl -w net.ipv4.ip_forward=0"], ["sysctl -w net.ipv4.ip_forward=1"])),
    FaultKind("DR", 2, "forward_policy_drop", "R",
              _fixed(["iptables -P FORWARD DROP"], ["iptables -P FORWARD ACCEPT"])),
    FaultKind("DR", 3, "rule_prohibit_iif", "R", _rule_prohibit_iif),
    FaultKind("DR", 4, "forward_drop_subnet", "R", _forward_drop_subnet),
    FaultKind("DR", 5, "interface_forwarding_off", "R",
              _on_interface(["sysctl -w net.ipv4.conf.{interface}.forwarding=0"],
                            ["sysctl -w net.ipv4.conf.{interface}.forwarding=1"])),
    FaultKind("DR", 6, "forward_drop_iif", "R",
              _on_interface(["iptables -I FORWARD -i {interface} -j DROP"],
                            ["iptables -D FORWARD -i {interface} -j DROP"])),
    FaultKind("DR", 7, "rule_lookup_unreachable_table", "R", _rule_lookup_unreachable_table),
    FaultKind("DI", 1, "ifconfig_down", "RH",
              _on_interface(["ifconfig {interface} down"], ["ifconfig {interface} up"],
                            reroute=True)),
    FaultKind("DI", 2, "link_down", "RH",
              _on_interface(["ip link set {interface} down"], ["ip link set {interface} up"],
                            reroute=True)),
    FaultKind("DI", 3, "mtu_68", "RH",
              _on_interface(["ip link set {interface} mtu 68"],
                            ["ip link set {interface} mtu 1500"], mtu=68)),
    FaultKind("DI", 4, "arp_off", "RH",
              _on_interface(["ip link set {interface} arp off"],
                            ["ip link set {interface} arp on"])),
    FaultKind("RI", 1, "flush", "RH", _remove_ip(_no_address)),
    FaultKind("RI", 2, "random_address", "RH", _remove_ip(_random_address)),
    FaultKind("RI", 3, "wrong_mask", "RH", _remove_ip(_wrong_mask)),
    FaultKind("RI", 4, "other_subnet_address", "RH", _remove_ip(_other_subnet_address)),
    FaultKind("DT", 1, "drop_subnet", "RH", _filter_subnet("DROP")),
    FaultKind("DT", 2, "reject_subnet", "RH", _filter_subnet("REJECT")),
    FaultKind("DT", 3, "drop_icmp_subnet", "RH", _filter_subnet("DROP", " -p icmp")),
    FaultKind("DT", 4, "delay", "RH", _delay),
    FaultKind("WR", 1, "other_interface", "R",
              _replaced_route(lambda site, c: f"{c.cidr} dev {c.interface}")),
    FaultKind("WR", 2, "unreachable_gateway", "R",
              _replaced_route(
                  lambda site, c: f"{c.cidr} via 10.255.255.254 dev {c.interface} onlink")),
    FaultKind("WR", 3, "other_interface_metric", "R", _replaced_route(_metric_route)),
    FaultKind("WR", 4, "wrong_next_hop", "R", _replaced_route(_wrong_next_hop)),
    FaultKind("WR", 5, "specific_other_interface", "R",
              _added_route(lambda site, c: f"192.168.{c.subnet}.96/27 dev {c.interface}")),
    FaultKind("WR", 6, "specific_blackhole", "R",
              _added_route(lambda site, c: f"blackhole 192.168.{c.subnet}.96/27")),
    FaultKind("WR", 7, "default_via_host", "H", _default_via_host),
    FaultKind("WR", 8, "default_unreachable", "H", _default_unreachable),
    FaultKind("WR", 9, "default_deleted", "H", _default_deleted),
    FaultKind("WR", 10, "subnet_via_host", "H", _subnet_via_host),
)  # fmt: skip
#: (label, method) -> its catalogue row.
FAULT_KINDS: dict[tuple[str, int], FaultKind] = {(k.label, k.method): k for k in _KINDS}
#: Label -> method number -> (short name, machine kinds it applies to).
METHODS: dict[str, dict[int, tuple[str, str]]] = {
    label: {k.method: (k.name, k.kinds) for k in _KINDS if k.label == label}
    for label in FAULT_TYPES
}
#: Label -> number of methods.
METHOD_COUNTS: dict[str, int] = {label: len(methods) for label, methods in METHODS.items()}


def make_fault(
    label: str,
    method: int,
    machine: str,
    topo: RouteTopology,
    rng: random.Random,
) -> dict[str, Any]:
    """Return one fault on ``machine``: label, type, method, machine, params, inject, repair.

    Args:
        label: ``DR``/``DI``/``RI``/``DT``/``WR``.
        method: 1-based method number (see :data:`FAULT_KINDS`).
        machine: unprefixed machine name (``r0``, ``h3``) of ``topo``; its kind must be one
            the method applies to.
        topo: the query's topology with prefix ``{p}``.
        rng: the query's seeded generator for the remaining operands.

    Returns a JSON dict ``{"label", "type", "method", "name", "machine", "params", "inject",
    "repair"}``; the commands run on ``machine`` and carry ``{p}`` for the prefix.

    Raises:
        ValueError: unknown label/method, or a machine the method does not apply to.
    """
    kind = FAULT_KINDS.get((label, method))
    if kind is None:
        raise ValueError(f"unknown fault {label} method {method}")
    if _kind(machine) not in kind.kinds:
        raise ValueError(f"{label}-{method} does not apply to {machine}")
    intf, cidr = rng.choice(machine_interfaces(topo, machine))
    made = kind.make(FaultSite(machine, topo, rng, intf, cidr))
    return {
        "label": label,
        "type": kind.type,
        "method": method,
        "name": kind.name,
        "machine": machine,
        "params": made.params,
        "inject": made.inject,
        "repair": made.repair,
    }


def with_prefix(command: str, prefix: str) -> str:
    """Substitute the episode prefix into a stored command."""
    return command.replace(PREFIX_PLACEHOLDER, prefix)
