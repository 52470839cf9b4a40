"""A held-out route pack for the test suite: public faults, another observation format.

The queries are the public generator's (:func:`apps.route.queries.sample_ground_truth`: Table 5
labels, public topologies, fault methods and distractors), drawn from a stream seeded apart
from the public one. What changes is how the first observation states the intended network:
``describe`` writes one interface table per machine, machines in a seeded order, addresses and
netmasks in dotted form (no ``/len``), links and routes in words. The facts are those of the
public layout (:meth:`apps.route.topology.RouteTopology.describe`); a reader of the network
finds them as easily, a parser of the public layout finds nothing. The oracle replays the
repair and needs no parsing.

Every query sets ``ground_truth["observation_format"] = "pack"``, so the route episode asks
this module's ``describe(topology, rng)`` for the topology text (docs/writing-a-variant-pack.md,
"route packs").
"""

from __future__ import annotations

import ipaddress
import random
from typing import Any

from apps.route.prompt import OBSERVATION_FORMAT_KEY, PACK_FORMAT, render_prompt
from apps.route.queries import LEVEL_LABELS, sample_ground_truth
from apps.route.topology import RouteTopology
from evaluator.variants import pack_query


def _dotted(cidr: str) -> tuple[str, str]:
    """``"192.168.1.1/24"`` -> ``("192.168.1.1", "255.255.255.0")``."""
    interface = ipaddress.ip_interface(cidr)
    return str(interface.ip), str(interface.netmask)


def _link(topology: RouteTopology, machine: str, interface: str) -> str:
    """What ``interface`` of ``machine`` is plugged into, in words."""
    if machine in topology.hosts():
        number = int(machine.removeprefix(topology.prefix)[1:])
        return f"switch {topology.switch_name(topology.host_subnet(number))}"
    for subnet in range(1, topology.num_switches + 1):
        if topology.router_intf(subnet) == interface:
            network = ipaddress.ip_network(topology.subnet_cidr(subnet))
            return f"switch {topology.switch_name(subnet)}, LAN {network.network_address}"
    for t in range(1, topology.num_routers):
        near, far = topology.transit_intfs(t)
        near_ip, far_ip = topology.transit_ips(t)
        if interface == near:
            return f"point-to-point to {topology.router_name(t)} ({far}, {far_ip})"
        if interface == far:
            return f"point-to-point to {topology.router} ({near}, {near_ip})"
    return "unplugged"


def _route_in_words(route: str) -> str:
    """``"192.168.2.0/24 via 10.0.1.2 dev r0-eth9"`` -> destination, netmask, next hop, out."""
    tokens = route.split()
    fields = dict(zip(tokens[1::2], tokens[2::2], strict=False))
    if tokens[0] == "default":
        where = "to any destination"
    else:
        network = ipaddress.ip_network(tokens[0])
        where = f"to {network.network_address} netmask {network.netmask}"
    return f"{where}: next hop {fields.get('via', 'none')}, out of {fields.get('dev', '?')}"


def describe(topology: RouteTopology, rng: random.Random) -> str:
    """The intended network of ``topology`` as per-machine interface tables (see the module
    docstring); ``rng`` orders the machines."""
    machines = [*topology.routers(), *topology.hosts()]
    rng.shuffle(machines)
    lines = ["Interface tables of every machine (netmasks in dotted form):"]
    for machine in machines:
        is_host = machine in topology.hosts()
        lines.append("")
        lines.append(f"[{machine}] {'host' if is_host else 'router'}")
        lines.append("  | interface | address | netmask | plugged into |")
        for interface, cidr in topology.interfaces(machine):
            address, netmask = _dotted(cidr)
            link = _link(topology, machine, interface)
            lines.append(f"  | {interface} | {address} | {netmask} | {link} |")
        if is_host:
            number = int(machine.removeprefix(topology.prefix)[1:])
            gateway = topology.router_ip(topology.host_subnet(number))
            lines.append(f"  default gateway: {gateway}")
            continue
        for route in topology.static_routes(machine):
            lines.append(f"  static route {_route_in_words(route)}")
    return "\n".join(lines)


def generate(app: Any, pack: Any, seed: int, indices: list[int], level: int | None) -> list[Any]:
    """One query per index (see evaluator/variants.py for the contract): a Table 5 label
    combination of the level, the public ground truth, this pack's observation format."""
    queries = []
    for index in indices:
        rng = random.Random(f"route-pack/{pack.name}/{seed}/{index}")
        query_level = level if level is not None else rng.choice(sorted(pack.levels))
        labels = rng.choice(LEVEL_LABELS[query_level])
        truth = sample_ground_truth(labels, rng, level=query_level)
        truth[OBSERVATION_FORMAT_KEY] = PACK_FORMAT
        shape = truth["topology"]
        prompt = render_prompt(
            num_switches=shape["num_switches"],
            hosts_per_switch=shape["hosts_per_switch"],
            num_routers=shape["num_routers"],
            max_steps=getattr(app, "max_steps", 10),
        )
        queries.append(pack_query(app, pack, seed=seed, index=index, level=query_level,
                                  labels=labels, prompt=prompt, ground_truth=truth))
    return queries
