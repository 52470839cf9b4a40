"""Hand-written worked examples for few-shot prompting of the route app (``llm`` agent).

Each example is one diagnostic situation (an abridged observation) and the single next
command a careful operator would send. They cover diagnosis and three fault families without
mirroring any generated query. A test checks that every answer parses and passes the command
allow-list.
"""

from __future__ import annotations

EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        "pingall: 50% loss. Hosts of 192.168.2.0/24 reach no other subnet; hosts inside one "
        "subnet still reach each other. Nothing has been inspected yet.",
        '{"machine": "r0", "command": "ip -br addr show"}',
    ),
    (
        "Output of `ip -br link show` on r0:\n"
        "lo               UNKNOWN        00:00:00:00:00:00\n"
        "r0-eth1@if12     UP             4e:1c:03:aa:10:01\n"
        "r0-eth2@if14     DOWN           4e:1c:03:aa:10:02\n"
        "pingall: 47% loss.",
        '{"machine": "r0", "command": "ip link set r0-eth2 up"}',
    ),
    (
        "Output of `iptables -S FORWARD` on r0:\n"
        "-P FORWARD ACCEPT\n"
        "-A FORWARD -s 192.168.3.0/24 -j DROP\n"
        "pingall: 40% loss; every lost pair involves a host of 192.168.3.0/24.",
        '{"machine": "r0", "command": "iptables -D FORWARD -s 192.168.3.0/24 -j DROP"}',
    ),
)
