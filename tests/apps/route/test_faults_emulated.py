"""Every fault method on real Mininet: it breaks pingall and its repair restores it.

Runs all 19 methods on three topologies (2x2, 3x3, 4x2) and every Table 5 pair once, checking
that the injection commands succeed, that pingall loses pairs afterwards, that the hidden
repair brings loss back to 0% and that r0's configuration is byte-for-byte the baseline again.
"""

from __future__ import annotations

import random
import shlex

import pytest

from apps.route.faults import (
    LEVEL_LABELS,
    METHOD_COUNTS,
    make_fault,
    sample_ground_truth,
    with_prefix,
)
from apps.route.network import RouteNetwork
from apps.route.topology import RouteTopology
from tests.apps.route.helpers import require_emulator

pytestmark = [pytest.mark.root, pytest.mark.netns]


@pytest.fixture(autouse=True)
def _emulator() -> None:
    require_emulator()


def _apply(net: RouteNetwork, commands: list[str]) -> None:
    for command in commands:
        status, output = net.exec(
            net.topology.router, shlex.split(with_prefix(command, net.topology.prefix))
        )
        assert status == 0, f"{command}: {output}"


@pytest.mark.slow
@pytest.mark.parametrize(("switches", "hosts"), [(2, 2), (3, 3), (4, 2)])
def test_every_method_breaks_pingall_and_its_repair_restores_it(switches: int, hosts: int) -> None:
    rng = random.Random(switches * 10 + hosts)
    with RouteNetwork(RouteTopology(switches, hosts)) as net:
        assert net.pingall().lost == 0
        baseline = net.fingerprint(net.topology.router)
        for label, count in METHOD_COUNTS.items():
            for method in range(1, count + 1):
                subnets = rng.sample(range(1, switches + 1), 2)
                fault = make_fault(label, method, subnets, rng)
                _apply(net, fault["inject"])
                broken = net.pingall()
                assert broken.lost > 0, f"{label}-{method} {fault['params']} left pingall intact"
                _apply(net, fault["repair"])
                net.wait_links_settled(net.topology.router)
                healed = net.pingall()
                assert healed.lost == 0, f"{label}-{method} repair left {healed.render()}"
                assert net.fingerprint(net.topology.router) == baseline, f"{label}-{method}"


@pytest.mark.slow
def test_every_table5_pair_breaks_and_repairs() -> None:
    rng = random.Random(5)
    combos = LEVEL_LABELS[2] + LEVEL_LABELS[3]
    with RouteNetwork(RouteTopology(4, 2)) as net:
        baseline = net.fingerprint(net.topology.router)
        for labels in combos:
            truth = sample_ground_truth(labels, rng, switches=(4, 4), hosts=(2, 2))
            for fault in truth["faults"]:
                _apply(net, fault["inject"])
            assert net.pingall().lost > 0, labels
            _apply(net, truth["repair"])
            net.wait_links_settled(net.topology.router)
            assert net.pingall().lost == 0, labels
            assert net.fingerprint(net.topology.router) == baseline, labels
