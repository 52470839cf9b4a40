"""Agent commands: the allow-list and the no-shell sandbox they run in.

A command is split with :func:`shlex.split` -- no shell ever sees it -- and checked against an
allow-list of network tools. Allowed commands run inside the node's network namespace
(``nsenter --net=/proc/<pid>/ns/net``, done by the evaluator) under bubblewrap: a private
mount namespace with a read-only ``/usr`` and ``/etc`` and nothing else of the host
filesystem, fresh ``/proc`` in a new PID namespace (no host processes visible),
``/proc/sys/net`` writable (per network namespace) while the rest of ``/proc/sys`` stays
read-only, empty ``/run`` ``/tmp`` ``/sys``, all capabilities dropped except ``CAP_NET_ADMIN``
and ``CAP_NET_RAW``, a per-command timeout and an output cap.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import select
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

from evaluator.app import DependencyMissingError

#: Per-command wall-clock limit (seconds).
COMMAND_TIMEOUT_S = 5.0
#: Output shown to the agent is cut after this many bytes.
OUTPUT_CAP_BYTES = 16_384
#: Longest accepted command (characters).
COMMAND_MAX_CHARS = 1_000

ALLOWED_TOOLS = (
    "ip", "ifconfig", "route", "arp", "iptables", "iptables-save", "ip6tables",
    "ip6tables-save", "sysctl", "tc", "ss", "netstat", "cat",
)  # fmt: skip

_SHELL_CHARS = re.compile(r"[;&|<>`$\n\r\\]")
#: ``net.a.b`` or ``net/a/b``; segments cannot be empty or ``..`` (no way out of net.*).
_SYSCTL_KEY = re.compile(r"^net(?:(?:\.[A-Za-z0-9_-]+)+|(?:/[A-Za-z0-9_-]+)+)(=\S*)?$")
_IP_REFUSED = {
    "netns", "-n", "-netns", "--netns", "-b", "-batch", "--batch", "vrf", "monitor", "exec",
    "-force", "--force", "mptcp", "xfrm",
}  # fmt: skip
_TC_REFUSED = {"-b", "-batch", "--batch", "exec", "-n", "-netns", "--netns", "-force", "bpf"}


def check_command(command: str) -> tuple[list[str] | None, str | None]:
    """Split ``command`` and check it against the allow-list.

    Returns ``(argv, None)`` when allowed, ``(None, reason)`` when refused.
    """
    if len(command) > COMMAND_MAX_CHARS:
        return None, f"command longer than {COMMAND_MAX_CHARS} characters"
    if _SHELL_CHARS.search(command) or "$(" in command:
        return None, (
            "shell syntax is not available (no ; && || | $( ) ` < > or backslashes): "
            "send exactly one command per step"
        )
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return None, f"cannot split the command: {exc}"
    if not argv:
        return None, "empty command"
    tool = argv[0]
    if tool == "sudo":
        return None, "no sudo: commands already run with the privileges they need"
    if tool in ("ping", "ping6", "fping", "arping", "traceroute"):
        return None, "no ping: the pingall result is provided after every step"
    if tool not in ALLOWED_TOOLS:
        return None, f"{tool!r} is not an allowed tool; allowed: {', '.join(ALLOWED_TOOLS)}"
    args = argv[1:]
    if tool == "ip":
        bad = [a for a in args if a in _IP_REFUSED or a.startswith(("-netns", "-batch"))]
        if bad:
            return None, f"ip {bad[0]} is not allowed here"
    elif tool == "tc":
        bad = [a for a in args if a in _TC_REFUSED]
        if bad:
            return None, f"tc {bad[0]} is not allowed here"
    elif tool in ("iptables", "ip6tables", "iptables-save", "ip6tables-save"):
        bad = [
            a
            for a in args
            if a.startswith(("--modprobe", "-M", "--file"))
            or (a == "-f" and tool.endswith("-save"))
        ]
        if bad:
            return None, f"{tool} {bad[0]} is not allowed here"
    elif tool == "arp":
        if any(a in ("-f", "--file") for a in args):
            return None, "arp -f is not allowed here"
    elif tool == "ss":
        if any(a in ("-N", "--net") or a.startswith("--net=") for a in args):
            return None, "ss -N is not allowed here"
    elif tool == "sysctl":
        options = [a for a in args if a.startswith("-")]
        keys = [a for a in args if not a.startswith("-")]
        if any(o not in ("-w", "-n", "-e", "-q", "-N", "--write", "--values") for o in options):
            return None, "sysctl: only -w -n -e -q -N with explicit net.* keys are allowed"
        if not keys or not all(_SYSCTL_KEY.match(k) for k in keys):
            return None, "sysctl: only net.* keys are allowed (e.g. net.ipv4.ip_forward)"
    elif tool == "cat":
        if not args:
            return None, "cat needs a file under /proc/net or /proc/sys/net"
        for path in args:
            norm = posixpath.normpath(path)
            if path.startswith("-") or not (
                norm.startswith("/proc/net/") or norm.startswith("/proc/sys/net/")
            ):
                return None, "cat: only files under /proc/net and /proc/sys/net"
    return argv, None


def _bwrap_argv() -> list[str]:
    bwrap = shutil.which("bwrap")
    nsenter = shutil.which("nsenter")
    if bwrap is None or nsenter is None:
        raise DependencyMissingError("bwrap (apt bubblewrap) and nsenter (util-linux) are needed")
    argv = [
        bwrap, "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc",
        "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
        "--symlink", "usr/lib", "/lib",
    ]  # fmt: skip
    if os.path.isdir("/usr/lib64"):
        argv += ["--symlink", "usr/lib64", "/lib64"]
    for secret in ("/etc/shadow", "/etc/gshadow", "/etc/ssh", "/etc/ssl/private"):
        if os.path.isdir(secret):
            argv += ["--tmpfs", secret]
        elif os.path.exists(secret):
            argv += ["--ro-bind", "/dev/null", secret]
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
    full = [nsenter, f"--net=/proc/{pid}/ns/net", "--", *_bwrap_argv(), "--", *argv]
    started = time.perf_counter()
    proc = subprocess.Popen(
        full,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
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
