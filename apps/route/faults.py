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

Distractors: each query also adds harmless configuration a correct fix leaves
alone -- unused routes and blackholes for unused prefixes, ACCEPT rules, DROP rules and
``prohibit`` rules for unused prefixes, and spare veth interfaces left down.

The levels, topology shapes and the seeded draw of each query's faults and distractors are
:mod:`apps.route.queries`'s.

Commands are stored with the placeholder ``{p}`` for the episode's node-name prefix; machines
by their unprefixed names (``r0``, ``h3``).
"""

from __future__ import annotations

import math
import random
from typing import Any

from apps.route.topology import RouteTopology

#: Label -> category name (paper Table 5).
FAULT_TYPES: dict[str, str] = {
    "DR": "disable_routing",
    "DI": "disable_interface",
    "RI": "remove_ip",
    "DT": "drop_traffic_to_from_subnet",
    "WR": "wrong_routing_table",
}

#: Label -> method number -> (short name, machine kinds it applies to).
METHODS: dict[str, dict[int, tuple[str, str]]] = {
    "DR": {
        1: ("ip_forward_off", "R"),
        2: ("forward_policy_drop", "R"),
        3: ("rule_prohibit_iif", "R"),
        4: ("forward_drop_subnet", "R"),
        5: ("interface_forwarding_off", "R"),
        6: ("forward_drop_iif", "R"),
        7: ("rule_lookup_unreachable_table", "R"),
    },
    "DI": {
        1: ("ifconfig_down", "RH"),
        2: ("link_down", "RH"),
        3: ("mtu_68", "RH"),
        4: ("arp_off", "RH"),
    },
    "RI": {
        1: ("flush", "RH"),
        2: ("random_address", "RH"),
        3: ("wrong_mask", "RH"),
        4: ("other_subnet_address", "RH"),
    },
    "DT": {
        1: ("drop_subnet", "RH"),
        2: ("reject_subnet", "RH"),
        3: ("drop_icmp_subnet", "RH"),
        4: ("delay", "RH"),
    },
    "WR": {
        1: ("other_interface", "R"),
        2: ("unreachable_gateway", "R"),
        3: ("other_interface_metric", "R"),
        4: ("wrong_next_hop", "R"),
        5: ("specific_other_interface", "R"),
        6: ("specific_blackhole", "R"),
        7: ("default_via_host", "H"),
        8: ("default_unreachable", "H"),
        9: ("default_deleted", "H"),
        10: ("subnet_via_host", "H"),
    },
}
#: Label -> number of methods.
METHOD_COUNTS: dict[str, int] = {label: len(methods) for label, methods in METHODS.items()}

#: Placeholder for the episode prefix inside stored commands.
PREFIX_PLACEHOLDER = "{p}"
#: Frame size of a default ping echo (14 + 20 + 8 + 56 bytes), for the DT-4 rate.
ECHO_FRAME_BYTES = 98


def _name(node: str) -> str:
    """Unprefixed machine name -> its prefixed placeholder form."""
    return f"{PREFIX_PLACEHOLDER}{node}"


def _kind(machine: str) -> str:
    return "R" if machine.startswith("r") else "H"


def _interfaces(topo: RouteTopology, machine: str) -> list[tuple[str, str]]:
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
        method: 1-based method number (see :data:`METHODS`).
        machine: unprefixed machine name (``r0``, ``h3``) of ``topo``; its kind must be one
            the method applies to.
        topo: the query's topology with prefix ``{p}``.
        rng: the query's seeded generator for the remaining operands.

    Returns a JSON dict ``{"label", "type", "method", "name", "machine", "params", "inject",
    "repair"}``; the commands run on ``machine`` and carry ``{p}`` for the prefix.

    Raises:
        ValueError: unknown label/method, or a machine the method does not apply to.
    """
    if label not in METHODS or method not in METHODS[label]:
        raise ValueError(f"unknown fault {label} method {method}")
    name, kinds = METHODS[label][method]
    if _kind(machine) not in kinds:
        raise ValueError(f"{label}-{method} does not apply to {machine}")
    node = _name(machine)
    interfaces = _interfaces(topo, machine)
    intf, cidr = rng.choice(interfaces)
    subnets = list(range(1, topo.num_switches + 1))
    params: dict[str, Any] = {}
    inject: list[str]
    repair: list[str]
    if label == "DR":
        if method == 1:
            inject = ["sysctl -w net.ipv4.ip_forward=0"]
            repair = ["sysctl -w net.ipv4.ip_forward=1"]
        elif method == 2:
            inject = ["iptables -P FORWARD DROP"]
            repair = ["iptables -P FORWARD ACCEPT"]
        elif method == 3:
            pref = rng.randint(1000, 30000)
            params = {"interface": intf, "pref": pref}
            inject = [f"ip rule add iif {intf} prohibit pref {pref}"]
            repair = [f"ip rule del pref {pref}"]
        elif method == 4:
            k = rng.choice(subnets)
            params = {"subnet": k}
            inject = [f"iptables -A FORWARD -s 192.168.{k}.0/24 -j DROP"]
            repair = [f"iptables -D FORWARD -s 192.168.{k}.0/24 -j DROP"]
        elif method == 5:
            params = {"interface": intf}
            inject = [f"sysctl -w net.ipv4.conf.{intf}.forwarding=0"]
            repair = [f"sysctl -w net.ipv4.conf.{intf}.forwarding=1"]
        elif method == 6:
            params = {"interface": intf}
            inject = [f"iptables -I FORWARD -i {intf} -j DROP"]
            repair = [f"iptables -D FORWARD -i {intf} -j DROP"]
        else:
            # traffic entering <if> is routed by a table whose only route is unreachable
            pref, table = rng.randint(1000, 30000), rng.randint(100, 250)
            params = {"interface": intf, "pref": pref, "table": table}
            inject = [
                f"ip route add unreachable default table {table}",
                f"ip rule add iif {intf} lookup {table} pref {pref}",
            ]
            repair = [f"ip rule del pref {pref}", f"ip route del unreachable default table {table}"]
    elif label == "DI":
        params = {"interface": intf}
        routes = [f"ip route add {r}" for r in topo.routes_through(node, intf)]
        if method == 1:
            inject = [f"ifconfig {intf} down"]
            repair = [f"ifconfig {intf} up", *routes]
        elif method == 2:
            inject = [f"ip link set {intf} down"]
            repair = [f"ip link set {intf} up", *routes]
        elif method == 3:
            params["mtu"] = 68
            inject = [f"ip link set {intf} mtu 68"]
            repair = [f"ip link set {intf} mtu 1500"]
        else:
            inject = [f"ip link set {intf} arp off"]
            repair = [f"ip link set {intf} arp on"]
    elif label == "RI":
        params = {"interface": intf}
        address, length = cidr.split("/")
        inject = [f"ip addr flush dev {intf}"]
        # The repair adds the right address before removing the wrong one: a wrong address
        # can still carry some traffic (a router's own address with /31 answers pings), so
        # removing it first would be a step that loses reachable pairs.
        repair = [f"ip addr add {cidr} brd + dev {intf}"]
        routes = [f"ip route add {r}" for r in topo.routes_through(node, intf)]
        wrong = None
        if method == 2:
            wrong = f"10.{rng.randint(100, 250)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}/24"
        elif method == 3:
            masks = (31, 32) if length == "30" else (30, 31, 32)
            mask = rng.choice(masks)
            params["mask"] = mask
            wrong = f"{address}/{mask}"
        elif method == 4:
            # another subnet's address. A router takes the router address of another subnet
            # it serves itself (the paper's duplicate); otherwise an address no node pings
            # (.200-.250), because owning another node's probe address would make that pair
            # look reachable and its repair look like a loss.
            own = _subnet_of_cidr(cidr)
            mine = []
            if _kind(machine) == "R":
                mine = [k for k in topo.router_subnets(int(machine[1:])) if k != own]
            if mine:
                j = rng.choice(mine)
                wrong = f"192.168.{j}.1/24"
            else:
                j = rng.choice([k for k in subnets if k != own])
                wrong = f"192.168.{j}.{rng.randint(200, 250)}/24"
            params["duplicate_of"] = j
        if wrong is not None:
            params["address"] = wrong
            inject.append(f"ip addr add {wrong} dev {intf}")
            repair.append(f"ip addr del {wrong} dev {intf}")
        # routes last: the wrong address's connected route may hold the same prefix
        repair += routes
    elif label == "DT":
        if method in (1, 2, 3):
            k = rng.choice(subnets)
            params = {"subnet": k}
            target = "DROP" if method in (1, 3) else "REJECT"
            proto = " -p icmp" if method == 3 else ""
            sub = f"192.168.{k}.0/24"
            rules = [f"INPUT -s {sub}{proto} -j {target}", f"OUTPUT -d {sub}{proto} -j {target}"]
            inject = [f"iptables -A {rule}" for rule in rules]
            repair = [f"iptables -D {rule}" for rule in rules]
        else:
            delay_ms = rng.randint(1000, 5000)
            rate_bit = math.ceil(ECHO_FRAME_BYTES * 8 * 1000 / delay_ms)
            params = {"interface": intf, "delay_ms": delay_ms, "rate_bit": rate_bit}
            inject = [f"tc qdisc add dev {intf} root tbf rate {rate_bit}bit burst 128 latency 30s"]
            repair = [f"tc qdisc del dev {intf} root"]
    elif method <= 6:  # WR on a router
        inject, repair, params = _wrong_route_router(method, machine, topo, rng)
    else:  # WR on a host
        inject, repair, params = _wrong_route_host(method, machine, topo, rng)
    return {
        "label": label,
        "type": FAULT_TYPES[label],
        "method": method,
        "name": name,
        "machine": machine,
        "params": params,
        "inject": inject,
        "repair": repair,
    }


def _wrong_route_router(
    method: int, machine: str, topo: RouteTopology, rng: random.Random
) -> tuple[list[str], list[str], dict[str, Any]]:
    index = int(machine[1:])
    subnets = list(range(1, topo.num_switches + 1))
    if method <= 4:
        candidates = [k for k in subnets if _plan_route(topo, machine, k) is not None]
    else:
        candidates = subnets
    a = rng.choice(candidates)
    cidr = topo.subnet_cidr(a)
    right = _egress(topo, machine, a)
    others = [i for i, _c in _interfaces(topo, machine) if i != right]
    other = rng.choice(others)
    params: dict[str, Any] = {"subnet": a, "wrong_interface": other}
    if method in (5, 6):
        specific = f"192.168.{a}.96/27"
        wrong = f"blackhole {specific}" if method == 6 else f"{specific} dev {other}"
        params["wrong_route"] = wrong
        return [f"ip route add {wrong}"], [f"ip route del {wrong}"], params
    if method == 1:
        wrong = f"{cidr} dev {other}"
    elif method == 2:
        wrong = f"{cidr} via 10.255.255.254 dev {other} onlink"
    elif method == 3:
        metric = rng.randint(5000, 20000)
        params["metric"] = metric
        wrong = f"{cidr} dev {other} metric {metric}"
    else:
        mine = [k for k in topo.router_subnets(index) if k != a]
        if mine:
            b = rng.choice(mine)
            gateway = topo.host_ip(rng.choice(topo.hosts_of(b)))
        elif index == 0:
            gateway = topo.transit_ips(rng.randint(1, topo.num_routers - 1))[1]
        else:
            gateway = topo.transit_ips(index)[0]
        wrong = f"{cidr} via {gateway}"
    params["wrong_route"] = wrong
    selector, restore = _plan_route(topo, machine, a) or ("", "")
    inject = [f"ip route del {selector}", f"ip route add {wrong}"]
    repair = [f"ip route del {wrong}", f"ip route add {restore}"]
    return inject, repair, params


def _wrong_route_host(
    method: int, machine: str, topo: RouteTopology, rng: random.Random
) -> tuple[list[str], list[str], dict[str, Any]]:
    number = int(machine[1:])
    subnet = topo.host_subnet(number)
    gateway = topo.router_ip(subnet)
    neighbours = [n for n in topo.hosts_of(subnet) if n != number]
    params: dict[str, Any] = {}
    if method == 7:
        wrong_gw = topo.host_ip(rng.choice(neighbours))
        params["gateway"] = wrong_gw
        return (
            [f"ip route replace default via {wrong_gw}"],
            [f"ip route replace default via {gateway}"],
            params,
        )
    if method == 8:
        intf = topo.intf(_name(machine), 0)
        params["gateway"] = "10.255.255.254"
        return (
            [f"ip route replace default via 10.255.255.254 dev {intf} onlink"],
            [f"ip route replace default via {gateway}"],
            params,
        )
    if method == 9:
        return [f"ip route del default via {gateway}"], [f"ip route add default via {gateway}"], {}
    b = rng.choice([k for k in range(1, topo.num_switches + 1) if k != subnet])
    wrong_gw = topo.host_ip(rng.choice(neighbours))
    wrong = f"{topo.subnet_cidr(b)} via {wrong_gw}"
    params = {"subnet": b, "wrong_route": wrong}
    return [f"ip route add {wrong}"], [f"ip route del {wrong}"], params


# distractors -------------------------------------------------------------------------------
DISTRACTOR_KINDS = ("unused_route", "blackhole", "accept_rule", "spare_down", "unused_drop",
                    "unused_rule")  # fmt: skip


def make_distractor(
    kind: str, machine: str, topo: RouteTopology, rng: random.Random, serial: int
) -> dict[str, Any]:
    """One harmless change on ``machine`` that a correct repair leaves alone.

    Unused prefixes come from 10.160.0.0/11 (never used by the plan, the faults' random
    addresses or the transit links); ``serial`` keeps names and preferences distinct.
    Returns ``{"kind", "machine", "command"}``.
    """
    prefix16 = f"10.{160 + rng.randint(0, 31)}"
    unused = f"{prefix16}.{rng.randint(0, 255)}.0/24"
    if kind == "unused_route":
        if machine.startswith("h"):
            gateway = topo.router_ip(topo.host_subnet(int(machine[1:])))
        else:
            intf, cidr = rng.choice(_interfaces(topo, machine))
            if cidr.startswith("10.0."):
                t = int(cidr.split(".")[2])
                near, far = topo.transit_ips(t)
                gateway = far if cidr.split("/")[0] == near else near
            else:
                gateway = topo.host_ip(rng.choice(topo.hosts_of(int(cidr.split(".")[2]))))
        command = f"ip route add {unused} via {gateway}"
    elif kind == "blackhole":
        command = f"ip route add blackhole {unused}"
    elif kind == "accept_rule":
        port = rng.choice((22, 80, 179, 443, 8080))
        chain = rng.choice(("INPUT", "FORWARD") if machine.startswith("r") else ("INPUT",))
        command = f"iptables -A {chain} -p tcp --dport {port} -j ACCEPT"
    elif kind == "spare_down":
        # a veth pair with both ends in the node, left down (the dummy driver is not built in)
        command = (
            f"ip link add {PREFIX_PLACEHOLDER}dm{serial} type veth peer name "
            f"{PREFIX_PLACEHOLDER}dn{serial}"
        )
    elif kind == "unused_drop":
        command = f"iptables -A INPUT -s {prefix16}.0.0/16 -j DROP"
    else:
        command = f"ip rule add from {prefix16}.0.0/16 prohibit pref {31000 + serial}"
    return {"kind": kind, "machine": machine, "command": command}


def with_prefix(command: str, prefix: str) -> str:
    """Substitute the episode prefix into a stored command."""
    return command.replace(PREFIX_PLACEHOLDER, prefix)
