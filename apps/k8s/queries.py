"""Query generation for the ``k8s`` app: fault injection into Online Boutique's policies.

The five basic faults of the paper's Appendix D.2, each editing one NetworkPolicy of the
healthy set (:func:`apps.k8s.manifests.healthy_policies`):

* ``RI`` remove_ingress -- one ingress rule of a service's policy is deleted;
* ``AI`` add_ingress -- a rule admitting a peer that should not reach the service is added
  (peer by ``app`` or ``tier`` label, with the service's port or without ports);
* ``CP`` change_port -- in a caller's egress allow-list, the port of the rule for one of its
  dependencies becomes another number (another service's port or a near miss);
* ``CPR`` change_protocol -- the protocol of such a rule becomes UDP or SCTP;
* ``AE`` add_egress -- a caller's egress section is replaced by one new rule to some peer
  (with or without its port), as the reference harness does (research notes, D: "add_egress
  replaces the egress rules"), so the caller may talk to that peer only.

Where the faults act is part of the task: RI and AI show up at the destination named by the
report, while CP, CPR and AE sit at the source's end of the connection (its egress
allow-list), which the report does not name -- the agent has to read both ends.

Levels and labels follow the paper's Table 6: level 1 the five singles, level 2 RI+AI, RI+CP,
RI+CPR, AI+CP, AI+CPR, CP+CPR, level 3 CP+AE, CPR+AE, RI+AE, AI+AE. The two faults of a
combination edit two different policies ("two separate YAML files", App. D.2). Every fault
must change the expected matrix on its own (checked with the project's one NetworkPolicy
model, :mod:`apps.k8s.cluster.policy_model`);
otherwise its operands are drawn again. Same seed, same query.
"""

from __future__ import annotations

import random
from typing import Any

from evaluator.sampling import LabelDraw, level_in, seeded_queries
from evaluator.types import Query

from apps.k8s import manifests, prompt
from apps.k8s.cluster.policy_model import Pod, PolicyModel, in_namespace
from apps.k8s.manifests import APP_LABEL, CALLS, SERVICE_PORTS, SERVICES, Obj

#: Level -> fault-label combinations (paper Table 6).
LEVEL_LABELS: dict[int, list[tuple[str, ...]]] = {
    1: [("RI",), ("AI",), ("CP",), ("CPR",), ("AE",)],
    2: [
        ("RI", "AI"),
        ("RI", "CP"),
        ("RI", "CPR"),
        ("AI", "CP"),
        ("AI", "CPR"),
        ("CP", "CPR"),
    ],
    3: [("CP", "AE"), ("CPR", "AE"), ("RI", "AE"), ("AI", "AE")],
}

FAULT_NAMES: dict[str, str] = {
    "RI": "remove_ingress",
    "AI": "add_ingress",
    "CP": "change_port",
    "CPR": "change_protocol",
    "AE": "add_egress",
}

MAX_DRAWS = 200
"""Operand draws per fault before generation gives up (never reached by the shipped set)."""


def level_of(labels: tuple[str, ...]) -> int:
    """Level of a label combination. Raises ``KeyError`` for a combination not in Table 6."""
    return level_in(LEVEL_LABELS, labels)


MODEL_NAMESPACE = "model"
"""Namespace of the generation-time model (the episode's real namespace is not known yet)."""


def model_pods() -> dict[str, Pod]:
    """One model pod per service, with the labels and ports of :mod:`apps.k8s.manifests`,
    in :data:`MODEL_NAMESPACE` (no IP: the model needs none for pod-to-pod decisions)."""
    pods = {}
    for service in SERVICES:
        dep = manifests.deployment(service)
        tmpl = dep["spec"]["template"]
        ports = tuple(
            (p.get("protocol", "TCP"), int(p["containerPort"]), p.get("name", ""))
            for c in tmpl["spec"]["containers"]
            for p in c.get("ports") or []
        )
        pods[service] = Pod(MODEL_NAMESPACE, service, "", dict(tmpl["metadata"]["labels"]), ports)
    return pods


def model_matrix(policies: dict[str, Obj]) -> set[tuple[str, str, str]]:
    """Allowed ``(src, dst, "TCP/port")`` of the probe plan under ``policies`` (model)."""
    pods = model_pods()
    model = PolicyModel(
        pods.values(), {MODEL_NAMESPACE: {}}, in_namespace(policies.values(), MODEL_NAMESPACE)
    )
    result = set()
    for src, dst, port_key in manifests.probe_plan():
        proto, _, port = port_key.partition("/")
        if model.allows(pods[src], pods[dst], proto, int(port)):
            result.add((src, dst, port_key))
    return result


def _rules_with_ports(
    policies: dict[str, Obj], directions: tuple[str, ...] = ("egress",)
) -> list[tuple[str, str, int]]:
    """``(policy, direction, rule index)`` of every rule of ``directions`` that lists ports."""
    found = []
    for name in sorted(policies):
        spec = policies[name]["spec"]
        for direction in directions:
            for i, rule in enumerate(spec.get(direction) or []):
                if rule.get("ports"):
                    found.append((name, direction, i))
    return found


def _peer_name(rule: Obj, key: str) -> str:
    peers = rule.get(key) or []
    names = [
        "/".join(f"{k}={v}" for k, v in (p.get("podSelector", {}).get("matchLabels") or {}).items())
        for p in peers
    ]
    return ", ".join(n for n in names if n) or "any pod"


def _inject_ri(policies: dict[str, Obj], rng: random.Random) -> JSONFault:
    names = [n for n in sorted(policies) if policies[n]["spec"].get("ingress")]
    name = rng.choice(names)
    rules = policies[name]["spec"]["ingress"]
    index = rng.randrange(len(rules))
    removed = rules.pop(index)
    return {"policy": name, "detail": f"removed ingress rule from {_peer_name(removed, 'from')}"}


def _inject_ai(policies: dict[str, Obj], rng: random.Random) -> JSONFault:
    dst = rng.choice([s for s in SERVICES if s in SERVICE_PORTS])
    peer: Obj
    if rng.random() < 0.25:
        tier = rng.choice(["backend", "web", "test", "data"])
        peer = {"podSelector": {"matchLabels": {"tier": tier}}}
        who = f"tier={tier}"
    else:
        src = rng.choice([s for s in SERVICES if s != dst])
        peer = {"podSelector": {"matchLabels": {APP_LABEL: src}}}
        who = f"{APP_LABEL}={src}"
    rule: Obj = {"from": [peer]}
    if rng.random() < 0.6:
        rule["ports"] = [{"port": SERVICE_PORTS[dst], "protocol": "TCP"}]
    spec = policies[dst]["spec"]
    spec.setdefault("ingress", []).insert(rng.randrange(len(spec["ingress"]) + 1), rule)
    return {"policy": dst, "detail": f"added ingress rule from {who}"}


def _inject_cp(policies: dict[str, Obj], rng: random.Random) -> JSONFault:
    name, direction, index = rng.choice(_rules_with_ports(policies))
    entry = policies[name]["spec"][direction][index]["ports"][0]
    old = int(entry["port"])
    choices = sorted({*SERVICE_PORTS.values(), old + 1, old - 1, 80, 443, 8443, 9090} - {old})
    entry["port"] = rng.choice(choices)
    return {"policy": name, "detail": f"{direction} rule {index}: port {old} -> {entry['port']}"}


def _inject_cpr(policies: dict[str, Obj], rng: random.Random) -> JSONFault:
    name, direction, index = rng.choice(_rules_with_ports(policies))
    entry = policies[name]["spec"][direction][index]["ports"][0]
    entry["protocol"] = rng.choice(["UDP", "SCTP"])
    return {
        "policy": name,
        "detail": f"{direction} rule {index}: protocol TCP -> {entry['protocol']}",
    }


def _inject_ae(policies: dict[str, Obj], rng: random.Random) -> JSONFault:
    name = rng.choice([s for s in SERVICES if s in CALLS])
    target = rng.choice([s for s in SERVICES if s != name])
    rule: Obj = {"to": [{"podSelector": {"matchLabels": {APP_LABEL: target}}}]}
    if target in SERVICE_PORTS and rng.random() < 0.5:
        rule["ports"] = [{"port": SERVICE_PORTS[target], "protocol": "TCP"}]
    policies[name]["spec"]["egress"] = [rule]
    return {"policy": name, "detail": f"egress rules replaced by one to {APP_LABEL}={target}"}


JSONFault = dict[str, Any]

INJECTORS = {
    "RI": _inject_ri,
    "AI": _inject_ai,
    "CP": _inject_cp,
    "CPR": _inject_cpr,
    "AE": _inject_ae,
}


def sample_ground_truth(labels: tuple[str, ...], rng: random.Random) -> dict[str, Any]:
    """Inject the faults ``labels`` (in order, on distinct policies) into the healthy set.

    Returns:
        ``{"faults": [{"label", "name", "policy", "detail"}], "policies": {name: policy}``
        (the whole injected set), ``"repair": {name: healthy policy}`` (the faulted ones),
        ``"expected": [[src, dst, "TCP/port"], ...]``, ``"initial_allowed": [...]`` (model)}.

    Raises:
        RuntimeError: no operands producing a visible fault within :data:`MAX_DRAWS` draws.
    """
    healthy = manifests.healthy_policies()
    expected = manifests.expected_edges()
    for _ in range(MAX_DRAWS):
        policies = manifests.policy_copy(healthy)
        faults: list[JSONFault] = []
        for label in labels:
            fault, policies = _draw_fault(label, policies, healthy, faults, expected, rng)
            faults.append(fault)
        initial = model_matrix(policies)
        if initial != expected:
            return {
                "faults": faults,
                "policies": policies,
                "repair": {f["policy"]: healthy[f["policy"]] for f in faults},
                "expected": sorted([list(e) for e in expected]),
                "initial_allowed": sorted([list(e) for e in initial]),
            }
    raise RuntimeError(f"faults {labels} cancel out in {MAX_DRAWS} draws")


def healthy_ground_truth() -> dict[str, Any]:
    """The ground truth of a healthy control: the healthy set, nothing to repair."""
    expected = sorted([list(e) for e in manifests.expected_edges()])
    return {
        "healthy": True,
        "faults": [],
        "policies": manifests.healthy_policies(),
        "repair": {},
        "expected": expected,
        "initial_allowed": expected,
    }


def _draw_fault(
    label: str,
    policies: dict[str, Obj],
    healthy: dict[str, Obj],
    faults: list[JSONFault],
    expected: set[tuple[str, str, str]],
    rng: random.Random,
) -> tuple[JSONFault, dict[str, Obj]]:
    """One visible fault ``label`` on a policy no earlier fault touched."""
    for _ in range(MAX_DRAWS):
        trial = manifests.policy_copy(policies)
        fault = INJECTORS[label](trial, rng)
        if any(f["policy"] == fault["policy"] for f in faults):
            continue
        alone = manifests.policy_copy(healthy)
        alone[fault["policy"]] = trial[fault["policy"]]
        if model_matrix(alone) == expected:
            continue
        return {"label": label, "name": FAULT_NAMES[label], **fault}, trial
    raise RuntimeError(f"no visible {label} fault after {MAX_DRAWS} draws")


def generate_queries(
    count: int,
    seed: int,
    level: int | None,
    *,
    app_id: str,
    version: int,
    levels: tuple[int, ...],
    max_steps: int,
    healthy_share: float = 0.0,
) -> list[Query]:
    """Return ``count`` k8s queries for ``seed`` (see :meth:`apps.k8s.app.K8sApp.generate`).

    ``healthy_share`` of them (placed by :func:`evaluator.sampling.seeded_queries`) are healthy
    controls: label ``HEALTHY``, the healthy policy set, no fault, ``"healthy": True`` in the
    ground truth, and the same prompt as every other query.

    Raises:
        ValueError: negative count or a level not in ``levels``.
    """
    text = prompt.render_prompt(max_steps)

    def build(draw: LabelDraw, rng: random.Random) -> tuple[str, dict[str, Any]]:
        if draw.control:
            return text, healthy_ground_truth()
        return text, sample_ground_truth(draw.labels, rng)

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


def ground_truth_problems(truth: dict[str, Any]) -> list[tuple[str, str]]:
    """What is wrong with a k8s ground truth, on the generation-time policy model, without a
    cluster: ``[(rule, message), ...]``, empty when sound (for ``manage.py check_pack``).

    Rules (docs/writing-a-variant-pack.md, "k8s packs"):

    * ``shape``: ``policies``, ``repair`` or ``expected`` missing or malformed;
    * ``manifest``: the oracle's one ``kubectl apply`` is refused by the command checks
      (:func:`apps.k8s.kubectl.check_manifest`);
    * ``healthy-set``: the repaired set (public policies not named, ``repair``,
      ``baseline``) does not realise ``expected`` (:func:`model_matrix`);
    * ``fault-visible``: a faulted query whose starting set already realises ``expected``
      (nothing to repair);
    * ``adds-policy``: a fault adds a policy name that no repair can delete.
    """
    from apps.k8s.kubectl import check_manifest
    from apps.k8s.reference import apply_command

    try:
        repair = dict(truth.get("repair") or {})
        baseline = dict(truth.get("baseline") or {})
        injected = dict(truth["policies"])
        expected = {tuple(edge) for edge in truth["expected"]}
    except (KeyError, TypeError, ValueError) as exc:
        return [("shape", f"{type(exc).__name__}: {exc}")]
    problems: list[tuple[str, str]] = []
    public = manifests.healthy_policies()
    if repair:
        command = apply_command([repair[name] for name in sorted(repair)])
        reason = check_manifest(command.split("\n", 1)[1].rsplit("\nEOF", 1)[0])
        if reason is not None:
            problems.append(("manifest", reason))
    healthy = {**public, **baseline, **repair}
    try:
        realised = model_matrix(healthy)
        starting = model_matrix({**public, **manifests.starting_policies(truth)})
    except Exception as exc:  # noqa: BLE001 - a malformed policy is a finding, not a crash
        return [*problems, ("shape", f"the policy model failed: {type(exc).__name__}: {exc}")]
    if realised != expected:
        missing, extra = len(expected - realised), len(realised - expected)
        problems.append(("healthy-set", f"the repaired set misses {missing} intended "
                                        f"connection(s) and opens {extra} other(s)"))
    if not truth.get("healthy") and starting == expected:
        problems.append(("fault-visible", "the starting policies already realise expected"))
    added = sorted(set(injected) - set(public) - set(baseline) - set(repair))
    if added:
        problems.append(("adds-policy", f"faults add policies {added} the oracle cannot "
                                        "delete"))
    return problems
