"""Run untrusted agent Python code in a separate, locked-down process (DESIGN.md §8, issue 2).

The MALT app calls :func:`run_function` with the agent's code (which defines
``process_graph(graph_data)``) and a networkx graph. The code runs in a fresh interpreter
inside bubblewrap (``bwrap``) with:

* new PID, network, IPC, UTS and cgroup namespaces (no network at all, the evaluator's
  processes are invisible), ``--die-with-parent`` and ``--new-session``;
* a read-only view of ``/usr`` and the Python installation only, a fresh ``/proc`` and
  ``/dev``, and a size-capped tmpfs ``/tmp`` as the only writable place (the per-run scratch
  dir, gone when the run ends);
* a cleared environment;
* an unprivileged, per-run uid with no capabilities and ``no_new_privs`` (``setpriv``), so
  that ``RLIMIT_NPROC`` applies (the kernel does not enforce it for root);
* POSIX limits on address space, CPU seconds, file size, processes and open files, plus — when
  the host lets us create cgroup v1 ``memory``/``pids`` groups — a memory and process cap over
  the whole sandbox;
* a parent-side hard wall-clock kill, capped reading of stdout/stderr and of the result channel.

The argument goes in as a pickle written by the parent (trusted data); only newline-delimited,
size-capped JSON comes back and the parent never unpickles or evaluates anything from the
child. The threat model and each control are described in ``docs/sandbox.md``.

``run_function`` raises :class:`SandboxUnavailableError` when bubblewrap, ``setpriv`` or root
are missing or the sandbox cannot start (infrastructure, not the agent's fault; pass
``raise_unavailable=False`` to get ``failure="sandbox_unavailable"`` instead), and
:class:`SandboxSetupError` when the trusted part (preamble, argument) fails before any agent
code ran. Every agent behaviour ends as a :class:`SandboxResult`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import itertools
import json
import os
import pickle
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from evaluator.app import DependencyMissingError, EmulatorError

#: Failure categories of :attr:`SandboxResult.failure`.
FAILURES = (
    "timeout",
    "memory",
    "cpu",
    "output_limit",
    "result_too_large",
    "crash",
    "exception",
    "no_function",
    "bad_result",
    "sandbox_unavailable",
)
#: Failures the child harness itself may report (anything else from the child is a violation).
_CHILD_FAILURES = frozenset(
    {"exception", "no_function", "bad_result", "memory", "result_too_large"}
)

_HARNESS_PATH = Path(__file__).with_name("sandbox_child.py")
_HARNESS_IN_SANDBOX = "/opt/netarena/sandbox_child.py"
#: The scratch dir: a fresh, size-capped tmpfs inside the sandbox (never the host's /tmp).
_SCRATCH = "/tmp"  # noqa: S108
_MAX_ERROR_CHARS = 4000
#: Seconds the sandbox may take to exit after it delivered its terminal message.
_EXIT_GRACE_S = 2.0
#: Per-run uids are drawn from [_UID_BASE, _UID_BASE + _UID_SPAN): far above system, user and
#: the usual subordinate-uid ranges (100000-165535), below the 32-bit "nobody" sentinels.
_UID_BASE = 1_500_000_000
_UID_SPAN = 1_000_000
_uid_counter = itertools.count()


class SandboxError(EmulatorError):
    """The sandbox itself failed (infrastructure, never the agent's fault)."""


class SandboxUnavailableError(SandboxError, DependencyMissingError):
    """bubblewrap/setpriv/root are missing or the sandbox could not be started on this host."""


class SandboxSetupError(SandboxError):
    """The trusted part (argument pickling, preamble) failed before any agent code ran."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed call.

    Attributes:
        wall_timeout_s: wall-clock seconds from the moment the agent code starts (after the
            interpreter started and the argument was loaded) until the result must be in.
        cpu_time_s: CPU seconds per process (RLIMIT_CPU; SIGXCPU then SIGKILL one second later).
        memory_bytes: address-space limit per process (RLIMIT_AS) and, when cgroups are
            usable, the memory limit of the whole sandbox (plus ``scratch_bytes``).
        output_bytes: stdout + stderr bytes kept; more output kills the run (``output_limit``).
        result_bytes: largest accepted JSON result line (``result_too_large`` beyond).
        max_processes: processes/threads the agent's uid may have (RLIMIT_NPROC; the pids
            cgroup when usable).
        setup_timeout_s: seconds allowed for interpreter start, unpickling and the preamble
            (infrastructure budget; exceeding it raises :class:`SandboxSetupError`).
        scratch_bytes: size of the writable tmpfs ``/tmp`` and the largest file (RLIMIT_FSIZE).

    Raises ``ValueError`` on a non-positive limit.
    """

    wall_timeout_s: float = 10.0
    cpu_time_s: float = 10.0
    memory_bytes: int = 2 * 1024**3
    output_bytes: int = 1_048_576
    result_bytes: int = 64 * 1024**2
    max_processes: int = 16
    setup_timeout_s: float = 30.0
    scratch_bytes: int = 64 * 1024**2

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive")


@dataclass(frozen=True)
class SandboxResult:
    """Outcome of one sandboxed call.

    Attributes:
        ok: the function returned and its value came back as JSON.
        value: the decoded return value (``None`` unless ``ok``); graphs arrive as
            ``{"__networkx__": node_link_data(G, edges="links")}``, tuples as lists, sets as
            sorted lists when sortable.
        failure: ``None`` when ok, else one of :data:`FAILURES`.
        error: human-readable reason; for ``exception`` it ends with the agent's traceback.
        exec_s: seconds measured by the parent from the child's "ready" message (sent before
            any agent code runs) to the arrival of the complete result (or to the failure).
            It covers compiling and running the agent code and encoding the result; agent code
            can only make it larger, never smaller.
        stdout: the agent's standard output, capped at ``output_bytes``.
        stderr: the sandbox's standard error, capped (extra field).
        wall_s: total wall seconds of the call, interpreter start included (extra field).
        controls: the isolation layers that were active, e.g. ``("bwrap", "rlimits",
            "uid", "cgroup")`` (extra field).
    """

    ok: bool
    value: Any
    failure: str | None
    error: str | None
    exec_s: float
    stdout: str
    stderr: str = ""
    wall_s: float = 0.0
    controls: tuple[str, ...] = field(default=())


#: Namespace flags of clone(2)/unshare(2) the agent may not use (linux/sched.h). Without
#: capabilities only CLONE_NEWUSER would succeed, and a user namespace would give the agent
#: capabilities over fresh mounts (an unbounded tmpfs, for one); all are listed for clarity.
_NAMESPACE_FLAGS = (
    0x00000080,  # CLONE_NEWTIME
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
#: System calls refused with EPERM: namespaces and mounts, kernel keyrings, eBPF, perf,
#: userfaultfd, io_uring, ptrace and cross-process memory access, kernel modules and
#: other administration calls (most need capabilities anyway; they are a large attack surface).
_DENIED_SYSCALLS = (
    "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "name_to_handle_at", "acct", "swapon", "swapoff", "reboot",
    "syslog", "quotactl", "personality", "lookup_dcookie", "vhangup",
)  # fmt: skip
_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_MASKED_EQ = 7


class _ScmpArgCmp(ctypes.Structure):
    """``struct scmp_arg_cmp`` of libseccomp (seccomp_rule_add_array(3))."""

    _fields_ = (
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    )


def _scmp_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)  # SCMP_ACT_ERRNO(code)


@lru_cache(maxsize=1)
def _seccomp_program() -> bytes | None:
    """Compile the sandbox's seccomp filter with libseccomp; ``None`` if libseccomp is absent.

    Default action: allow. Denied: :data:`_DENIED_SYSCALLS` (EPERM), ``clone``/``unshare``
    with any of :data:`_NAMESPACE_FLAGS` (EPERM) and ``clone3`` (ENOSYS, whose flags live in
    memory a filter cannot read; glibc then falls back to ``clone``). Foreign architectures
    (e.g. 32-bit calls on x86_64) are killed by libseccomp's default bad-arch action. Returns
    the classic-BPF program that bwrap's ``--seccomp FD`` loads.
    """
    name = ctypes.util.find_library("seccomp")
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = (ctypes.c_uint32,)
    lib.seccomp_release.argtypes = (ctypes.c_void_p,)
    lib.seccomp_syscall_resolve_name.argtypes = (ctypes.c_char_p,)
    lib.seccomp_rule_add_array.argtypes = (
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
        ctypes.POINTER(_ScmpArgCmp),
    )  # fmt: skip
    lib.seccomp_export_bpf.argtypes = (ctypes.c_void_p, ctypes.c_int)
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        return None
    try:

        def rule(action: int, syscall: str, *compare: _ScmpArgCmp) -> None:
            number = lib.seccomp_syscall_resolve_name(syscall.encode())
            if number < 0:
                return  # unknown on this architecture/libseccomp version
            array = (_ScmpArgCmp * max(len(compare), 1))(*compare)
            if lib.seccomp_rule_add_array(ctx, action, number, len(compare), array) != 0:
                raise OSError(f"seccomp_rule_add_array failed for {syscall}")

        for syscall in _DENIED_SYSCALLS:
            rule(_scmp_errno(1), syscall)  # EPERM
        rule(_scmp_errno(38), "clone3")  # ENOSYS
        for syscall in ("clone", "unshare"):
            for flag in _NAMESPACE_FLAGS:
                rule(_scmp_errno(1), syscall, _ScmpArgCmp(0, _SCMP_CMP_MASKED_EQ, flag, flag))
        read_fd, write_fd = os.pipe()
        try:
            if lib.seccomp_export_bpf(ctx, write_fd) != 0:
                return None
            os.close(write_fd)
            write_fd = -1
            chunks = []
            while chunk := os.read(read_fd, 65536):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)
    except OSError:
        return None
    finally:
        lib.seccomp_release(ctx)


@dataclass(frozen=True)
class _Plan:
    """Host paths resolved once per process: tools and the directories to bind read-only."""

    bwrap: str
    setpriv: str
    python: str
    ro_dirs: tuple[str, ...]


def _tail(text: str, limit: int = _MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


@lru_cache(maxsize=1)
def _plan() -> _Plan:
    """Resolve the sandbox's tools and bind set. Raises :class:`SandboxUnavailableError`."""
    if os.geteuid() != 0:
        raise SandboxUnavailableError(
            "the sandbox needs root to give each run its own unprivileged uid (setpriv)"
        )
    bwrap = shutil.which("bwrap")
    setpriv = shutil.which("setpriv")
    if bwrap is None:
        raise SandboxUnavailableError("bubblewrap (bwrap) is not installed (apt: bubblewrap)")
    if setpriv is None:
        raise SandboxUnavailableError("setpriv is not installed (apt: util-linux)")
    if not _HARNESS_PATH.is_file():
        raise SandboxUnavailableError(f"sandbox harness missing: {_HARNESS_PATH}")
    candidates = {
        os.path.realpath(p)
        for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)
    }
    candidates.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    # /usr is bound as a whole; drop paths inside it and paths nested in another candidate.
    kept = sorted(p for p in candidates if not (p == "/usr" or p.startswith("/usr/")))
    ro_dirs = tuple(
        p for p in kept if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in kept)
    )
    return _Plan(bwrap=bwrap, setpriv=setpriv, python=sys.executable, ro_dirs=ro_dirs)


def _allocate_uid() -> int:
    """Return a uid for one run: distinct for concurrent runs of this host with high
    probability (pid and a per-process counter), so RLIMIT_NPROC budgets do not mix."""
    return _UID_BASE + (os.getpid() * 1024 + next(_uid_counter)) % _UID_SPAN


def _parents(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _bwrap_command(
    plan: _Plan, uid: int, limits: SandboxLimits, result_fd: int, seccomp_fd: int | None
) -> list[str]:
    """Build the bwrap + setpriv + python command line (see docs/sandbox.md for each flag)."""
    cmd = [
        plan.bwrap,
        "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent", "--new-session",
        "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "HOME", _SCRATCH,
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONHASHSEED", "0",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--hostname", "sandbox",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/bin", "/bin",
        "--symlink", "usr/sbin", "/sbin",
        "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64",
        "--proc", "/proc",
        "--dev", "/dev",
    ]  # fmt: skip
    # The scratch tmpfs is mounted before the read-only binds: a checkout (and its venv) that
    # lives under /tmp must stay visible above it.
    cmd += ["--perms", "1777", "--size", str(limits.scratch_bytes), "--tmpfs", _SCRATCH]
    made: set[str] = {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/dev", _SCRATCH}
    for target in (*plan.ro_dirs, _HARNESS_IN_SANDBOX):
        for parent in _parents(target):
            if parent not in made:
                made.add(parent)
                cmd += ["--perms", "0755", "--dir", parent]
    for directory in plan.ro_dirs:
        cmd += ["--ro-bind", directory, directory]
    cmd += ["--ro-bind", str(_HARNESS_PATH.resolve()), _HARNESS_IN_SANDBOX]
    cmd += ["--chdir", _SCRATCH]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    cmd += ["--cap-drop", "ALL"]
    cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    cmd += [
        plan.setpriv,
        f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
        "--",
        plan.python, "-s", "-P", "-B", _HARNESS_IN_SANDBOX, str(result_fd),
    ]  # fmt: skip
    return cmd


class _Cgroup:
    """Optional cgroup v1 ``memory`` + ``pids`` groups around one run.

    Created under this process's own v1 groups when the host allows it (root, writable
    ``/sys/fs/cgroup/{memory,pids}``); otherwise :meth:`create` returns ``None`` and the run
    relies on rlimits alone. Limits: ``memory.limit_in_bytes`` = memory + scratch bytes (the
    tmpfs is charged to the group), ``pids.max`` = max_processes + 3 (bwrap, its pid-1 and the
    harness).
    """

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs

    @staticmethod
    def _own_path(controller: str) -> str | None:
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            _, _, rest = line.partition(":")
            names, _, path = rest.partition(":")
            if controller in names.split(","):
                return path
        return None

    @classmethod
    def create(cls, name: str, limits: SandboxLimits) -> _Cgroup | None:
        dirs: dict[str, Path] = {}
        try:
            for controller in ("memory", "pids"):
                own = cls._own_path(controller)
                root = Path("/sys/fs/cgroup") / controller
                if own is None or not (root / "cgroup.procs").exists():
                    raise OSError(f"no cgroup v1 {controller} hierarchy")
                directory = root / own.lstrip("/") / name
                directory.mkdir()
                dirs[controller] = directory
            memory = limits.memory_bytes + limits.scratch_bytes
            (dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory))
            with contextlib.suppress(OSError):  # no swap accounting on some hosts
                (dirs["memory"] / "memory.memsw.limit_in_bytes").write_text(str(memory))
            (dirs["pids"] / "pids.max").write_text(str(limits.max_processes + 3))
        except OSError:
            cls(dirs).destroy()
            return None
        return cls(dirs)

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def oom_killed(self) -> bool:
        """True when the memory group hit its limit and the kernel killed a process."""
        directory = self.dirs.get("memory")
        if directory is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            for line in (directory / "memory.oom_control").read_text().splitlines():
                key, _, count = line.partition(" ")
                if key == "oom_kill" and int(count) > 0:
                    return True
        return False

    def kill_all(self) -> None:
        for directory in self.dirs.values():
            for _ in range(50):
                try:
                    pids = [int(p) for p in (directory / "cgroup.procs").read_text().split()]
                except (OSError, ValueError):
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)

    def destroy(self) -> None:
        self.kill_all()
        for directory in self.dirs.values():
            for _ in range(100):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


@dataclass
class _Run:
    """Mutable state of the parent-side I/O loop of one run."""

    t_start: float
    limits: SandboxLimits
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    channel: bytearray = field(default_factory=bytearray)
    channel_bytes: int = 0
    messages: list[Any] = field(default_factory=list)
    t_ready: float | None = None
    t_done: float | None = None
    t_end: float | None = None
    killed_for: str | None = None
    violation: str | None = None

    @property
    def output_total(self) -> int:
        return len(self.stdout) + len(self.stderr)


def _parse_lines(run: _Run, now: float) -> None:
    """Consume complete lines of the result channel and apply the protocol rules."""
    while True:
        newline = run.channel.find(b"\n")
        if newline < 0:
            return
        line = bytes(run.channel[:newline])
        del run.channel[: newline + 1]
        if run.violation is not None:
            continue
        try:
            message = json.loads(line)
        except (ValueError, RecursionError) as exc:
            run.violation = f"result channel carried malformed JSON ({type(exc).__name__})"
            continue
        if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
            run.violation = "result channel carried a message without a kind"
            continue
        kind = message["kind"]
        if run.t_ready is None:
            if kind == "ready":
                run.t_ready = now
            elif kind == "setup_error":
                run.messages.append(message)
            else:
                run.violation = f"first message was {kind!r}, not 'ready'"
            continue
        if run.t_done is not None:
            run.violation = "more than one result message"
            continue
        run.t_done = now
        run.messages.append(message)


def _deadline(run: _Run) -> float:
    if run.t_done is not None:
        return run.t_done + _EXIT_GRACE_S
    if run.t_ready is not None:
        return run.t_ready + run.limits.wall_timeout_s
    return run.t_start + run.limits.setup_timeout_s


def _io_loop(proc: subprocess.Popen[bytes], channel_fd: int, payload: bytes, run: _Run) -> None:
    """Feed the payload, read stdout/stderr/result with caps, stop at the first violation."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    selector = selectors.DefaultSelector()
    stdin_fd = proc.stdin.fileno()
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    for fd in (stdin_fd, out_fd, err_fd, channel_fd):
        os.set_blocking(fd, False)
    selector.register(stdin_fd, selectors.EVENT_WRITE)
    for fd in (out_fd, err_fd, channel_fd):
        selector.register(fd, selectors.EVENT_READ)
    pending = memoryview(payload)
    open_reads = 3
    try:
        while open_reads:
            now = time.monotonic()
            remaining = _deadline(run) - now
            if remaining <= 0:
                run.killed_for = (
                    "exit" if run.t_done is not None
                    else "timeout" if run.t_ready is not None
                    else "setup_timeout"
                )  # fmt: skip
                return
            for key, _ in selector.select(timeout=min(remaining, 1.0)):
                fd = int(key.fd)
                now = time.monotonic()
                if fd == stdin_fd:
                    try:
                        pending = pending[os.write(fd, pending[: 1 << 16]) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        pending = pending[len(pending) :]
                    if not pending:
                        selector.unregister(fd)
                        proc.stdin.close()
                    continue
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(fd)
                    open_reads -= 1
                    continue
                if fd == channel_fd:
                    run.channel_bytes += len(chunk)
                    if run.channel_bytes > run.limits.result_bytes + 4096:
                        run.killed_for = "result_too_large"
                        return
                    run.channel += chunk
                    _parse_lines(run, now)
                    continue
                target = run.stdout if fd == out_fd else run.stderr
                room = run.limits.output_bytes - run.output_total
                target += chunk[: max(room, 0)]
                if len(chunk) > room:
                    run.killed_for = "output_limit"
                    return
    finally:
        run.t_end = time.monotonic()
        selector.close()


def _kill(proc: subprocess.Popen[bytes], cgroup: _Cgroup | None) -> None:
    """SIGKILL bwrap: its pid-1 has PDEATHSIG (``--die-with-parent``) and when the namespace's
    pid 1 dies the kernel kills every process in it. The cgroup, if any, is swept as well."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill_all()


def _reap(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """Wait up to ``timeout_s`` for bwrap; return its exit code (``-signal`` when killed)."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None


def _exit_text(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    if code > 128 and (code - 128) in signal.valid_signals():
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(code - 128).name}"
    return f"exit status {code}"


def _classify(run: _Run, code: int | None, cgroup: _Cgroup | None) -> tuple[Any, str | None, str]:
    """Return (value, failure, error) for a run that reached the agent phase."""
    limits = run.limits
    if run.killed_for == "timeout":
        return None, "timeout", f"no result within wall_timeout_s={limits.wall_timeout_s}"
    if run.killed_for == "output_limit":
        return None, "output_limit", f"stdout+stderr exceeded {limits.output_bytes} bytes"
    if run.killed_for == "result_too_large":
        return None, "result_too_large", f"result exceeded {limits.result_bytes} bytes"
    if run.violation is not None:
        return None, "bad_result", f"protocol violation: {run.violation}"
    if run.killed_for == "exit":
        return None, "bad_result", "the sandbox did not exit after its result"
    signal_no = -code if code is not None and code < 0 else (code or 0) - 128
    if signal_no == signal.SIGXCPU:
        return None, "cpu", f"CPU time limit of {limits.cpu_time_s} s exceeded (SIGXCPU)"
    if not run.messages or code != 0:
        if cgroup is not None and cgroup.oom_killed():
            return None, "memory", f"sandbox memory limit exceeded ({_exit_text(code)})"
        if not run.messages:
            stderr = _tail(run.stderr.decode(errors="replace"))
            return None, "crash", f"no result: {_exit_text(code)}\n{stderr}".rstrip()
        return None, "crash", f"sandbox ended with {_exit_text(code)} after its result"
    message = run.messages[0]
    if message["kind"] == "result" and "value" in message:
        return message["value"], None, ""
    failure = message.get("failure")
    if message["kind"] == "error" and failure in _CHILD_FAILURES:
        return None, failure, _tail(str(message.get("error", "")))
    return None, "bad_result", f"protocol violation: unexpected message {message['kind']!r}"


def _popen(command: list[str], cgroup: _Cgroup | None, fds: tuple[int, ...]) -> Any:
    if cgroup is not None:
        # A tiny shell joins the cgroups, then execs bwrap: every later fork inherits them.
        joins = " && ".join(f'echo $$ > "${i + 1}"' for i in range(len(cgroup.procs_files())))
        script = f'{joins} && shift {len(cgroup.procs_files())} && exec "$@"'
        command = ["/bin/sh", "-c", script, "sh", *cgroup.procs_files(), *command]
    return subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=fds,
        env={"PATH": "/usr/bin:/bin"},
        start_new_session=True,
        close_fds=True,
    )


def run_function(
    code: str,
    function: str,
    argument: object,
    *,
    limits: SandboxLimits = SandboxLimits(),  # noqa: B008 - frozen, immutable default
    preamble: str = "",
    raise_unavailable: bool = True,
) -> SandboxResult:
    """Run ``function(argument)`` from untrusted ``code`` in a fresh sandboxed interpreter.

    Args:
        code: the agent's Python source; executed as a module in a fresh namespace that
            already holds whatever ``preamble`` defined.
        function: name of the function the code must define (e.g. ``"process_graph"``).
        argument: trusted data pickled by the parent and unpickled in the child (a deep copy:
            the caller's object is never touched).
        limits: see :class:`SandboxLimits`.
        preamble: trusted code run first in the same namespace (e.g. ``"import networkx as nx"``).
        raise_unavailable: when False, an unusable sandbox returns
            ``failure="sandbox_unavailable"`` instead of raising.

    Returns:
        A :class:`SandboxResult`; agent failures never raise.

    Raises:
        SandboxUnavailableError: bwrap/setpriv/root missing or the sandbox did not start.
        SandboxSetupError: ``argument`` cannot be pickled, or the preamble/unpickling failed
            or exceeded ``setup_timeout_s`` in the child.
    """
    t_start = time.monotonic()
    try:
        plan = _plan()
    except SandboxUnavailableError as exc:
        if raise_unavailable:
            raise
        return SandboxResult(False, None, "sandbox_unavailable", str(exc), 0.0, "")
    try:
        payload = pickle.dumps(
            {
                "code": code,
                "function": function,
                "preamble": preamble,
                "argument": argument,
                "limits": {
                    "cpu_time_s": limits.cpu_time_s,
                    "memory_bytes": limits.memory_bytes,
                    "scratch_bytes": limits.scratch_bytes,
                    "max_processes": limits.max_processes,
                    "result_bytes": limits.result_bytes,
                },
            },
            protocol=pickle.HIGHEST_PROTOCOL,
        )
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
        raise SandboxSetupError(f"argument cannot be pickled: {exc}") from exc
    uid = _allocate_uid()
    cgroup = _Cgroup.create(f"netarena-sbx-{os.getpid()}-{uid}", limits)
    program = _seccomp_program()
    controls: tuple[str, ...] = ("bwrap", "uid", "rlimits")
    controls += ("seccomp",) if program is not None else ()
    controls += ("cgroup",) if cgroup is not None else ()
    run = _Run(t_start=t_start, limits=limits)
    code_exit: int | None = None
    try:
        read_fd, write_fd = os.pipe()
        try:
            seccomp_fd = _filled_pipe(program) if program is not None else None
            fds = (write_fd,) if seccomp_fd is None else (write_fd, seccomp_fd)
            command = _bwrap_command(plan, uid, limits, write_fd, seccomp_fd)
            try:
                proc = _popen(command, cgroup, fds)
            except OSError as exc:
                raise SandboxUnavailableError(f"cannot start bwrap: {exc}") from exc
            finally:
                os.close(write_fd)
                if seccomp_fd is not None:
                    os.close(seccomp_fd)
            try:
                _io_loop(proc, read_fd, payload, run)
            except BaseException:
                run.killed_for = run.killed_for or "error"  # never leave a sandbox running
                raise
            finally:
                if run.killed_for is not None:
                    _kill(proc, cgroup)
                code_exit = _reap(proc, _EXIT_GRACE_S)
                if code_exit is None:
                    run.killed_for = run.killed_for or "exit"
                    _kill(proc, cgroup)
                    code_exit = _reap(proc, 5.0)
                for stream in (proc.stdin, proc.stdout, proc.stderr):
                    if stream is not None:
                        with contextlib.suppress(OSError):
                            stream.close()
        finally:
            os.close(read_fd)
        wall_s = time.monotonic() - t_start
        stdout = run.stdout.decode(errors="replace")
        stderr = run.stderr.decode(errors="replace")
        if run.t_ready is None:
            _raise_setup(run, code_exit, stderr, raise_unavailable)
            return SandboxResult(
                False, None, "sandbox_unavailable", _tail(stderr), 0.0, stdout, stderr, wall_s,
                controls,
            )  # fmt: skip
        value, failure, error = _classify(run, code_exit, cgroup)
        end = run.t_done if run.t_done is not None else (run.t_end or time.monotonic())
        exec_s = max(0.0, end - run.t_ready, _reported_call_s(run, limits))
        return SandboxResult(
            ok=failure is None,
            value=value if failure is None else None,
            failure=failure,
            error=error or None,
            exec_s=exec_s,
            stdout=stdout,
            stderr=stderr,
            wall_s=wall_s,
            controls=controls,
        )
    finally:
        if cgroup is not None:
            cgroup.destroy()


def _filled_pipe(data: bytes) -> int:
    """Return the read end of a pipe already holding ``data`` (< 64 KiB) and closed for writing."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, data)
    finally:
        os.close(write_fd)
    return read_fd


def _reported_call_s(run: _Run, limits: SandboxLimits) -> float:
    """The harness's own timing of the call, clamped to [0, wall_timeout_s].

    Only used to *raise* ``exec_s`` when the parent read the ready and result lines in one
    chunk (sub-millisecond calls); agent code can forge it, but only upwards, which only
    hurts itself.
    """
    if not run.messages:
        return 0.0
    value = run.messages[0].get("call_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return 0.0
    return float(min(max(value, 0.0), limits.wall_timeout_s))


def _raise_setup(run: _Run, code: int | None, stderr: str, raise_unavailable: bool) -> None:
    """Raise the right infrastructure error for a run that never reached the agent phase."""
    if run.messages and run.messages[0].get("kind") == "setup_error":
        raise SandboxSetupError(
            "sandbox setup failed before agent code ran:\n" + _tail(str(run.messages[0]["error"]))
        )
    if run.killed_for == "setup_timeout":
        raise SandboxSetupError(
            f"sandbox setup exceeded setup_timeout_s={run.limits.setup_timeout_s}"
        )
    if run.killed_for in ("output_limit", "result_too_large") or run.violation is not None:
        raise SandboxSetupError(f"sandbox setup misbehaved ({run.killed_for or run.violation})")
    if raise_unavailable:
        raise SandboxUnavailableError(
            f"sandbox did not start ({_exit_text(code)}): {_tail(stderr.strip(), 1000)}"
        )
