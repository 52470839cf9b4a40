"""The ``k8s`` app's host check: can this machine run k8s episodes?

A k8s worker brings up the embedded cluster (docs/k8s-cluster.md) the first time an episode
needs it, so everything the cluster and the agent's kubectl need must be on the host before the
worker takes work:

* root: the cluster lives in a network namespace of its own, pods are network namespaces
  joined with ``setns`` and the enforcer writes iptables rules inside it;
* network namespaces (``/proc/self/ns/net``);
* the control-plane binaries ``etcd``, ``kube-apiserver`` and ``kube-controller-manager`` at
  the pinned version, in the binary cache (``NETARENA_K8S_BIN``) or on PATH, resolved as the
  cluster resolves them (:meth:`apps.k8s.cluster.config.ClusterConfig.find_binary`);
* ``kubectl`` for the agent's commands (:func:`apps.k8s.kubectl.kubectl_binary`);
* the host tools the cluster runs: ``ip`` (namespaces, veths, routes;
  :mod:`apps.k8s.cluster.netns`), ``nsenter`` (starts the node agent), ``iptables-restore``,
  ``ipset`` and ``conntrack`` (the NetworkPolicy enforcer, :mod:`apps.k8s.cluster.enforcer`).

This checks presence only; it starts nothing and writes nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from evaluator.app import DependencyMissingError

from apps.k8s.cluster.config import ClusterConfig
from apps.k8s.kubectl import kubectl_binary

HOST_TOOLS: dict[str, str] = {
    "ip": "iproute2",
    "nsenter": "util-linux",
    "iptables-restore": "iptables",
    "ipset": "ipset",
    "conntrack": "conntrack",
}
"""Host executables the cluster runs -> the Debian/Ubuntu package that provides each (the
packages ``scripts/setup.sh`` installs)."""

NETNS_PROC = Path("/proc/self/ns/net")
"""Present when the kernel has network namespaces."""


def missing_on_host(config: ClusterConfig | None = None) -> list[str]:
    """What this host lacks for k8s episodes, one sentence per problem saying how to fix it.

    Args:
        config: the cluster instance whose binary cache is checked (default instance).

    Returns:
        The problems in a fixed order (root, namespaces, cluster binaries, kubectl, host
        tools); empty when the host can run k8s episodes.
    """
    cfg = config or ClusterConfig()
    problems = []
    if os.geteuid() != 0:
        problems.append("k8s episodes need root (the cluster's network namespaces, pod "
                        "namespaces joined with setns, iptables and ipset rules)")
    if not NETNS_PROC.exists():
        problems.append(f"this kernel has no network namespaces ({NETNS_PROC} is missing)")
    binaries = cfg.missing_binaries()
    if binaries:
        problems.append(
            f"cluster binaries {', '.join(binaries)} are neither in {cfg.bin_dir} "
            f"(NETARENA_K8S_BIN) nor on PATH; run `make k8s-binaries` to build them there"
        )
    if kubectl_binary() is None:
        problems.append(
            "kubectl is not on PATH and NETARENA_KUBECTL names no executable; install kubectl "
            "(v1.32-v1.34), or build it with `NETARENA_K8S_KUBECTL=1 make k8s-binaries` and set "
            f"NETARENA_KUBECTL={cfg.bin_dir / 'kubectl'}"
        )
    tools = [name for name in HOST_TOOLS if shutil.which(name) is None]
    if tools:
        packages = sorted({HOST_TOOLS[name] for name in tools})
        problems.append(
            f"{', '.join(tools)} not on PATH; install the package(s) {', '.join(packages)} "
            "(`make k8s-binaries` installs them with the binaries)"
        )
    return problems


def check_host(config: ClusterConfig | None = None) -> None:
    """Raise unless this host can run k8s episodes (see :func:`missing_on_host`).

    Raises:
        DependencyMissingError: every problem found, each with how to fix it.
    """
    problems = missing_on_host(config)
    if problems:
        raise DependencyMissingError("; ".join(problems))

