"""Start, inspect and tear down the embedded cluster.

Processes (all real Kubernetes code except the node agent):

* etcd v3.5 — storage, on 127.0.0.1 of the cluster network namespace;
* kube-apiserver — RBAC authorization, client-certificate and service-account authentication
  (flags: https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/);
* kube-controller-manager — Deployments, ReplicaSets, EndpointSlices, ServiceAccounts, GC,
  namespace deletion (https://kubernetes.io/docs/reference/command-line-tools-reference/
  kube-controller-manager/);
* the Python node agent (:mod:`apps.k8s.cluster.node_agent`) — Node, Lease, pods as network
  namespaces with real listeners;
* the NetworkPolicy enforcer (:mod:`apps.k8s.cluster.enforcer`) — our policy model compiled
  to iptables/ipset rules, reporting each namespace's sync health
  (:mod:`apps.k8s.cluster.health`).

Cluster-wide objects written at ``up``: the dataplane sentinel (:mod:`apps.k8s.cluster.sync`)
and the admission rule on episode namespaces' NetworkPolicies
(:mod:`apps.k8s.cluster.admission`).

Every daemon runs inside one network namespace (``config.netns``); all iptables/ipset state
lives there, so the host's rules are never touched and deleting the namespace removes them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.rest import ApiException

from apps.k8s.cluster import certs, netns, processes
from apps.k8s.cluster.admission import ensure_admission
from apps.k8s.cluster.config import ClusterConfig
from apps.k8s.cluster.health import (
    STATUS_FILE,
    STATUS_FORMAT,
    NotEnforcedError,
    describe_not_in_sync,
)
from apps.k8s.cluster.kubeconfig import mint_namespace_kubeconfig, write_cert_kubeconfig
from apps.k8s.cluster.rest import KubeRest, resource_path
from apps.k8s.cluster.sync import DataplaneSync, wait_pods_ready

REPO_ROOT = Path(__file__).resolve().parents[3]
COMPONENTS = (
    "etcd", "kube-apiserver", "kube-controller-manager", "node-agent", "netpol-enforcer"
)
"""Daemons in start order; stopped in reverse order."""
LEGACY_ENFORCER = "kube-router"
"""The enforcer of earlier versions; stopped if a cluster it was started in is reused."""


class ClusterError(RuntimeError):
    """The cluster could not be brought up; the message names the component and its log."""


@dataclass
class ClusterStatus:
    """Snapshot of the cluster.

    Attributes:
        running: True when every component is alive and the API server is ready.
        components: name -> pid (None when not running).
        apiserver_ready: ``/readyz`` answered 200.
        node_ready: the Node reports condition Ready=True.
        server: API server URL; kubeconfig: admin kubeconfig path.
        rss_bytes: resident memory of each running component in bytes.
    """

    running: bool
    components: dict[str, int | None]
    apiserver_ready: bool
    node_ready: bool
    server: str
    kubeconfig: str
    rss_bytes: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Cluster:
    """The embedded single-node cluster described by a :class:`ClusterConfig`.

    Typical use by an application worker::

        cluster = Cluster()
        cluster.up()                     # idempotent; ~10-20 s cold
        api = cluster.api_client()       # admin
        kubeconfig = cluster.mint_namespace_kubeconfig("episode-1")
        ...                              # apply objects, then cluster.wait_dataplane()
        cluster.down()                   # nothing left behind
    """

    def __init__(self, config: ClusterConfig | None = None) -> None:
        self.config = config or ClusterConfig()
        self._marker = str(self.config.state_dir)

    # ------------------------------------------------------------------ public API

    @contextlib.contextmanager
    def _lifecycle_lock(self) -> Iterator[None]:
        """Serialise up/down between processes (e.g. several workers on one machine)."""
        path = self.config.state_dir.parent / f".{self.config.state_dir.name}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def up(self, timeout_s: float = 180.0) -> ClusterStatus:
        """Bring the cluster up, or do nothing if it is already healthy.

        If only the node agent and/or the enforcer died, just those are restarted (the agent
        re-adopts its pods); any other partial state is torn down and started afresh.
        Serialised with other processes by a lock file next to the state directory.

        Raises:
            MissingBinaryError: a binary is missing (run ``scripts/build_k8s.sh``).
            ClusterError: a component died or did not become ready within ``timeout_s``.
        """
        with self._lifecycle_lock():
            return self._up(timeout_s)

    def _up(self, timeout_s: float) -> ClusterStatus:
        current = self.status()
        if current.running and current.node_ready:
            if self._enforcer_outdated():
                return self._restart_node_side(timeout_s, restart=("netpol-enforcer",))
            ensure_admission(KubeRest(self.api_client()))
            return current
        cfg = self.config
        for name in ("etcd", "kube-apiserver", "kube-controller-manager"):
            cfg.find_binary(name)
        core = ("etcd", "kube-apiserver", "kube-controller-manager")
        if all(current.components[n] for n in core) and self._apiserver_ready():
            return self._restart_node_side(timeout_s)
        if any(pid is not None for pid in current.components.values()) or netns.netns_exists(
            cfg.netns
        ):
            self._down(20.0)
        deadline = time.monotonic() + timeout_s
        try:
            self._prepare_state()
            netns.create_cluster_netns(
                cfg.netns, cfg.host_veth, cfg.host_ip, cfg.node_ip, cfg.link_prefix_len
            )
            self._start("etcd", self._etcd_argv(), in_netns=True)
            self._start("kube-apiserver", self._apiserver_argv(), in_netns=True)
            self._wait_apiserver(deadline)
            self._start("kube-controller-manager", self._kcm_argv(), in_netns=True)
            self._start("node-agent", self._agent_argv(), in_netns=True, keep_mounts=True)
            self._wait_node_ready(deadline)
            self._start("netpol-enforcer", self._enforcer_argv(), in_netns=True)
            ensure_admission(KubeRest(self.api_client()))
            sentinel = DataplaneSync(self.api_client(), cfg)
            sentinel.install(timeout_s=max(1.0, deadline - time.monotonic()))
        except BaseException:
            self._write_failure_note()
            raise
        return self.status()

    def _restart_node_side(
        self, timeout_s: float, restart: tuple[str, ...] = ()
    ) -> ClusterStatus:
        """Restart a dead node agent and/or enforcer (and the live ones named in ``restart``);
        the control plane stayed up.

        The agent reconciles on start (re-adopts pod namespaces, reopens listeners).
        """
        deadline = time.monotonic() + timeout_s
        # A cluster started by an earlier version ran kube-router as its enforcer: it must not
        # keep writing the filter table next to ours.
        processes.stop_daemon(LEGACY_ENFORCER, self.config.run_dir, self._marker)
        netns.unlimit_icmp(self.config.netns)
        for name, keep_mounts, argv in (
            ("node-agent", True, self._agent_argv()),
            ("netpol-enforcer", False, self._enforcer_argv()),
        ):
            if name in restart or \
                    processes.daemon_pid(name, self.config.run_dir, self._marker) is None:
                processes.stop_daemon(name, self.config.run_dir, self._marker)
                self._start(name, argv, in_netns=True, keep_mounts=keep_mounts)
                if name == "node-agent":
                    self._wait_node_ready(deadline)
        ensure_admission(KubeRest(self.api_client()))
        sentinel = DataplaneSync(self.api_client(), self.config)
        sentinel.install(timeout_s=max(1.0, deadline - time.monotonic()))
        return self.status()

    def down(self, timeout_s: float = 20.0) -> None:
        """Stop every component and remove namespaces, veths, rules and runtime state.

        Safe to call when nothing is running.
        """
        with self._lifecycle_lock():
            self._down(timeout_s)

    def _down(self, timeout_s: float) -> None:
        cfg = self.config
        for name in (*reversed(COMPONENTS), LEGACY_ENFORCER):
            processes.stop_daemon(name, cfg.run_dir, self._marker, timeout_s)
        for name in netns.list_netns(cfg.pod_netns_prefix):
            netns.delete_netns(name)
        netns.delete_netns(cfg.netns)
        if Path(f"/sys/class/net/{cfg.host_veth}").exists():
            netns.run_ip("link", "delete", cfg.host_veth, check=False)
        if cfg.state_dir.exists():
            shutil.rmtree(cfg.state_dir)

    def status(self) -> ClusterStatus:
        """Current state; never raises for a stopped cluster."""
        cfg = self.config
        pids = {
            name: processes.daemon_pid(name, cfg.run_dir, self._marker) for name in COMPONENTS
        }
        ready = all(pids.values()) and self._apiserver_ready()
        node_ready = bool(ready) and self._node_ready()
        return ClusterStatus(
            running=bool(ready),
            components=pids,
            apiserver_ready=bool(ready),
            node_ready=node_ready,
            server=cfg.server_url,
            kubeconfig=str(cfg.admin_kubeconfig),
            rss_bytes={n: processes.rss_bytes(p) for n, p in pids.items() if p},
        )

    def api_client(self, kubeconfig: Path | None = None) -> client.ApiClient:
        """A ``kubernetes`` client for the admin (or the given kubeconfig)."""
        return kube_config.new_client_from_config(
            config_file=str(kubeconfig or self.config.admin_kubeconfig)
        )

    def mint_namespace_kubeconfig(
        self, namespace: str, path: Path | None = None, *, name: str = "agent"
    ) -> Path:
        """Write a kubeconfig whose RBAC role reaches only ``namespace`` (which must exist).

        See :func:`apps.k8s.cluster.kubeconfig.mint_namespace_kubeconfig`.
        """
        target = path or self.config.kubeconfig_dir / f"{namespace}-{name}.kubeconfig"
        return mint_namespace_kubeconfig(
            self.api_client(), namespace, target, self.config.server_url,
            self.config.pki_dir / "ca.crt", name=name,
        )

    def ensure_namespace(
        self, name: str, labels: dict[str, str] | None = None, timeout_s: float = 30.0
    ) -> None:
        """Create namespace ``name`` (if missing) and wait for its ``default`` ServiceAccount,
        without which the ServiceAccount admission plugin rejects pods.

        Raises:
            TimeoutError: if the controller-manager does not create the account in time.
        """
        rest = KubeRest(self.api_client())
        rest.create_or_keep(
            resource_path("namespaces"), {"metadata": {"name": name, "labels": labels or {}}}
        )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                rest.get(resource_path("serviceaccounts", name, "default"))
                return
            except ApiException as exc:
                if exc.status != 404:
                    raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"namespace {name}: no default ServiceAccount in {timeout_s} s")
            time.sleep(0.05)

    def wait_dataplane(
        self, namespaces: tuple[str, ...] | list[str] = (), timeout_s: float = 60.0
    ) -> float:
        """Bounded wait until the pods of ``namespaces`` are ready and the dataplane enforces
        every API change made before the call (see :mod:`apps.k8s.cluster.sync`), and check
        that the enforcer reports each of ``namespaces`` in sync (:mod:`apps.k8s.cluster.health`).

        Returns:
            Seconds waited.

        Raises:
            apps.k8s.cluster.sync.SyncTimeoutError: not within ``timeout_s``.
            apps.k8s.cluster.health.NotEnforcedError: a namespace is not in sync (a refused
                policy, over the per-namespace budget, rules the kernel refused); the message
                names the namespace, the policies and the reasons.
        """
        start = time.monotonic()
        api = self.api_client()
        if namespaces:
            wait_pods_ready(api, namespaces, timeout_s)
        remaining = max(1.0, timeout_s - (time.monotonic() - start))
        sentinel = DataplaneSync(api, self.config)
        sentinel.barrier(remaining)
        if namespaces and sentinel.last_status is not None:
            bad = sentinel.last_status.not_in_sync(tuple(namespaces))
            if bad:
                raise NotEnforcedError(describe_not_in_sync(bad), bad)
        return time.monotonic() - start

    def kubectl_env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        """Environment for running ``kubectl`` against the cluster (KUBECONFIG set)."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(kubeconfig or self.config.admin_kubeconfig)
        return env

    # ------------------------------------------------------------------ startup steps

    def _prepare_state(self) -> None:
        cfg = self.config
        for d in (cfg.pki_dir, cfg.log_dir, cfg.run_dir, cfg.kubeconfig_dir):
            d.mkdir(parents=True, exist_ok=True)
        pki = cfg.pki_dir
        ca = certs.create_ca(pki)
        certs.issue(
            ca, pki, "apiserver", "kube-apiserver",
            server_names=(
                "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local", "localhost",
            ),
            server_ips=(cfg.node_ip, "127.0.0.1", cfg.service_ip),
        )
        certs.create_service_account_key(pki)
        users = {
            "admin": ("kubernetes-admin", ("system:masters",)),
            "controller-manager": ("system:kube-controller-manager", ()),
            # The node agent and the enforcer are cluster components with wide needs (nodes,
            # leases, pods/status, bindings; cluster-wide watches of pods, namespaces, policies).
            "node-agent": ("system:node:" + cfg.node_name, ("system:masters",)),
            "netpol-enforcer": ("system:netarena-netpol-enforcer", ("system:masters",)),
        }
        for stem, (user, groups) in users.items():
            pair = certs.issue(ca, pki, stem, user, groups)
            write_cert_kubeconfig(
                cfg.kubeconfig_dir / f"{stem}.kubeconfig", cfg.server_url, ca.cert,
                pair.cert, pair.key, user,
            )

    def _start(
        self, name: str, argv: list[str], *, in_netns: bool, keep_mounts: bool = False
    ) -> None:
        """Start a daemon, inside the cluster network namespace if ``in_netns``.

        ``ip netns exec`` also gives the process a private mount namespace (with the netns'
        /sys), in which named namespaces it creates would stay invisible to the host; the node
        agent creates pod namespaces, so it joins only the network namespace (``keep_mounts``).
        """
        cfg = self.config
        if in_netns and keep_mounts:
            argv = ["nsenter", f"--net={netns.NETNS_DIR / cfg.netns}", "--", *argv]
        elif in_netns:
            argv = ["ip", "netns", "exec", cfg.netns, *argv]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT)
        processes.start_daemon(name, argv, cfg.run_dir, cfg.log_dir, env=env, cwd=REPO_ROOT)

    def _etcd_argv(self) -> list[str]:
        cfg = self.config
        return [
            cfg.find_binary("etcd"),
            "--name=netarena",
            f"--data-dir={cfg.state_dir / 'etcd'}",
            "--listen-client-urls=http://127.0.0.1:2379",
            "--advertise-client-urls=http://127.0.0.1:2379",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=netarena=http://127.0.0.1:2380",
            "--listen-metrics-urls=http://127.0.0.1:2381",
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=1073741824",
            "--log-level=warn",
        ]

    def _apiserver_argv(self) -> list[str]:
        cfg = self.config
        pki = cfg.pki_dir
        return [
            cfg.find_binary("kube-apiserver"),
            "--etcd-servers=http://127.0.0.1:2379",
            f"--advertise-address={cfg.node_ip}",
            "--bind-address=0.0.0.0",
            f"--secure-port={cfg.apiserver_port}",
            f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--authorization-mode=RBAC",
            "--anonymous-auth=false",
            f"--service-cluster-ip-range={cfg.service_cidr}",
            "--allow-privileged=true",
            "--profiling=false",
            "--enable-priority-and-fairness=false",
            "--v=0",
        ]

    def _kcm_argv(self) -> list[str]:
        cfg = self.config
        pki = cfg.pki_dir
        kubeconfig = cfg.kubeconfig_dir / "controller-manager.kubeconfig"
        return [
            cfg.find_binary("kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--allocate-node-cidrs=false",
            "--configure-cloud-routes=false",
            "--bind-address=127.0.0.1",
            f"--cert-dir={cfg.state_dir / 'kcm-certs'}",
            "--profiling=false",
            "--v=0",
        ]

    def _agent_argv(self) -> list[str]:
        return [sys.executable, "-m", "apps.k8s.cluster.node_agent", "--state-dir",
                str(self.config.state_dir)]

    def _enforcer_argv(self) -> list[str]:
        cfg = self.config
        return [
            sys.executable, "-m", "apps.k8s.cluster.enforcer",
            "--kubeconfig", str(cfg.kubeconfig_dir / "netpol-enforcer.kubeconfig"),
            "--pod-cidr", cfg.pod_cidr,
            "--status-file", str(cfg.run_dir / STATUS_FILE),
            "--status-format", str(STATUS_FORMAT),
        ]

    def _enforcer_outdated(self) -> bool:
        """True when the running enforcer was started by a version that writes no status file
        of :data:`apps.k8s.cluster.health.STATUS_FORMAT` (its command line says which)."""
        pid = processes.daemon_pid("netpol-enforcer", self.config.run_dir, self._marker)
        if pid is None:
            return False
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        wanted = [b"--status-format", str(STATUS_FORMAT).encode()]
        return not any(argv[i:i + 2] == wanted for i in range(len(argv) - 1))

    # ------------------------------------------------------------------ readiness

    def _ssl_context(self) -> ssl.SSLContext:
        pki = self.config.pki_dir
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return ctx

    def _apiserver_ready(self) -> bool:
        if not (self.config.pki_dir / "admin.crt").exists():
            return False
        try:
            with urllib.request.urlopen(  # noqa: S310 - fixed https URL of our own API server
                f"{self.config.server_url}/readyz", context=self._ssl_context(), timeout=2
            ) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    def _node_ready(self) -> bool:
        try:
            node = KubeRest(self.api_client()).get(
                resource_path("nodes", name=self.config.node_name)
            )
        except Exception:  # noqa: BLE001 - any failure means "not ready"
            return False
        return any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (node.get("status") or {}).get("conditions") or []
        )

    def _check_alive(self, *names: str) -> None:
        for name in names:
            if not processes.pid_alive(name, self.config.run_dir):
                log = self.config.log_dir / f"{name}.log"
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise ClusterError(f"{name} exited; see {log}:\n{tail}")

    def _wait_apiserver(self, deadline: float) -> None:
        while not self._apiserver_ready():
            self._check_alive("etcd", "kube-apiserver")
            if time.monotonic() > deadline:
                raise ClusterError("kube-apiserver not ready before the deadline")
            time.sleep(0.2)

    def _wait_node_ready(self, deadline: float) -> None:
        while not self._node_ready():
            self._check_alive("etcd", "kube-apiserver", "kube-controller-manager", "node-agent")
            if time.monotonic() > deadline:
                raise ClusterError(f"node {self.config.node_name} not Ready before the deadline")
            time.sleep(0.1)

    def _write_failure_note(self) -> None:
        run_dir = self.config.run_dir
        if run_dir.exists():
            note = {n: processes.daemon_pid(n, run_dir, self._marker) for n in COMPONENTS}
            (run_dir / "last-failure.json").write_text(json.dumps(note))
