"""Access to Mininet's own Python API from the project's virtualenv.

Debian ships Mininet 2.3.0 as ``python3-mininet`` for the system interpreter
(``/usr/lib/python3/dist-packages/mininet``); PyPI only carries ``2.3.0.dev6``. The package is
pure Python (its only binary, ``mnexec``, is on ``PATH``), so we import exactly that package
from its directory without putting the whole of ``dist-packages`` on ``sys.path`` (which would
shadow the venv's own packages).

Mininet's ``LinuxBridge`` drives bridges with ``brctl`` (bridge-utils), which these machines do
not have; :class:`IPRouteBridge` is the same switch class driven by iproute2 (``ip link ...
type bridge``), with spanning tree off so ports forward at once and no controller.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import shutil
import sys
from functools import cache
from types import ModuleType
from typing import Any

from evaluator.app import DependencyMissingError

#: Where Debian's ``mininet`` package installs the Python module.
DEBIAN_MININET_DIRS = ("/usr/lib/python3/dist-packages", "/usr/lib/python3/site-packages")


def _import_debian_mininet() -> ModuleType:
    try:
        return importlib.import_module("mininet")
    except ImportError:
        pass
    spec = importlib.machinery.PathFinder.find_spec("mininet", list(DEBIAN_MININET_DIRS))
    if spec is None or spec.loader is None:
        raise DependencyMissingError(
            "Mininet's Python package is not installed (apt package `mininet`)"
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules["mininet"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"
        sys.modules.pop("mininet", None)
        raise DependencyMissingError(f"Mininet's Python package failed to import: {exc}") from exc
    return module


@cache
def mininet_api() -> dict[str, Any]:
    """Return Mininet's classes used by this app, importing them on first use.

    Returns a dict with ``Mininet``, ``Topo``, ``Node``, ``Host``, ``LinuxBridge`` and
    ``IPRouteBridge`` (our subclass).

    Raises:
        DependencyMissingError: the ``mininet`` package or the ``mnexec`` helper is missing.
    """
    if shutil.which("mnexec") is None:
        raise DependencyMissingError("mnexec is not on PATH (apt package `mininet`)")
    _import_debian_mininet()
    net = importlib.import_module("mininet.net")
    node = importlib.import_module("mininet.node")
    nodelib = importlib.import_module("mininet.nodelib")
    topo = importlib.import_module("mininet.topo")
    log = importlib.import_module("mininet.log")
    log.setLogLevel("error")

    linux_bridge = nodelib.LinuxBridge

    class IPRouteBridge(linux_bridge):  # type: ignore[misc, valid-type]
        """Mininet ``LinuxBridge`` driven by iproute2 instead of ``brctl`` (no STP)."""

        def connected(self) -> bool:
            return True

        def start(self, _controllers: Any) -> None:
            self.cmd("ip link del dev", self, "2>/dev/null")
            self.cmd("ip link add name", self, "type bridge stp_state 0 forward_delay 0")
            for intf in self.intfList():
                if self.name in intf.name:
                    self.cmd("ip link set dev", intf, "master", self)
            self.cmd("ip link set dev", self, "up")

        def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 - Mininet's name
            self.cmd("ip link del dev", self, "2>/dev/null")
            node.Switch.stop(self, deleteIntfs)

    return {
        "Mininet": net.Mininet,
        "Topo": topo.Topo,
        "Node": node.Node,
        "Host": node.Host,
        "LinuxBridge": linux_bridge,
        "IPRouteBridge": IPRouteBridge,
    }
