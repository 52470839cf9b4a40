"""Every fault method on real Mininet: it breaks pingall and its repair restores it.

Runs every method on every kind of machine it applies to (the core router, an edge router, a
host) on two topologies (one router 3x2; two routers 4x2, where the core router r0 carries the
edge router's traffic: a third router would only repeat those kinds), and every
Table 5 pair with its distractors once per level shape, checking that the injection commands
succeed, that pingall loses pairs afterwards, that the hidden repair brings loss back to 0%
and that the faulted machine's configuration is byte-for-byte the baseline again.
"""

from __future__ import annotations

import random

import pytest

from apps.route.distractors import DISTRACTOR_KINDS, make_distractor
from apps.route.faults import METHODS, make_fault
from apps.route.network import RouteNetwork
from apps.route.queries import LEVEL_LABELS, sample_ground_truth
from apps.route.topology import RouteTopology
from tests.apps.route.helpers import apply_commands, require_emulator

pytestmark = [pytest.mark.root, pytest.mark.netns]


@pytest.fixture(autouse=True)
def _emulator() -> None:
    require_emulator()


def _state(net: RouteNetwork, machine: str) -> list[str]:
    # "ip -d link" reports veth peers in other namespaces on stderr now and then: not state
    text = net.fingerprint(net.topology.prefix + machine)
    return [line for line in text.splitlines() if not line.startswith("Error: Peer netns")]


@pytest.mark.slow
@pytest.mark.parametrize(("routers", "switches", "hosts"), [(1, 3, 2), (2, 4, 2)])
def test_every_method_on_every_kind_of_machine_breaks_and_repairs(
    routers: int, switches: int, hosts: int
) -> None:
    rng = random.Random(routers * 100 + switches)
    shape = RouteTopology(switches, hosts, routers)
    logical = shape.with_prefix("{p}")
    machines = [f"r{i}" for i in range(routers)] + ["h1", f"h{switches * hosts}"]
    with RouteNetwork(shape) as net:
        assert net.pingall().lost == 0
        # distractors stay harmless (a gateway route only on a machine no fault touches)
        for serial, kind in enumerate(DISTRACTOR_KINDS):
            machine = "h2" if kind == "unused_route" else rng.choice(machines)
            extra = make_distractor(kind, machine, logical, rng, serial)
            apply_commands(net, machine, [extra["command"]])
        assert net.pingall().lost == 0
        for label, methods in METHODS.items():
            for method, (_name, kinds) in methods.items():
                for machine in machines:
                    if machine[0].upper() not in kinds:
                        continue
                    baseline = _state(net, machine)
                    fault = make_fault(label, method, machine, logical, rng)
                    where = f"{label}-{method} on {machine} {fault['params']}"
                    apply_commands(net, machine, fault["inject"])
                    if label == "DT" and method == 4:
                        net.pingall()  # drain the shaper's first frame
                    net.wait_links_settled(net.topology.prefix + machine)
                    assert net.pingall().lost > 0, f"{where} left pingall intact"
                    apply_commands(net, machine, fault["repair"])
                    net.wait_links_settled(net.topology.prefix + machine)
                    healed = net.pingall()
                    assert healed.lost == 0, f"{where} repair left {healed.render()}"
                    assert _state(net, machine) == baseline, where


@pytest.mark.slow
@pytest.mark.parametrize("level", [2, 3])
def test_every_table5_pair_with_distractors_breaks_and_repairs(level: int) -> None:
    rng = random.Random(level)
    for labels in LEVEL_LABELS[level]:
        truth = sample_ground_truth(labels, rng, level=level)
        with RouteNetwork(RouteTopology.from_dict(truth["topology"])) as net:
            for extra in truth["distractors"]:
                apply_commands(net, extra["machine"], [extra["command"]])
            assert net.pingall().lost == 0, (labels, truth["distractors"])
            baselines = {f["machine"]: _state(net, f["machine"]) for f in truth["faults"]}
            for fault in truth["faults"]:
                apply_commands(net, fault["machine"], fault["inject"])
            net.pingall()
            assert net.pingall().lost > 0, labels
            for step in truth["repair"]:
                apply_commands(net, step["machine"], [step["command"]])
            for machine in baselines:
                net.wait_links_settled(net.topology.prefix + machine)
            assert net.pingall().lost == 0, (labels, truth["faults"])
            for machine, state in baselines.items():
                assert _state(net, machine) == state, (labels, machine)


@pytest.fixture
def forwarding_machine():
    """The machine forwards IPv4 (as podman, Docker and Kubernetes nodes set it), restored after."""
    path = "/proc/sys/net/ipv4/ip_forward"
    with open(path) as f:
        before = f.read().strip()
    with open(path, "w") as f:
        f.write("1")
    yield
    with open(path, "w") as f:
        f.write(before)


def test_hosts_never_forward_even_on_a_forwarding_machine(forwarding_machine) -> None:
    # a forwarding host would carry traffic around a wrong-gateway fault (WR method 7)
    shape = RouteTopology(3, 2, 1)
    with RouteNetwork(shape) as net:
        for host in net.topology.hosts():
            status, output = net.exec(host, ["sysctl", "-n", "net.ipv4.ip_forward"])
            assert (status, output.strip()) == (0, "0"), host
        for router in net.topology.routers():
            assert net.exec(router, ["sysctl", "-n", "net.ipv4.ip_forward"])[1].strip() == "1"
