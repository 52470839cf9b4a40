"""The route *adaptive* agent: no model, it learns a pack's fault kinds from one exposed batch.

After a practice submission on a spent pack a team sees each query's prompt and ground truth:
for route the injected faults, each with its ``inject`` and ``repair`` commands (``{p}`` for
the episode's node-name prefix) and the machine it sits on. This agent learns from exactly
that, then diagnoses fresh queries of the same pack from what its commands show;
on anything else it plays the scripted agent (:mod:`apps.route.scripted`).

The rule (:func:`learn_kind`, per exposed fault whose injection uses ``ip``):

* **Read.** The command that shows the injected state is the ``show`` of the injection's
  ``ip`` object, in the same table when it names one (``ip neigh replace ...`` ->
  ``ip neigh show``; ``ip route add local ... table local`` -> ``ip route show table local``).
* **Signature.** Of the fault's injection commands, the one sharing most values with the
  repair. Its values are typed (:data:`VALUE_RES`: CIDR, IPv4 address, MAC address,
  interface); the rest of its words after ``ip <object> <verb>`` are its keywords. A line of
  the read's output shows the fault when it holds a value of every type the injection has,
  the addresses inside the plan's address space (:func:`apps.route.scripted._in_plan_space`),
  and at least three quarters of the keywords (``nud permanent`` shows as ``PERMANENT``, the
  ``table`` of a table listing is not repeated).
* **Repair.** Each repair command becomes a template: its values are replaced by the
  signature's value of the same type and rank; an ``ip route replace <route>`` stands for the
  plan's routes through the signature's interface (the kernel drops them with the interface;
  the scripted agent's plan reader lists them). Commands with a value the line cannot give
  are left to the scripted agent.
* **Where.** Each kind remembers whether it was seen on hosts, routers or both.
* **Order.** A kind whose repair came after every other fault's in each exposed repair
  sequence that had another fault (``LT``: a hijacked subnet answers for hosts another fault
  cuts off, so repairing it first breaks pairs that look reachable) is repaired last: its
  repair waits until another repair has been made after it was found, or until no suspect host
  is left to read (the episode ends by itself if the other repairs make pingall full).
* **Kept.** A kind seen again keeps the keywords both examples share and both repairs. Kinds
  left without keywords (nothing tells their line from a healthy one) and kinds read by a
  command the scripted agent already reads (it repairs those itself) are dropped.

Playing (:meth:`RouteLearner.reply`, a pure function of the chat history, one command per step):
a repair derived from the output of an earlier read (any read: the signatures are looked for
in every output) comes first; then a repair the scripted agent derived from its own reads;
then, machine by machine (the scripted agent's suspects, most suspect first, each host followed
by the router serving its subnet, then every router; a machine that already yielded a repair is
skipped), the learned reads not yet made on it (most often seen kind first), and then the
scripted agent's next read when it is on that machine; then the scripted agent (whose ``done``
waits until no learned read is left while pingall still fails).

Targets (``benchmarks/bench_difficulty.py --apps route --agents oracle,scripted,adaptive
--exposed-pack tests/variant_packs/route/heldout-faults --sealed-pack
tests/variant_packs/route/heldout-format``): at least 80% correct and safe on a fresh batch of
the exposed pack, at most 20% on levels 2 and 3 of the sealed one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from evaluator.types import JSON, Query

from apps.route import scripted
from apps.route.replies import command_reply, parse_reply

#: Value types of command words, most specific first (a CIDR before an address).
VALUE_RES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cidr", re.compile(r"^\d+\.\d+\.\d+\.\d+/\d+$")),
    ("ip", re.compile(r"^\d+\.\d+\.\d+\.\d+$")),
    ("mac", re.compile(r"^[0-9a-f]{2}(?::[0-9a-f]{2}){5}$", re.IGNORECASE)),
    ("intf", re.compile(r"^\S*-eth\d+$")),
)
#: Share of an injection's keywords a line must show.
KEYWORD_SHARE = 0.75


def value_type(word: str) -> str | None:
    """The type of a command or output word (``cidr``, ``ip``, ``mac``, ``intf``), or None."""
    word = word.split("@", 1)[0].rstrip(":")
    for name, pattern in VALUE_RES:
        if pattern.match(word):
            return name
    return None


def _values(words: Iterable[str]) -> list[tuple[str, str]]:
    """``(type, value)`` of the typed words, in order (interface names without ``@ifN:``)."""
    found = []
    for word in words:
        kind = value_type(word)
        if kind is not None:
            found.append((kind, word.split("@", 1)[0].rstrip(":")))
    return found


@dataclass
class LearnedKind:
    """One fault kind as learned from exposed ground truths.

    Attributes:
        label: the fault's label in the ground truth (e.g. ``NB``).
        read: the command that shows it (``ip <object> show [table T]``).
        keywords: the injection's words that are neither values nor ``ip <object> <verb>``.
        types: the value types the injection holds (each must appear in a matching line).
        repairs: templates, each a list of tokens: a literal word, ``(type, rank)`` for the
            matched line's rank-th value of that type, or ``("routes", rank)`` for the plan's
            routes through that interface (a whole command per route).
        where: ``host`` and/or ``router``.
        seen: how many exposed faults taught it.
        last: whether every exposed repair sequence with another fault repaired this kind
            after the others (None: never seen beside another fault).
    """

    label: str
    read: str
    keywords: tuple[str, ...]
    types: tuple[str, ...]
    repairs: list[list[Any]] = field(default_factory=list)
    where: set[str] = field(default_factory=set)
    seen: int = 0
    last: bool | None = None

    def matches(self, line: str) -> list[tuple[str, str]] | None:
        """The line's typed values when it shows this fault (rule in the module docstring)."""
        words = line.split()
        values = _values(words)
        if any(t not in {v for v, _ in values} for t in self.types):
            return None
        if any(t in ("cidr", "ip") and not scripted._in_plan_space(v) for t, v in values):
            return None
        lowered = {w.lower() for w in words}
        if self.keywords:
            shown = sum(k in lowered for k in self.keywords)
            if shown < KEYWORD_SHARE * len(self.keywords):
                return None
        return values

    def fixes(self, machine: scripted.Machine, values: list[tuple[str, str]]) -> list[str]:
        """The repair commands for a matching line's ``values`` on ``machine``."""
        by_type: dict[str, list[str]] = {}
        for kind, value in values:
            by_type.setdefault(kind, []).append(value)
        out: list[str] = []
        for template in self.repairs:
            if template and template[0] == ("routes",):
                interfaces = by_type.get("intf", [])
                if interfaces:
                    out.extend(scripted._routes_through(machine, interfaces[0]))
                continue
            words = []
            for token in template:
                if isinstance(token, tuple):
                    kind, rank = token
                    if rank >= len(by_type.get(kind, [])):
                        break
                    words.append(by_type[kind][rank])
                else:
                    words.append(token)
            else:
                out.append(" ".join(words))
        return out


def learn_kind(fault: JSON) -> LearnedKind | None:
    """What one exposed fault teaches (module docstring), or None when its injection is not an
    ``ip`` command or its repair shares no value with it."""
    injects = [str(c).replace("{p}", "") for c in fault.get("inject", [])]
    repairs = [str(c).replace("{p}", "") for c in fault.get("repair", [])]
    if not injects or not repairs:
        return None
    repair_values = {v for c in repairs for _, v in _values(c.split())}
    inject = max(injects, key=lambda c: len({v for _, v in _values(c.split())} & repair_values))
    words = inject.split()
    if len(words) < 4 or words[0] != "ip" or not {v for _, v in _values(words)} & repair_values:
        return None
    read = f"ip {words[1]} show"
    if "table" in words[:-1]:
        read += f" table {words[words.index('table') + 1]}"
    values = _values(words)
    typed = {v for _, v in values}
    keywords = tuple(w.lower() for w in words[3:] if w not in typed and w.lower() != "nud")
    templates: list[list[Any]] = []
    for command in repairs:
        if command.startswith("ip route replace "):
            if [("routes",)] not in templates:
                templates.append([("routes",)])
            continue
        template: list[Any] = []
        for word in command.split():
            kind = value_type(word)
            if kind is None:
                template.append(word)
                continue
            ranks = [v for t, v in values if t == kind]
            if word not in ranks:
                break  # a value the signature cannot give
            template.append((kind, ranks.index(word)))
        else:
            templates.append(template)
    if not templates:
        return None
    machine = str(fault.get("machine", ""))
    return LearnedKind(
        label=str(fault.get("label", "?")), read=read, keywords=keywords,
        types=tuple(sorted({t for t, _ in values})), repairs=templates,
        where={"router" if machine.startswith("r") else "host"}, seen=1,
    )


class RouteLearner:
    """The learned fault kinds (by label and read) and the agent that uses them."""

    def __init__(self) -> None:
        self.kinds: dict[tuple[str, str], LearnedKind] = {}
        self.learned = 0

    def __str__(self) -> str:
        names = ", ".join(f"{k.label} via '{k.read}' x{k.seen}" for k in self.kinds.values())
        return f"{len(self.kinds)} fault kinds from {self.learned} queries ({names})"

    def learn(self, queries: Iterable[Query]) -> None:
        """Learn from each query's ground truth (``faults``, and the order of ``repair``)."""
        for query in queries:
            faults = query.ground_truth.get("faults", [])
            order = [str(step.get("command", "")) for step in query.ground_truth.get("repair", [])]
            for fault in faults:
                kind = learn_kind(fault)
                if kind is None:
                    continue
                if len(faults) > 1:
                    kind.last = _repaired_last(fault, faults, order)
                known = self.kinds.get((kind.label, kind.read))
                if known is None:
                    self.kinds[(kind.label, kind.read)] = kind
                else:
                    known.seen += 1
                    known.where |= kind.where
                    known.keywords = tuple(k for k in known.keywords if k in kind.keywords)
                    known.repairs.extend(t for t in kind.repairs if t not in known.repairs)
                    if kind.last is not None:
                        known.last = kind.last if known.last is None else known.last and kind.last
            self.learned += 1
        # a signature without words cannot tell a fault from a healthy line, and what the
        # scripted agent reads it also repairs: keep the kinds that add something
        self.kinds = {key: kind for key, kind in self.kinds.items()
                      if kind.keywords and kind.read not in scripted_reads()}

    def reply(self, history: list[JSON]) -> str:
        """The next reply (rule in the module docstring); never raises."""
        first = next((str(m.get("content") or "") for m in history if m.get("role") == "user"),
                     "")
        plan = scripted.read_plan(first)
        fallback = scripted.scripted_reply(history)
        if not plan.machines or not self.kinds:
            return fallback
        steps = scripted._history(history, plan.prefix)
        reads = {k.read for k in self.kinds.values()} | scripted_reads()
        done_reads: set[tuple[str, str]] = set()
        repaired: set[str] = set()
        deferred: list[str] = []  # repairs of kinds repaired last, once nothing else is left
        for position, step in enumerate(steps):
            if step.machine is None or step.command is None:
                continue
            machine = plan.machines.get(step.machine)
            if machine is None:
                continue
            if step.command not in reads:
                repaired.add(step.machine)
                continue
            done_reads.add((step.machine, step.command))
            later = {(s.machine, s.command) for s in steps[position + 1:]}
            for fix, last in self._fixes(machine, step.output):
                if (step.machine, fix) in later:
                    continue
                if last:
                    deferred.append(command_reply(plan.prefix + step.machine, fix))
                    if any(s.command not in reads for s in steps[position + 1:]):
                        return deferred[-1]  # another repair came after it: now it is last
                else:
                    return command_reply(plan.prefix + step.machine, fix)
        suggested = fallback_command(fallback)
        if suggested is not None and suggested[1] not in scripted_reads():
            return fallback  # a repair the scripted agent derived from its reads
        current = _current_failures(history, plan)
        if not current:
            return deferred[0] if deferred else fallback  # healthy, or repaired
        suggested_machine = suggested[0].removeprefix(plan.prefix) if suggested else None
        kinds = sorted(self.kinds.values(), key=lambda k: -k.seen)
        if deferred and not any(
            (name, kind.read) not in done_reads
            for name, _reads in scripted.suspects(plan, current) if not plan.is_router(name)
            for kind in kinds if "host" in kind.where
        ):
            return deferred[0]  # no suspect host is left to read: nothing else to repair first
        for name in _candidates(plan, current):
            if name in repaired:
                continue
            where = "router" if plan.is_router(name) else "host"
            for kind in kinds:
                if where in kind.where and (name, kind.read) not in done_reads:
                    return command_reply(plan.prefix + name, kind.read)
            if name == suggested_machine:
                return fallback  # the scripted agent's next read on the same machine
        if deferred and suggested is None:
            return deferred[0]
        return fallback

    def _fixes(self, machine: scripted.Machine, output: str) -> list[tuple[str, bool]]:
        """The learned repairs of every line of a read's output, each with whether its kind is
        repaired last (a signature is looked for in every read: ``ip addr show`` shows a
        bridge master as ``ip link show`` does)."""
        fixes: list[tuple[str, bool]] = []
        for kind in self.kinds.values():
            for line in output.splitlines():
                values = kind.matches(line)
                if values is not None:
                    fixes.extend((f, bool(kind.last)) for f in kind.fixes(machine, values)
                                 if (f, bool(kind.last)) not in fixes)
        return fixes


def _repaired_last(fault: JSON, faults: list[JSON], order: list[str]) -> bool:
    """Whether ``fault``'s repair commands all come after every other fault's in ``order``
    (the ground truth's repair sequence)."""
    def positions(f: JSON) -> list[int]:
        return [i for i, c in enumerate(order) if c in f.get("repair", [])]

    mine = positions(fault)
    others = [i for f in faults if f is not fault for i in positions(f)]
    return bool(mine) and all(i > j for i in mine for j in others)


def scripted_reads() -> frozenset[str]:
    """The scripted agent's read commands (its other commands are repairs)."""
    return frozenset({scripted.ADDR, scripted.ROUTE, scripted.IPTABLES, scripted.RULE,
                      scripted.NETCONF, scripted.QDISC})


def fallback_command(reply: str) -> tuple[str, str] | None:
    """``(machine, command)`` of a command reply, None for a ``done`` reply."""
    parsed = parse_reply(reply)
    if parsed.command is None or parsed.machine is None:
        return None
    return parsed.machine, parsed.command


def _candidates(plan: scripted.Plan, failing: set[tuple[str, str]]) -> list[str]:
    """Machines to read, in order: the scripted agent's suspects, each host followed by the
    router serving its subnet (a fault on the router can cut one host alone), then every
    router."""
    order: list[str] = []
    for name, _reads in scripted.suspects(plan, failing):
        order.append(name)
        subnet = plan.machines[name].subnet if name in plan.machines else None
        if subnet is not None:
            order.append(plan.owner.get(subnet, "r0"))
    order.extend(sorted(n for n in plan.machines if plan.is_router(n)))
    return list(dict.fromkeys(order))


def _current_failures(history: list[JSON], plan: scripted.Plan) -> set[tuple[str, str]]:
    """The failing pairs of the newest pingall in the history."""
    current: set[tuple[str, str]] = set()
    for message in history:
        if message.get("role") == "user":
            seen = scripted.read_pingall(str(message.get("content") or ""), plan.prefix)
            if seen is not None:
                current = seen
    return current


def learner_from(queries: Iterable[Query]) -> RouteLearner:
    """A :class:`RouteLearner` that has learned from ``queries``."""
    learner = RouteLearner()
    learner.learn(queries)
    return learner
