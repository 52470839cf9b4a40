"""What one episode namespace may create: an admission rule and a quota on NetworkPolicies.

The agent may write NetworkPolicies in its namespace and nothing else, and the cluster's one
enforcer compiles every namespace's policies on every sync. Two API-server mechanisms bound
what one namespace can make the enforcer do, so that no episode can slow or break another:

* a **ValidatingAdmissionPolicy** (:data:`POLICY_NAME`; CEL, admissionregistration.k8s.io/v1,
  https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/) bound
  to the namespaces labelled ``netarena/app=k8s`` (every episode namespace) that refuses, on
  create and update, a NetworkPolicy the enforcer could not install (an ipBlock ``cidr`` or
  ``except`` that is not a plain IPv4 CIDR: the cluster is IPv4-only; see
  :func:`apps.k8s.cluster.policy_model.unsupported`) or larger than the limits below;
* a **ResourceQuota** (:data:`QUOTA_NAME`,
  https://kubernetes.io/docs/concepts/policy/resource-quotas/#object-count-quota) of
  :data:`MAX_POLICIES` objects ``count/networkpolicies.networking.k8s.io`` per episode
  namespace.

Limits (each also checked by :func:`violations`, the same rules in Python, which the tests
compare with the API server's answers):

* rules per direction (ingress, egress): :data:`MAX_RULES`;
* peers per rule and ports per rule: :data:`MAX_PEERS`, :data:`MAX_PORTS`;
* peer-port pairs per direction (the sum over its rules of max(1, peers) x max(1, ports)):
  :data:`MAX_PAIRS`;
* terms per label selector (matchLabels entries plus matchExpressions):
  :data:`MAX_SELECTOR_TERMS`; values per expression: :data:`MAX_SELECTOR_VALUES`;
* ``except`` entries per ipBlock: :data:`MAX_EXCEPTS`;
* labels: :data:`MAX_LABELS`; annotations: :data:`MAX_ANNOTATION_CHARS` characters (keys and
  values, as CEL's ``size`` counts them).

Healthy Online Boutique uses 13 policies of at most 6 rules with one peer and one port each.
With these bounds one namespace compiles to at most about 10 000 iptables lines
(:data:`apps.k8s.cluster.compiler.NAMESPACE_BUDGET` is twice that). A refusal is the API
server's answer to the agent's own command (``kubectl`` prints it, exit status 1), which the
``k8s`` app counts as a refused step (:func:`refusal_in_output`).
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes.client.rest import ApiException

from apps.k8s.cluster.policy_model import Obj, parse_ipv4_cidr
from apps.k8s.cluster.rest import KubeRest, resource_path

POLICY_NAME = "netarena-episode-networkpolicies"
"""Name of the ValidatingAdmissionPolicy and of its binding."""
QUOTA_NAME = "netarena-episode-quota"
"""Name of the ResourceQuota in every episode namespace."""
EPISODE_LABEL = {"netarena/app": "k8s"}
"""Namespaces the admission rule binds to (every episode namespace carries this label)."""
MAX_POLICIES = 40
MAX_RULES = 20
MAX_PEERS = 20
MAX_PORTS = 20
MAX_PAIRS = 100
MAX_SELECTOR_TERMS = 10
MAX_SELECTOR_VALUES = 20
MAX_EXCEPTS = 10
MAX_LABELS = 20
MAX_ANNOTATION_CHARS = 32 * 1024
QUOTA_RESOURCE = "count/networkpolicies.networking.k8s.io"

_VAP_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
_BINDING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
_DIRECTIONS = (("ingress", "from"), ("egress", "to"))

# ----------------------------------------------------------------------- CEL (our own)


def _selector_ok(sel: str) -> str:
    return (f"((has({sel}.matchLabels) ? size({sel}.matchLabels) : 0)"
            f" + (has({sel}.matchExpressions) ? size({sel}.matchExpressions) : 0)"
            f" <= {MAX_SELECTOR_TERMS})"
            f" && (!has({sel}.matchExpressions) || {sel}.matchExpressions.all(x,"
            f" !has(x.values) || size(x.values) <= {MAX_SELECTOR_VALUES}))")


def _every_rule(test: str) -> str:
    """``test`` (about rule ``r`` and its peer list ``PEERS``) holds for every rule."""
    parts = []
    for direction, peers in _DIRECTIONS:
        body = test.replace("PEERS", f"r.{peers}")
        parts.append(f"(!has(object.spec.{direction}) || object.spec.{direction}.all(r, {body}))")
    return " && ".join(parts)


def _every_peer(test: str) -> str:
    """``test`` (about peer ``p``) holds for every peer of every rule."""
    return _every_rule(f"!has(PEERS) || PEERS.all(p, {test})")


def _ipv4(expr: str) -> str:
    return f"(isCIDR({expr}) && cidr({expr}).ip().family() == 4)"


VALIDATIONS: tuple[tuple[str, str], ...] = (
    (" && ".join(f"(!has(object.spec.{d}) || size(object.spec.{d}) <= {MAX_RULES})"
                 for d, _ in _DIRECTIONS),
     f"at most {MAX_RULES} ingress and {MAX_RULES} egress rules per NetworkPolicy"),
    (_every_rule(f"(!has(PEERS) || size(PEERS) <= {MAX_PEERS})"
                 f" && (!has(r.ports) || size(r.ports) <= {MAX_PORTS})"),
     f"at most {MAX_PEERS} peers and {MAX_PORTS} ports per rule"),
    (" && ".join(
        f"(!has(object.spec.{d}) || object.spec.{d}.map(r,"
        f" (has(r.{k}) && size(r.{k}) > 0 ? size(r.{k}) : 1)"
        f" * (has(r.ports) && size(r.ports) > 0 ? size(r.ports) : 1)).sum() <= {MAX_PAIRS})"
        for d, k in _DIRECTIONS),
     f"at most {MAX_PAIRS} peer-port pairs per direction (sum over the rules of peers x ports)"),
    (_every_peer(f"!has(p.ipBlock) || ({_ipv4('p.ipBlock.cidr')}"
                 f" && (!has(p.ipBlock.except) || (size(p.ipBlock.except) <= {MAX_EXCEPTS}"
                 f" && p.ipBlock.except.all(e, {_ipv4('e')}))))"),
     "ipBlock cidr and except must be plain IPv4 CIDRs such as 10.1.0.0/16 (this cluster is "
     f"IPv4-only), with at most {MAX_EXCEPTS} except entries"),
    (_selector_ok("object.spec.podSelector") + " && " + _every_peer(
        f"(!has(p.podSelector) || ({_selector_ok('p.podSelector')}))"
        f" && (!has(p.namespaceSelector) || ({_selector_ok('p.namespaceSelector')}))"),
     f"at most {MAX_SELECTOR_TERMS} terms per label selector and {MAX_SELECTOR_VALUES} values "
     "per expression"),
    (f"(!has(object.metadata.labels) || size(object.metadata.labels) <= {MAX_LABELS})"
     " && (!has(object.metadata.annotations) || object.metadata.annotations.map(k,"
     f" size(k) + size(object.metadata.annotations[k])).sum() <= {MAX_ANNOTATION_CHARS})",
     f"at most {MAX_LABELS} labels and {MAX_ANNOTATION_CHARS} characters of annotations"),
)
"""``(CEL expression, message)`` of every rule of the admission policy."""
MESSAGE_PREFIX = "refused in an episode namespace: "


def admission_policy() -> dict[str, Any]:
    """The ValidatingAdmissionPolicy (failurePolicy Fail: an expression that errs or runs
    over its cost budget refuses the request too)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["networking.k8s.io"], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"], "resources": ["networkpolicies"]}]},
            "validations": [{"expression": expr, "message": MESSAGE_PREFIX + message}
                            for expr, message in VALIDATIONS],
        },
    }


def admission_binding() -> dict[str, Any]:
    """The binding: deny in every namespace labelled :data:`EPISODE_LABEL`."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": dict(EPISODE_LABEL)}},
        },
    }


def quota() -> dict[str, Any]:
    """The ResourceQuota of an episode namespace."""
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": QUOTA_NAME},
            "spec": {"hard": {QUOTA_RESOURCE: str(MAX_POLICIES)}}}


def _create_or_update(rest: KubeRest, collection: str, obj: dict[str, Any]) -> None:
    path = f"{collection}/{obj['metadata']['name']}"
    try:
        current = rest.get(path)
    except ApiException as exc:
        if exc.status != 404:
            raise
        rest.create(collection, obj)
        return
    if current.get("spec") != obj["spec"]:
        body = {**obj, "metadata": {**obj["metadata"],
                                    "resourceVersion": current["metadata"]["resourceVersion"]}}
        rest.replace(path, body)


def ensure_admission(rest: KubeRest) -> None:
    """Create (or update to this version) the admission policy and its binding. Cluster-wide
    and idempotent; the API server applies them within about a second
    (:func:`wait_admission` proves it for one namespace).

    Raises:
        kubernetes.client.rest.ApiException: the API server refused.
    """
    _create_or_update(rest, _VAP_PATH, admission_policy())
    _create_or_update(rest, _BINDING_PATH, admission_binding())


_PROBE_POLICY = {
    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
    "metadata": {"name": "netarena-admission-probe"},
    "spec": {"podSelector": {}, "policyTypes": ["Egress"],
             "egress": [{"to": [{"ipBlock": {"cidr": "2001:db8::/32"}}]}]},
}


def wait_admission(rest: KubeRest, namespace: str, timeout_s: float = 15.0) -> float:
    """Wait until the admission policy refuses in ``namespace`` (a server-side dry-run create
    of an IPv6 policy; nothing is stored) and the quota has been counted (its
    ``status.hard``: until then the API server refuses every new policy there).

    Returns:
        Seconds waited.

    Raises:
        TimeoutError: not within ``timeout_s`` (e.g. a namespace without the episode label).
        kubernetes.client.rest.ApiException: another API error.
    """
    start = time.monotonic()
    path = resource_path("networkpolicies", namespace)
    refused = counted = False
    while True:
        if not refused:
            try:
                rest.request("POST", path, _PROBE_POLICY, query={"dryRun": "All"})
            except ApiException as exc:
                if exc.status not in (403, 422) or POLICY_NAME not in str(exc.body):
                    raise
                refused = True
        if not counted:
            status = rest.get(f"/api/v1/namespaces/{namespace}/resourcequotas/{QUOTA_NAME}")
            counted = QUOTA_RESOURCE in ((status.get("status") or {}).get("hard") or {})
        if refused and counted:
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"admission in {namespace} not active after {timeout_s} s "
                               f"(policy refuses: {refused}, quota counted: {counted})")
        time.sleep(0.05)


def refusal_in_output(output: str) -> str | None:
    """The first line of kubectl output in which the API server refused a write because of
    :data:`POLICY_NAME` or :data:`QUOTA_NAME` (None: no such refusal)."""
    for line in output.splitlines():
        if POLICY_NAME in line or f"exceeded quota: {QUOTA_NAME}" in line:
            return line.strip()
    return None


# ----------------------------------------------------------------------- the same in Python


def _selector_terms(sel: Obj | None) -> list[str]:
    if sel is None:
        return []
    reasons = []
    terms = len(sel.get("matchLabels") or {}) + len(sel.get("matchExpressions") or [])
    if terms > MAX_SELECTOR_TERMS:
        reasons.append(f"selector with {terms} terms")
    for expr in sel.get("matchExpressions") or []:
        if len(expr.get("values") or []) > MAX_SELECTOR_VALUES:
            reasons.append(f"expression with {len(expr['values'])} values")
    return reasons


def violations(policy: Obj) -> list[str]:
    """The limits of this module that ``policy`` breaks (empty: the admission rule admits
    it); the quota is not checked here. The same rules as :data:`VALIDATIONS`."""
    reasons: list[str] = []
    spec = policy.get("spec") or {}
    for direction, key in _DIRECTIONS:
        rules = spec.get(direction) or []
        if len(rules) > MAX_RULES:
            reasons.append(f"{len(rules)} {direction} rules")
        pairs = 0
        for rule in rules:
            peers, ports = rule.get(key) or [], rule.get("ports") or []
            if len(peers) > MAX_PEERS or len(ports) > MAX_PORTS:
                reasons.append(f"a rule with {len(peers)} peers and {len(ports)} ports")
            pairs += max(1, len(peers)) * max(1, len(ports))
            for peer in peers:
                block = peer.get("ipBlock")
                if block is not None:
                    excepts = block.get("except") or []
                    texts = [block.get("cidr"), *excepts]
                    if any(parse_ipv4_cidr(t) is None for t in texts):
                        reasons.append(f"ipBlock {texts} is not IPv4")
                    if len(excepts) > MAX_EXCEPTS:
                        reasons.append(f"ipBlock with {len(excepts)} excepts")
                reasons += _selector_terms(peer.get("podSelector"))
                reasons += _selector_terms(peer.get("namespaceSelector"))
        if pairs > MAX_PAIRS:
            reasons.append(f"{pairs} peer-port pairs in {direction}")
    reasons += _selector_terms(spec.get("podSelector") or {})
    meta = policy.get("metadata") or {}
    if len(meta.get("labels") or {}) > MAX_LABELS:
        reasons.append(f"{len(meta['labels'])} labels")
    annotations = meta.get("annotations") or {}
    size = sum(len(k) + len(str(v)) for k, v in annotations.items())
    if size > MAX_ANNOTATION_CHARS:
        reasons.append(f"{size} characters of annotations")
    return reasons
