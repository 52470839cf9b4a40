"""The text a route agent sees: the task prompt and the observations of each step.

Written for this project. The observation markers are the fixed parts of every observation
(the reference agents parse observations through them, as a team's agent could).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from evaluator.types import Query
from evaluator.variants import VariantPackError, find_pack

from apps.route.topology import RouteTopology

#: Text every route task contains (reference servers use it to route a task to its app).
PROMPT_MARKER = "pingall"

#: Observation markers: the prefix line of the first observation, the command output header,
#: and the pingall section that ends every step's observation.
PREFIX_LINE_RE = re.compile(r"node names carry the prefix `([^`]*)`")
OUTPUT_MARKER = "Output:\n"
PINGALL_MARKER = "\n\nPingall after this step:"

PROMPT_TEMPLATE = """\
You are the network engineer on call for a small routed network emulated with Mininet. \
{routers_sentence} {num_switches} subnets; each subnet is one switch with {hosts} hosts. \
Every host should be able to reach every other host and every router. Users have reported \
connectivity problems: a misconfiguration somewhere in the network (on a router or on a host) \
may make some pairs unreachable. Find the cause and repair it so that pingall reports every \
pair reachable. The report may be wrong: if you find the network healthy, change nothing and \
say so.

How to work:
- Each reply is exactly one JSON object naming one machine and one command, for example \
{{"machine": "r0", "command": "ip route show"}}. Nothing else is run: one command per step, \
no shell features (no pipes, ;, &&, redirections or $(...)).
- Machines are the routers ({router_names}) and the hosts h1..h{num_hosts}. Switches are not \
machines you can log into.
- Node names in this episode carry a prefix (shown below); "r0" and the prefixed name both \
work as machine names, but interface names must be written in full (e.g. <prefix>r0-eth1).
- Allowed tools: ip, ifconfig, route, arp, iptables, iptables-save, sysctl (net.* keys), tc, \
ss, netstat, and cat on files under /proc/net or /proc/sys/net. Commands already run with \
the privileges they need: do not use sudo. Do not run ping: the pingall result is shown \
after every step.
- Look before you change things, and do not break connections that work.
- When you are finished, reply {{"done": true}}; if you found nothing to repair, reply \
{{"done": true, "healthy": true}} instead. The episode also ends by itself when one of your \
steps makes a failing pingall fully reachable, or after {max_steps} steps.
"""


def render_prompt(
    *, num_switches: int, hosts_per_switch: int, max_steps: int, num_routers: int = 1
) -> str:
    """Return the task prompt of a query on ``num_switches`` subnets of ``hosts_per_switch``
    hosts served by ``num_routers`` routers."""
    names = ", ".join(f"r{i}" for i in range(num_routers))
    return PROMPT_TEMPLATE.format(
        routers_sentence=(
            "Router r0 connects"
            if num_routers == 1
            else f"Routers {names} (r0 is the core; the others reach it over point-to-point "
            "links) connect"
        ),
        router_names=names,
        num_switches=num_switches,
        hosts=hosts_per_switch,
        num_hosts=num_switches * hosts_per_switch,
        max_steps=max_steps,
    )


#: Ground-truth key of a pack query whose first observation shows the topology in its pack's
#: own layout (value :data:`PACK_FORMAT`); absent (public queries, most pack queries): the
#: public layout, :meth:`RouteTopology.describe`.
OBSERVATION_FORMAT_KEY = "observation_format"
PACK_FORMAT = "pack"

#: Writes the topology text of the first observation for the episode's (prefixed) topology.
TopologyWriter = Callable[[RouteTopology], str]


def topology_writer(query: Query) -> TopologyWriter:
    """How the first observation of ``query`` writes its topology and intended addressing.

    Public layout: :meth:`RouteTopology.describe`. A query whose ground truth sets
    :data:`OBSERVATION_FORMAT_KEY` to :data:`PACK_FORMAT` is written by the optional
    ``describe(topology, rng) -> str`` of the pack its ``ground_truth["variant_pack"]`` names
    (found with :func:`evaluator.variants.find_pack`; docs/writing-a-variant-pack.md, "route
    packs"): ``topology`` is the episode's prefixed :class:`RouteTopology`, ``rng`` a
    ``random.Random`` seeded from (pack name, query seed, index), so the same query is always
    written alike whatever the prefix.

    Raises:
        VariantPackError: the pack is not loaded in this process or has no ``describe`` (at
            once); its ``describe`` raised or returned no text (when the writer is called).
    """
    truth = query.ground_truth
    if truth.get(OBSERVATION_FORMAT_KEY, "public") != PACK_FORMAT:
        return RouteTopology.describe
    reference = truth.get("variant_pack") or {}
    pack = find_pack(query.app_id, reference)
    describe = getattr(pack.module, "describe", None)
    if not callable(describe):
        raise VariantPackError(f"variant pack {pack.name!r} has no describe(topology, rng) hook")
    stream = f"{query.app_id}/describe/{pack.name}/{query.seed}/{query.index}"

    def write(topology: RouteTopology) -> str:
        try:
            text = describe(topology, random.Random(stream))
        except Exception as exc:  # noqa: BLE001 - pack code: its failure is the platform's
            raise VariantPackError(
                f"variant pack {pack.name!r}: describe() raised {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(text, str) or not text.strip():
            raise VariantPackError(f"variant pack {pack.name!r}: describe() returned no text")
        return text

    return write


def render_reset_observation(
    prompt: str, *, prefix: str, topology: str, initial_pingall: str
) -> str:
    """Return the first observation: the prompt, the episode's node prefix, the topology with
    its intended addressing, and the initial pingall."""
    return (
        f"{prompt}\n"
        f"In this episode node names carry the prefix `{prefix}`.\n\n"
        f"Topology and intended addressing:\n{topology}\n\n"
        f"Initial pingall:\n{initial_pingall}"
    )


def render_step_observation(n: int, machine: str, command: str, status: str, output: str) -> str:
    """Return the body of a step's observation (the pingall section is appended later)."""
    return (
        f"Step {n} on {machine}: {command}\nExit status: {status}\n"
        f"{OUTPUT_MARKER}{output or '(no output)'}"
    )
