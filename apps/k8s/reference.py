"""Reference agents of the ``k8s`` app: oracle, heuristic (floor) and null replies.

All three are pure functions of the chat history (``[{"role", "content"}]``, the first user
message being the episode's first observation), so they can be served statelessly.

* oracle -- reverts the hidden faults: one ``kubectl apply -f -`` whose here-document holds
  the healthy version of every faulted policy, then ``done``.
* heuristic -- no ground truth; a report-driven operator working on the destination side, as
  the report reads ("src cannot reach dst:port" -> admit src in dst's policy; "src reaches
  dst:port but should not" -> take src out of the rules of dst's policies). It reads the pods
  and the policies with kubectl, patches with one ``kubectl apply -f -``, re-reads and repeats
  while mismatches remain and it still finds something to change, then says ``done``.
* null -- ``done`` at once, changing nothing.

On a healthy control the oracle says ``healthy`` at once; so does the heuristic whenever the
first report shows no mismatch (what a script can see).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import yaml
from evaluator.multistep import assistant_steps, oracle_stop

from apps.k8s import prompt
from apps.k8s.cluster.policy_model import (
    Pod,
    PolicyModel,
    in_namespace,
    policy_types,
    selector_matches,
)
from apps.k8s.manifests import APP_LABEL, DENY_ALL
from apps.k8s.replies import DONE_WORD, HEALTHY_WORD, parse_reply

Obj = dict[str, Any]

READ_PODS = "kubectl get pods --show-labels"
READ_POLICIES = "kubectl get networkpolicies -o json"
_REPORT_LINE = re.compile(
    r"^(?P<src>\S+) -> (?P<dst>\S+):(?P<port>\d+)/(?P<proto>[A-Z]+) "
    r"\(expected (?P<expected>allowed|blocked), measured (?P<measured>[a-z]+)"
)


def _fence(command: str) -> str:
    return f"```\n{command}\n```"


def apply_command(policies: list[Obj]) -> str:
    """``kubectl apply -f - <<EOF`` with ``policies`` as a multi-document manifest."""
    docs = []
    for policy in policies:
        doc = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": policy["metadata"]["name"]},
            "spec": policy["spec"],
        }
        docs.append(yaml.safe_dump(doc, sort_keys=False).rstrip("\n"))
    return "kubectl apply -f - <<EOF\n" + "\n---\n".join(docs) + "\nEOF"


def _assistant_commands(history: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(command line sent, observation that followed) for each assistant reply."""
    steps = []
    for reply, after in assistant_steps(history):
        parsed = parse_reply(reply)
        steps.append(("done" if parsed.done else parsed.text, after))
    return steps


def oracle_reply(ground_truth: dict[str, Any], history: list[dict[str, Any]]) -> str:
    """The repair (healthy versions of the faulted policies) once, then ``done``."""
    if ground_truth.get("healthy"):
        return oracle_stop(ground_truth, done_reply=DONE_WORD, healthy_reply=HEALTHY_WORD)
    sent = [cmd for cmd, _ in _assistant_commands(history)]
    if any(cmd.startswith("kubectl apply") for cmd in sent):
        return oracle_stop(ground_truth, done_reply=DONE_WORD, healthy_reply=HEALTHY_WORD)
    repair = [ground_truth["repair"][name] for name in sorted(ground_truth["repair"])]
    return _fence(apply_command(repair))


def null_reply(history: list[dict[str, Any]]) -> str:
    """``done``: ends the episode without changing anything."""
    return DONE_WORD


def last_report(history: list[dict[str, Any]]) -> list[tuple[str, str, str, int, bool]]:
    """Mismatches of the newest report in ``history``: ``(src, dst, proto, port,
    expected_allowed)``."""
    for message in reversed(history):
        if message.get("role") != "user":
            continue
        text = str(message.get("content") or "")
        if prompt.REPORT_MARKER not in text:
            continue
        report = text.rsplit(prompt.REPORT_MARKER, 1)[1]
        found = []
        for line in report.splitlines():
            match = _REPORT_LINE.match(line.strip())
            if match:
                found.append((match["src"], match["dst"], match["proto"], int(match["port"]),
                              match["expected"] == "allowed"))
        return found
    return []


def _output_json(observation: str) -> Obj | None:
    body = _output(observation)
    if body is None:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _output(observation: str) -> str | None:
    if prompt.OUTPUT_MARKER not in observation:
        return None
    return observation.split(prompt.OUTPUT_MARKER, 1)[1].split("\n\n" + prompt.REPORT_MARKER, 1)[0]


AGENT_NAMESPACE = "agent"
"""Namespace the heuristic's model places the pods and policies it read in (kubectl shows
one namespace, the episode's)."""


def pods_from_table(table: str) -> dict[str, Pod]:
    """Pods by ``app`` label from ``kubectl get pods --show-labels`` (LABELS = last column),
    as model pods in :data:`AGENT_NAMESPACE` without ports or IP."""
    pods: dict[str, Pod] = {}
    for line in table.splitlines()[1:]:
        fields = line.split()
        if not fields or "=" not in fields[-1]:
            continue
        labels = dict(item.split("=", 1) for item in fields[-1].split(",") if "=" in item)
        if APP_LABEL in labels:
            pods.setdefault(labels[APP_LABEL], Pod(AGENT_NAMESPACE, labels[APP_LABEL], "", labels))
    return pods


def _peer_matches(peer: Obj, pod: Pod) -> bool:
    if "ipBlock" in peer:
        return False
    if "podSelector" in peer:
        return selector_matches(peer["podSelector"], pod.labels)
    return "namespaceSelector" in peer


def _port_ok(rule: Obj, proto: str, port: int) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    return any(
        e.get("protocol", "TCP") == proto and (e.get("port") is None or e.get("port") == port)
        for e in ports
    )


def plan_fix(
    policies: list[Obj], pods: dict[str, Pod], report: list[tuple[str, str, str, int, bool]]
) -> list[Obj]:
    """Destination-side patch for ``report``; returns the changed policies (maybe none)."""
    by_name = {p["metadata"]["name"]: copy.deepcopy(p) for p in policies}
    changed: set[str] = set()
    for src, dst, proto, port, expected_allowed in report:
        if src not in pods or dst not in pods:
            continue
        src_pod, dst_pod = pods[src], pods[dst]
        selecting = [
            name for name, p in sorted(by_name.items())
            if "Ingress" in policy_types(p)
            and selector_matches(p["spec"].get("podSelector", {}), dst_pod.labels)
        ]
        if expected_allowed:
            model = PolicyModel([src_pod, dst_pod], {AGENT_NAMESPACE: {}},
                                in_namespace(by_name.values(), AGENT_NAMESPACE))
            if model.side_allows(dst_pod, "Ingress", src_pod, dst_pod, proto, port):
                continue  # the destination admits it: nothing to do on this side
            own = [n for n in selecting if n != DENY_ALL]
            target = dst if dst in own else (own[0] if own else None)
            if target is None:
                continue
            rule = {"from": [{"podSelector": {"matchLabels": {APP_LABEL: src}}}],
                    "ports": [{"port": port, "protocol": proto}]}
            by_name[target]["spec"].setdefault("ingress", []).append(rule)
            changed.add(target)
            continue
        for name in selecting:
            spec = by_name[name]["spec"]
            kept = []
            for rule in spec.get("ingress") or []:
                if not _port_ok(rule, proto, port):
                    kept.append(rule)
                    continue
                peers = rule.get("from")
                if not peers:
                    changed.add(name)  # admits everyone on this port: drop it
                    continue
                remaining = [p for p in peers if not _peer_matches(p, src_pod)]
                if len(remaining) != len(peers):
                    changed.add(name)
                    if remaining:
                        kept.append({**rule, "from": remaining})
                    continue
                kept.append(rule)
            spec["ingress"] = kept
    return [by_name[n] for n in sorted(changed)]


def heuristic_reply(history: list[dict[str, Any]]) -> str:
    """Next command of the report-driven floor agent (see the module docstring)."""
    report = last_report(history)
    steps = _assistant_commands(history)
    if not report:
        return DONE_WORD if steps else HEALTHY_WORD
    tables = [_output(obs) or "" for cmd, obs in steps if cmd == READ_PODS]
    pods = next((p for p in map(pods_from_table, reversed(tables)) if p), None)
    if pods is None:
        if any(cmd == READ_PODS for cmd, _ in steps):
            return DONE_WORD  # could not read the pods
        return _fence(READ_PODS)
    if not steps or steps[-1][0] != READ_POLICIES:
        return _fence(READ_POLICIES)
    policy_list = _output_json(steps[-1][1])
    if policy_list is None:
        return DONE_WORD
    fix = plan_fix(policy_list.get("items") or [], pods, report)
    if not fix:
        return DONE_WORD
    return _fence(apply_command(fix))
