"""network-config-analyzer (nca, https://github.com/np-guard/network-config-analyzer) as an
independent NetworkPolicy oracle, installed from PyPI into its own virtualenv (it pins exact
versions of PyYAML, networkx and others that must not leak into the project's environment).

One documented difference is accounted for here instead of failing the comparison: nca 2.1.0
never matches a pod by an ``ipBlock`` peer (it treats ipBlocks as addresses outside the
cluster), while the project's model and enforcer match pod IPs in ipBlocks as Kubernetes'
NetworkPolicy e2e suite expects (docs/k8s.md, "ipBlock"). :func:`ipblocks_as_pod_peers`
states that reading in terms nca evaluates the Kubernetes way: next to every ipBlock peer it
adds one peer selecting exactly each pod whose IP lies in the block (and in no ``except``), by
a label unique to that pod. :func:`nca_allowed_ports` applies it unless told not to; nca's own
reading stays available with ``ipblock_matches_pods=False``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from apps.k8s.cluster.policy_model import block_contains

NCA_REQUIREMENT = "network-config-analyzer==2.1.0"
RUNNER = Path(__file__).with_name("nca_runner.py")


class NcaError(RuntimeError):
    """network-config-analyzer failed on an input."""


def nca_venv_dir() -> Path:
    """Virtualenv location: ``NETARENA_NCA_VENV`` or ``/var/cache/netarena/nca-venv``."""
    return Path(os.environ.get("NETARENA_NCA_VENV", "/var/cache/netarena/nca-venv"))


def ensure_nca_venv(venv: Path | None = None, timeout_s: float = 600.0) -> Path:
    """Create the virtualenv and install :data:`NCA_REQUIREMENT` unless already there.

    Returns:
        The venv's python executable.

    Raises:
        subprocess.CalledProcessError: if venv creation or pip fails (e.g. PyPI unreachable).
    """
    venv = venv or nca_venv_dir()
    python = venv / "bin" / "python"
    marker = venv / ".netarena-installed"
    if marker.exists() and marker.read_text().strip() == NCA_REQUIREMENT and python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True,
                   timeout=timeout_s)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         NCA_REQUIREMENT],
        check=True, timeout=timeout_s,
    )
    marker.write_text(NCA_REQUIREMENT + "\n")
    return python


POD_KEY_LABEL = "netarena.io/nca-pod"
"""Label that :func:`ipblocks_as_pod_peers` gives every pod (a value unique to the pod)."""


def ipblocks_as_pod_peers(world: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``world`` in which every ipBlock peer is followed by one peer per pod whose
    IP the block contains (:func:`apps.k8s.cluster.policy_model.block_contains`), selecting
    that pod alone (``namespaceSelector: {}`` plus a :data:`POD_KEY_LABEL` label that only it
    carries). Evaluated with nca's reading (ipBlocks never match pods), the result is the
    input evaluated with Kubernetes' (pod IPs match ipBlocks).
    """
    world = copy.deepcopy(world)
    pods = world["pods"]["items"]
    keys = []
    for pod in pods:
        meta = pod["metadata"]
        key = "p" + hashlib.sha256(f"{meta['namespace']}/{meta['name']}".encode()).hexdigest()[:16]
        meta["labels"] = {**(meta.get("labels") or {}), POD_KEY_LABEL: key}
        keys.append((key, (pod.get("status") or {}).get("podIP") or ""))
    for policy in world["policies"]["items"]:
        spec = policy.get("spec") or {}
        for direction, field in (("ingress", "from"), ("egress", "to")):
            for rule in spec.get(direction) or []:
                peers = rule.get(field)
                if not peers:
                    continue
                added = [
                    {"namespaceSelector": {}, "podSelector": {"matchLabels": {POD_KEY_LABEL: key}}}
                    for peer in peers if peer.get("ipBlock")
                    for key, ip in keys if ip and block_contains(peer["ipBlock"], ip)
                ]
                rule[field] = peers + added
    return world


def nca_allowed_ports(
    worlds: list[dict[str, Any]], python: Path | None = None, timeout_s: float = 600.0,
    *, ipblock_matches_pods: bool = True,
) -> dict[str, dict[str, dict[str, list[str]]]]:
    """Ask nca which declared ports each pod may reach in each world.

    Args:
        worlds: ``[{"id", "pods": PodList, "namespaces": NamespaceList,
            "policies": NetworkPolicyList}]`` (API-shaped dicts; pods need ``status.podIP``).
        ipblock_matches_pods: evaluate with pod IPs matching ipBlocks, as the project's model
            does (:func:`ipblocks_as_pod_peers`; default), or with nca's own reading (False).

    Returns:
        ``{world_id: {"ns/src": {"ns/dst": ["TCP/80", ...]}}}`` (sorted port lists).

    Raises:
        subprocess.CalledProcessError: if the runner fails (stderr attached).
    """
    python = python or ensure_nca_venv()
    if ipblock_matches_pods:
        worlds = [ipblocks_as_pod_peers(w) for w in worlds]
    proc = subprocess.run(
        [str(python), str(RUNNER)], input=json.dumps(worlds), capture_output=True, text=True,
        timeout=timeout_s, check=False,
    )
    if proc.returncode != 0:
        raise NcaError(f"nca runner exited {proc.returncode}: {proc.stderr[-3000:]}")
    result: dict[str, dict[str, dict[str, list[str]]]] = json.loads(proc.stdout)
    return result
