"""A held-out k8s pack for the test suite: NetworkPolicy faults on *architecture variants* of
Online Boutique.

Each query first draws (seeded per index, apart from the public stream) a variant of the
public service graph (:data:`apps.k8s.manifests.CALLS`), one of four shapes:

* ``retire`` -- one intended call is retired (the caller no longer calls that service);
* ``add`` -- one service now also calls another one on its port, written into both services'
  own policies (caller egress rule, callee ingress rule);
* ``add+retire`` -- both of the above;
* ``add-separate+retire`` -- a call is retired and a new one is added through two new
  policies, ``<callee>-from-<caller>`` (ingress) and ``<caller>-to-<callee>`` (egress), as a
  team adding an integration might write them.

The variant's healthy set follows the public rules (:mod:`apps.k8s.manifests`: one ingress
rule per caller, an egress allow-list for every service that calls something, ``egress: [{}]``
for the others) on the variant's graph, and its intended matrix is checked with the policy
model to equal the variant's graph. The task prompt states that graph in this pack's own
wording (by receiving service), followed by the public reply rules.

Faults are then injected into the variant's healthy set: the Table 6 kinds of
:mod:`apps.k8s.queries` (RI, AI, CP, CPR, AE) and two kinds beyond Table 6:

* ``SEL`` retarget_selector -- a policy's ``podSelector`` names another service;
* ``NSP`` open_peer -- one ingress rule's peers become ``namespaceSelector: {}``,
  ``podSelector: {}`` or nothing at all (everyone may connect on that port).

Level 1 has one fault, levels 2 and 3 two (on distinct policies; level 3 pairs include AE or
one of the new kinds with AE). Every fault is visible on its own against the variant's matrix.

Ground truth (the k8s pack hook of :class:`apps.k8s.episode.K8sEpisode`): ``expected`` is the
variant's matrix, ``policies`` the whole injected set, ``repair`` the variant-healthy version
of every faulted policy and of every public policy the variant changes, ``baseline`` the
variant's new policies that no fault touched. The oracle's one apply restores the variant; a
script that restores the public set cuts the variant's new call and reopens its retired one.
"""

from __future__ import annotations

import copy
import hashlib
import random
from dataclasses import dataclass
from typing import Any

from apps.k8s import manifests, prompt
from apps.k8s.manifests import APP_LABEL, CALLS, DENY_ALL, SERVICE_PORTS, SERVICES
from apps.k8s.queries import FAULT_NAMES, INJECTORS, model_matrix
from evaluator.variants import pack_query

Obj = dict[str, Any]
Edge = tuple[str, str, str]

#: Level -> fault-label combinations of this pack.
LEVEL_LABELS: dict[int, list[tuple[str, ...]]] = {
    1: [("RI",), ("AI",), ("CP",), ("CPR",), ("AE",), ("SEL",), ("NSP",)],
    2: [("RI", "AI"), ("RI", "CP"), ("AI", "CPR"), ("CP", "CPR"), ("SEL", "RI"),
        ("NSP", "CP"), ("SEL", "NSP")],
    3: [("CP", "AE"), ("CPR", "AE"), ("RI", "AE"), ("AI", "AE"), ("SEL", "AE"),
        ("NSP", "AE")],
}
SHAPES = ("retire", "add", "add+retire", "add-separate+retire")
NEW_FAULT_NAMES = {"SEL": "retarget_selector", "NSP": "open_peer"}
MAX_DRAWS = 200


@dataclass(frozen=True)
class Variant:
    """One architecture variant: its call graph (``calls``, written into the services' own
    policies) and the call added through separate policies (``separate``), if any."""

    shape: str
    calls: dict[str, tuple[str, ...]]
    added: tuple[str, str] | None
    retired: tuple[str, str] | None
    separate: tuple[str, str] | None

    def edges(self) -> set[Edge]:
        """The intended ``(src, dst, "TCP/port")`` of the variant."""
        pairs = [(c, d) for c, ds in self.calls.items() for d in ds]
        if self.separate is not None:
            pairs.append(self.separate)
        return {(c, d, f"TCP/{SERVICE_PORTS[d]}") for c, d in pairs}


def _edge(pair: tuple[str, str] | None) -> list[str] | None:
    return None if pair is None else [pair[0], pair[1], f"TCP/{SERVICE_PORTS[pair[1]]}"]


def draw_variant(rng: random.Random) -> Variant:
    """A variant of the public graph (see the module docstring): retired calls are public
    ones; added calls are new, never from redis-cart, never to loadgenerator (no port)."""
    shape = rng.choice(SHAPES)
    calls = {c: list(ds) for c, ds in CALLS.items()}
    retired = added = separate = None
    if "retire" in shape:
        retired = rng.choice([(c, d) for c in CALLS for d in CALLS[c]])
        calls[retired[0]].remove(retired[1])
    if shape.startswith("add"):
        pair = rng.choice([
            (c, d) for c in SERVICES if c != "redis-cart"
            for d in SERVICES if d in SERVICE_PORTS and d != c
            and d not in CALLS.get(c, ()) and (c, d) != retired
        ])
        added = pair
        if "separate" in shape:
            separate = pair
        else:
            calls.setdefault(pair[0], []).append(pair[1])
    kept = {c: tuple(ds) for c, ds in calls.items() if ds}
    return Variant(shape, kept, added, retired, separate)


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


def separate_names(pair: tuple[str, str]) -> tuple[str, str]:
    """Names of the two policies that add call ``(caller, callee)``: ingress, egress."""
    caller, callee = pair
    return f"{callee}-from-{caller}", f"{caller}-to-{callee}"


def variant_policies(variant: Variant) -> dict[str, Obj]:
    """The variant's healthy set: the public rules on the variant's graph, plus the two
    separate policies of a separately added call. Equals the public healthy set for the
    public graph."""
    policies = {DENY_ALL: manifests.deny_all_policy()}
    for service in SERVICES:
        callers = [c for c in SERVICES if service in variant.calls.get(c, ())]
        ingress = [{"from": [_peer(c)], "ports": _ports(service)} for c in callers] \
            if service in SERVICE_PORTS else []
        deps = variant.calls.get(service, ())
        egress = [{"to": [_peer(d)], "ports": _ports(d)} for d in deps] if deps else [{}]
        policies[service] = _policy(service, service, ["Ingress", "Egress"],
                                    {"ingress": ingress, "egress": egress})
    if variant.separate is not None:
        caller, callee = variant.separate
        in_name, out_name = separate_names(variant.separate)
        policies[in_name] = _policy(in_name, callee, ["Ingress"], {
            "ingress": [{"from": [_peer(caller)], "ports": _ports(callee)}]})
        policies[out_name] = _policy(out_name, caller, ["Egress"], {
            "egress": [{"to": [_peer(callee)], "ports": _ports(callee)}]})
    return policies


# ----------------------------------------------------------------------- faults beyond Table 6

def _inject_sel(policies: dict[str, Obj], rng: random.Random) -> Obj:
    names = [n for n in sorted(policies)
             if (policies[n]["spec"]["podSelector"].get("matchLabels") or {}).get(APP_LABEL)]
    name = rng.choice(names)
    labels = policies[name]["spec"]["podSelector"]["matchLabels"]
    old = labels[APP_LABEL]
    labels[APP_LABEL] = rng.choice([s for s in SERVICES if s != old])
    return {"policy": name, "detail": f"podSelector app={old} -> app={labels[APP_LABEL]}"}


def _inject_nsp(policies: dict[str, Obj], rng: random.Random) -> Obj:
    rules = [(n, i) for n in sorted(policies)
             for i, rule in enumerate(policies[n]["spec"].get("ingress") or []) if rule.get("from")]
    name, index = rng.choice(rules)
    rule = policies[name]["spec"]["ingress"][index]
    form = rng.choice(("namespaceSelector", "podSelector", "none"))
    if form == "none":
        del rule["from"]
        detail = f"ingress rule {index}: peers removed (everyone admitted)"
    else:
        rule["from"] = [{form: {}}]
        detail = f"ingress rule {index}: peers replaced by {form}: {{}}"
    return {"policy": name, "detail": detail}


PACK_INJECTORS = {**INJECTORS, "SEL": _inject_sel, "NSP": _inject_nsp}
PACK_FAULT_NAMES = {**FAULT_NAMES, **NEW_FAULT_NAMES}


def _draw_fault(label: str, policies: dict[str, Obj], healthy: dict[str, Obj],
                taken: set[str], expected: set[Edge], rng: random.Random) -> tuple[Obj, dict]:
    """One fault ``label`` on a policy no earlier fault touched, visible on its own against
    ``expected``. Raises RuntimeError after :data:`MAX_DRAWS` draws."""
    for _ in range(MAX_DRAWS):
        trial = copy.deepcopy(policies)
        fault = PACK_INJECTORS[label](trial, rng)
        if fault["policy"] in taken:
            continue
        alone = copy.deepcopy(healthy)
        alone[fault["policy"]] = trial[fault["policy"]]
        if model_matrix(alone) == expected:
            continue
        return {"label": label, "name": PACK_FAULT_NAMES[label], **fault}, trial
    raise RuntimeError(f"no visible {label} fault after {MAX_DRAWS} draws")


def ground_truth(labels: tuple[str, ...], rng: random.Random) -> dict[str, Any]:
    """Draw a variant and inject ``labels`` into its healthy set (see the module docstring).

    Raises:
        RuntimeError: the variant's model matrix is not its graph (a bug), or no visible
            faults within :data:`MAX_DRAWS` draws.
    """
    variant = draw_variant(rng)
    healthy = variant_policies(variant)
    expected = variant.edges()
    if model_matrix(healthy) != expected:
        raise RuntimeError(f"variant {variant} does not realise its own graph")
    public = manifests.healthy_policies()
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
        changed = {n for n in healthy if n in public and healthy[n] != public[n]}
        return {
            "faults": faults,
            "policies": policies,
            "repair": {n: healthy[n] for n in sorted(faulted | changed)},
            "baseline": {n: healthy[n] for n in sorted(healthy)
                         if n not in public and n not in faulted},
            "expected": sorted([list(e) for e in expected]),
            "initial_allowed": sorted([list(e) for e in initial]),
            "variant": {"shape": variant.shape, "added": _edge(variant.added),
                        "retired": _edge(variant.retired),
                        "separate_policies": variant.separate is not None},
        }
    raise RuntimeError(f"faults {labels} cancel out in {MAX_DRAWS} draws")


# ------------------------------------------------------------------------------- the prompt

INTRO = """\
You are on call for one deployment of Online Boutique, the web shop built from twelve \
microservices, all in one Kubernetes namespace. Each service is a single Deployment whose pods \
are labelled app=<service name>, and NetworkPolicies govern which pods may open connections to \
which. This deployment has its own service graph: the list below, and no other description of \
Online Boutique, is what its policies must implement. Someone has reportedly edited the \
policies, so the measured connectivity may have drifted from the intended one. Work out which \
policies are wrong and correct them with kubectl until the measured connectivity matches the \
intended connectivity exactly. If you find nothing wrong, leave everything as it is and say so.

Intended connectivity, listed by the receiving service (ports are container ports):
{graph}
"""
RULES_START = "How connectivity is measured"


def graph_text(edges: set[Edge]) -> str:
    """The intended connectivity by receiving service, in this pack's wording."""
    lines = []
    for dst in SERVICES:
        if dst not in SERVICE_PORTS:
            lines.append(f"- {dst} listens on no port; no connection to it is intended.")
            continue
        callers = [s for s in SERVICES if (s, dst, f"TCP/{SERVICE_PORTS[dst]}") in edges]
        if callers:
            who = ", ".join(callers[:-1]) + (" and " if len(callers) > 1 else "") + callers[-1]
            lines.append(f"- {dst} ({SERVICE_PORTS[dst]}/TCP) accepts connections from {who}.")
        else:
            lines.append(f"- {dst} ({SERVICE_PORTS[dst]}/TCP) accepts no connection from the "
                         "other services.")
    lines.append("- Nothing else: every pod-to-pod connection not listed here must be blocked.")
    return "\n".join(lines)


def render(edges: set[Edge], max_steps: int) -> str:
    """The task prompt of a variant: this pack's introduction and graph, then the public
    measurement and reply rules (:func:`apps.k8s.prompt.render_prompt`).

    Raises:
        ValueError: the public prompt no longer has its rules section.
    """
    public = prompt.render_prompt(max_steps)
    if RULES_START not in public:
        raise ValueError(f"the public k8s prompt has no {RULES_START!r} section")
    rules = public[public.index(RULES_START):]
    return INTRO.format(graph=graph_text(edges)) + "\n" + rules


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def generate(app: Any, pack: Any, seed: int, indices: list[int], level: int | None) -> list[Any]:
    """One query per index (see the module docstring); ``level`` fixes the level, else it is
    drawn from the pack's levels. Same ``(seed, index, level)``, same query.

    Raises:
        RuntimeError: as :func:`ground_truth`.
    """
    out = []
    for index in indices:
        rng = _rng(pack.name, seed, index, "any" if level is None else level)
        query_level = level if level is not None else rng.choice(list(pack.levels))
        labels = rng.choice(LEVEL_LABELS[query_level])
        truth = ground_truth(labels, rng)
        text = render({(s, d, p) for s, d, p in truth["expected"]}, app.max_steps)
        out.append(pack_query(app, pack, seed=seed, index=index, level=query_level,
                              labels=labels, prompt=text, ground_truth=truth))
    return out
