"""The start-up check runs a real sandboxed call: a host (or container) that has every tool
and a memory cgroup but may not create namespaces is refused at start-up, instead of turning
every MALT episode into an infrastructure failure."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import require, require_root

pytestmark = [pytest.mark.root]

CHECK = """
from evaluator.sandbox import SandboxUnavailableError, check_host
try:
    print("LAYERS", ",".join(check_host()))
except SandboxUnavailableError as exc:
    print("UNAVAILABLE", exc)
"""


def _check_host(*prefix: str) -> str:
    done = subprocess.run([*prefix, sys.executable, "-c", CHECK], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_check_host_passes_where_the_sandbox_runs() -> None:
    require_root()
    assert "LAYERS bwrap,uid" in _check_host()


def test_check_host_refuses_a_host_where_namespaces_are_refused() -> None:
    require_root()
    setpriv = shutil.which("setpriv")
    require(setpriv is not None, "setpriv (util-linux) is not installed")
    assert setpriv is not None
    # root without CAP_SYS_ADMIN: like a container that lacks the capability bubblewrap needs
    out = _check_host(setpriv, "--inh-caps=-sys_admin", "--bounding-set=-sys_admin")
    assert out.startswith("UNAVAILABLE"), out
    assert "Operation not permitted" in out
