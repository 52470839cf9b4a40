"""The warm path's host side: one zygote per worker process, one fresh child per call.

The zygote (``_child.zygote_main``) is started once per worker process inside bubblewrap, with
the trusted modules imported; per call it forks a child that the host places in the call's
cgroups before it unshares its own namespaces and drops to the call's uid (docs/sandbox.md,
"Warm path"). This module starts, feeds and restarts zygotes and gives :mod:`._run` a
Popen-like handle of each call.

Control protocol (an ``AF_UNIX``/``SOCK_SEQPACKET`` socket pair, one JSON object per message):
the host sends the configuration, the zygote answers ``{"kind": "zygote_ready"}`` after its
imports; then the host sends ``preload`` (+ a memfd) and ``spawn`` (+ five fds) requests, and
the zygote never answers them: each call talks to the host over its own pipes and its own
status socket, whose first byte carries the child's host pid (``SCM_CREDENTIALS``, which the
kernel fills in and translates between pid namespaces, pid_namespaces(7)).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import os
import select
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from typing import IO, Any

from evaluator.sandbox import _bwrap
from evaluator.sandbox._types import SandboxUnavailableError

logger = logging.getLogger(__name__)

#: Environment variable: ``0`` turns the warm path off (every call starts a cold bubblewrap
#: sandbox, as before); anything else, or unset, uses it.
WARM_ENV = "NETARENA_SANDBOX_WARM"
#: Modules the zygote imports once (trusted), so that the preamble's imports are free.
ZYGOTE_IMPORTS = ("networkx",)
#: Seconds a zygote may take to start (bubblewrap + interpreter + imports, ~0.5-1 s loaded).
ZYGOTE_START_TIMEOUT_S = 60.0
#: Seconds a fresh child may take to say hello (fork of the zygote).
HELLO_TIMEOUT_S = 10.0
#: After a failed zygote start, calls use the cold path for this long before trying again.
RETRY_AFTER_S = 60.0
#: Capacity asked for the argument and result pipes (the default maximum of
#: /proc/sys/fs/pipe-max-size, pipe(7)); a smaller one is kept when refused.
PIPE_BYTES = 1024 * 1024
#: The launcher's environment (the zygote's own is set by bwrap --clearenv/--setenv).
LAUNCHER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def warm_enabled() -> bool:
    """True unless :data:`WARM_ENV` is ``0``."""
    return os.environ.get(WARM_ENV, "1") != "0"


def _readable(sock: socket.socket, timeout_s: float | None) -> bool:
    """Wait until ``sock`` is readable (or at EOF); poll(2), so any fd number works."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(None if timeout_s is None else int(timeout_s * 1000) + 1))


class ZygoteError(OSError):
    """The zygote is dead or did not answer (the caller restarts it or goes cold)."""


class WarmProc:
    """A Popen-like handle of one warm call (what :func:`._io.io_loop` and ``_run`` use).

    Attributes:
        pid: host pid of the call's first process (its pid 1); it is signalled through a
            pidfd, so a recycled pid is never hit.
        stdin, stdout, stderr: the parent's ends of the call's pipes.
    """

    def __init__(
        self, pid: int, status: socket.socket, stdin: int, stdout: int, stderr: int
    ) -> None:
        self.pid = pid
        self._status = status
        self._pidfd = os.pidfd_open(pid)
        self.stdin: IO[bytes] | None = os.fdopen(stdin, "wb", buffering=0)
        self.stdout: IO[bytes] | None = os.fdopen(stdout, "rb", buffering=0)
        self.stderr: IO[bytes] | None = os.fdopen(stderr, "rb", buffering=0)
        self._received = bytearray()
        self.returncode: int | None = None

    def send_signal(self, number: int) -> None:
        """Signal the call's pid 1 (when it dies, the kernel kills its whole pid namespace)."""
        with contextlib.suppress(ProcessLookupError, OSError):
            signal.pidfd_send_signal(self._pidfd, number)

    def wait(self, timeout: float | None = None) -> int:
        """Return the call's exit status: the agent process's exit code, ``128 + signal`` when
        it was killed, ``-9`` when the call's pid 1 ended without a status (killed).

        Raises:
            subprocess.TimeoutExpired: no status within ``timeout`` seconds.
        """
        end = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if end is None else max(0.0, end - time.monotonic())
            if not _readable(self._status, left):
                raise subprocess.TimeoutExpired("sandbox", timeout or 0.0)
            chunk = self._status.recv(64)
            if chunk:
                self._received += chunk
                continue
            text = self._received.decode(errors="replace")
            valid = text[:1] == "x" and text[1:].lstrip("-").isdigit()
            self.returncode = int(text[1:]) if valid else -signal.SIGKILL
        return self.returncode

    def close(self) -> None:
        """Close the status socket and the pidfd (the pipes are closed by the caller)."""
        self._status.close()
        with contextlib.suppress(OSError):
            os.close(self._pidfd)


class Zygote:
    """One zygote: a bubblewrap process running ``_child.py --zygote``.

    Raises :class:`SandboxUnavailableError` from the constructor when it does not start
    (the message carries bubblewrap's stderr, as the cold path's does).
    """

    def __init__(self, plan: _bwrap.Plan, program: bytes | None) -> None:
        self.plan = plan
        self.owner = os.getpid()
        self.digest: str | None = None
        #: Calls in flight (a retired zygote is stopped when the last one ends).
        self.active = 0
        self.retired = False
        self._spare: _Pending | None = None
        self._lock = threading.Lock()
        #: Held while a caller checks and loads the shared argument.
        self.share_lock = threading.Lock()
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = host
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - kept open for the zygote's life
        try:
            self.proc = subprocess.Popen(
                _bwrap.zygote_command(plan, child.fileno()),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                pass_fds=(child.fileno(),),
                env=dict(LAUNCHER_ENV),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            host.close()
            raise SandboxUnavailableError(f"cannot start bwrap: {exc}") from exc
        finally:
            child.close()
        config = {
            "imports": list(ZYGOTE_IMPORTS),
            "tmp_ro_dirs": [d for d in plan.ro_dirs if d.startswith(_bwrap.SCRATCH + "/")],
            "shm_limits": _bwrap.SHM_LIMITS,
            "seccomp": program.hex() if program is not None else None,
        }
        try:
            host.sendall(json.dumps(config).encode())
            ready = _readable(host, ZYGOTE_START_TIMEOUT_S)
            answer = host.recv(256) if ready else b""
        except OSError:
            answer = b""
        if answer != b'{"kind":"zygote_ready"}':
            self.stop()
            code = self.proc.poll()
            how = f"exit status {code}" if code is not None else "no answer"
            raise SandboxUnavailableError(
                f"sandbox did not start (warm zygote, {how}): {self.log_tail()}"
            )

    def log_tail(self, limit: int = 1000) -> str:
        """The last ``limit`` characters the zygote and bubblewrap wrote to stdout/stderr."""
        with contextlib.suppress(OSError):
            self._log.seek(0, os.SEEK_END)
            size = self._log.tell()
            self._log.seek(max(0, size - limit))
            return self._log.read().decode(errors="replace").strip()
        return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def died(self, within_s: float) -> bool:
        """True when the zygote has ended, or ends within ``within_s`` seconds."""
        try:
            self.proc.wait(timeout=within_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def detach(self) -> None:
        """In a forked copy of the owner process: close this copy's ends without stopping
        the zygote (it belongs to the owner, and must see EOF when the owner exits)."""
        if self._spare is not None:
            self._spare.discard()
            self._spare = None
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(OSError):
            self._log.close()

    def stop(self) -> None:
        """Close the control socket (the zygote exits) and kill bubblewrap."""
        with self._lock:
            if self._spare is not None:
                self._spare.discard()
                self._spare = None
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)

    def preload(self, digest: str, data: bytes) -> None:
        """Make ``data`` (a pickle) the zygote's shared argument under ``digest``."""
        memfd = os.memfd_create("netarena-argument", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(memfd, view) :]
            with self._lock:
                self._send({"op": "preload", "digest": digest}, [memfd])
            self.digest = digest
        finally:
            os.close(memfd)

    def _send(self, request: dict[str, Any], fds: list[int]) -> None:
        try:
            socket.send_fds(self._sock, [json.dumps(request).encode()], fds)
        except OSError as exc:
            raise ZygoteError(f"zygote unreachable: {exc}") from exc

    def _request(self) -> _Pending:
        """Ask the zygote for one call's process pair (not waited for)."""
        pipes = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, result channel
        for _reader, writer in (pipes[0], pipes[3]):  # fewer wake-ups for a graph in or out
            with contextlib.suppress(OSError):
                fcntl.fcntl(writer, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        host_end.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        child_fds = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1], child_end.fileno()]
        pending = _Pending(host_end, [pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0]])
        try:
            self._send({"op": "spawn"}, child_fds)
        except BaseException:
            pending.discard()
            raise
        finally:
            for fd in child_fds[:4]:
                os.close(fd)
            child_end.close()
        pending.digest = self.digest
        return pending

    def spawn(self) -> tuple[WarmProc, int, int]:
        """Return one call's processes: a handle on its pid 1, the host pid of its agent
        process (both still outside any call cgroup, waiting for the header on stdin) and
        the parent's end of the result channel. A spare forked ahead of time is used when it
        matches the zygote's shared argument; a new spare is asked for at once.

        Raises:
            ZygoteError: the zygote did not fork the processes in time.
        """
        with self._lock:
            pending, self._spare = self._spare, None
            if pending is not None and pending.digest != self.digest:
                pending.discard()
                pending = None
            if pending is None:
                pending = self._request()
            if os.getpid() == self.owner:
                with contextlib.suppress(ZygoteError):
                    self._spare = self._request()
        try:
            init_pid = _hello_pid(pending.status, b"h")
            agent_pid = _hello_pid(pending.status, b"a")
            fds = pending.fds
            proc = WarmProc(init_pid, pending.status, fds[0], fds[1], fds[2])
        except ProcessLookupError as exc:  # pidfd_open: the pair died (with the zygote)
            pending.discard()
            raise ZygoteError(f"the zygote's child is gone: {exc}") from exc
        except BaseException:
            pending.discard()
            raise
        return proc, agent_pid, fds[3]


class _Pending:
    """A requested, not yet used process pair: the host's socket and pipe ends."""

    def __init__(self, status: socket.socket, fds: list[int]) -> None:
        self.status = status
        self.fds = fds
        self.digest: str | None = None

    def discard(self) -> None:
        """Close the host's ends: the agent process reads EOF for its header and exits."""
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.status.close()


def _hello_pid(sock: socket.socket, expected: bytes) -> int:
    """Read one hello byte (``expected``) and return its sender's host pid from
    ``SCM_CREDENTIALS``."""
    if not _readable(sock, HELLO_TIMEOUT_S):
        raise ZygoteError("the zygote's child did not say hello")
    size = socket.CMSG_SPACE(struct.calcsize("iII"))
    data, ancillary, _, _ = sock.recvmsg(1, size)
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and data == expected:
            pid, _, _ = struct.unpack("iII", payload[: struct.calcsize("iII")])
            if pid > 0:
                return int(pid)
    raise ZygoteError("the zygote's child sent no credentials")


_zygotes: dict[int, Zygote] = {}
_failed_until: dict[_bwrap.Plan, float] = {}
_registry_lock = threading.Lock()


def zygote_for(plan: _bwrap.Plan, program: bytes | None, restart: bool = False) -> Zygote | None:
    """Return this process's live zygote for ``plan`` (started or restarted as needed), or
    ``None`` when a start failed less than :data:`RETRY_AFTER_S` ago (use the cold path).

    The caller holds the zygote until :func:`release`; a zygote replaced meanwhile (another
    plan, a restart) is only stopped when its last call ended, because stopping it kills
    its calls (each call's first process has PDEATHSIG on it).

    Raises:
        SandboxUnavailableError: a start failed just now (its reason).
    """
    with _registry_lock:
        current = _zygotes.get(os.getpid())
        if current is not None and (restart or current.plan != plan or not current.alive()):
            del _zygotes[os.getpid()]
            _retire(current)
            current = None
        if current is None:
            if time.monotonic() < _failed_until.get(plan, 0.0):
                return None
            try:
                current = Zygote(plan, program)
            except SandboxUnavailableError:
                _failed_until[plan] = time.monotonic() + RETRY_AFTER_S
                raise
            _zygotes[os.getpid()] = current
        current.active += 1
        return current


def _retire(zygote: Zygote) -> None:
    zygote.retired = True
    if zygote.active == 0:
        zygote.stop()


def release(zygote: Zygote) -> None:
    """The caller's call on ``zygote`` ended."""
    with _registry_lock:
        zygote.active -= 1
        if zygote.retired and zygote.active == 0:
            zygote.stop()


def stop_all() -> None:
    """Stop this process's zygote (registered with ``atexit``; tests use it too)."""
    with _registry_lock:
        zygote = _zygotes.pop(os.getpid(), None)
        _failed_until.clear()
        if zygote is not None:
            _retire(zygote)


def _after_fork_in_child() -> None:
    """A forked worker starts its own zygote; it drops its copies of the parent's ends."""
    global _registry_lock
    _registry_lock = threading.Lock()  # another thread may have held it at the fork
    for zygote in list(_zygotes.values()):
        zygote.detach()
    _zygotes.clear()


atexit.register(stop_all)
os.register_at_fork(after_in_child=_after_fork_in_child)
