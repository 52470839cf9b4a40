"""NetworkPolicy rules of the embedded cluster: the policy model compiled to iptables + ipsets.

Pure (no I/O): :class:`Compiler` turns one
:class:`apps.k8s.cluster.policy_model.PolicyModel` into per-namespace :class:`Fragment` s and
:func:`assemble` joins them into one :class:`Ruleset` (an ``iptables-restore`` text and the
ipsets it references). The daemon that reads the cluster and installs the result is
:mod:`apps.k8s.cluster.enforcer`.

Layout of the filter table (chain names fixed or derived from content; everything lives in the
cluster namespace)::

    FORWARD      -> NETARENA-FWD
    NETARENA-FWD  ESTABLISHED,RELATED -> ACCEPT          (policies govern new connections;
                                                          UDP flows whose verdict a change may
                                                          alter are forgotten, see below)
                  clear marks 0x30000
                  per egress-isolated pod and each policy isolating it:
                      -s <pod> unless mark 0x10000 -> NAP-<hash>;  then unless mark: REJECT
                  per ingress-isolated pod and each policy isolating it:
                      -d <pod> unless mark 0x20000 -> NAP-<hash>;  then unless mark: REJECT
                  ACCEPT
    NAP-<hash>    one policy in one direction: one rule per (rule, peer group, port) that
                  sets the direction's mark when it matches
    NAB-<hash>    one ipBlock: RETURN for each ``except``, else mark

Egress and ingress of a pod are checked separately with separate marks, so an ingress rule can
never satisfy an egress check (kube-router's divergence 2). Named ports are resolved per
destination pod: destinations are grouped by the number their port name resolves to
(divergences 3 and 4). ipBlocks match pod IPs like any other address (the reading of
Kubernetes' e2e suite; docs/k8s.md, "ipBlock"). Peer pods are matched through ``hash:ip``
ipsets named after a hash of their content (``na-<16 hex>``): a set never changes once
created, new sets are created before the one atomic ``iptables-restore`` that references them,
and sets nothing references any more are destroyed after it — so no packet ever sees a
half-applied state. Denied packets are REJECTed (ICMP port unreachable), so a blocked probe
fails at once instead of timing out.

One namespace cannot break the others. Chains are per policy, so a namespace costs the size of
its own policies plus one jump per (pod, isolating policy); each namespace is compiled into its
own :class:`Fragment`. A policy the enforcer cannot install
(:func:`apps.k8s.cluster.policy_model.unsupported`, e.g. an IPv6 ipBlock) is refused on its
own: its pods stay isolated, none of its rules are installed. A namespace whose fragment is
larger than the per-namespace budget (:data:`NAMESPACE_BUDGET`), or whose rules the kernel
refuses (the enforcer finds those by installing namespace by namespace), is installed
fail-closed (its isolated pods reject every new connection in that direction). Every such case
is reported as "not in sync" for that namespace only.

Every line of :data:`TOP_CHAIN` below the two fixed ones names one pod address (``-s <pod>/32``
egress, ``-d <pod>/32`` ingress) and every chain, ipset and mark it reaches is named after its
content, so a packet's verdict depends only on the egress lines of its source and the ingress
lines of its destination. :func:`changed_addresses` compares two tables by those lines: the
enforcer forgets only the UDP flows of the addresses whose lines changed, not the whole table's
(a flush of everything, 8-10 times a second while other episodes changed their policies, made
in-flight UDP replies of untouched namespaces NEW packets that their policies rejected).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from apps.k8s.cluster.health import NamespaceHealth
from apps.k8s.cluster.policy_model import (
    Obj,
    Pod,
    PolicyModel,
    PortMatch,
    block_contains,
    parse_ipv4_cidr,
    resolve_ports,
    selector_matches,
)

EGRESS_MARK = 0x10000
INGRESS_MARK = 0x20000
MARK_MASK = EGRESS_MARK | INGRESS_MARK
SET_PREFIX = "na-"
TOP_CHAIN = "NETARENA-FWD"
NAMESPACE_BUDGET = 20000
"""Most iptables lines plus ipset members one namespace may compile to. An episode namespace
stays far below it under the admission limits (:mod:`apps.k8s.cluster.admission`: at most 40
policies of at most 100 peer-port pairs per direction, so about 10 000 at the very worst); a
namespace above it is installed fail-closed and reported not in sync."""


@dataclass
class Fragment:
    """The compiled rules of one namespace.

    Attributes:
        chains: chain name -> its rules (``-A`` lines); names derive from content, so two
            fragments never declare one name with different rules.
        egress / ingress: the namespace's lines of :data:`TOP_CHAIN` (jumps and REJECTs).
        ipsets: set name -> members. health: what the namespace reports.
    """

    namespace: str
    chains: dict[str, list[str]] = field(default_factory=dict)
    egress: list[str] = field(default_factory=list)
    ingress: list[str] = field(default_factory=list)
    ipsets: dict[str, tuple[str, ...]] = field(default_factory=dict)
    health: NamespaceHealth = field(default_factory=NamespaceHealth)

    @property
    def size(self) -> int:
        """iptables lines (chain declarations and rules) plus ipset members."""
        return (len(self.chains) + sum(len(r) for r in self.chains.values())
                + len(self.egress) + len(self.ingress)
                + sum(len(m) for m in self.ipsets.values()))

    def digest(self) -> str:
        """A hash of everything this fragment installs."""
        body = json.dumps([sorted(self.chains.items()), self.egress, self.ingress,
                           sorted(self.ipsets.items())])
        return hashlib.sha256(body.encode()).hexdigest()


@dataclass
class Ruleset:
    """A compiled ruleset: the ``iptables-restore`` text, the ipsets it references and the
    health of every namespace it covers."""

    iptables: str
    ipsets: dict[str, tuple[str, ...]] = field(default_factory=dict)
    health: dict[str, NamespaceHealth] = field(default_factory=dict)


def _set_name(ips: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    members = tuple(sorted(set(ips)))
    digest = hashlib.sha256("\n".join(members).encode()).hexdigest()[:16]
    return SET_PREFIX + digest, members


def _chain_name(prefix: str, body: list[str]) -> str:
    return f"{prefix}-{hashlib.sha256(chr(10).join(body).encode()).hexdigest()[:16]}"


def _port_args(match: PortMatch | None) -> str:
    if match is None:
        return ""
    args = f" -p {match.protocol.lower()}"
    if match.low:
        args += f" --dport {match.low}" if match.high == match.low else \
            f" --dport {match.low}:{match.high}"
    return args


def _all_numeric(ports: Sequence[Obj] | None) -> bool:
    return not ports or all(not isinstance(p.get("port"), str) for p in ports)


def _is_ipv4(ip: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(ip), ipaddress.IPv4Address)
    except ValueError:
        return False


class Compiler:
    """Compile one :class:`PolicyModel` into per-namespace :class:`Fragment` s (pure; no I/O).

    Args:
        model: the cluster's pods, namespaces and policies.
        pod_cidr: the pod network (egress rules without ``to`` tell pods and other addresses
            apart with it).
        budget: :data:`NAMESPACE_BUDGET` unless given.
    """

    def __init__(self, model: PolicyModel, pod_cidr: str, budget: int = NAMESPACE_BUDGET) -> None:
        self.model = model
        self.pod_cidr = str(ipaddress.ip_network(pod_cidr, strict=False))
        self.budget = budget
        self._peer_cache: dict[tuple[str, str], list[Pod]] = {}
        self._by_ns: dict[str, list[Pod]] = {}
        for pod in model.pods:
            if _is_ipv4(pod.ip):
                self._by_ns.setdefault(pod.namespace, []).append(pod)

    def namespaces(self) -> list[str]:
        """Every namespace with a pod or a policy, sorted."""
        names = set(self._by_ns) | {p["metadata"]["namespace"] for p in self.model.policies}
        return sorted(names)

    # ------------------------------------------------------------------ fragments

    def fragments(self, errors: Mapping[str, str] | None = None) -> dict[str, Fragment]:
        """One fragment per namespace; those named in ``errors`` fail-closed with that error."""
        errors = errors or {}
        return {ns: self.fragment(ns, errors.get(ns)) for ns in self.namespaces()}

    def fragment(self, namespace: str, error: str | None = None) -> Fragment:
        """The fragment of ``namespace``; fail-closed (and reporting ``error``) when ``error`` is
        given or the compiled fragment exceeds the budget."""
        refused = {name: reasons for (ns, name), reasons in self.model.refused.items()
                   if ns == namespace}
        frag: Fragment | None = None
        if error is None:
            frag = self._compile_namespace(namespace)
            if frag.size > self.budget:
                error = (f"its policies compile to {frag.size} rules and set members, above "
                         f"the enforcer's per-namespace budget of {self.budget}")
        if error is not None:
            frag = self._closed(namespace)
        assert frag is not None
        frag.health = NamespaceHealth(refused, error, frag.size)
        return frag

    def _closed(self, namespace: str) -> Fragment:
        """Every pod the namespace isolates rejects all new connections in that direction."""
        frag = Fragment(namespace)
        for pod in self._by_ns.get(namespace, []):
            if self.model.isolating(pod, "Egress"):
                frag.egress.append(f"-A {TOP_CHAIN} -s {pod.ip}/32 -j REJECT")
            if self.model.isolating(pod, "Ingress"):
                frag.ingress.append(f"-A {TOP_CHAIN} -d {pod.ip}/32 -j REJECT")
        return frag

    def _compile_namespace(self, namespace: str) -> Fragment:
        frag = Fragment(namespace)
        cache: dict[tuple[Any, ...], str | None] = {}
        for pod in self._by_ns.get(namespace, []):
            for direction, flag, mark, lines in (
                ("Egress", "-s", EGRESS_MARK, frag.egress),
                ("Ingress", "-d", INGRESS_MARK, frag.ingress),
            ):
                policies = self.model.isolating(pod, direction)
                if not policies:
                    continue
                unmarked = f"-m mark ! --mark {mark:#x}/{mark:#x}"
                for pol in policies:
                    if self.model.is_refused(pol):
                        continue  # isolates, admits nothing
                    chain = self._policy_chain(frag, cache, pol, direction, pod)
                    if chain is not None:
                        lines.append(f"-A {TOP_CHAIN} {flag} {pod.ip}/32 {unmarked} -j {chain}")
                lines.append(f"-A {TOP_CHAIN} {flag} {pod.ip}/32 {unmarked} -j REJECT")
        return frag

    # ------------------------------------------------------------------ one policy

    def _add_chain(self, frag: Fragment, prefix: str, body: list[str]) -> str:
        name = _chain_name(prefix, body)
        frag.chains[name] = [f"-A {name} {line}" for line in body]
        return name

    def _ipset(self, frag: Fragment, ips: Iterable[str]) -> str:
        name, members = _set_name(ips)
        frag.ipsets[name] = members
        return name

    @staticmethod
    def _marks(body: list[str], match: str, ports: list[PortMatch] | None, mark: int) -> None:
        target = f"-j MARK --set-xmark {mark:#x}/{mark:#x}"
        for port in ports if ports is not None else [None]:
            body.append(f"{match}{_port_args(port)} {target}".lstrip())

    def _policy_chain(self, frag: Fragment, cache: dict[tuple[Any, ...], str | None],
                      policy: Obj, direction: str, pod: Pod) -> str | None:
        """The chain of ``policy`` in ``direction`` (None: no rule, it admits nothing). Ingress
        chains with named ports are per destination port set (names resolve against the
        destination pod)."""
        egress = direction == "Egress"
        rules = (policy.get("spec") or {}).get("egress" if egress else "ingress") or []
        if not rules:
            return None
        named = any(isinstance(p.get("port"), str) for r in rules for p in r.get("ports") or [])
        owner_key = pod.ports if (named and not egress) else ()
        meta = policy["metadata"]
        key = (meta["namespace"], meta.get("name"), direction, owner_key)
        if key in cache:
            return cache[key]
        mark = EGRESS_MARK if egress else INGRESS_MARK
        body: list[str] = []
        owner = None if egress else pod
        ns = meta["namespace"]
        for rule in rules:
            peers = rule.get("to" if egress else "from") or []
            ports = rule.get("ports")
            if not peers:
                # every pod, then every non-pod address
                if egress and not _all_numeric(ports):
                    for ips, resolved in self._pod_groups(self.model.pods, ports, None):
                        if resolved is None or resolved:
                            match = f"-m set --match-set {self._ipset(frag, ips)} dst"
                            self._marks(body, match, resolved, mark)
                    external = resolve_ports(ports, None)
                    if external is None or external:
                        self._marks(body, f"! -d {self.pod_cidr}", external, mark)
                else:
                    resolved = resolve_ports(ports, owner)
                    if resolved is None or resolved:
                        self._marks(body, "", resolved, mark)
                continue
            for peer in peers:
                if peer.get("ipBlock"):
                    self._ip_block(frag, body, peer["ipBlock"], egress, ports, owner, mark)
                    continue
                flag = "dst" if egress else "src"
                for ips, resolved in self._pod_groups(self._peer_pods(peer, ns), ports, owner):
                    if resolved is None or resolved:
                        match = f"-m set --match-set {self._ipset(frag, ips)} {flag}"
                        self._marks(body, match, resolved, mark)
        chain = self._add_chain(frag, "NAP", body)
        cache[key] = chain
        return chain

    def _ip_block(self, frag: Fragment, body: list[str], block: Obj, egress: bool,
                  ports: Sequence[Obj] | None, owner: Pod | None, mark: int) -> None:
        """Rules of one ipBlock peer; it matches pod IPs and other addresses alike.

        Egress with named ports: a name resolves against the destination pod and to nothing
        for other addresses, so the numbered entries go into the block's chain (every address)
        and the named ones into ipsets of the pods inside the block, grouped by resolution.
        """
        flag = "-d" if egress else "-s"
        if egress and not _all_numeric(ports):
            assert ports is not None
            numbered = [p for p in ports if not isinstance(p.get("port"), str)]
            named = [p for p in ports if isinstance(p.get("port"), str)]
            if numbered:
                self._block_chain(frag, body, flag, block, resolve_ports(numbered, None), mark)
            inside = [p for p in self.model.pods if _is_ipv4(p.ip) and block_contains(block, p.ip)]
            for ips, resolved in self._pod_groups(inside, named, None):
                if resolved:
                    self._marks(body, f"-m set --match-set {self._ipset(frag, ips)} dst",
                                resolved, mark)
            return
        resolved = resolve_ports(ports, owner)
        if resolved is None or resolved:
            self._block_chain(frag, body, flag, block, resolved, mark)

    def _block_chain(self, frag: Fragment, body: list[str], flag: str, block: Obj,
                     ports: list[PortMatch] | None, mark: int) -> None:
        network = parse_ipv4_cidr(block.get("cidr"))
        assert network is not None  # policies with unreadable blocks are refused before
        sub: list[str] = []
        for text in block.get("except") or []:
            excepted = parse_ipv4_cidr(text)
            assert excepted is not None
            sub.append(f"{flag} {excepted} -j RETURN")
        self._marks(sub, "", ports, mark)
        body.append(f"{flag} {network} -j {self._add_chain(frag, 'NAB', sub)}")

    def _pod_groups(self, pods: Sequence[Pod], ports: Sequence[Obj] | None,
                    port_owner: Pod | None) -> list[tuple[list[str], list[PortMatch] | None]]:
        """Group peer pods by resolved ports. Ports resolve against ``port_owner`` (ingress:
        the destination itself) or, when None, against each peer (egress: the peer is the
        destination)."""
        pods = [p for p in pods if _is_ipv4(p.ip)]
        if not pods:
            return []
        if port_owner is not None or _all_numeric(ports):
            return [([p.ip for p in pods], resolve_ports(ports, port_owner or pods[0]))]
        groups: dict[str, tuple[list[str], list[PortMatch] | None]] = {}
        for pod in pods:
            resolved = resolve_ports(ports, pod)
            key = json.dumps(None if resolved is None else
                             sorted((m.protocol, m.low, m.high) for m in resolved))
            groups.setdefault(key, ([], resolved))[0].append(pod.ip)
        return list(groups.values())

    def _peer_pods(self, peer: Obj, ns: str) -> list[Pod]:
        key = (ns, json.dumps(peer, sort_keys=True))
        found = self._peer_cache.get(key)
        if found is None:
            ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
            if ns_sel is None and pod_sel is None:
                found = []
            else:
                namespaces = [ns] if ns_sel is None else [
                    name for name in self._by_ns
                    if selector_matches(ns_sel, self.model.namespace_labels.get(name, {}))]
                found = [p for name in namespaces for p in self._by_ns.get(name, [])
                         if pod_sel is None or selector_matches(pod_sel, p.labels)]
            self._peer_cache[key] = found
        return found

    # ------------------------------------------------------------------ whole table

    def compile(self, errors: Mapping[str, str] | None = None) -> Ruleset:
        """The full filter table for the model (see :func:`assemble`)."""
        return assemble(self.fragments(errors).values())


def assemble(fragments: Iterable[Fragment]) -> Ruleset:
    """The filter table made of ``fragments`` (namespace order; one declaration per chain)."""
    frags = sorted(fragments, key=lambda f: f.namespace)
    top = [
        f"-A {TOP_CHAIN} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        f"-A {TOP_CHAIN} -j MARK --set-xmark 0x0/{MARK_MASK:#x}",
    ]
    chains: dict[str, list[str]] = {}
    ipsets: dict[str, tuple[str, ...]] = {}
    for frag in frags:
        top += frag.egress
        chains.update(frag.chains)
        ipsets.update(frag.ipsets)
    for frag in frags:
        top += frag.ingress
    top.append(f"-A {TOP_CHAIN} -j ACCEPT")
    lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]",
             ":OUTPUT ACCEPT [0:0]", f":{TOP_CHAIN} - [0:0]"]
    lines += [f":{name} - [0:0]" for name in sorted(chains)]
    lines.append(f"-A FORWARD -j {TOP_CHAIN}")
    lines += top
    for name in sorted(chains):
        lines += chains[name]
    lines += ["COMMIT", ""]
    return Ruleset("\n".join(lines), ipsets, {f.namespace: f.health for f in frags})


_ADDRESS_LINE = re.compile(rf"-A {TOP_CHAIN} (-s|-d) (\S+)/32 ")


def addressed_lines(iptables: str) -> dict[tuple[str, str], list[str]]:
    """The lines of :data:`TOP_CHAIN` in an ``iptables-restore`` text that name one address,
    grouped by (``"egress"`` or ``"ingress"``, address), in table order."""
    lines: dict[tuple[str, str], list[str]] = {}
    for line in iptables.splitlines():
        found = _ADDRESS_LINE.match(line)
        if found:
            direction = "egress" if found.group(1) == "-s" else "ingress"
            lines.setdefault((direction, found.group(2)), []).append(line)
    return lines


def changed_addresses(old: str, new: str) -> tuple[set[str], set[str]]:
    """Which addresses' verdicts may differ between two tables of :func:`assemble`.

    Args:
        old / new: ``iptables-restore`` texts made by :func:`assemble`.

    Returns:
        (sources, destinations): the addresses whose egress lines differ and those whose
        ingress lines differ. A new connection from ``s`` to ``d`` gets the same verdict from
        both tables unless ``s`` is in ``sources`` or ``d`` in ``destinations`` (the chains,
        ipsets and marks a line reaches are named after their content; module docstring).
    """
    before, after = addressed_lines(old), addressed_lines(new)
    differing = {key for key in before.keys() | after.keys()
                 if before.get(key) != after.get(key)}
    return ({ip for direction, ip in differing if direction == "egress"},
            {ip for direction, ip in differing if direction == "ingress"})


def compile_model(model: PolicyModel, pod_cidr: str, budget: int = NAMESPACE_BUDGET) -> Ruleset:
    """Compile ``model``; see :class:`Compiler`."""
    return Compiler(model, pod_cidr, budget).compile()
