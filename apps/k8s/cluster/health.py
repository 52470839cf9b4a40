"""Per-namespace sync health of the NetworkPolicy enforcer, as it reports it.

After every successful install the enforcer (:mod:`apps.k8s.cluster.enforcer`) writes one JSON
status file (``<state>/run/enforcer-status.json``, replaced atomically)::

    {"format": 2, "sync": 17, "time": 1764143000.1, "sentinel_epoch": "3f0c...",
     "namespaces": {"k8s-ep-...": {"in_sync": true, "refused": {}, "error": null,
                                    "rules": 212}}}

``sentinel_epoch`` is the epoch label of the dataplane sentinel's gate policy as that sync read
it (:mod:`apps.k8s.cluster.sync`): the barrier waits for the status of its own epoch, so the
health it returns describes a table that contains every write made before the barrier. A
namespace is *in sync* when every one of its NetworkPolicies is installed as the policy model
states it. It is not when the enforcer refused a policy (:func:`apps.k8s.cluster.policy_model.
unsupported`; the policy's pods stay isolated, nothing of it is admitted), when the namespace's
compiled rules exceed the enforcer's per-namespace budget, or when the kernel refused its rules
(in the last two cases every pod the namespace isolates rejects all new connections in that
direction). Other namespaces are installed normally in every case.

:meth:`apps.k8s.cluster.control_plane.Cluster.wait_dataplane` raises :class:`NotEnforcedError`
for a namespace that is not in sync, so an episode in such a namespace is never judged as
enforced (the ``k8s`` app turns it into an infrastructure failure).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATUS_FORMAT = 2
"""Version of the status file; an enforcer that writes another (or none) is restarted by
:meth:`apps.k8s.cluster.control_plane.Cluster.up`."""
STATUS_FILE = "enforcer-status.json"
"""File name inside the cluster's run directory."""


class NotEnforcedError(RuntimeError):
    """The dataplane does not enforce a namespace's policies as the model states them.

    Attributes:
        namespaces: ``{namespace: NamespaceHealth}`` of the namespaces not in sync.
    """

    def __init__(self, message: str, namespaces: dict[str, NamespaceHealth]) -> None:
        super().__init__(message)
        self.namespaces = namespaces


@dataclass
class NamespaceHealth:
    """One namespace in one sync.

    Attributes:
        refused: policy name -> reasons the enforcer refused it (see module docstring).
        error: why the whole namespace is installed fail-closed (budget, kernel), or None.
        rules: iptables lines plus ipset members compiled for the namespace.
    """

    refused: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None
    rules: int = 0

    @property
    def in_sync(self) -> bool:
        """True when every policy of the namespace is installed as modelled."""
        return not self.refused and self.error is None

    def describe(self) -> str:
        """One line: the namespace-wide error and each refused policy with its reasons."""
        parts = [self.error] if self.error else []
        parts += [f"policy {name} refused: {'; '.join(reasons)}"
                  for name, reasons in sorted(self.refused.items())]
        return "; ".join(parts) or "in sync"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (see the module docstring)."""
        return {"in_sync": self.in_sync, "refused": self.refused, "error": self.error,
                "rules": self.rules}


@dataclass
class EnforcerStatus:
    """What one enforcer sync reported (see the module docstring)."""

    sync: int
    time: float
    sentinel_epoch: str | None
    namespaces: dict[str, NamespaceHealth]
    format: int = STATUS_FORMAT

    def not_in_sync(self, namespaces: list[str] | tuple[str, ...]) -> dict[str, NamespaceHealth]:
        """The given namespaces that are not in sync (a namespace the report does not name
        has neither pods nor policies, so nothing to enforce: in sync)."""
        return {ns: self.namespaces[ns] for ns in namespaces
                if ns in self.namespaces and not self.namespaces[ns].in_sync}

    def to_dict(self) -> dict[str, Any]:
        """JSON form (see the module docstring)."""
        return {"format": self.format, "sync": self.sync, "time": self.time,
                "sentinel_epoch": self.sentinel_epoch,
                "namespaces": {ns: h.to_dict() for ns, h in sorted(self.namespaces.items())}}


def write_status(path: Path, status: EnforcerStatus) -> None:
    """Replace ``path`` atomically with ``status`` (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(status.to_dict(), sort_keys=True))
    os.replace(tmp, path)


def read_status(path: Path) -> EnforcerStatus | None:
    """The last status written to ``path``; None when there is none or its format is not
    :data:`STATUS_FORMAT` (an enforcer of another version)."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("format") != STATUS_FORMAT:
        return None
    namespaces = {
        ns: NamespaceHealth(dict(h.get("refused") or {}), h.get("error"), int(h.get("rules", 0)))
        for ns, h in (raw.get("namespaces") or {}).items()
    }
    return EnforcerStatus(int(raw.get("sync", 0)), float(raw.get("time", 0.0)),
                          raw.get("sentinel_epoch"), namespaces)


def describe_not_in_sync(bad: dict[str, NamespaceHealth]) -> str:
    """``namespace X is not enforced: ...`` for each namespace of ``bad``."""
    return "; ".join(f"namespace {ns} is not enforced: {h.describe()}"
                     for ns, h in sorted(bad.items()))
