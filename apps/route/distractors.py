"""Distractors of the routing app: harmless configuration a correct repair leaves alone.

Each query adds a few (the count per level is :data:`apps.route.queries.DISTRACTORS_PER_LEVEL`):
unused routes and blackholes for unused prefixes, ACCEPT rules, DROP rules and ``prohibit``
rules for unused prefixes, and spare veth interfaces left down. A repair that "undoes
everything that looks odd" removes them too.
"""

from __future__ import annotations

import random
from typing import Any

from apps.route.faults import PREFIX_PLACEHOLDER, machine_interfaces
from apps.route.topology import RouteTopology

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
            intf, cidr = rng.choice(machine_interfaces(topo, machine))
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
