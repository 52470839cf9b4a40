"""The MALT code sandbox sees no evaluator environment and its memory
limit holds against shared memory (memfd, SysV shm) on any host, with a real bubblewrap sandbox.
"""

from __future__ import annotations

import pytest

from evaluator.sandbox import (
    SandboxLimits,
    SandboxUnavailableError,
    _cgroup,
    check_host,
    run_function,
)
from tests.conftest import require_root, require_tool

SMALL = SandboxLimits(wall_timeout_s=20.0, cpu_time_s=20.0, memory_bytes=256 * 1024**2)
SECRET = "postgres://netarena:s3cret-from-settings@db.internal/netarena"


@pytest.fixture(autouse=True)
def _sandbox_tools() -> None:
    require_root()
    require_tool("bwrap")
    require_tool("setpriv")
    require_tool("unshare")


def test_no_evaluator_environment_reaches_any_sandbox_process(monkeypatch) -> None:
    monkeypatch.setenv("DATABASE_URL", SECRET)
    monkeypatch.setenv("NETARENA_SECRET_ENCRYPTION_KEY", "k" * 40)
    code = (
        "import os\n"
        "def f(x):\n"
        "    seen = {'self': dict(os.environ)}\n"
        "    for pid in os.listdir('/proc'):\n"
        "        if pid.isdigit():\n"
        "            try:\n"
        "                seen[pid] = open(f'/proc/{pid}/environ', 'rb').read().decode()\n"
        "            except OSError as exc:\n"
        "                seen[pid] = f'unreadable: {exc.errno}'\n"
        "    return seen\n"
    )
    result = run_function(code, "f", None, limits=SMALL)
    assert result.ok, result.error
    text = repr(result.value)
    assert "1" in result.value  # the sandbox's pid 1 (bwrap) was looked at
    assert "s3cret" not in text and "DATABASE_URL" not in text
    assert "NETARENA" not in text
    assert set(result.value["self"]) <= {
        "PATH", "HOME", "LANG", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PWD",
    }  # fmt: skip


def test_memfd_writes_beyond_the_limit_end_as_a_memory_failure() -> None:
    # 1 GiB in 16 MiB memfds: no single file reaches RLIMIT_FSIZE and nothing is mapped, so
    # only the memory cgroup can stop it (the attack that held 1 GiB in a 256 MiB sandbox).
    code = (
        "import os\n"
        "def f(x):\n"
        "    block = b'\\0' * (16 * 1024 * 1024)\n"
        "    fds = []\n"
        "    for i in range(64):\n"
        "        fd = os.memfd_create(f'm{i}')\n"
        "        os.write(fd, block)\n"
        "        fds.append(fd)\n"
        "    return len(fds)\n"
    )
    result = run_function(code, "f", None, limits=SMALL)
    assert not result.ok and result.failure == "memory", result
    assert "cgroup" in result.controls


def test_sysv_shared_memory_is_capped_by_the_ipc_namespace() -> None:
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "IPC_PRIVATE, IPC_CREAT = 0, 0o1000\n"
        "def f(x):\n"
        "    big = libc.shmget(IPC_PRIVATE, 64 * 1024 * 1024, IPC_CREAT | 0o600)\n"
        "    big_errno = ctypes.get_errno()\n"
        "    count = 0\n"
        "    while count < 4096 and libc.shmget(IPC_PRIVATE, 1 << 20, IPC_CREAT | 0o600) >= 0:\n"
        "        count += 1\n"
        "    limits = {n: int(open('/proc/sys/kernel/' + n).read()) for n in\n"
        "              ('shmmax', 'shmall', 'shmmni')}\n"
        "    return {'big': big, 'big_errno': big_errno, 'segments_of_1MiB': count, **limits}\n"
    )
    result = run_function(code, "f", None, limits=SMALL)
    assert result.ok, result.error
    value = result.value
    assert value["big"] == -1 and value["big_errno"] == 22  # EINVAL: above shmmax
    assert value["segments_of_1MiB"] <= 1  # shmall = 1 MiB in all
    assert value["shmmax"] == 1024 * 1024 and value["shmmni"] == 16


def test_without_a_memory_cgroup_agent_code_is_refused(monkeypatch, tmp_path) -> None:
    # A host with neither cgroup v1 memory nor cgroup v2: point the sandbox at an empty
    # directory instead of /sys/fs/cgroup.
    monkeypatch.setattr(_cgroup, "CGROUP_ROOT", tmp_path)
    monkeypatch.delenv(_cgroup.ALLOW_NO_CGROUP_ENV, raising=False)
    with pytest.raises(SandboxUnavailableError, match="no memory limit can be enforced"):
        run_function("def f(x):\n    return 1\n", "f", None, limits=SMALL)
    result = run_function("def f(x):\n    return 1\n", "f", None, raise_unavailable=False)
    assert result.failure == "sandbox_unavailable"
    assert _cgroup.ALLOW_NO_CGROUP_ENV in (result.error or "")
    with pytest.raises(SandboxUnavailableError, match="no memory limit"):  # at start-up too
        check_host()


def test_start_up_check_reports_the_layers_of_this_host() -> None:
    controls = check_host()
    assert {"bwrap", "uid", "rlimits", "ipc_limits", "cgroup"} <= set(controls)


def test_the_development_override_runs_without_a_cgroup(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(_cgroup, "CGROUP_ROOT", tmp_path)
    monkeypatch.setenv(_cgroup.ALLOW_NO_CGROUP_ENV, "1")
    result = run_function("def f(x):\n    return 7\n", "f", None, limits=SMALL)
    assert result.ok and result.value == 7
    assert "cgroup" not in result.controls and "ipc_limits" in result.controls


def test_cgroup_v2_subtree_refuses_clearly_when_controllers_are_missing(
    monkeypatch, tmp_path
) -> None:
    # The v2 code path against a directory laid out like a v2 hierarchy whose parent did not
    # delegate the memory controller: the reason names the missing controller and the setting.
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")
    subtree = tmp_path / "delegated"
    subtree.mkdir()
    (subtree / "cgroup.controllers").write_text("cpu io\n")
    (subtree / "cgroup.subtree_control").write_text("\n")
    monkeypatch.setattr(_cgroup, "CGROUP_ROOT", tmp_path)
    monkeypatch.setenv(_cgroup.CGROUP_PARENT_ENV, str(subtree))
    with pytest.raises(_cgroup.CgroupUnavailableError, match="memory") as info:
        _cgroup.Cgroup.create("probe", SMALL)
    assert _cgroup.CGROUP_PARENT_ENV in str(info.value)
