"""The k8s *adaptive* agent: no model, it learns a pack's architecture statements and how the
pack writes its healthy policies from one exposed batch (prompts and ground truths).

After a practice submission on a spent pack a team sees each query's prompt and ground truth:
for k8s the intended connectivity (``expected``, ``[[src, dst, "TCP/port"], ...]``) and the
healthy version of every policy the query changed (``repair``, ``baseline``). This agent learns
from exactly that, then restores a fresh query's own healthy set; on a
statement it cannot read it plays the scripted agent (:mod:`apps.k8s.scripted`).

The rule (:class:`K8sLearner`):

* **Statement forms.** Every line of the task text that names a service
  (:data:`apps.k8s.manifests.SERVICES`, public) is abstracted: service names become ``<S>``
  slots and numbers ``<I>`` slots, wherever the line sits and whatever its shape (a list item,
  a table row). Each line form is mapped to the edges of the ground truth's ``expected`` it
  states, as ``(caller slot, callee slot, port slot)`` triples (a form that states none maps
  to none).
* **Policy templates.** Every healthy policy seen in an exposure (``repair``, ``baseline``
  and the public healthy set) is abstracted against that example's edges. A *service policy*
  (named like the service it selects): its ingress rules become one template per caller (the
  caller's name and the service's port as slots), its egress rules one template per callee, a
  service that calls nothing keeps its literal egress, and the rest of the policy (name,
  selector, types) a skeleton with the service's name as slot. A *call policy* (it names
  exactly the two ends of one intended call and selects one of them): the whole policy
  becomes a template with the caller's and callee's names (also inside its name) and the port
  as slots, on the ingress side when it selects the callee, else on the egress side.
* **Carriers.** For each side of a call (ingress at the callee, egress at the caller) the
  learner counts how many of the exposed calls each kind of policy carried; the kind that
  carried the most is the pack's layout for that side. The templates every example agrees on
  are kept (the most seen).
* **Answer.** A fresh prompt whose every statement line has a known form gives the intended
  edges; the healthy set is the public deny-all policy, one service policy per service (with
  the rules of the sides service policies carry) and, for a side carried by call policies,
  one call policy per intended edge; it is applied in one ``kubectl apply``; if mismatches
  remain, policies outside that set are listed and deleted; then ``done`` (``healthy`` on a
  clean first report).

Targets (``benchmarks/bench_difficulty.py --apps k8s --agents oracle,scripted,adaptive
--exposed-pack A --sealed-pack B`` with the two k8s test packs,
``tests/variant_packs/k8s/heldout-architecture`` and ``tests/variant_packs/k8s/heldout-layout``,
either way round): at least 80% correct and safe on a fresh batch of the exposed pack, at most
20% on levels 2 and 3 of the sealed one.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from evaluator.types import JSON, Query

from apps.k8s import manifests, prompt
from apps.k8s.reference import apply_command
from apps.k8s.scripted import restore_and_prune_reply, scripted_reply

Obj = dict[str, Any]
Edge = tuple[str, str, int]
_SERVICE_RE = re.compile(
    r"(?<![\w-])(" + "|".join(re.escape(s) for s in sorted(manifests.SERVICES, key=len,
                                                           reverse=True)) + r")(?![\w-])")
#: A service name inside a longer string (a policy name such as ``call-a-to-b``).
_NAME_PART_RE = re.compile(
    r"(?<![a-z0-9])(" + "|".join(re.escape(s) for s in sorted(manifests.SERVICES, key=len,
                                                             reverse=True)) + r")(?![a-z0-9])")
_CALLER, _PORT, _SELF, _CALLEE, _CPORT = "$caller", "$port", "$self", "$callee", "$callee_port"
#: A name slot inside a longer string (``$callee`` never matches inside ``$callee_port``).
_NAME_SLOT_RE = re.compile(r"\$(caller|callee|self)(?!\w)")
#: Sides of a call and the kinds of policy that may carry them.
INGRESS, EGRESS, SERVICE_POLICY, CALL_POLICY = "ingress", "egress", "service", "call"


def statement_lines(text: str) -> list[str]:
    """Every line of the task text that names a service, stripped, in order (``[]`` when
    none does). The task text ends where the episode's namespace line begins, so the first
    observation's mismatch report is left out."""
    task = text.split(prompt.NAMESPACE_LINE, 1)[0]
    return [line.strip() for line in task.splitlines() if _SERVICE_RE.search(line)]


def abstract_line(line: str) -> tuple[str, list[str | int]]:
    """``(form, slots)``: service names as ``<S>``, numbers as ``<I>``, slots in text order."""
    slots: list[str | int] = []

    def slot(m: re.Match[str]) -> str:
        if m[1] is not None:
            slots.append(m[1])
            return "<S>"
        slots.append(int(m[2]))
        return "<I>"

    pattern = re.compile(_SERVICE_RE.pattern + r"|(?<![\w-])(\d+)(?![\w-])")
    return pattern.sub(slot, line), slots


def _edges(truth: JSON) -> set[Edge]:
    return {(str(s), str(d), int(str(p).split("/")[1])) for s, d, p in truth.get("expected", [])}


def _abstract(value: Any, names: dict[str, str], ports: dict[int, str]) -> Any:
    """``value`` with service names and ports replaced by slot markers."""
    if isinstance(value, dict):
        return {k: _abstract(v, names, ports) for k, v in value.items()}
    if isinstance(value, list):
        return [_abstract(v, names, ports) for v in value]
    if isinstance(value, str) and value in names:
        return names[value]
    if isinstance(value, str):
        return _NAME_PART_RE.sub(lambda m: names.get(m[1], m[1]), value)
    if isinstance(value, int) and not isinstance(value, bool) and value in ports:
        return ports[value]
    return value


def _fill(value: Any, slots: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        return {k: _fill(v, slots) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, slots) for v in value]
    if isinstance(value, str) and value in slots:
        return slots[value]
    if isinstance(value, str):
        return _NAME_SLOT_RE.sub(lambda m: str(slots.get(m[0], m[0])), value)
    return value


def _names_in(value: Any) -> set[str]:
    """Every service name in the strings of ``value`` (keys left out)."""
    if isinstance(value, dict):
        return set().union(*(_names_in(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_names_in(v) for v in value))
    if isinstance(value, str):
        return set(_NAME_PART_RE.findall(value))
    return set()


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


class K8sLearner:
    """Learned statement forms, policy templates and carriers (module docstring).

    ``forms``: ``{form: [(caller slot, callee slot, port slot), ...]}``; the template counters
    map a template's JSON to how many examples showed it; ``call_templates``: ``{side: that
    counter}`` of call policies; ``carried``: ``{(side, kind): calls that kind carried}``.
    """

    def __init__(self) -> None:
        self.forms: dict[str, list[tuple[int, int, int]]] = {}
        self.skeletons: Counter[str] = Counter()
        self.ingress: Counter[str] = Counter()
        self.egress: Counter[str] = Counter()
        self.no_egress: Counter[str] = Counter()
        self.call_templates: dict[str, Counter[str]] = {INGRESS: Counter(), EGRESS: Counter()}
        self.carried: Counter[tuple[str, str]] = Counter()
        self.learned = 0

    def __str__(self) -> str:
        return (f"{len(self.forms)} statement forms, {len(self.skeletons)} policy skeletons, "
                f"{sum(map(len, self.call_templates.values()))} call-policy templates "
                f"(ingress by {self.carrier(INGRESS)}, egress by {self.carrier(EGRESS)} "
                f"policies) from {self.learned} queries")

    def learn(self, queries: Iterable[Query]) -> None:
        """Learn from each query's prompt and ground truth (``expected``, ``repair``,
        ``baseline``); the public healthy set is learned once, on the public edges."""
        public = {(s, d, int(p.split("/")[1])) for s, d, p in manifests.expected_edges()}
        for policy in manifests.healthy_policies().values():
            self._learn_policy(policy, public)
        for query in queries:
            edges = _edges(query.ground_truth)
            if not edges:
                continue
            for line in statement_lines(query.prompt):
                form, slots = abstract_line(line)
                triples = [
                    (slots.index(s), slots.index(d), slots.index(p))
                    for s, d, p in sorted(edges) if s in slots and d in slots and p in slots
                    and slots.index(s) != slots.index(d)
                ]
                self.forms.setdefault(form, triples)
            truth = query.ground_truth
            for group in ("repair", "baseline"):
                for policy in (truth.get(group) or {}).values():
                    self._learn_policy(policy, edges)
            self.learned += 1

    def _learn_policy(self, policy: Obj, edges: set[Edge]) -> None:
        """Templates of one healthy service or call policy (others, e.g. deny-all, are
        skipped)."""
        spec = policy.get("spec", {})
        selects = spec.get("podSelector", {}).get("matchLabels", {}).get(manifests.APP_LABEL)
        name = policy.get("metadata", {}).get("name")
        if selects in manifests.SERVICES and name == selects:
            self._learn_service_policy(policy, selects, edges)
            return
        named = _names_in(policy)
        calls = [(s, d, p) for s, d, p in edges if {s, d} == named]
        if len(calls) != 1 or selects not in named:
            return
        caller, callee, port = calls[0]
        side = INGRESS if selects == callee else EGRESS
        template = _abstract(policy, {caller: _CALLER, callee: _CALLEE}, {port: _PORT})
        self.call_templates[side][_key(template)] += 1
        self.carried[(side, CALL_POLICY)] += 1

    def _learn_service_policy(self, policy: Obj, selects: str, edges: set[Edge]) -> None:
        spec = policy["spec"]
        callers = {s: p for s, d, p in edges if d == selects}
        callees = {d: p for s, d, p in edges if s == selects}
        skeleton = {k: v for k, v in policy.items() if k != "spec"}
        skeleton["spec"] = {k: v for k, v in spec.items() if k not in ("ingress", "egress")}
        self.skeletons[_key(_abstract(skeleton, {selects: _SELF}, {}))] += 1
        for rule in spec.get("ingress") or []:
            text = _key(rule)
            caller = next((c for c in callers if f'"{c}"' in text), None)
            if caller is not None:
                self.ingress[_key(_abstract(rule, {caller: _CALLER},
                                            {callers[caller]: _PORT}))] += 1
                self.carried[(INGRESS, SERVICE_POLICY)] += 1
        if not callees:
            self.no_egress[_key(spec.get("egress", []))] += 1
        for rule in spec.get("egress") or []:
            text = _key(rule)
            callee = next((c for c in callees if f'"{c}"' in text), None)
            if callee is not None:
                self.egress[_key(_abstract(rule, {callee: _CALLEE},
                                           {callees[callee]: _CPORT}))] += 1
                self.carried[(EGRESS, SERVICE_POLICY)] += 1

    def carrier(self, side: str) -> str:
        """The kind of policy (:data:`SERVICE_POLICY` or :data:`CALL_POLICY`) that carried
        the most exposed calls on ``side`` (:data:`INGRESS` or :data:`EGRESS`); service
        policies on a tie."""
        call, service = self.carried[(side, CALL_POLICY)], self.carried[(side, SERVICE_POLICY)]
        return CALL_POLICY if call > service else SERVICE_POLICY

    def intended(self, text: str) -> set[Edge] | None:
        """The intended edges a fresh task text states (``{(src, dst, port)}``), or None when
        it names no service or a line's form is unknown."""
        lines = statement_lines(text)
        if not lines:
            return None
        edges: set[Edge] = set()
        for line in lines:
            form, slots = abstract_line(line)
            if form not in self.forms:
                return None
            for s, d, p in self.forms[form]:
                edges.add((str(slots[s]), str(slots[d]), int(slots[p])))
        return edges

    def healthy_set(self, edges: set[Edge]) -> dict[str, Obj]:
        """The healthy policies for ``edges``: deny-all, one service policy per service from
        the most seen templates, then one call policy per edge and side that call policies
        carry (module docstring).

        Raises:
            ValueError: a template the learned layout needs was never seen.
        """
        by = {side: self.carrier(side) for side in (INGRESS, EGRESS)}
        needed = [self.skeletons, self.no_egress]
        needed += [self.ingress if by[INGRESS] == SERVICE_POLICY else
                   self.call_templates[INGRESS]]
        needed += [self.egress if by[EGRESS] == SERVICE_POLICY else
                   self.call_templates[EGRESS]]
        if not all(needed):
            raise ValueError("nothing learned")

        def best(counter: Counter[str]) -> Any:
            return json.loads(counter.most_common(1)[0][0])

        policies = {manifests.DENY_ALL: manifests.deny_all_policy()}
        for service in manifests.SERVICES:
            policy = _fill(best(self.skeletons), {_SELF: service})
            callers = sorted((s, p) for s, d, p in edges if d == service)
            callees = sorted((d, p) for s, d, p in edges if s == service)
            if by[INGRESS] == SERVICE_POLICY:
                policy["spec"]["ingress"] = [
                    _fill(best(self.ingress), {_CALLER: caller, _PORT: port})
                    for caller, port in callers]
            if not callees:
                policy["spec"]["egress"] = copy.deepcopy(best(self.no_egress))
            elif by[EGRESS] == SERVICE_POLICY:
                policy["spec"]["egress"] = [
                    _fill(best(self.egress), {_CALLEE: callee, _CPORT: port})
                    for callee, port in callees]
            policies[service] = policy
        for side in (INGRESS, EGRESS):
            if by[side] != CALL_POLICY:
                continue
            for caller, callee, port in sorted(edges):
                policy = _fill(best(self.call_templates[side]),
                               {_CALLER: caller, _CALLEE: callee, _PORT: port})
                policies[policy["metadata"]["name"]] = policy
        return policies

    def reply(self, history: list[JSON]) -> str:
        """The next reply (module docstring); the scripted agent's when the statement is not
        in a learned form."""
        first = next((str(m.get("content") or "") for m in history if m.get("role") == "user"),
                     "")
        edges = self.intended(first)
        if edges is None:
            return scripted_reply(history)
        try:
            healthy = self.healthy_set(edges)
        except ValueError:
            return scripted_reply(history)
        return restore_and_prune_reply(history, apply_command(list(healthy.values())), healthy)


def learner_from(queries: Iterable[Query]) -> K8sLearner:
    """A :class:`K8sLearner` that has learned from ``queries``."""
    learner = K8sLearner()
    learner.learn(queries)
    return learner
