"""Fault catalogue of the routing app: paper Appendix C.2 and Table 5.

Five fault categories, every method the paper lists, all injected on the router ``r0``:

====  ============================  =======================================================
DR    disable_routing               1 ``sysctl net.ipv4.ip_forward=0``; 2 ``iptables -P FORWARD
                                    DROP``; 3 ``ip rule ... prohibit`` (traffic entering from
                                    one subnet); 4 ``iptables -A FORWARD -s <subnet> -j DROP``
DI    disable_interface             1 ``ifconfig <if> down``; 2 ``ip link set <if> down``;
                                    3 ``ip link set <if> mtu 68``
RI    remove_ip                     1 ``ip addr flush``; 2 flush + random ``10.x.y.1/24``;
                                    3 flush + own address with mask /30, /31 or /32;
                                    4 flush + another subnet's router address (duplicate)
DT    drop_traffic_to_from_subnet   1 iptables INPUT/OUTPUT DROP for a subnet; 2 the same with
                                    REJECT; 3 the same for ICMP only; 4 delay (see below)
WR    wrong_routing_table           a subnet's route is deleted and replaced by: 1 a route out
                                    of another interface; 2 a route via an unreachable gateway
                                    (10.255.255.254, ``onlink``); 3 a route out of another
                                    interface with metric 5000-20000; 4 a route via a host of
                                    another subnet (a misdirection loop)
====  ============================  =======================================================

Substitution for DT method 4: the paper adds ``tc netem delay 1000-5000ms``; ``sch_netem`` is not
built into these kernels. We keep the observable effect (packets through the interface arrive
seconds late, so pingall times out on them while traffic still flows) with a token-bucket
shaper that is built in: ``tc qdisc add dev <if> root tbf rate <R>bit burst 128 latency 30s``
with R = 784 000 / delay_ms bit/s, i.e. one 98-byte echo frame per ``delay_ms`` milliseconds.

Operands are chosen so that every fault really breaks pingall, avoiding the reference
implementation's no-ops: RI method 3 uses only /30, /31 and /32 (with /8 or /16 -- and any mask
up to /25 -- the hosts at .100+ stay on-link); WR method 2 adds ``onlink`` (without it the
kernel refuses the unreachable gateway and the fault degenerates to a deleted route).

In a two-fault query (levels 2-3) the two faults touch disjoint subnets, so neither fault's
injection or repair depends on the other; when the drawn topology has too few subnets for that,
the subnet count is raised (still within the 2-4 range whenever possible). Repairs are applied
in reverse order of injection.

Complexity levels follow the paper's Table 5: level 2 = DR+DI, DR+RI, DR+DT, DR+WR, RI+WR,
DT+WR; level 3 = DI+DT, DI+WR, RI+DT, DI+RI. (The reference implementation's plotting table
swaps DR+DT and DI+DT; we follow the paper.)

Commands are stored with the placeholder ``{p}`` for the episode's node-name prefix.
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

#: Label -> number of methods (paper C.2: 4, 3, 4, 4, 4).
METHOD_COUNTS: dict[str, int] = {"DR": 4, "DI": 3, "RI": 4, "DT": 4, "WR": 4}

#: Level -> label tuples (paper Table 5).
LEVEL_LABELS: dict[int, list[tuple[str, ...]]] = {
    1: [("DR",), ("DI",), ("RI",), ("DT",), ("WR",)],
    2: [("DR", "DI"), ("DR", "RI"), ("DR", "DT"), ("DR", "WR"), ("RI", "WR"), ("DT", "WR")],
    3: [("DI", "DT"), ("DI", "WR"), ("RI", "DT"), ("DI", "RI")],
}

#: Placeholder for the episode prefix inside stored commands.
PREFIX_PLACEHOLDER = "{p}"
#: Masks used by RI method 3 (paper lists 8, 16, 30, 31, 32; /8 and /16 are no-ops).
RI_BAD_MASKS = (30, 31, 32)
#: Frame size of a default ping echo (14 + 20 + 8 + 56 bytes), for the DT-4 rate.
ECHO_FRAME_BYTES = 98


def level_of(labels: tuple[str, ...]) -> int:
    """Level of a label tuple. Raises ``KeyError`` for a combination not in Table 5."""
    for level, combos in LEVEL_LABELS.items():
        if labels in combos:
            return level
    raise KeyError("+".join(labels))


def subnets_needed(label: str, method: int) -> int:
    """How many distinct subnets a fault method touches (0 for router-wide faults)."""
    if label == "DR":
        return 0 if method in (1, 2) else 1
    if label == "RI" and method == 4:
        return 2
    if label == "WR":
        return 2
    return 1


def _intf(subnet: int) -> str:
    return f"{PREFIX_PLACEHOLDER}r0-eth{subnet}"


def _restore_route(subnet: int) -> str:
    return (
        f"ip route add 192.168.{subnet}.0/24 dev {_intf(subnet)} proto kernel scope link "
        f"src 192.168.{subnet}.1"
    )


def make_fault(label: str, method: int, subnets: list[int], rng: random.Random) -> dict[str, Any]:
    """Return one fault: its label, type, method, parameters, injection and repair commands.

    Args:
        label: ``DR``/``DI``/``RI``/``DT``/``WR``.
        method: 1-based method number (see the module table).
        subnets: the subnets (1-based) this fault may touch, at least :func:`subnets_needed`.
        rng: the query's seeded generator for the remaining operands.

    Returns a JSON dict ``{"label", "type", "method", "params", "inject", "repair"}``; all
    commands run on ``r0`` and carry ``{p}`` for the prefix.

    Raises:
        ValueError: unknown label/method or too few subnets.
    """
    if label not in FAULT_TYPES or not 1 <= method <= METHOD_COUNTS[label]:
        raise ValueError(f"unknown fault {label} method {method}")
    if len(subnets) < subnets_needed(label, method):
        raise ValueError(f"{label}-{method} needs {subnets_needed(label, method)} subnets")
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
            k = subnets[0]
            pref = rng.randint(1000, 30000)
            params = {"subnet": k, "pref": pref}
            inject = [f"ip rule add iif {_intf(k)} prohibit pref {pref}"]
            repair = [f"ip rule del pref {pref}"]
        else:
            k = subnets[0]
            params = {"subnet": k}
            inject = [f"iptables -A FORWARD -s 192.168.{k}.0/24 -j DROP"]
            repair = [f"iptables -D FORWARD -s 192.168.{k}.0/24 -j DROP"]
    elif label == "DI":
        k = subnets[0]
        params = {"subnet": k, "interface": _intf(k)}
        if method == 1:
            inject = [f"ifconfig {_intf(k)} down"]
            repair = [f"ifconfig {_intf(k)} up"]
        elif method == 2:
            inject = [f"ip link set {_intf(k)} down"]
            repair = [f"ip link set {_intf(k)} up"]
        else:
            params["mtu"] = 68
            inject = [f"ip link set {_intf(k)} mtu 68"]
            repair = [f"ip link set {_intf(k)} mtu 1500"]
    elif label == "RI":
        k = subnets[0]
        params = {"subnet": k, "interface": _intf(k)}
        inject = [f"ip addr flush dev {_intf(k)}"]
        # The repair adds the right address before removing the wrong one: a wrong address
        # can still carry some traffic (r0's own address with /31 answers pings), so
        # removing it first would be a step that loses reachable pairs.
        repair = [f"ip addr add 192.168.{k}.1/24 brd + dev {_intf(k)}"]
        wrong = None
        if method == 2:
            wrong = f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.1/24"
        elif method == 3:
            mask = rng.choice(RI_BAD_MASKS)
            params["mask"] = mask
            wrong = f"192.168.{k}.1/{mask}"
        elif method == 4:
            j = subnets[1]
            params["duplicate_of"] = j
            wrong = f"192.168.{j}.1/24"
        if wrong is not None:
            params["address"] = wrong
            inject.append(f"ip addr add {wrong} dev {_intf(k)}")
            repair.append(f"ip addr del {wrong} dev {_intf(k)}")
    elif label == "DT":
        k = subnets[0]
        params = {"subnet": k}
        cidr = f"192.168.{k}.0/24"
        if method in (1, 2, 3):
            target = "DROP" if method in (1, 3) else "REJECT"
            proto = " -p icmp" if method == 3 else ""
            rules = [f"INPUT -s {cidr}{proto} -j {target}", f"OUTPUT -d {cidr}{proto} -j {target}"]
            inject = [f"iptables -A {rule}" for rule in rules]
            repair = [f"iptables -D {rule}" for rule in rules]
        else:
            delay_ms = rng.randint(1000, 5000)
            rate_bit = math.ceil(ECHO_FRAME_BYTES * 8 * 1000 / delay_ms)
            params.update({"interface": _intf(k), "delay_ms": delay_ms, "rate_bit": rate_bit})
            inject = [
                f"tc qdisc add dev {_intf(k)} root tbf rate {rate_bit}bit burst 128 latency 30s"
            ]
            repair = [f"tc qdisc del dev {_intf(k)} root"]
    else:  # WR
        a, b = subnets[0], subnets[1]
        params = {"subnet": a, "wrong_interface": _intf(b)}
        cidr = f"192.168.{a}.0/24"
        if method == 1:
            wrong = f"{cidr} dev {_intf(b)}"
        elif method == 2:
            wrong = f"{cidr} via 10.255.255.254 dev {_intf(b)} onlink"
        elif method == 3:
            metric = rng.randint(5000, 20000)
            params["metric"] = metric
            wrong = f"{cidr} dev {_intf(b)} metric {metric}"
        else:
            wrong = f"{cidr} via 192.168.{b}.100"
        params["wrong_route"] = wrong
        inject = [f"ip route del {cidr} dev {_intf(a)}", f"ip route add {wrong}"]
        repair = [f"ip route del {wrong}", _restore_route(a)]
    return {
        "label": label,
        "type": FAULT_TYPES[label],
        "method": method,
        "params": params,
        "inject": inject,
        "repair": repair,
    }


def sample_ground_truth(
    labels: tuple[str, ...],
    rng: random.Random,
    *,
    switches: tuple[int, int] = (2, 4),
    hosts: tuple[int, int] = (2, 4),
    methods: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """Draw topology and faults for a query with ``labels`` (one or two fault labels).

    Args:
        labels: e.g. ``("DR",)`` or ``("RI", "WR")``.
        rng: the query's seeded generator.
        switches / hosts: inclusive ranges of S and H (paper: 2 to 4).
        methods: force the method numbers (tests); drawn uniformly otherwise.

    Returns ``{"topology": {...}, "faults": [...], "repair": [...]}`` where ``repair`` is the
    whole repair sequence (reverse order of injection).
    """
    if methods is None:
        methods = tuple(rng.randint(1, METHOD_COUNTS[label]) for label in labels)
    needed = sum(subnets_needed(label, m) for label, m in zip(labels, methods, strict=True))
    lo_s, hi_s = switches
    num_switches = rng.randint(max(lo_s, needed, 1), max(hi_s, needed, 1))
    hosts_per_switch = rng.randint(hosts[0], hosts[1])
    pool = list(range(1, num_switches + 1))
    rng.shuffle(pool)
    faults = []
    for label, method in zip(labels, methods, strict=True):
        n = subnets_needed(label, method)
        mine, pool = pool[:n], pool[n:]
        faults.append(make_fault(label, method, mine, rng))
    repair = [cmd for fault in reversed(faults) for cmd in fault["repair"]]
    topology = RouteTopology(num_switches, hosts_per_switch)
    return {"topology": topology.to_dict(), "faults": faults, "repair": repair}


def with_prefix(command: str, prefix: str) -> str:
    """Substitute the episode prefix into a stored command."""
    return command.replace(PREFIX_PLACEHOLDER, prefix)
