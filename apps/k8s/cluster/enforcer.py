"""NetworkPolicy enforcement of the embedded cluster: the policy model compiled to iptables.

Runs as the daemon ``netpol-enforcer`` inside the cluster network namespace (where every
pod-to-pod packet crosses the FORWARD chain, see :mod:`apps.k8s.cluster.netns`). It watches
Pods, Namespaces and NetworkPolicies; after any event it re-reads all three with consistent
LISTs, compiles :class:`apps.k8s.cluster.policy_model.PolicyModel` and installs the result,
then reports each namespace's sync health (:mod:`apps.k8s.cluster.health`).

Layout of the filter table (chain names fixed or derived from content; everything lives in the
cluster namespace)::

    FORWARD      -> NETARENA-FWD
    NETARENA-FWD  ESTABLISHED,RELATED -> ACCEPT          (policies govern new connections;
                                                          UDP flows are forgotten on each change)
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
refuses (found by installing namespace by namespace after a failed install), is installed
fail-closed (its isolated pods reject every new connection in that direction). Every such case
is reported as "not in sync" for that namespace only.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import logging
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apps.k8s.cluster.health import (
    STATUS_FORMAT,
    EnforcerStatus,
    NamespaceHealth,
    write_status,
)
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
from apps.k8s.cluster.sync import EPOCH_LABEL, SYNC_NAMESPACE

log = logging.getLogger("netarena.enforcer")

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


def compile_model(model: PolicyModel, pod_cidr: str, budget: int = NAMESPACE_BUDGET) -> Ruleset:
    """Compile ``model``; see :class:`Compiler`."""
    return Compiler(model, pod_cidr, budget).compile()


def sentinel_epoch(model: PolicyModel) -> str | None:
    """The dataplane sentinel's epoch if this model saw all of its writes, else None.

    A barrier (:mod:`apps.k8s.cluster.sync`) writes one fresh epoch into the namespace's label,
    a client pod's label and the gate policy; only a model whose three LISTs each came after
    those writes -- and therefore after every write made before the barrier -- carries the
    same epoch in all three.
    """
    epoch: str | None = None
    for pol in model.policies:
        meta = pol["metadata"]
        if meta["namespace"] == SYNC_NAMESPACE and meta.get("name") == "sync-gate":
            try:
                epoch = str(pol["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"][
                    EPOCH_LABEL])
            except (KeyError, IndexError, TypeError):
                return None
    if epoch is None or model.namespace_labels.get(SYNC_NAMESPACE, {}).get(EPOCH_LABEL) != epoch:
        return None
    if not any(p.namespace == SYNC_NAMESPACE and p.labels.get(EPOCH_LABEL) == epoch
               for p in model.pods):
        return None
    return epoch


def _run(argv: list[str], stdin: str | None = None) -> None:
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False,
                          timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {proc.returncode}: {proc.stderr.strip()[:2000]}")


def _existing_sets() -> set[str]:
    proc = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=True,
                          timeout=60)
    return {n for n in proc.stdout.split() if n.startswith(SET_PREFIX)}


def install(ruleset: Ruleset, existing: set[str] | None = None) -> set[str]:
    """Install in the current network namespace: new ipsets, the table, then stale sets go.

    Args:
        existing: our ipsets known to exist (None: ask ``ipset list -n``).

    Returns:
        The names of our ipsets that exist afterwards.

    Raises:
        RuntimeError: ipset or iptables-restore failed (the previous table stays in force).
    """
    if existing is None:
        existing = _existing_sets()
    new = [f"create {name} hash:ip -exist" for name in ruleset.ipsets if name not in existing]
    for name, members in ruleset.ipsets.items():
        if name not in existing:
            new += [f"add {name} {ip} -exist" for ip in members]
    if new:
        _run(["ipset", "restore"], "\n".join(new) + "\n")
    _run(["iptables-restore", "-w", "5"], ruleset.iptables)
    stale = existing - set(ruleset.ipsets)
    if stale:
        _run(["ipset", "restore"], "".join(f"destroy {n}\n" for n in sorted(stale)))
    return set(ruleset.ipsets)


def forget_udp_flows() -> int:
    """Delete every UDP conntrack entry of the current network namespace; returns how many.

    UDP has no connection to keep: without this, a datagram whose 5-tuple had an answered
    exchange under the previous table (conntrack keeps it ESTABLISHED for 30 s,
    ``nf_conntrack_udp_timeout``) would pass the ESTABLISHED rule although the new policies deny
    it. TCP flows stay (policies govern new connections, as in Kubernetes CNIs).

    Raises:
        RuntimeError: ``conntrack`` failed for another reason than finding nothing to delete.
    """
    proc = subprocess.run(["conntrack", "-D", "-p", "udp"], capture_output=True, text=True,
                          check=False, timeout=60)
    found = re.search(r"(\d+) flow entries have been deleted", proc.stderr + proc.stdout)
    if found is None:
        raise RuntimeError(f"conntrack exited {proc.returncode}: {proc.stderr.strip()[:2000]}")
    return int(found.group(1))


class Enforcer:
    """Watch the API and keep the dataplane equal to the compiled model.

    Args:
        api: client of the cluster (cluster-wide watches of pods, namespaces, policies).
        pod_cidr: the pod network. status_file: where to write each sync's health (None:
            nowhere). budget: per-namespace budget (:data:`NAMESPACE_BUDGET`).
    """

    def __init__(self, api: Any, pod_cidr: str, status_file: Path | None = None,
                 budget: int = NAMESPACE_BUDGET) -> None:
        self.api = api
        self.pod_cidr = pod_cidr
        self.status_file = status_file
        self.budget = budget
        self.dirty = threading.Event()
        self.last_text = ""
        self.sets: set[str] | None = None  # our ipsets; None = unknown (ask the kernel)
        self.installed: dict[str, Fragment] = {}
        self.kernel_refused: dict[str, tuple[str, str]] = {}  # ns -> (fragment digest, error)
        self.syncs = 0
        self.unhealthy: dict[str, str] = {}

    def _watch(self, list_func: Callable[..., Any]) -> None:
        from kubernetes import watch

        while True:
            try:
                stream = watch.Watch().stream(list_func, timeout_seconds=300)
                for _event in stream:
                    self.dirty.set()
            except Exception as exc:  # noqa: BLE001 - reconnect on any watch failure
                log.warning("watch %s failed: %s", getattr(list_func, "__name__", "?"), exc)
                time.sleep(0.5)
            self.dirty.set()

    def _install(self, ruleset: Ruleset) -> None:
        known, self.sets = self.sets, None  # unknown unless the install below succeeds
        self.sets = install(ruleset, known)

    def _install_namespace_by_namespace(self, compiler: Compiler, frags: dict[str, Fragment],
                                        first_error: str) -> dict[str, Fragment]:
        """After a failed install: find the namespaces whose rules the kernel refuses.

        Namespaces are tried one at a time (the sentinel's last, so that no barrier passes
        before the end), each on top of those already accepted, the untried ones in their
        previously installed form (fail-closed if they had none). A refused namespace is
        installed fail-closed from then on, until its compiled fragment changes.

        Returns:
            The fragments now installed.
        """
        order = sorted(frags, key=lambda ns: (ns == SYNC_NAMESPACE, ns))
        chosen: dict[str, Fragment] = {}
        for index, ns in enumerate(order):
            trial = dict(chosen)
            trial[ns] = frags[ns]
            for later in order[index + 1:]:
                trial[later] = self.installed.get(later) or compiler.fragment(
                    later, "waiting for the other namespaces to be installed")
            try:
                self._install(assemble(trial.values()))
                chosen[ns] = frags[ns]
            except RuntimeError as exc:
                error = f"the kernel refused its rules: {str(exc)[:300]}"
                log.error("namespace %s installed fail-closed: %s", ns, error)
                self.kernel_refused[ns] = (frags[ns].digest(), error)
                chosen[ns] = compiler.fragment(ns, error)
        final = assemble(chosen.values())
        self._install(final)
        log.warning("install failed as a whole (%s); namespaces refused by the kernel: %s",
                    first_error[:200], sorted(self.kernel_refused))
        return chosen

    def sync_once(self) -> dict[str, float]:
        """Read, compile and install once, then write the status file; returns seconds per
        phase (read, compile, install) and the sizes.

        Raises:
            kubernetes.client.rest.ApiException / RuntimeError: the read or even the
                fail-closed install failed (the previous table stays in force).
        """
        from apps.k8s.cluster.crosscheck import load_model

        t0 = time.monotonic()
        model = load_model(self.api, pod_cidr=self.pod_cidr)
        t1 = time.monotonic()
        compiler = Compiler(model, self.pod_cidr, self.budget)
        frags = compiler.fragments()
        for ns, (digest, error) in list(self.kernel_refused.items()):
            if ns in frags and frags[ns].digest() == digest:
                frags[ns] = compiler.fragment(ns, error)  # still what the kernel refused
            else:
                del self.kernel_refused[ns]
        ruleset = assemble(frags.values())
        t2 = time.monotonic()
        if ruleset.iptables != self.last_text:
            try:
                self._install(ruleset)
            except RuntimeError as exc:
                frags = self._install_namespace_by_namespace(compiler, frags, str(exc))
                ruleset = assemble(frags.values())
            self.installed = frags
            self.last_text = ruleset.iptables
            forget_udp_flows()
        t3 = time.monotonic()
        self.syncs += 1
        health = {ns: f.health for ns, f in frags.items()}
        if self.status_file is not None:
            write_status(self.status_file, EnforcerStatus(
                self.syncs, time.time(), sentinel_epoch(model), health))
        unhealthy = {ns: h.describe() for ns, h in health.items() if not h.in_sync}
        if unhealthy != self.unhealthy:
            log.warning("not in sync: %s", unhealthy or "none")
            self.unhealthy = unhealthy
        return {"read_s": t1 - t0, "compile_s": t2 - t1, "install_s": t3 - t2,
                "pods": len(model.pods), "policies": len(model.policies),
                "lines": ruleset.iptables.count("\n")}

    def run(self) -> None:
        """Forever: after each watch event, one full sync (errors retried after 0.2 s)."""
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        net = client.NetworkingV1Api(self.api)
        for func in (core.list_pod_for_all_namespaces, core.list_namespace,
                     net.list_network_policy_for_all_namespaces):
            threading.Thread(target=self._watch, args=(func,), daemon=True).start()
        self.dirty.set()
        while True:
            self.dirty.wait()
            self.dirty.clear()
            try:
                took = self.sync_once()
                log.info("synced: %s", " ".join(f"{k}={v:.3f}" for k, v in took.items()))
            except Exception as exc:  # noqa: BLE001 - keep enforcing the last good table
                log.error("sync failed: %s", exc)
                self.dirty.set()
                time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    """``python -m apps.k8s.cluster.enforcer --kubeconfig PATH --pod-cidr CIDR
    [--status-file PATH] [--namespace-budget N] [--status-format N]``."""
    from kubernetes import config as kube_config

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--pod-cidr", required=True)
    parser.add_argument("--status-file", type=Path, default=None)
    parser.add_argument("--namespace-budget", type=int, default=NAMESPACE_BUDGET)
    parser.add_argument("--status-format", type=int, default=STATUS_FORMAT,
                        help="the status format the starter expects (refused if another)")
    args = parser.parse_args(argv)
    if args.status_format != STATUS_FORMAT:
        parser.error(f"this enforcer writes status format {STATUS_FORMAT}, not "
                     f"{args.status_format}")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    api = kube_config.new_client_from_config(config_file=args.kubeconfig)
    Enforcer(api, args.pod_cidr, args.status_file, args.namespace_budget).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
