"""Route query generation: labels, topology shape, fault methods and operands from the seed.

Pure and fast (no emulator): the seed fixes the labels, the topology (its size grows with the
level), the faulted machines, the fault methods, every operand and the distractors; the fault
makers of :mod:`apps.route.faults` exclude the operands that would not break pingall. The ground
truth is the list of faults with their machine, injection and repair commands, the distractors,
and the whole repair sequence as ``{"machine", "command"}`` steps.

Levels follow the paper's Table 5 for the labels: level 2 = DR+DI, DR+RI, DR+DT, DR+WR, RI+WR,
DT+WR; level 3 = DI+DT, DI+WR, RI+DT, DI+RI. Topologies grow with the level (see
:data:`LEVEL_SHAPES`).
"""

from __future__ import annotations

import random
from typing import Any

from evaluator.sampling import LabelDraw, level_in, seeded_queries
from evaluator.types import Query

from apps.route.distractors import DISTRACTOR_KINDS, make_distractor
from apps.route.faults import METHODS, PREFIX_PLACEHOLDER, make_fault
from apps.route.prompt import render_prompt
from apps.route.topology import RouteTopology

#: Level -> label tuples (paper Table 5).
LEVEL_LABELS: dict[int, list[tuple[str, ...]]] = {
    1: [("DR",), ("DI",), ("RI",), ("DT",), ("WR",)],
    2: [("DR", "DI"), ("DR", "RI"), ("DR", "DT"), ("DR", "WR"), ("RI", "WR"), ("DT", "WR")],
    3: [("DI", "DT"), ("DI", "WR"), ("RI", "DT"), ("DI", "RI")],
}
#: Level -> (routers, subnet range, hosts-per-subnet range). Level 1 is the paper's network;
#: levels 2 and 3 add routers and subnets.
LEVEL_SHAPES: dict[int, tuple[int, tuple[int, int], tuple[int, int]]] = {
    1: (1, (2, 4), (2, 4)),
    2: (2, (3, 5), (2, 3)),
    3: (3, (4, 6), (2, 3)),
}
#: Level -> how many distractors a query carries.
DISTRACTORS_PER_LEVEL: dict[int, tuple[int, int]] = {1: (1, 2), 2: (2, 3), 3: (3, 4)}
#: Probability that a fault of a label with methods for both kinds lands on a router (then a
#: method for routers is drawn, else one for hosts).
ROUTER_SHARE = 1 / 4


def level_of(labels: tuple[str, ...]) -> int:
    """Level of a label tuple. Raises ``KeyError`` for a combination not in Table 5."""
    return level_in(LEVEL_LABELS, labels)


# ground truth -----------------------------------------------------------------------------------
def _pick(
    label: str,
    topo: RouteTopology,
    rng: random.Random,
    taken: set[str],
    method: int | None = None,
) -> tuple[int, str]:
    """Draw (method, machine) for ``label``: the machine kind first (routers with probability
    :data:`ROUTER_SHARE` when the label has methods for both), then a method of that kind, then
    a machine of that kind not in ``taken`` (uniformly)."""
    routers = [f"r{i}" for i in range(topo.num_routers)]
    hosts = [f"h{n}" for n in range(1, topo.num_hosts + 1)]
    methods = METHODS[label]
    if method is not None:
        kinds = methods[method][1]
    else:
        kinds = "".join(sorted({k for _name, ks in methods.values() for k in ks}))
    if len(kinds) > 1:
        kind = "R" if rng.random() < ROUTER_SHARE else "H"
    else:
        kind = kinds
    pool = [m for m in (routers if kind == "R" else hosts) if m not in taken]
    if not pool:
        kind = "H" if kind == "R" else "R"
        pool = [m for m in (routers if kind == "R" else hosts) if m not in taken]
    if method is None:
        method = rng.choice(sorted(n for n, (_name, ks) in methods.items() if kind in ks))
    return method, rng.choice(pool)


def sample_ground_truth(
    labels: tuple[str, ...],
    rng: random.Random,
    *,
    level: int | None = None,
    switches: tuple[int, int] | None = None,
    hosts: tuple[int, int] | None = None,
    routers: int | None = None,
    methods: tuple[int, ...] | None = None,
    machines: tuple[str, ...] | None = None,
    distractors: bool = True,
) -> dict[str, Any]:
    """Draw topology, faults and distractors for a query with ``labels``.

    Args:
        labels: e.g. ``("DR",)`` or ``("RI", "WR")``.
        rng: the query's seeded generator.
        level: the labels' level (default: from Table 5); picks :data:`LEVEL_SHAPES`.
        switches / hosts / routers: override the level's shape (tests, knobs).
        methods / machines: force method numbers and machines (tests); drawn otherwise.
        distractors: add the level's distractors (default True).

    Returns ``{"topology", "faults", "distractors", "repair"}``; ``repair`` is the whole repair
    sequence as ``{"machine", "command"}`` (reverse order of injection).
    """
    level = level if level is not None else level_of(labels)
    default_routers, default_switches, default_hosts = LEVEL_SHAPES[level]
    num_routers = routers if routers is not None else default_routers
    lo_s, hi_s = switches or default_switches
    lo_h, hi_h = hosts or default_hosts
    num_switches = rng.randint(max(lo_s, num_routers), max(hi_s, num_routers))
    hosts_per_switch = rng.randint(max(lo_h, 2), max(hi_h, 2))
    topo = RouteTopology(num_switches, hosts_per_switch, num_routers, PREFIX_PLACEHOLDER)
    faults: list[dict[str, Any]] = []
    taken: set[str] = set()
    for position, label in enumerate(labels):
        forced = methods[position] if methods is not None else None
        if machines is not None and forced is not None:
            method, machine = forced, machines[position]
        else:
            method, machine = _pick(label, topo, rng, taken, forced)
        taken.add(machine)
        faults.append(make_fault(label, method, machine, topo, rng))
    extras: list[dict[str, Any]] = []
    if distractors:
        lo_d, hi_d = DISTRACTORS_PER_LEVEL.get(level, (1, 2))
        everyone = [*(f"h{n}" for n in range(1, topo.num_hosts + 1)),
                    *(f"r{i}" for i in range(topo.num_routers))]  # fmt: skip
        for serial in range(rng.randint(lo_d, hi_d)):
            kind = rng.choice(DISTRACTOR_KINDS)
            pool = everyone
            if kind == "unused_route":
                # a gateway route would vanish with a faulted interface: keep it elsewhere
                pool = [m for m in everyone if m not in taken] or everyone
            extras.append(make_distractor(kind, rng.choice(pool), topo, rng, serial))
    repair = [
        {"machine": fault["machine"], "command": command}
        for fault in reversed(faults)
        for command in fault["repair"]
    ]
    return {
        "topology": topo.to_dict(),
        "faults": faults,
        "distractors": extras,
        "repair": repair,
    }


def generate_queries(
    count: int,
    seed: int,
    level: int | None,
    *,
    app_id: str,
    version: int,
    levels: tuple[int, ...],
    switches: tuple[int, int] | None,
    hosts: tuple[int, int] | None,
    max_steps: int,
    healthy_share: float = 0.0,
) -> list[Query]:
    """Return ``count`` route queries for ``seed`` (see :meth:`apps.route.app.RouteApp.generate`).

    ``switches``/``hosts`` are inclusive ranges of the subnet count and hosts per subnet (None:
    the level's, :data:`LEVEL_SHAPES`); ``max_steps`` is the step budget the prompt announces.
    ``healthy_share`` of the queries (placed by :func:`evaluator.sampling.seeded_queries`) are
    healthy controls: label ``HEALTHY``, the level's topology and distractors, no fault,
    ``ground_truth["healthy"] = True``, and the same prompt as every other query.

    Raises:
        ValueError: negative count or a level not in ``levels``.
    """

    def build(draw: LabelDraw, rng: random.Random) -> tuple[str, dict[str, Any]]:
        truth = sample_ground_truth(
            () if draw.control else draw.labels,
            rng,
            level=draw.level,
            switches=switches,
            hosts=hosts,
        )
        if draw.control:
            truth["healthy"] = True
        shape = truth["topology"]
        prompt = render_prompt(
            num_switches=shape["num_switches"],
            hosts_per_switch=shape["hosts_per_switch"],
            num_routers=shape["num_routers"],
            max_steps=max_steps,
        )
        return prompt, truth

    return seeded_queries(
        LEVEL_LABELS,
        build,
        app_id=app_id,
        version=version,
        seed=seed,
        count=count,
        level=level,
        levels=levels,
        healthy_share=healthy_share,
    )


#: Prefix written in place of ``{p}`` when a ground truth's commands are checked statically.
CHECK_PREFIX = "x"


def ground_truth_problems(truth: dict[str, Any]) -> list[tuple[str, str]]:
    """What is wrong with a route ground truth, without building a network: ``[(rule,
    message), ...]``, empty when sound (for ``manage.py check_pack``).

    Rules (docs/writing-a-variant-pack.md, "route packs"):

    * ``shape``: a fault or repair entry lacks its fields;
    * ``allowlist``: a repair command is refused by the agent allow-list
      (:func:`apps.route.allowlist.check_command`, ``{p}`` written as :data:`CHECK_PREFIX`):
      the oracle is an agent like any other;
    * ``repair``: a faulted query has no repair, or a fault's machine gets no repair step;
    * ``one-fault-per-machine``: two faults on one machine (their repairs may interfere).

    Ordering (a repair must never cut a reachable pair) needs the network: the
    ``reference-agents`` check of ``check_pack`` plays it.
    """
    from apps.route.allowlist import check_command
    from apps.route.faults import with_prefix

    problems: list[tuple[str, str]] = []
    faults = truth.get("faults") or []
    repair = truth.get("repair") or []
    if truth.get("healthy") and not faults:
        return []
    try:
        machines = [str(f["machine"]) for f in faults]
        steps = [(str(s["machine"]), str(s["command"])) for s in repair]
    except (KeyError, TypeError) as exc:
        return [("shape", f"fault or repair entry without {exc}")]
    if faults and not steps:
        problems.append(("repair", "faults are injected but the repair is empty"))
    for machine, command in steps:
        _, reason = check_command(with_prefix(command, CHECK_PREFIX))
        if reason is not None:
            problems.append(("allowlist", f"repair on {machine}: {command!r}: {reason}"))
    repaired = {machine for machine, _ in steps}
    for machine in sorted(set(machines) - repaired):
        problems.append(("repair", f"the fault on {machine} gets no repair step"))
    for machine in sorted({m for m in machines if machines.count(m) > 1}):
        problems.append(("one-fault-per-machine", f"{machines.count(machine)} faults on "
                                                  f"{machine}"))
    return problems
