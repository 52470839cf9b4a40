"""The routing topology of paper Appendix C.1 and its IP plan.

One router ``r0`` with one interface per subnet, ``S`` switches (one per subnet) and ``H`` hosts
per switch; the paper draws S and H from 2 to 4. Names follow Mininet's conventions (``r0``,
``s1..sS``, ``h1..hN`` numbered across subnets, interfaces ``<node>-eth<k>``) behind a
per-episode prefix (e.g. ``nq7x_``) so that several episodes coexist on one machine.

IP plan (the reference implementation's): subnet ``i`` (1-based) is ``192.168.i.0/24``, the
router's interface ``r0-eth<i>`` holds ``192.168.i.1`` and host ``j`` (0-based) of subnet ``i``
holds ``192.168.i.(100+j)`` with its default route via ``192.168.i.1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Longest interface name the kernel accepts (IFNAMSIZ - 1).
IFNAME_MAX = 15
#: Highest subnet count the IP plan supports (third octet 1..250).
MAX_SUBNETS = 250
#: Highest hosts-per-subnet count the IP plan supports (.100 .. .254).
MAX_HOSTS_PER_SUBNET = 154


@dataclass(frozen=True)
class RouteTopology:
    """Shape and naming of one episode's network.

    Attributes:
        num_switches: subnets (= switches = router interfaces), 1..250.
        hosts_per_switch: hosts on each switch, 1..154.
        prefix: node-name prefix of the episode ("" for the logical, unprefixed names).

    Raises:
        ValueError: sizes out of range or a resulting interface name longer than 15 chars.
    """

    num_switches: int
    hosts_per_switch: int
    prefix: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.num_switches <= MAX_SUBNETS:
            raise ValueError(f"num_switches must be 1..{MAX_SUBNETS}")
        if not 1 <= self.hosts_per_switch <= MAX_HOSTS_PER_SUBNET:
            raise ValueError(f"hosts_per_switch must be 1..{MAX_HOSTS_PER_SUBNET}")
        longest = max(
            len(self.intf("r0", self.num_switches)),
            len(self.intf(self.host_name(self.num_hosts), 0)),
            len(self.intf(self.switch_name(self.num_switches), self.hosts_per_switch + 1)),
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
        """Prefixed router name."""
        return f"{self.prefix}r0"

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

    def router_intf(self, subnet: int) -> str:
        """Router interface facing ``subnet`` (1-based): ``<prefix>r0-eth<subnet>``."""
        return self.intf(self.router, subnet)

    def hosts(self) -> list[str]:
        """All prefixed host names in order."""
        return [self.host_name(n) for n in range(1, self.num_hosts + 1)]

    def machines(self) -> list[str]:
        """Nodes an agent may run commands on and that take part in pingall: hosts then r0."""
        return [*self.hosts(), self.router]

    def host_subnet(self, number: int) -> int:
        """Subnet (1-based) of host ``number`` (1-based)."""
        return (number - 1) // self.hosts_per_switch + 1

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
        """Address pingall uses to reach node ``name`` (Mininet's ``node.IP()``: r0-eth1 for r0)."""
        if name == self.router:
            return self.router_ip(1)
        return self.host_ip(int(name[len(self.prefix) + 1 :]))

    def with_prefix(self, prefix: str) -> RouteTopology:
        """The same shape with another prefix."""
        return RouteTopology(self.num_switches, self.hosts_per_switch, prefix)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (without prefix, which is per episode)."""
        return {"num_switches": self.num_switches, "hosts_per_switch": self.hosts_per_switch}

    def describe(self) -> str:
        """Multi-line plain-text description of nodes, links and the intended IP plan."""
        lines = [f"Router {self.router}:"]
        for i in range(1, self.num_switches + 1):
            lines.append(
                f"  {self.router_intf(i)} {self.router_ip(i)}/24 -> switch {self.switch_name(i)}"
                f" (subnet {self.subnet_cidr(i)})"
            )
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

    The router is a plain Mininet ``Node`` (it lives in its own network namespace); IP forwarding
    is switched on when the network starts (see ``network.RouteNetwork``).

    Raises:
        DependencyMissingError: Mininet is not installed.
    """
    from apps.route.mn import mininet_api

    api = mininet_api()
    topo = api["Topo"]()
    router = topo.addNode(topology.router, cls=api["Node"], ip=None)
    for i in range(1, topology.num_switches + 1):
        switch = topo.addSwitch(topology.switch_name(i))
        topo.addLink(
            switch,
            router,
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
