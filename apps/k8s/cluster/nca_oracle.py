"""network-config-analyzer (nca, https://github.com/np-guard/network-config-analyzer) as an
independent NetworkPolicy oracle, installed from PyPI into its own virtualenv (it pins exact
versions of PyYAML, networkx and others that must not leak into the project's environment).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def nca_allowed_ports(
    worlds: list[dict[str, Any]], python: Path | None = None, timeout_s: float = 600.0
) -> dict[str, dict[str, dict[str, list[str]]]]:
    """Ask nca which declared ports each pod may reach in each world.

    Args:
        worlds: ``[{"id", "pods": PodList, "namespaces": NamespaceList,
            "policies": NetworkPolicyList}]`` (API-shaped dicts; pods need ``status.podIP``).

    Returns:
        ``{world_id: {"ns/src": {"ns/dst": ["TCP/80", ...]}}}`` (sorted port lists).

    Raises:
        subprocess.CalledProcessError: if the runner fails (stderr attached).
    """
    python = python or ensure_nca_venv()
    proc = subprocess.run(
        [str(python), str(RUNNER)], input=json.dumps(worlds), capture_output=True, text=True,
        timeout=timeout_s, check=False,
    )
    if proc.returncode != 0:
        raise NcaError(f"nca runner exited {proc.returncode}: {proc.stderr[-3000:]}")
    result: dict[str, dict[str, dict[str, list[str]]]] = json.loads(proc.stdout)
    return result
