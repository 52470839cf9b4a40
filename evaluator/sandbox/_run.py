"""``run_function``: start one sandboxed interpreter, feed it, read it, classify the outcome."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import time
from typing import Any

from evaluator.sandbox import _bwrap
from evaluator.sandbox._cgroup import Cgroup
from evaluator.sandbox._io import EXIT_GRACE_S, Run, io_loop
from evaluator.sandbox._outcome import classify, raise_setup, reported_call_s, tail
from evaluator.sandbox._seccomp import filled_pipe, seccomp_program
from evaluator.sandbox._types import (
    SandboxLimits,
    SandboxResult,
    SandboxSetupError,
    SandboxUnavailableError,
)


def _kill(proc: subprocess.Popen[bytes], cgroup: Cgroup | None) -> None:
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


def _popen(command: list[str], cgroup: Cgroup | None, fds: tuple[int, ...]) -> Any:
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
        plan = _bwrap.plan()
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
    uid = _bwrap.allocate_uid()
    cgroup = Cgroup.create(f"netarena-sbx-{os.getpid()}-{uid}", limits)
    program = seccomp_program()
    controls: tuple[str, ...] = ("bwrap", "uid", "rlimits")
    controls += ("seccomp",) if program is not None else ()
    controls += ("cgroup",) if cgroup is not None else ()
    run = Run(t_start=t_start, limits=limits)
    code_exit: int | None = None
    try:
        read_fd, write_fd = os.pipe()
        try:
            seccomp_fd = filled_pipe(program) if program is not None else None
            fds = (write_fd,) if seccomp_fd is None else (write_fd, seccomp_fd)
            command = _bwrap.bwrap_command(plan, uid, limits, write_fd, seccomp_fd)
            try:
                proc = _popen(command, cgroup, fds)
            except OSError as exc:
                raise SandboxUnavailableError(f"cannot start bwrap: {exc}") from exc
            finally:
                os.close(write_fd)
                if seccomp_fd is not None:
                    os.close(seccomp_fd)
            try:
                io_loop(proc, read_fd, payload, run)
            except BaseException:
                run.killed_for = run.killed_for or "error"  # never leave a sandbox running
                raise
            finally:
                if run.killed_for is not None:
                    _kill(proc, cgroup)
                code_exit = _reap(proc, EXIT_GRACE_S)
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
            raise_setup(run, code_exit, stderr, raise_unavailable)
            return SandboxResult(
                False, None, "sandbox_unavailable", tail(stderr), 0.0, stdout, stderr, wall_s,
                controls,
            )  # fmt: skip
        value, failure, error = classify(run, code_exit, cgroup)
        end = run.t_done if run.t_done is not None else (run.t_end or time.monotonic())
        exec_s = max(0.0, end - run.t_ready, reported_call_s(run, limits))
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
