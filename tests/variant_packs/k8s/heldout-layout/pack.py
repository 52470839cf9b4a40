"""A held-out k8s pack for the test suite: NetworkPolicy faults on *reworked* Online Boutique
graphs whose policies follow a *call-per-policy layout*, stated as a *table of calls*.

Graph. Each query first draws (seeded per pack name, seed, index and level) a rework of the
public service graph (:data:`apps.k8s.manifests.CALLS`, 16 calls), one of four shapes, each
changing two calls so that no query's graph is the public one:

* ``retire-two`` -- two public calls are retired;
* ``add-two`` -- two new calls are added, each from a service that already calls others
  (a service whose egress is open, one that calls nothing, would keep a new call through
  the public set: see the last paragraph);
* ``swap`` -- a caller stops calling one of its services and calls another one instead;
* ``reroute`` -- a service loses one of its callers and gains another one.

New calls never come from redis-cart (a datastore) and never go to loadgenerator (it listens on
no port); a rework has 14 to 18 calls.

Layout (the deployment's healthy set, 27 to 31 policies, under the episode namespace's quota
of 40):

* ``default-deny`` -- the public deny-all policy (every pod isolated both ways);
* one policy per service, named like the service (so it replaces the public one of that
  name), selecting ``app=<service>`` with ``policyTypes: [Egress]`` only: its egress
  allow-list, one rule per service it calls on that service's port/TCP, or ``egress: [{}]``
  for a service that calls nothing;
* one policy per call, ``call-<caller>-to-<callee>``, selecting ``app=<callee>`` with
  ``policyTypes: [Ingress]`` and one ingress rule admitting ``app=<caller>`` on the callee's
  port/TCP.

So a call is admitted at the callee by its own policy and let out at the caller by the
caller's service policy; the public layout (one policy per service holding both directions)
is not used anywhere. The healthy set is checked with the policy model
(:func:`apps.k8s.queries.model_matrix`) to realise exactly the rework's calls.

Wording. The prompt has its own introduction and states the design as a Markdown table of
calls (``| caller | callee | port |``, one row per call, rows by caller then callee in
:data:`apps.k8s.manifests.SERVICES` order), then the public measurement and reply rules.

Faults. The Table 6 kinds of :mod:`apps.k8s.queries`, re-implemented on this layout (the
public injectors assume the public one), and one kind beyond it:

* ``RI`` remove_ingress -- a call policy's ingress rule is deleted;
* ``AI`` add_ingress -- a call policy gains a rule admitting a peer by ``app`` or ``tier``
  label (with the callee's port or without ports);
* ``CP`` change_port -- the port of a call policy's ingress rule or of a service policy's
  egress rule becomes another number;
* ``CPR`` change_protocol -- the protocol of such a rule becomes UDP or SCTP;
* ``AE`` add_egress -- a calling service's egress allow-list is replaced by one rule to some
  peer (with or without its port);
* ``PT`` change_policy_types -- a call policy becomes ``policyTypes: [Egress]`` (its ingress
  rule then counts for nothing) or a service policy ``[Ingress]`` (its egress allow-list then
  counts for nothing, and default-deny blocks the service's calls).

Level 1 has one fault, levels 2 and 3 two on distinct policies, every level 3 pair with AE.
Every fault is visible on its own against the rework's matrix, and the pair together too.

Ground truth (the k8s pack hook of :class:`apps.k8s.episode.K8sEpisode`): ``expected`` is the
rework's calls, ``policies`` the whole injected set, ``repair`` the healthy version of every
faulted policy and of every service policy (all twelve differ from the public policies of
their names, so the oracle must overwrite them), ``baseline`` the call policies no fault
touched. Public policies not named: ``default-deny`` only, identical in this layout. So
``repair`` and ``baseline`` together are the complete healthy set, and the oracle's one apply
restores it. A script that restores the public set reopens the retired calls and cuts the
new ones (their callers' public allow-lists lack them), so mismatches remain; pruning the
policies the public set lacks then leaves the public graph, which is never the rework's.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from apps.k8s import manifests, prompt
from apps.k8s.manifests import APP_LABEL, CALLS, DENY_ALL, SERVICE_PORTS, SERVICES, TIERS
from apps.k8s.queries import FAULT_NAMES, model_matrix
from evaluator.sampling import seeded_rng
from evaluator.variants import pack_query

Obj = dict[str, Any]
Edge = tuple[str, str, str]
Pair = tuple[str, str]
Injector = Callable[[dict[str, Obj], random.Random], Obj]

#: Level -> fault-label combinations of this pack.
LEVEL_LABELS: dict[int, list[tuple[str, ...]]] = {
    1: [("RI",), ("AI",), ("CP",), ("CPR",), ("AE",), ("PT",)],
    2: [("RI", "AI"), ("RI", "CP"), ("RI", "CPR"), ("AI", "CP"), ("AI", "CPR"), ("CP", "CPR"),
        ("PT", "RI"), ("PT", "CP")],
    3: [("CP", "AE"), ("CPR", "AE"), ("RI", "AE"), ("AI", "AE"), ("PT", "AE")],
}
SHAPES = ("retire-two", "add-two", "swap", "reroute")
CALL_PREFIX = "call-"
NEW_FAULT_NAMES = {"PT": "change_policy_types"}
FAULT_LABEL_NAMES = {**FAULT_NAMES, **NEW_FAULT_NAMES}
MAX_DRAWS = 200


@dataclass(frozen=True)
class Rework:
    """One rework of the public graph: its shape, its calls ``(caller, callee)`` and the
    public calls it retires and the new ones it adds (two changes in all)."""

    shape: str
    calls: tuple[Pair, ...]
    retired: tuple[Pair, ...]
    added: tuple[Pair, ...]

    def edges(self) -> set[Edge]:
        """The intended ``(src, dst, "TCP/port")`` of the rework."""
        return {(c, d, f"TCP/{SERVICE_PORTS[d]}") for c, d in self.calls}


def _public_calls() -> list[Pair]:
    return [(c, d) for c in SERVICES for d in CALLS.get(c, ())]


def _may_call(caller: str, callee: str, calls: set[Pair]) -> bool:
    """Whether ``caller -> callee`` may be added: a new call, not from redis-cart, to a
    service that listens on a port."""
    return (caller != callee and caller != "redis-cart" and callee in SERVICE_PORTS
            and (caller, callee) not in calls)


def draw_rework(rng: random.Random) -> Rework:
    """A rework of the public graph (see the module docstring). Never the public graph."""
    shape = rng.choice(SHAPES)
    public = _public_calls()
    calls = set(public)
    retired: list[Pair] = []
    added: list[Pair] = []
    if shape == "retire-two":
        retired = rng.sample(public, 2)
    elif shape == "add-two":
        candidates = [(c, d) for c in SERVICES if c in CALLS for d in SERVICES
                      if _may_call(c, d, calls)]
        added = rng.sample(candidates, 2)
    elif shape == "swap":
        caller, old = rng.choice(public)
        new = rng.choice([d for d in SERVICES if d != old and _may_call(caller, d, calls)])
        retired, added = [(caller, old)], [(caller, new)]
    else:  # reroute
        old, callee = rng.choice(public)
        new = rng.choice([c for c in SERVICES if c != old and _may_call(c, callee, calls)])
        retired, added = [(old, callee)], [(new, callee)]
    calls = (calls - set(retired)) | set(added)
    order = {s: i for i, s in enumerate(SERVICES)}
    ordered = tuple(sorted(calls, key=lambda p: (order[p[0]], order[p[1]])))
    return Rework(shape, ordered, tuple(retired), tuple(added))


# ------------------------------------------------------------------------------ the layout

def _peer(service: str) -> Obj:
    return {"podSelector": {"matchLabels": {APP_LABEL: service}}}


def _ports(service: str) -> list[Obj]:
    return [{"port": SERVICE_PORTS[service], "protocol": "TCP"}]


def _policy(name: str, selects: str, types: list[str], spec: Obj) -> Obj:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": {"podSelector": {"matchLabels": {APP_LABEL: selects}}, "policyTypes": types,
                 **spec},
    }


def call_policy_name(caller: str, callee: str) -> str:
    """Name of the policy that admits call ``caller -> callee`` at the callee."""
    return f"{CALL_PREFIX}{caller}-to-{callee}"


def layout_policies(rework: Rework) -> dict[str, Obj]:
    """The rework's healthy set in this pack's layout (module docstring), by name:
    ``default-deny``, the twelve service policies (egress only), then one call policy per
    call (ingress only)."""
    policies = {DENY_ALL: manifests.deny_all_policy()}
    for service in SERVICES:
        callees = [d for c, d in rework.calls if c == service]
        egress = [{"to": [_peer(d)], "ports": _ports(d)} for d in callees] if callees else [{}]
        policies[service] = _policy(service, service, ["Egress"], {"egress": egress})
    for caller, callee in rework.calls:
        name = call_policy_name(caller, callee)
        policies[name] = _policy(name, callee, ["Ingress"], {
            "ingress": [{"from": [_peer(caller)], "ports": _ports(callee)}]})
    return policies


# ---------------------------------------------------------------------------------- faults

def _call_names(policies: dict[str, Obj]) -> list[str]:
    return [n for n in sorted(policies) if n.startswith(CALL_PREFIX)]


def _selected(policy: Obj) -> str:
    return str((policy["spec"].get("podSelector", {}).get("matchLabels") or {}).get(APP_LABEL))


def _port_rules(policies: dict[str, Obj]) -> list[tuple[str, str, int]]:
    """``(policy, direction, rule index)`` of every ingress or egress rule that lists ports."""
    return [(name, direction, i)
            for name in sorted(policies)
            for direction in ("ingress", "egress")
            for i, rule in enumerate(policies[name]["spec"].get(direction) or [])
            if rule.get("ports")]


def _inject_ri(policies: dict[str, Obj], rng: random.Random) -> Obj:
    name = rng.choice([n for n in _call_names(policies) if policies[n]["spec"].get("ingress")])
    rules = policies[name]["spec"]["ingress"]
    removed = rules.pop(rng.randrange(len(rules)))
    peers = [p.get("podSelector", {}).get("matchLabels", {}) for p in removed.get("from", [])]
    return {"policy": name, "detail": f"removed the ingress rule from {peers}"}


def _inject_ai(policies: dict[str, Obj], rng: random.Random) -> Obj:
    name = rng.choice(_call_names(policies))
    callee = _selected(policies[name])
    if rng.random() < 0.25:
        tier = rng.choice(sorted({*TIERS.values(), "backend"}))
        peer: Obj = {"podSelector": {"matchLabels": {"tier": tier}}}
        who = f"tier={tier}"
    else:
        source = rng.choice([s for s in SERVICES if s != callee])
        peer, who = _peer(source), f"{APP_LABEL}={source}"
    rule: Obj = {"from": [peer]}
    if rng.random() < 0.6:
        rule["ports"] = _ports(callee)
    rules = policies[name]["spec"].setdefault("ingress", [])
    rules.insert(rng.randrange(len(rules) + 1), rule)
    return {"policy": name, "detail": f"added an ingress rule from {who}"}


def _inject_cp(policies: dict[str, Obj], rng: random.Random) -> Obj:
    name, direction, index = rng.choice(_port_rules(policies))
    entry = policies[name]["spec"][direction][index]["ports"][0]
    old = int(entry["port"])
    entry["port"] = rng.choice(sorted({*SERVICE_PORTS.values(), old - 1, old + 1, 80, 443,
                                       8443, 9090} - {old}))
    return {"policy": name, "detail": f"{direction} rule {index}: port {old} -> {entry['port']}"}


def _inject_cpr(policies: dict[str, Obj], rng: random.Random) -> Obj:
    name, direction, index = rng.choice(_port_rules(policies))
    entry = policies[name]["spec"][direction][index]["ports"][0]
    entry["protocol"] = rng.choice(["UDP", "SCTP"])
    return {"policy": name,
            "detail": f"{direction} rule {index}: protocol TCP -> {entry['protocol']}"}


def _inject_ae(policies: dict[str, Obj], rng: random.Random) -> Obj:
    name = rng.choice([s for s in SERVICES
                       if any(r.get("to") for r in policies[s]["spec"].get("egress") or [])])
    target = rng.choice([s for s in SERVICES if s != name])
    rule: Obj = {"to": [_peer(target)]}
    if target in SERVICE_PORTS and rng.random() < 0.5:
        rule["ports"] = _ports(target)
    policies[name]["spec"]["egress"] = [rule]
    return {"policy": name, "detail": f"egress rules replaced by one to {APP_LABEL}={target}"}


def _inject_pt(policies: dict[str, Obj], rng: random.Random) -> Obj:
    name = rng.choice([n for n in sorted(policies) if n != DENY_ALL])
    spec = policies[name]["spec"]
    old = list(spec["policyTypes"])
    spec["policyTypes"] = ["Egress"] if old == ["Ingress"] else ["Ingress"]
    return {"policy": name, "detail": f"policyTypes {old} -> {spec['policyTypes']}"}


INJECTORS: dict[str, Injector] = {
    "RI": _inject_ri, "AI": _inject_ai, "CP": _inject_cp, "CPR": _inject_cpr,
    "AE": _inject_ae, "PT": _inject_pt,
}


def _draw_fault(label: str, policies: dict[str, Obj], healthy: dict[str, Obj],
                taken: set[str], expected: set[Edge], rng: random.Random) -> tuple[Obj, dict]:
    """One fault ``label`` on a policy no earlier fault touched, visible on its own against
    ``expected``: ``(fault, policies with the fault)``. Raises RuntimeError after
    :data:`MAX_DRAWS` draws."""
    for _ in range(MAX_DRAWS):
        trial = copy.deepcopy(policies)
        fault = INJECTORS[label](trial, rng)
        if fault["policy"] in taken:
            continue
        alone = dict(healthy)
        alone[fault["policy"]] = trial[fault["policy"]]
        if model_matrix(alone) == expected:
            continue
        return {"label": label, "name": FAULT_LABEL_NAMES[label], **fault}, trial
    raise RuntimeError(f"no visible {label} fault after {MAX_DRAWS} draws")


def _pairs(pairs: tuple[Pair, ...]) -> list[list[str]]:
    return [[c, d, f"TCP/{SERVICE_PORTS[d]}"] for c, d in pairs]


def ground_truth(labels: tuple[str, ...], rng: random.Random) -> dict[str, Any]:
    """Draw a rework and inject ``labels`` into its healthy set (see the module docstring).

    Returns:
        ``{"faults": [{"label", "name", "policy", "detail"}], "policies": {name: policy}``
        (the injected set), ``"repair"``, ``"baseline"`` (``{name: healthy policy}``),
        ``"expected"``, ``"initial_allowed"`` (``[[src, dst, "TCP/port"], ...]``, sorted),
        ``"variant": {"shape", "retired", "added", "layout"}}``.

    Raises:
        RuntimeError: the layout does not realise the rework or drops a public policy name
            (a bug), or no visible faults within :data:`MAX_DRAWS` draws.
    """
    rework = draw_rework(rng)
    healthy = layout_policies(rework)
    expected = rework.edges()
    public = manifests.healthy_policies()
    if model_matrix(healthy) != expected or set(public) - set(healthy):
        raise RuntimeError(f"the layout of {rework} is not its healthy set")
    for _ in range(MAX_DRAWS):
        policies = copy.deepcopy(healthy)
        faults: list[Obj] = []
        for label in labels:
            fault, policies = _draw_fault(label, policies, healthy,
                                          {f["policy"] for f in faults}, expected, rng)
            faults.append(fault)
        initial = model_matrix(policies)
        if initial == expected:
            continue
        faulted = {f["policy"] for f in faults}
        rewritten = {n for n in public if healthy[n] != public[n]}
        return {
            "faults": faults,
            "policies": policies,
            "repair": {n: healthy[n] for n in sorted(faulted | rewritten)},
            "baseline": {n: healthy[n] for n in sorted(healthy)
                         if n not in public and n not in faulted},
            "expected": sorted([list(e) for e in expected]),
            "initial_allowed": sorted([list(e) for e in initial]),
            "variant": {"shape": rework.shape, "retired": _pairs(rework.retired),
                        "added": _pairs(rework.added), "layout": "call-policies"},
        }
    raise RuntimeError(f"faults {labels} cancel out in {MAX_DRAWS} draws")


# ------------------------------------------------------------------------------- the prompt

INTRO = """\
You are the on-call engineer for one deployment of Online Boutique, the twelve-microservice web \
shop, which runs in a single Kubernetes namespace. Every service is one Deployment and its pods \
are labelled app=<service name>. The team behind this deployment has reworked which service \
calls which, so the table below, and not the usual Online Boutique diagram, is the design its \
NetworkPolicies have to implement. A recent change to those policies is suspected of breaking \
that design. Find the policies that no longer fit it and correct them with kubectl, so that \
the measured connectivity is exactly the design. If nothing needs fixing, change nothing and \
say so.

Calls of this deployment's design (one row per call; the port is the callee's container port):

| caller | callee | port |
|---|---|---|
{rows}

Any connection between two pods that is not a row of this table must be blocked.
"""
RULES_START = "How connectivity is measured"


def calls_table(edges: set[Edge]) -> str:
    """The table rows of ``edges`` (``| caller | callee | port/TCP |``), by caller then callee
    in :data:`apps.k8s.manifests.SERVICES` order."""
    order = {s: i for i, s in enumerate(SERVICES)}
    rows = sorted(edges, key=lambda e: (order[e[0]], order[e[1]]))
    return "\n".join(f"| {src} | {dst} | {port.split('/')[1]}/TCP |" for src, dst, port in rows)


def render(edges: set[Edge], max_steps: int) -> str:
    """The task prompt: this pack's introduction and table, then the public measurement and
    reply rules (:func:`apps.k8s.prompt.render_prompt`).

    Raises:
        ValueError: the public prompt no longer has its rules section.
    """
    public = prompt.render_prompt(max_steps)
    if RULES_START not in public:
        raise ValueError(f"the public k8s prompt has no {RULES_START!r} section")
    return INTRO.format(rows=calls_table(edges)) + "\n" + public[public.index(RULES_START):]


def generate(app: Any, pack: Any, seed: int, indices: list[int], level: int | None) -> list[Any]:
    """One query per index (see the module docstring); ``level`` fixes the level, else it is
    drawn from the pack's levels. Same ``(seed, index, level)``, same query.

    Raises:
        RuntimeError: as :func:`ground_truth`.
    """
    out = []
    for index in indices:
        rng = seeded_rng(pack.name, seed, index, "any" if level is None else level)
        query_level = level if level is not None else rng.choice(list(pack.levels))
        labels = rng.choice(LEVEL_LABELS[query_level])
        truth = ground_truth(labels, rng)
        text = render({(s, d, p) for s, d, p in truth["expected"]}, app.max_steps)
        out.append(pack_query(app, pack, seed=seed, index=index, level=query_level,
                              labels=labels, prompt=text, ground_truth=truth))
    return out
