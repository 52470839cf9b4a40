"""The routing topology of paper Appendix C.1, grown with the level, and its IP plan.

Level 1 is the paper's network: one router ``r0`` with one interface per subnet, ``S`` switches
(one per subnet) and ``H`` hosts per switch, S and H drawn from 2 to 4. Levels 2 and 3 add
routers: ``r1``, ``r2`` ... each own some subnets and reach the others through
a point-to-point transit link to ``r0``, so a fault may sit on any of several routers and the
reachability matrix no longer points at one box. Names follow Mininet's conventions (``r0``,
``s1..sS``, ``h1..hN`` numbered across subnets, interfaces ``<node>-eth<k>``) behind a
per-episode prefix (e.g. ``nq7x_``) so that several episodes coexist on one machine.

IP plan: subnet ``i`` (1-based) is ``192.168.i.0/24`` and belongs to router
``r<(i - 1) mod R>``; that router's interface ``r<j>-eth<i>`` holds ``192.168.i.1``. Host ``j``
(0-based) of subnet ``i`` holds ``192.168.i.(100+j)`` with its default route via
``192.168.i.1``. Transit link ``t`` (1 <= t < R) joins ``r0-eth<100+t>`` (``10.0.t.1/30``) and
``r<t>-eth100`` (``10.0.t.2/30``); ``r0`` routes each subnet of ``r<t>`` via ``10.0.t.2`` and
``r<t>`` has its default route via ``10.0.t.1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Longest interface name the kernel accepts (IFNAMSIZ - 1).
IFNAME_MAX = 15
#: Length of a real episode prefix (``n<3 chars>_``), used to check name lengths.
PREFIX_CHARS = 5
#: Highest subnet count the IP plan supports (third octet 1..99, interface numbers < 100).
MAX_SUBNETS = 99
#: Highest hosts-per-subnet count the IP plan supports (.100 .. .254).
MAX_HOSTS_PER_SUBNET = 154
#: Highest router count (transit links 10.0.1.0/30 .. 10.0.8.0/30).
MAX_ROUTERS = 9
#: Interface number of an edge router's transit interface (``r<t>-eth100``).
TRANSIT_PORT = 100


@dataclass(frozen=True)
class RouteTopology:
    """Shape and naming of one episode's network.

    Attributes:
        num_switches: subnets (= switches), 1..99, at least ``num_routers``.
        hosts_per_switch: hosts on each switch, 1..154.
        num_routers: routers ``r0 .. r<R-1>``, 1..9 (1 = the paper's single router).
        prefix: node-name prefix of the episode ("" for the logical, unprefixed names).

    Raises:
        ValueError: sizes out of range or a resulting interface name longer than 15 chars.
    """

    num_switches: int
    hosts_per_switch: int
    num_routers: int = 1
    prefix: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.num_switches <= MAX_SUBNETS:
            raise ValueError(f"num_switches must be 1..{MAX_SUBNETS}")
        if not 1 <= self.hosts_per_switch <= MAX_HOSTS_PER_SUBNET:
            raise ValueError(f"hosts_per_switch must be 1..{MAX_HOSTS_PER_SUBNET}")
        if not 1 <= self.num_routers <= min(MAX_ROUTERS, self.num_switches):
            raise ValueError("num_routers must be 1..9 and at most num_switches")
        pad = " " * max(len(self.prefix), PREFIX_CHARS)
        longest = max(
            len(pad + f"r{self.num_routers - 1}-eth{TRANSIT_PORT + self.num_routers}"),
            len(pad + f"h{self.num_hosts}-eth0"),
            len(pad + f"s{self.num_switches}-eth{self.hosts_per_switch + 1}"),
        )
        if longest > IFNAME_MAX:
            raise ValueError(f"interface names would be {longest} > {IFNAME_MAX} characters")

    # names ---------------------------------------------------------------------------------
    @property
    def num_hosts(self) -> int:
        """Total number of hosts (S x H)."""
        return self.num_switches * self.hosts_per_switch

    @property
    def router(self) -> str:
        """Prefixed name of the core router ``r0``."""
        return self.router_name(0)

    def router_name(self, index: int) -> str:
        """Prefixed name of router ``index`` (0-based)."""
        return f"{self.prefix}r{index}"

    def routers(self) -> list[str]:
        """All prefixed router names, ``r0`` first."""
        return [self.router_name(i) for i in range(self.num_routers)]

    def switch_name(self, subnet: int) -> str:
        """Prefixed name of the switch of ``subnet`` (1-based)."""
        return f"{self.prefix}s{subnet}"

    def host_name(self, number: int) -> str:
        """Prefixed name of host ``number`` (1-based, numbered across subnets)."""
        return f"{self.prefix}h{number}"

    @staticmethod
    def intf(node: str, port: int) -> str:
        """Mininet interface name ``<node>-eth<port>``."""
        return f"{node}-eth{port}"

    def owner(self, subnet: int) -> int:
        """Index of the router that serves ``subnet`` (1-based): ``(subnet - 1) mod R``."""
        return (subnet - 1) % self.num_routers

    def router_subnets(self, index: int) -> list[int]:
        """Subnets served by router ``index``."""
        return [k for k in range(1, self.num_switches + 1) if self.owner(k) == index]

    def router_intf(self, subnet: int) -> str:
        """Router interface facing ``subnet``: ``<prefix>r<owner>-eth<subnet>``."""
        return self.intf(self.router_name(self.owner(subnet)), subnet)

    def transit_intfs(self, t: int) -> tuple[str, str]:
        """(r0 side, r<t> side) interface names of transit link ``t`` (1 <= t < R)."""
        return (
            self.intf(self.router, TRANSIT_PORT + t),
            self.intf(self.router_name(t), TRANSIT_PORT),
        )

    @staticmethod
    def transit_ips(t: int) -> tuple[str, str]:
        """(r0 side, r<t> side) addresses of transit link ``t`` (``10.0.t.1``, ``10.0.t.2``)."""
        return f"10.0.{t}.1", f"10.0.{t}.2"

    def hosts(self) -> list[str]:
        """All prefixed host names in order."""
        return [self.host_name(n) for n in range(1, self.num_hosts + 1)]

    def machines(self) -> list[str]:
        """Nodes an agent may run commands on and that take part in pingall: hosts, routers."""
        return [*self.hosts(), *self.routers()]

    def host_subnet(self, number: int) -> int:
        """Subnet (1-based) of host ``number`` (1-based)."""
        return (number - 1) // self.hosts_per_switch + 1

    def hosts_of(self, subnet: int) -> list[int]:
        """Host numbers on ``subnet``."""
        first = (subnet - 1) * self.hosts_per_switch + 1
        return list(range(first, first + self.hosts_per_switch))

    # addresses ----------------------------------------------------------------------------
    @staticmethod
    def subnet_cidr(subnet: int) -> str:
        """Network of ``subnet``: ``192.168.<subnet>.0/24``."""
        return f"192.168.{subnet}.0/24"

    @staticmethod
    def router_ip(subnet: int) -> str:
        """Router address on ``subnet``: ``192.168.<subnet>.1``."""
        return f"192.168.{subnet}.1"

    def host_ip(self, number: int) -> str:
        """Address of host ``number`` (1-based): ``192.168.<subnet>.<100 + j>``."""
        subnet = self.host_subnet(number)
        j = (number - 1) % self.hosts_per_switch
        return f"192.168.{subnet}.{100 + j}"

    def probe_ip(self, name: str) -> str:
        """Address pingall uses to reach node ``name`` (a router: its first subnet's address)."""
        bare = name[len(self.prefix) :]
        if bare.startswith("r"):
            return self.router_ip(self.router_subnets(int(bare[1:]))[0])
        return self.host_ip(int(bare[1:]))

    def interfaces(self, name: str) -> list[tuple[str, str]]:
        """(interface, address/prefix-length) of every interface of machine ``name``."""
        bare = name[len(self.prefix) :]
        if bare.startswith("h"):
            number = int(bare[1:])
            return [(self.intf(name, 0), f"{self.host_ip(number)}/24")]
        index = int(bare[1:])
        result = [
            (self.intf(name, k), f"{self.router_ip(k)}/24") for k in self.router_subnets(index)
        ]
        if index == 0:
            for t in range(1, self.num_routers):
                result.append((self.transit_intfs(t)[0], f"{self.transit_ips(t)[0]}/30"))
        else:
            result.append((self.transit_intfs(index)[1], f"{self.transit_ips(index)[1]}/30"))
        return result

    def routes_through(self, name: str, interface: str) -> list[str]:
        """The plan's gateway routes of ``name`` out of ``interface``, as ``ip route add``
        arguments (connected routes are left out: the kernel makes those). The kernel drops
        these routes when the interface goes down or loses its address."""
        bare = name[len(self.prefix) :]
        if bare.startswith("h"):
            number = int(bare[1:])
            return [f"default via {self.router_ip(self.host_subnet(number))}"]
        index = int(bare[1:])
        routes = []
        if index == 0:
            for t in range(1, self.num_routers):
                if self.transit_intfs(t)[0] == interface:
                    gateway = self.transit_ips(t)[1]
                    routes += [
                        f"{self.subnet_cidr(k)} via {gateway} dev {interface}"
                        for k in self.router_subnets(t)
                    ]
        elif self.transit_intfs(index)[1] == interface:
            routes.append(f"default via {self.transit_ips(index)[0]} dev {interface}")
        return routes

    def static_routes(self, name: str) -> list[str]:
        """Every gateway route of machine ``name`` in the plan (``ip route add`` arguments)."""
        routes: list[str] = []
        for interface, _cidr in self.interfaces(name):
            routes += self.routes_through(name, interface)
        return routes

    def with_prefix(self, prefix: str) -> RouteTopology:
        """The same shape with another prefix."""
        return RouteTopology(self.num_switches, self.hosts_per_switch, self.num_routers, prefix)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (without prefix, which is per episode)."""
        return {
            "num_switches": self.num_switches,
            "hosts_per_switch": self.hosts_per_switch,
            "num_routers": self.num_routers,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], prefix: str = "") -> RouteTopology:
        """Inverse of :meth:`to_dict` (``num_routers`` defaults to 1)."""
        return cls(
            int(data["num_switches"]),
            int(data["hosts_per_switch"]),
            int(data.get("num_routers", 1)),
            prefix,
        )

    def describe(self) -> str:
        """Multi-line plain-text description of nodes, links and the intended IP plan."""
        lines: list[str] = []
        for index in range(self.num_routers):
            name = self.router_name(index)
            lines.append(f"Router {name}:")
            for k in self.router_subnets(index):
                lines.append(
                    f"  {self.router_intf(k)} {self.router_ip(k)}/24 -> switch "
                    f"{self.switch_name(k)} (subnet {self.subnet_cidr(k)})"
                )
            for t in range(1, self.num_routers):
                if index not in (0, t):
                    continue
                near, far = self.transit_intfs(t)
                near_ip, far_ip = self.transit_ips(t)
                if index == 0:
                    lines.append(
                        f"  {near} {near_ip}/30 -> router {self.router_name(t)} ({far} {far_ip})"
                    )
                else:
                    lines.append(f"  {far} {far_ip}/30 -> router {self.router} ({near} {near_ip})")
            for route in self.static_routes(name):
                lines.append(f"  route: {route}")
        lines.append("Hosts (each with a default route via its subnet's router address):")
        for n in range(1, self.num_hosts + 1):
            name = self.host_name(n)
            lines.append(
                f"  {name}: {self.intf(name, 0)} {self.host_ip(n)}/24 on "
                f"{self.switch_name(self.host_subnet(n))}"
            )
        return "\n".join(lines)


def build_mininet_topo(topology: RouteTopology) -> Any:
    """Return a Mininet ``Topo`` for ``topology`` (names prefixed, IPs per the plan).

    Routers are plain Mininet ``Node`` objects (each in its own network namespace); forwarding
    and the static routes are set when the network starts (see ``network.RouteNetwork``).

    Raises:
        DependencyMissingError: Mininet is not installed.
    """
    from apps.route.mn import mininet_api

    api = mininet_api()
    topo = api["Topo"]()
    routers = [topo.addNode(name, cls=api["Node"], ip=None) for name in topology.routers()]
    for t in range(1, topology.num_routers):
        near, far = topology.transit_intfs(t)
        near_ip, far_ip = topology.transit_ips(t)
        topo.addLink(
            routers[0],
            routers[t],
            port1=TRANSIT_PORT + t,
            port2=TRANSIT_PORT,
            intfName1=near,
            intfName2=far,
            params1={"ip": f"{near_ip}/30"},
            params2={"ip": f"{far_ip}/30"},
        )
    for i in range(1, topology.num_switches + 1):
        switch = topo.addSwitch(topology.switch_name(i))
        topo.addLink(
            switch,
            routers[topology.owner(i)],
            port1=1,
            port2=i,
            intfName2=topology.router_intf(i),
            params2={"ip": f"{topology.router_ip(i)}/24"},
        )
        for j in range(topology.hosts_per_switch):
            number = (i - 1) * topology.hosts_per_switch + j + 1
            host = topo.addHost(
                topology.host_name(number),
                ip=f"{topology.host_ip(number)}/24",
                defaultRoute=f"via {topology.router_ip(i)}",
            )
            topo.addLink(host, switch, port1=0, port2=j + 2)
    return topo
