"""Supervision of the cluster's daemons: start with a pid file, find, stop. No shell involved.

A pid file is trusted only if ``/proc/<pid>/cmdline`` still contains the marker the daemon was
started with (the state directory), so a recycled pid never gets signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def start_daemon(
    name: str,
    argv: Sequence[str],
    run_dir: Path,
    log_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start ``argv`` detached (own session), output appended to ``log_dir/<name>.log``.

    Returns:
        The pid, also written to ``run_dir/<name>.pid``.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(env) if env is not None else None,
            cwd=cwd,
        )
    (run_dir / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def daemon_pid(name: str, run_dir: Path, marker: str) -> int | None:
    """Pid of daemon ``name`` if its pid file names a live process whose cmdline has ``marker``."""
    try:
        pid = int((run_dir / f"{name}.pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    state = stat.rsplit(")", 1)[-1].split()[0]
    if state == "Z" or marker not in cmdline:
        return None
    return pid


def pid_alive(name: str, run_dir: Path) -> bool:
    """True if the pid file of ``name`` names a live, non-zombie process.

    Unlike :func:`daemon_pid` this does not look at the command line, which is briefly empty
    while a freshly started daemon is inside ``execve``; use it right after :func:`start_daemon`.
    """
    try:
        pid = int((run_dir / f"{name}.pid").read_text().strip())
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def stop_daemon(name: str, run_dir: Path, marker: str, timeout_s: float = 10.0) -> bool:
    """SIGTERM the daemon, SIGKILL it after ``timeout_s``; remove its pid file.

    Returns:
        True if a live process was found and stopped.
    """
    pid = daemon_pid(name, run_dir, marker)
    stopped = False
    if pid is not None:
        _signal(pid, signal.SIGTERM)
        if not wait_gone(pid, timeout_s):
            _signal(pid, signal.SIGKILL)
            wait_gone(pid, 5.0)
        stopped = True
    (run_dir / f"{name}.pid").unlink(missing_ok=True)
    return stopped


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Poll until ``pid`` has exited (or is a zombie), at most ``timeout_s``; reap our children."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return True
        except ChildProcessError:
            pass
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` in bytes (VmRSS of /proc/<pid>/status), 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
