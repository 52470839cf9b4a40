"""A held-out route pack for the test suite: fault kinds the public catalogue never injects.

* ``NB`` poisoned neighbour -- a permanent ``ip neigh`` entry gives a host's gateway (or, on a
  router, one host of a subnet it serves) a MAC address nobody owns; repair: delete the entry.
* ``BR`` stray bridge -- an interface is enslaved to a new bridge, left down, inside its node,
  so what it receives goes to the bridge and is dropped instead of reaching the IP stack;
  repair: ``ip link set <if> nomaster`` and the plan's routes through the interface.
* ``LT`` local-table hijack -- a router's ``local`` table claims a whole subnet
  (``local 192.168.k.0/24 dev lo``), so the router keeps traffic for those hosts to itself;
  repair: delete that route from the local table.

Topologies, distractors and the public faults of level 2 come from the public generator
(:func:`apps.route.queries.sample_ground_truth`), drawn from a stream seeded apart from the
public one. Level 1 carries one held-out fault, level 2 a public fault plus a held-out one,
level 3 two held-out faults of different kinds, always on different machines. Every fault is
data (injection and repair commands), so the route episode runs these queries unchanged and
the oracle replays the repair. A network engineer finds these with ``ip neigh``, ``ip -d
link`` and ``ip route show table local``; a checklist written for the public catalogue does
not look there.
"""

from __future__ import annotations

import random
from typing import Any

from apps.route.faults import PREFIX_PLACEHOLDER
from apps.route.prompt import render_prompt
from apps.route.queries import LEVEL_LABELS, sample_ground_truth
from apps.route.topology import RouteTopology
from evaluator.variants import pack_query

HELD_OUT_KINDS = ("NB", "BR", "LT")
NAMES = {"NB": "poisoned_neighbour", "BR": "stray_bridge", "LT": "local_table_hijack"}
#: Share of NB and BR faults put on a host (the rest on a router).
HOST_SHARE = 0.6


def _bogus_mac(rng: random.Random) -> str:
    return "02:00:5e:" + ":".join(f"{rng.randint(0, 255):02x}" for _ in range(3))


def _fault(kind: str, machine: str, topo: RouteTopology, rng: random.Random,
           serial: int) -> dict[str, Any]:
    node = f"{PREFIX_PLACEHOLDER}{machine}"
    params: dict[str, Any] = {}
    if machine.startswith("h"):
        number = int(machine[1:])
        subnet = topo.host_subnet(number)
        intf = topo.intf(node, 0)
        neighbour = topo.router_ip(subnet)
    else:
        index = int(machine[1:])
        subnet = rng.choice(topo.router_subnets(index))
        intf = topo.router_intf(subnet)
        neighbour = topo.host_ip(rng.choice(topo.hosts_of(subnet)))
    routes = [f"ip route replace {r}" for r in topo.routes_through(node, intf)]
    if kind == "NB":
        mac = _bogus_mac(rng)
        params = {"interface": intf, "neighbour": neighbour, "lladdr": mac}
        inject = [f"ip neigh replace {neighbour} lladdr {mac} dev {intf} nud permanent"]
        repair = [f"ip neigh del {neighbour} dev {intf}"]
    elif kind == "BR":
        bridge = f"{PREFIX_PLACEHOLDER}sb{serial}"
        params = {"interface": intf, "bridge": bridge}
        # the bridge stays down: a port of a down bridge drops what it receives (an up bridge
        # would hand the frames to the stack, which owns the address, and nothing would break)
        inject = [f"ip link add name {bridge} type bridge", f"ip link set {intf} master {bridge}"]
        repair = [f"ip link set {intf} nomaster", *routes]
    else:
        target = rng.randint(1, topo.num_switches)
        cidr = topo.subnet_cidr(target)
        params = {"subnet": target}
        inject = [f"ip route add local {cidr} dev lo table local"]
        repair = [f"ip route del local {cidr} dev lo table local"]
    return {"label": kind, "type": NAMES[kind], "method": 1, "name": NAMES[kind],
            "machine": machine, "params": params, "inject": inject, "repair": repair}


def _machine(kind: str, topo: RouteTopology, rng: random.Random, taken: set[str]) -> str:
    routers = [f"r{i}" for i in range(topo.num_routers) if f"r{i}" not in taken]
    hosts = [f"h{n}" for n in range(1, topo.num_hosts + 1) if f"h{n}" not in taken]
    on_host = kind != "LT" and (not routers or rng.random() < HOST_SHARE)
    return rng.choice(hosts if on_host else routers)


def _ground_truth(level: int, rng: random.Random) -> tuple[tuple[str, ...], dict[str, Any]]:
    if level == 1:
        public: tuple[str, ...] = ()
        held_out = [rng.choice(HELD_OUT_KINDS)]
    elif level == 2:
        public = (rng.choice([labels[0] for labels in LEVEL_LABELS[1]]),)
        held_out = [rng.choice(HELD_OUT_KINDS)]
    else:
        public = ()
        held_out = rng.sample(HELD_OUT_KINDS, 2)
    truth = sample_ground_truth(public, rng, level=level)
    topo = RouteTopology.from_dict(truth["topology"], PREFIX_PLACEHOLDER)
    taken = {fault["machine"] for fault in truth["faults"]}
    for serial, kind in enumerate(held_out):
        machine = _machine(kind, topo, rng, taken)
        taken.add(machine)
        truth["faults"].append(_fault(kind, machine, topo, rng, serial))
    # a hijacked subnet is answered by the router itself, so pings to hosts another fault
    # cuts off look reachable while the hijack stands: it is injected first and therefore
    # repaired last (removing it earlier would cut those pairs and make the repair unsafe)
    truth["faults"].sort(key=lambda fault: fault["label"] != "LT")
    truth["repair"] = [
        {"machine": fault["machine"], "command": command}
        for fault in reversed(truth["faults"])
        for command in fault["repair"]
    ]
    return (*public, *held_out), truth


def generate(app: Any, pack: Any, seed: int, indices: list[int], level: int | None) -> list[Any]:
    """One query per index (see evaluator/variants.py for the contract)."""
    queries = []
    for index in indices:
        rng = random.Random(f"route-pack/{pack.name}/{seed}/{index}")
        query_level = level if level is not None else rng.choice(sorted(pack.levels))
        labels, truth = _ground_truth(query_level, rng)
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
