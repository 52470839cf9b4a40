"""Agent commands: the allow-list and the no-shell sandbox they run in.

A command is split with :func:`shlex.split` -- no shell ever sees it -- and checked against the
per-tool grammars of :mod:`apps.route.allowlist`. Allowed commands run inside the node's network
namespace (``nsenter --net=/proc/<pid>/ns/net``, done by the evaluator) under bubblewrap, all of
it started with the two-variable :data:`SANDBOX_ENV` (never the evaluator's environment): a
private mount namespace with a read-only ``/usr``, only the ``/etc`` files the tools read
(:data:`SANDBOX_ETC_FILES`) and nothing else of the host filesystem, fresh ``/proc`` in a new
PID namespace (no host processes visible),
``/proc/sys/net`` writable (per network namespace) while the rest of ``/proc/sys`` stays
read-only, empty ``/run`` ``/tmp`` ``/sys``, all capabilities dropped except ``CAP_NET_ADMIN``
and ``CAP_NET_RAW``, a per-command timeout and an output cap.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

from evaluator.app import DependencyMissingError

from apps.route.allowlist import ALLOWED_TOOLS, COMMAND_MAX_CHARS, check_command

__all__ = [
    "ALLOWED_TOOLS", "COMMAND_MAX_CHARS", "COMMAND_TIMEOUT_S", "OUTPUT_CAP_BYTES",
    "SANDBOX_ENV", "SANDBOX_ETC_FILES", "CommandOutput", "check_command", "run_sandboxed",
]  # fmt: skip

#: Per-command wall-clock limit (seconds).
COMMAND_TIMEOUT_S = 5.0
#: Output shown to the agent is cut after this many bytes.
OUTPUT_CAP_BYTES = 16_384
#: The only environment of the processes started for agent commands (nsenter, bwrap and so
#: bwrap's own init, which is pid 1 of the sandbox and readable as /proc/1/environ there).
SANDBOX_ENV = {"PATH": "/usr/sbin:/usr/bin", "LANG": "C"}
#: The /etc entries the allowed tools read (found with strace): the dynamic linker's cache, the
#: alternatives links iptables runs through, iproute2's name tables and the name-service files
#: used when a tool prints names instead of numbers. Everything else of /etc stays out.
SANDBOX_ETC_FILES = (
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
    "/etc/iproute2", "/etc/protocols", "/etc/services", "/etc/hosts", "/etc/host.conf",
    "/etc/nsswitch.conf", "/etc/networks", "/etc/ethertypes", "/etc/passwd", "/etc/group",
)  # fmt: skip


def sandbox_argv() -> list[str]:
    """The bwrap + nsenter prefix of a sandboxed command. Raises DependencyMissingError."""
    bwrap = shutil.which("bwrap")
    nsenter = shutil.which("nsenter")
    if bwrap is None or nsenter is None:
        raise DependencyMissingError("bwrap (apt bubblewrap) and nsenter (util-linux) are needed")
    argv = [
        bwrap, "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
        "--symlink", "usr/lib", "/lib",
    ]  # fmt: skip
    if os.path.isdir("/usr/lib64"):
        argv += ["--symlink", "usr/lib64", "/lib64"]
    argv += ["--dir", "/etc"]
    for path in SANDBOX_ETC_FILES:
        if os.path.lexists(path):
            argv += ["--ro-bind", path, path]
    argv += [
        # /proc/sys read-only (kernel.* etc. are global), then the per-namespace net.* writable
        "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys",
        "--bind", "/proc/sys/net", "/proc/sys/net", "--dev", "/dev",
        "--tmpfs", "/tmp", "--tmpfs",  # noqa: S108 - a private tmpfs
        "/run", "--tmpfs", "/sys", "--dir", "/var",
        "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session",
        "--cap-drop", "ALL", "--cap-add", "CAP_NET_ADMIN", "--cap-add", "CAP_NET_RAW",
        "--clearenv", "--setenv", "PATH", "/usr/sbin:/usr/bin", "--setenv", "LANG", "C",
        "--chdir", "/",
    ]  # fmt: skip
    return argv


@dataclass(frozen=True)
class CommandOutput:
    """Result of one sandboxed command: exit status (None if killed), output, flags, seconds."""

    status: int | None
    output: str
    timed_out: bool = False
    truncated: bool = False
    elapsed_s: float = 0.0


def run_sandboxed(
    pid: int,
    argv: list[str],
    *,
    timeout_s: float = COMMAND_TIMEOUT_S,
    output_cap_bytes: int = OUTPUT_CAP_BYTES,
) -> CommandOutput:
    """Run allowed ``argv`` in the network namespace of ``pid`` inside the sandbox.

    Stdout and stderr are merged; the process group is killed on timeout or when the output
    exceeds the cap. Raises :class:`DependencyMissingError` if bwrap/nsenter are missing.
    """
    nsenter = shutil.which("nsenter") or "nsenter"
    full = [nsenter, f"--net=/proc/{pid}/ns/net", "--", *sandbox_argv(), "--", *argv]
    started = time.perf_counter()
    proc = subprocess.Popen(
        full,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=dict(SANDBOX_ENV),
    )
    assert proc.stdout is not None
    chunks: list[bytes] = []
    size = 0
    timed_out = truncated = False
    deadline = started + timeout_s
    fd = proc.stdout.fileno()
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        data = os.read(fd, 65536)
        if not data:
            break
        chunks.append(data)
        size += len(data)
        if size > output_cap_bytes:
            truncated = True
            break
    if timed_out or truncated:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        status: int | None = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        status = proc.wait()
    proc.stdout.close()
    if timed_out:
        status = None
    text = b"".join(chunks)[:output_cap_bytes].decode("utf-8", errors="replace")
    if truncated:
        text += f"\n[output cut at {output_cap_bytes} bytes]"
    if timed_out:
        text += f"\n[command killed after {timeout_s:g} s]"
    return CommandOutput(status, text.rstrip(), timed_out, truncated, time.perf_counter() - started)
