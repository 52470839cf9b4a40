"""Static configuration of the embedded cluster: paths, addresses, names, binaries.

Every value can be overridden by an environment variable so that CI, developers and a Celery
worker can run the same code with different state directories or address ranges.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

K8S_VERSION = "v1.33.13"
"""Pinned Kubernetes version built by ``scripts/build_k8s.sh`` (kubectl v1.32 is within skew)."""

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
"""Executables the control plane needs, resolved by :func:`find_binary`."""


class MissingBinaryError(RuntimeError):
    """A required executable is neither in the binary cache nor on PATH."""


@dataclass(frozen=True)
class ClusterConfig:
    """Where the cluster lives and how it is addressed.

    Attributes:
        state_dir: runtime state (PKI, etcd data, logs, pid files, kubeconfigs); outside the repo.
        bin_dir: binary cache written by ``scripts/build_k8s.sh``.
        netns: name of the dedicated network namespace that holds the control plane, the enforcer
            and every iptables rule of the cluster.
        host_veth / host_ip: root-namespace end of the link into ``netns`` (an ``/30``).
        node_ip: address of the cluster namespace end; API server address and Node InternalIP.
        pod_cidr: the only node's pod CIDR; pods get ``/32`` routed veths from it.
        service_cidr: ClusterIP range handed to kube-apiserver.
        node_name: name of the single Node registered by the node agent.
        apiserver_port: HTTPS port of kube-apiserver on ``node_ip``.
        pod_netns_prefix: prefix of every pod network namespace (used by cleanup).

    Host-level names (``netns``, ``host_veth``, ``pod_netns_prefix``) and the lock file (next to
    ``state_dir``, named after it) must differ between two clusters on one host; every other
    iptables/ipset object lives inside ``netns``. Environment: ``NETARENA_K8S_STATE``,
    ``NETARENA_K8S_NETNS``, ``NETARENA_K8S_HOST_VETH``, ``NETARENA_K8S_POD_NETNS_PREFIX``,
    ``NETARENA_K8S_HOST_IP``, ``NETARENA_K8S_NODE_IP``, ``NETARENA_K8S_POD_CIDR``.
    """

    state_dir: Path = field(
        default_factory=lambda: Path(os.environ.get("NETARENA_K8S_STATE", "/var/lib/netarena/k8s"))
    )
    bin_dir: Path = field(
        default_factory=lambda: Path(
            os.environ.get("NETARENA_K8S_BIN", f"/var/cache/netarena/k8s/{K8S_VERSION}/bin")
        )
    )
    netns: str = field(default_factory=lambda: os.environ.get("NETARENA_K8S_NETNS", "netarena-k8s"))
    host_veth: str = field(
        default_factory=lambda: os.environ.get("NETARENA_K8S_HOST_VETH", "nak8s-host")
    )
    host_ip: str = field(
        default_factory=lambda: os.environ.get("NETARENA_K8S_HOST_IP", "10.250.0.1")
    )
    node_ip: str = field(
        default_factory=lambda: os.environ.get("NETARENA_K8S_NODE_IP", "10.250.0.2")
    )
    link_prefix_len: int = 30
    pod_cidr: str = field(
        default_factory=lambda: os.environ.get("NETARENA_K8S_POD_CIDR", "10.244.0.0/16")
    )
    service_cidr: str = "10.96.0.0/16"
    node_name: str = "node0"
    apiserver_port: int = 6443
    pod_netns_prefix: str = field(
        default_factory=lambda: os.environ.get("NETARENA_K8S_POD_NETNS_PREFIX", "nak8s-pod-")
    )

    @property
    def server_url(self) -> str:
        """HTTPS URL of kube-apiserver, reachable from the root network namespace."""
        return f"https://{self.node_ip}:{self.apiserver_port}"

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def kubeconfig_dir(self) -> Path:
        return self.state_dir / "kubeconfigs"

    @property
    def admin_kubeconfig(self) -> Path:
        """Kubeconfig of the cluster administrator (group ``system:masters``)."""
        return self.kubeconfig_dir / "admin.kubeconfig"

    @property
    def service_ip(self) -> str:
        """First address of the service CIDR: the ClusterIP of ``default/kubernetes``."""
        net = ipaddress.ip_network(self.service_cidr)
        return str(net.network_address + 1)

    def find_binary(self, name: str) -> str:
        """Return the path of executable ``name``: the binary cache first, then PATH.

        Raises:
            MissingBinaryError: when neither has it (run ``scripts/build_k8s.sh``).
        """
        cached = self.bin_dir / name
        if cached.is_file() and os.access(cached, os.X_OK):
            return str(cached)
        found = shutil.which(name)
        if found:
            return found
        raise MissingBinaryError(
            f"{name} not found in {self.bin_dir} nor on PATH; run scripts/build_k8s.sh"
        )

    def missing_binaries(self) -> list[str]:
        """Names from :data:`BINARIES` that :meth:`find_binary` cannot resolve."""
        missing = []
        for name in BINARIES:
            try:
                self.find_binary(name)
            except MissingBinaryError:
                missing.append(name)
        return missing
