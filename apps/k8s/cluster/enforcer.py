"""NetworkPolicy enforcement of the embedded cluster: the policy model compiled to iptables.

Runs as the daemon ``netpol-enforcer`` inside the cluster network namespace (where every
pod-to-pod packet crosses the FORWARD chain, see :mod:`apps.k8s.cluster.netns`). It watches
Pods, Namespaces and NetworkPolicies; after any event it re-reads all three with consistent
LISTs, compiles :class:`apps.k8s.cluster.policy_model.PolicyModel` and installs the result.

Layout of the filter table (chain names fixed; everything lives in the cluster namespace)::

    FORWARD      -> NETARENA-FWD
    NETARENA-FWD  ESTABLISHED,RELATED -> ACCEPT          (policies govern new connections;
                                                          UDP flows are forgotten on each change)
                  clear marks 0x30000
                  -s <pod> -> NAE-<n>; unless mark 0x10000: REJECT   (egress-isolated pods)
                  -d <pod> -> NAI-<n>; unless mark 0x20000: REJECT   (ingress-isolated pods)
                  ACCEPT
    NAE-<n>/NAI-<n>  one rule per (rule, peer group, port): set the mark when it matches
    NAB-<n>       ipBlock peers: RETURN for the pod CIDR and for each ``except``, else mark

Egress and ingress of a pod are separate chains with separate marks, so an ingress rule can
never satisfy an egress check (kube-router's divergence 2). Named ports are resolved per
destination pod: destinations are grouped by the number their port name resolves to
(divergences 3 and 4). Peer pods are matched through ``hash:ip`` ipsets named after a hash of
their content (``na-<16 hex>``): a set never changes once created, new sets are created before
the one atomic ``iptables-restore`` that references them, and sets nothing references any more
are destroyed after it — so no packet ever sees a half-applied state. Denied packets are
REJECTed (ICMP port unreachable), so a blocked probe fails at once instead of timing out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from apps.k8s.cluster.policy_model import (
    Obj,
    Pod,
    PolicyModel,
    PortMatch,
    resolve_ports,
    selector_matches,
)

log = logging.getLogger("netarena.enforcer")

EGRESS_MARK = 0x10000
INGRESS_MARK = 0x20000
MARK_MASK = EGRESS_MARK | INGRESS_MARK
SET_PREFIX = "na-"
TOP_CHAIN = "NETARENA-FWD"


@dataclass
class Ruleset:
    """A compiled ruleset: the ``iptables-restore`` text and the ipsets it references."""

    iptables: str
    ipsets: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _set_name(ips: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    members = tuple(sorted(set(ips)))
    digest = hashlib.sha256("\n".join(members).encode()).hexdigest()[:16]
    return SET_PREFIX + digest, members


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


class Compiler:
    """Compile one :class:`PolicyModel` into a :class:`Ruleset` (pure; no I/O)."""

    def __init__(self, model: PolicyModel, pod_cidr: str) -> None:
        self.model = model
        self.pod_cidr = pod_cidr
        self.chains: list[str] = []
        self.rules: list[str] = []
        self.ipsets: dict[str, tuple[str, ...]] = {}
        self._blocks = 0
        self._peer_cache: dict[tuple[str, str], list[Pod]] = {}
        self._chain_cache: dict[tuple[Any, ...], str] = {}
        self._by_ns: dict[str, list[Pod]] = {}
        for pod in model.pods:
            self._by_ns.setdefault(pod.namespace, []).append(pod)

    def _ipset(self, ips: Iterable[str]) -> str:
        name, members = _set_name(ips)
        self.ipsets[name] = members
        return name

    def _mark(self, chain: str, match: str, ports: list[PortMatch] | None, mark: int) -> None:
        target = f"-j MARK --set-xmark {mark:#x}/{mark:#x}"
        for port in ports if ports is not None else [None]:
            self.rules.append(f"-A {chain}{match}{_port_args(port)} {target}")

    def _pod_groups(self, pods: Sequence[Pod], ports: Sequence[Obj] | None,
                    port_owner: Pod | None) -> list[tuple[list[str], list[PortMatch] | None]]:
        """Group peer pods by resolved ports. Ports resolve against ``port_owner`` (ingress:
        the destination itself) or, when None, against each peer (egress: the peer is the
        destination)."""
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

    def _ip_block(self, chain: str, block: Obj, direction: str,
                  ports: list[PortMatch] | None, mark: int) -> None:
        self._blocks += 1
        sub = f"NAB-{self._blocks}"
        self.chains.append(sub)
        flag = "-d" if direction == "Egress" else "-s"
        self.rules.append(f"-A {chain} {flag} {block['cidr']} -j {sub}")
        self.rules.append(f"-A {sub} {flag} {self.pod_cidr} -j RETURN")
        for exc in block.get("except") or []:
            self.rules.append(f"-A {sub} {flag} {exc} -j RETURN")
        if ports is not None and not ports:
            return
        self._mark(sub, "", ports, mark)

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

    def _side(self, pod: Pod, direction: str) -> str | None:
        """The chain deciding ``direction`` for ``pod`` (None: not isolated). Pods isolated by
        the same policies share a chain (for ingress also the same declared ports, against
        which named ports resolve)."""
        policies = self.model.isolating(pod, direction)
        if not policies:
            return None
        egress = direction == "Egress"
        key = (direction, tuple(id(p) for p in policies), () if egress else pod.ports)
        if key in self._chain_cache:
            return self._chain_cache[key]
        chain = f"{'NAE' if egress else 'NAI'}-{len(self._chain_cache)}"
        self._chain_cache[key] = chain
        mark = EGRESS_MARK if egress else INGRESS_MARK
        flag = "dst" if egress else "src"
        self.chains.append(chain)
        for pol in policies:
            ns = pol["metadata"]["namespace"]
            for rule in (pol.get("spec") or {}).get("egress" if egress else "ingress") or []:
                peers = rule.get("to" if egress else "from") or []
                ports = rule.get("ports")
                owner = None if egress else pod
                if not peers:
                    # every pod, then every non-pod address
                    if egress and not _all_numeric(ports):
                        for ips, resolved in self._pod_groups(self.model.pods, ports, None):
                            if resolved is None or resolved:
                                match = f" -m set --match-set {self._ipset(ips)} dst"
                                self._mark(chain, match, resolved, mark)
                        external = resolve_ports(ports, None)
                        if external is None or external:
                            self._mark(chain, f" ! -d {self.pod_cidr}", external, mark)
                    else:
                        resolved = resolve_ports(ports, owner)
                        if resolved is None or resolved:
                            self._mark(chain, "", resolved, mark)
                    continue
                for peer in peers:
                    if peer.get("ipBlock"):
                        self._ip_block(chain, peer["ipBlock"], direction,
                                       resolve_ports(ports, owner), mark)
                        continue
                    matched = self._peer_pods(peer, ns)
                    for ips, resolved in self._pod_groups(matched, ports, owner):
                        if resolved is None or resolved:
                            match = f" -m set --match-set {self._ipset(ips)} {flag}"
                            self._mark(chain, match, resolved, mark)
        return chain

    def compile(self) -> Ruleset:
        """The full filter table for the model."""
        top = [
            f"-A {TOP_CHAIN} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
            f"-A {TOP_CHAIN} -j MARK --set-xmark 0x0/{MARK_MASK:#x}",
        ]
        for pod in self.model.pods:
            chain = self._side(pod, "Egress")
            if chain:
                top.append(f"-A {TOP_CHAIN} -s {pod.ip}/32 -j {chain}")
                top.append(f"-A {TOP_CHAIN} -s {pod.ip}/32 -m mark ! --mark "
                           f"{EGRESS_MARK:#x}/{EGRESS_MARK:#x} -j REJECT")
        for pod in self.model.pods:
            chain = self._side(pod, "Ingress")
            if chain:
                top.append(f"-A {TOP_CHAIN} -d {pod.ip}/32 -j {chain}")
                top.append(f"-A {TOP_CHAIN} -d {pod.ip}/32 -m mark ! --mark "
                           f"{INGRESS_MARK:#x}/{INGRESS_MARK:#x} -j REJECT")
        top.append(f"-A {TOP_CHAIN} -j ACCEPT")
        lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]",
                 ":OUTPUT ACCEPT [0:0]", f":{TOP_CHAIN} - [0:0]"]
        lines += [f":{c} - [0:0]" for c in self.chains]
        lines.append(f"-A FORWARD -j {TOP_CHAIN}")
        lines += top + self.rules + ["COMMIT", ""]
        return Ruleset("\n".join(lines), dict(self.ipsets))


def compile_model(model: PolicyModel, pod_cidr: str) -> Ruleset:
    """Compile ``model``; see :class:`Compiler`."""
    return Compiler(model, pod_cidr).compile()


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
    """Watch the API and keep the dataplane equal to the compiled model."""

    def __init__(self, api: Any, pod_cidr: str) -> None:
        self.api = api
        self.pod_cidr = pod_cidr
        self.dirty = threading.Event()
        self.last_text = ""
        self.sets: set[str] | None = None  # our ipsets; None = unknown (ask the kernel)

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

    def sync_once(self) -> dict[str, float]:
        """Read, compile and install once; returns seconds per phase (read, compile, install)."""
        from apps.k8s.cluster.crosscheck import load_model

        t0 = time.monotonic()
        model = load_model(self.api, pod_cidr=self.pod_cidr)
        t1 = time.monotonic()
        ruleset = compile_model(model, self.pod_cidr)
        t2 = time.monotonic()
        if ruleset.iptables != self.last_text:
            known, self.sets = self.sets, None  # unknown unless the install below succeeds
            self.sets = install(ruleset, known)
            self.last_text = ruleset.iptables
            forget_udp_flows()
        t3 = time.monotonic()
        return {"read_s": t1 - t0, "compile_s": t2 - t1, "install_s": t3 - t2,
                "pods": len(model.pods), "policies": len(model.policies)}

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
    """``python -m apps.k8s.cluster.enforcer --kubeconfig PATH --pod-cidr CIDR``."""
    from kubernetes import config as kube_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--pod-cidr", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    api = kube_config.new_client_from_config(config_file=args.kubeconfig)
    Enforcer(api, args.pod_cidr).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
