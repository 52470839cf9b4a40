"""NetworkPolicy enforcement of the embedded cluster: the policy model compiled to iptables.

Runs as the daemon ``netpol-enforcer`` inside the cluster network namespace (where every
pod-to-pod packet crosses the FORWARD chain, see :mod:`apps.k8s.cluster.netns`). It watches
Pods, Namespaces and NetworkPolicies; after any event it re-reads all three with consistent
LISTs, compiles :class:`apps.k8s.cluster.policy_model.PolicyModel` and installs the result,
then reports each namespace's sync health (:mod:`apps.k8s.cluster.health`).

The rules themselves (table layout, per-policy chains, ipsets, the per-namespace budget and
fail-closed fragments) are compiled by :mod:`apps.k8s.cluster.compiler`; this module reads the
cluster (:func:`load_model`), installs what the compiler gives (:func:`install`: new ipsets,
one atomic ``iptables-restore``, then stale sets destroyed), after each change forgets the UDP
flows of the addresses whose verdicts it may alter (:func:`forget_udp_flows`) and, when the
kernel refuses an install, finds the namespaces whose rules it refuses and installs those
fail-closed.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client

from apps.k8s.cluster.compiler import (
    NAMESPACE_BUDGET,
    SET_PREFIX,
    Compiler,
    Fragment,
    Ruleset,
    assemble,
    changed_addresses,
)
from apps.k8s.cluster.config import ClusterConfig
from apps.k8s.cluster.ctnetlink import forget_udp
from apps.k8s.cluster.health import (
    STATUS_FORMAT,
    EnforcerStatus,
    write_status,
)
from apps.k8s.cluster.policy_model import PolicyModel, pod_from_api
from apps.k8s.cluster.rest import KubeRest, resource_path
from apps.k8s.cluster.sync import EPOCH_LABEL, SYNC_NAMESPACE

log = logging.getLogger("netarena.enforcer")


def load_model(api: client.ApiClient, pod_cidr: str | None = None,
               config: ClusterConfig | None = None) -> PolicyModel:
    """A :class:`PolicyModel` of the whole cluster as the API server sees it now.

    Every namespace and pod is read, because a peer's ``namespaceSelector`` may select pods
    outside the episode's namespace. Raises ``kubernetes.client.rest.ApiException``.
    """
    cfg = config or ClusterConfig()
    rest = KubeRest(api)
    paths = (resource_path("namespaces"), "/api/v1/pods",
             "/apis/networking.k8s.io/v1/networkpolicies")
    with ThreadPoolExecutor(len(paths)) as pool:  # three independent consistent LISTs
        ns_items, pod_items, policies = (r["items"] for r in pool.map(rest.get, paths))
    namespaces = {ns["metadata"]["name"]: dict(ns["metadata"].get("labels") or {})
                  for ns in ns_items}
    pods = [p for p in (pod_from_api(item) for item in pod_items) if p]
    return PolicyModel(pods, namespaces, policies, pod_cidr or cfg.pod_cidr)


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


def forget_udp_flows(sources: Iterable[str] | None = None,
                     destinations: Iterable[str] | None = None) -> int:
    """Delete UDP conntrack entries of the current network namespace; returns how many.

    UDP has no connection to keep: without this, a datagram whose 5-tuple had an answered
    exchange under the previous table (conntrack keeps it ESTABLISHED for 30 s,
    ``nf_conntrack_udp_timeout``) would pass the ESTABLISHED rule although the new policies deny
    it. TCP flows stay (policies govern new connections, as in Kubernetes CNIs).

    Args:
        sources / destinations: with both None every UDP entry goes; otherwise only those
            whose original source is in ``sources`` or original destination in
            ``destinations`` (:func:`apps.k8s.cluster.compiler.changed_addresses`), so that a
            change elsewhere never turns an in-flight reply into a NEW packet.

    Raises:
        RuntimeError: netfilter netlink failed (:func:`apps.k8s.cluster.ctnetlink.forget_udp`).
    """
    try:
        return forget_udp(sources, destinations)
    except OSError as exc:
        raise RuntimeError(f"conntrack: {exc}") from exc


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
            whole = not self.last_text  # first install: the table before may be anyone's
            try:
                self._install(ruleset)
            except RuntimeError as exc:
                frags = self._install_namespace_by_namespace(compiler, frags, str(exc))
                ruleset = assemble(frags.values())
                whole = True  # trial tables were in force in between: forget every flow
            if whole:
                forget_udp_flows()
            else:
                sources, destinations = changed_addresses(self.last_text, ruleset.iptables)
                forget_udp_flows(sources, destinations)
            self.installed = frags
            self.last_text = ruleset.iptables
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
