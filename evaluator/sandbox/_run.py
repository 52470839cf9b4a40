"""``run_function``: start one sandboxed interpreter, feed it, read it, classify the outcome."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import signal
import subprocess
import time
from typing import Any

from evaluator.sandbox import _bwrap, _zygote
from evaluator.sandbox._cgroup import (
    ALLOW_NO_CGROUP_ENV,
    SANDBOX_GROUP_PREFIX,
    Cgroup,
    CgroupUnavailableError,
    no_cgroup_allowed,
)
from evaluator.sandbox._io import EXIT_GRACE_S, Run, io_loop
from evaluator.sandbox._load import OVERLOAD_RUNNABLE_PER_CPU, LoadMeter
from evaluator.sandbox._outcome import classify, raise_setup, reported_call_s, tail
from evaluator.sandbox._seccomp import filled_pipe, seccomp_program
from evaluator.sandbox._types import (
    SandboxError,
    SandboxExitError,
    SandboxLimits,
    SandboxOverloadedError,
    SandboxResult,
    SandboxSetupError,
    SandboxUnavailableError,
    SharedArgument,
)

logger = logging.getLogger(__name__)

#: The whole environment of the launcher and of bwrap (which then clears it for the sandbox):
#: nothing of the evaluator's environment (secrets, DATABASE_URL) reaches agent code.
LAUNCHER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def _make_cgroup(
    name: str, limits: SandboxLimits, raise_unavailable: bool
) -> Cgroup | SandboxResult | None:
    """The run's cgroup; ``None`` under the development override; a ``sandbox_unavailable``
    result (or :class:`SandboxUnavailableError`) when no memory limit can be enforced."""
    try:
        return Cgroup.create(name, limits)
    except CgroupUnavailableError as exc:
        if no_cgroup_allowed():
            return None
        message = (
            f"no memory limit can be enforced for agent code ({exc}); refusing to run it. "
            f"Set {ALLOW_NO_CGROUP_ENV}=1 on development machines only."
        )
    if raise_unavailable:
        raise SandboxUnavailableError(message)
    return SandboxResult(False, None, "sandbox_unavailable", message, 0.0, "")


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


def _popen(command: list[str], fds: tuple[int, ...]) -> Any:
    return subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=fds,
        env=dict(LAUNCHER_ENV),
        start_new_session=True,
        close_fds=True,
    )


def _pickle_payload(
    code: str,
    function: str,
    preamble: str,
    argument: object,
    warm_shared: bool,
    limits: SandboxLimits,
    graph_diffs: bool = False,
) -> bytes:
    """The child's stdin: everything but a shared argument the zygote already holds."""
    shared = argument if isinstance(argument, SharedArgument) else None
    try:
        return pickle.dumps(
            {
                "code": code,
                "function": function,
                "preamble": preamble,
                "argument": None if shared is not None else argument,
                "argument_pickle": shared.data if shared is not None and not warm_shared else None,
                "argument_digest": shared.digest if shared is not None and warm_shared else None,
                "graph_diffs": graph_diffs,
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


def _warm_zygote(plan: _bwrap.Plan, program: bytes | None) -> _zygote.Zygote | None:
    """This process's zygote, or ``None`` (warm path off, or it cannot start: go cold)."""
    if not _zygote.warm_enabled():
        return None
    try:
        return _zygote.zygote_for(plan, program)
    except SandboxUnavailableError as exc:
        logger.warning("warm sandbox unavailable, using the cold path: %s", exc)
        return None


def _replace(held: list[_zygote.Zygote], plan: _bwrap.Plan, program: bytes | None) -> None:
    """Restart the zygote held in ``held[0]`` (the old one ends when its calls have ended)."""
    replacement = _zygote.zygote_for(plan, program, restart=True)
    if replacement is None:
        raise SandboxUnavailableError("the warm zygote could not be restarted")
    _zygote.release(held[0])
    held[0] = replacement


def _share(
    held: list[_zygote.Zygote], plan: _bwrap.Plan, program: bytes | None, shared: SharedArgument
) -> None:
    """Make ``shared`` the shared argument of the zygote in ``held[0]``, replacing that zygote
    when it held another one (a zygote never holds two, see docs/sandbox.md)."""
    while True:
        zygote = held[0]
        with zygote.share_lock:
            if zygote.digest == shared.digest:
                return
            if zygote.digest is None:
                try:
                    zygote.preload(shared.digest, shared.data)
                except _zygote.ZygoteError as exc:
                    raise SandboxUnavailableError(str(exc)) from exc
                return
        _replace(held, plan, program)


def _spawn_warm(
    held: list[_zygote.Zygote],
    plan: _bwrap.Plan,
    program: bytes | None,
    cgroup: Cgroup | None,
    shared: SharedArgument | None,
) -> tuple[_zygote.WarmProc, int]:
    """Get the call's processes from the zygote (restarting a dead zygote once, with the
    shared argument loaded again) and place both in the call's cgroups; they proceed when the
    header arrives on their stdin.

    Raises:
        SandboxUnavailableError: no processes, or the cgroups refused them.
    """
    for attempt in range(2):
        try:
            proc, agent_pid, read_fd = held[0].spawn()
            break
        except _zygote.ZygoteError as exc:
            if attempt == 1:
                raise SandboxUnavailableError(
                    f"sandbox did not start (warm zygote: {exc}): {held[0].log_tail()}"
                ) from exc
            _replace(held, plan, program)
            if shared is not None:
                _share(held, plan, program, shared)
    try:
        if cgroup is not None:
            cgroup.add(proc.pid)
            cgroup.add(agent_pid)
    except OSError as exc:
        proc.send_signal(signal.SIGKILL)
        proc.close()
        os.close(read_fd)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        if isinstance(exc, ProcessLookupError):  # gone with a dying zygote: start again
            raise _zygote.ZygoteError(f"the zygote's child is gone: {exc}") from exc
        raise SandboxUnavailableError(f"cannot place the sandbox in its cgroup: {exc}") from exc
    return proc, read_fd


def run_function(
    code: str,
    function: str,
    argument: object,
    *,
    limits: SandboxLimits = SandboxLimits(),  # noqa: B008 - frozen, immutable default
    preamble: str = "",
    raise_unavailable: bool = True,
    graph_diffs: bool = False,
) -> SandboxResult:
    """Run ``function(argument)`` from untrusted ``code`` in a fresh sandboxed process.

    Warm path (default, docs/sandbox.md): the process is forked from this worker's zygote and
    isolated per call; ``NETARENA_SANDBOX_WARM=0`` (or a zygote that cannot start) starts a
    fresh bubblewrap sandbox and interpreter instead (cold path). Both give the same result.

    Args:
        code: the agent's Python source; executed as a module in a fresh namespace that
            already holds whatever ``preamble`` defined.
        function: name of the function the code must define (e.g. ``"process_graph"``).
        argument: trusted data pickled by the parent and unpickled in the child (a deep copy:
            the caller's object is never touched), or a :class:`SharedArgument` (public data
            used by many calls, pickled once; on the warm path held by the zygote).
        limits: see :class:`SandboxLimits`.
        preamble: trusted code run first in the same namespace (e.g. ``"import networkx as nx"``).
        raise_unavailable: when False, an unusable sandbox returns
            ``failure="sandbox_unavailable"`` instead of raising.
        graph_diffs: when True and ``argument`` is a networkx graph, a graph the function
            returns (the value itself, or a value of a top-level dict) comes back as its
            change against the argument, ``{"__networkx_diff__": ...}`` (docs/sandbox.md,
            "Result contract"), whenever the child can state it exactly; the caller applies
            it to its own copy of the argument (``apps.malt.checks.parse_graph``).

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
    program = seccomp_program()
    zygote = _warm_zygote(plan, program)
    held = [zygote] if zygote is not None else []
    try:
        for attempt in range(2):
            try:
                return _run(
                    code, function, argument, limits, preamble, raise_unavailable, plan,
                    program, held, t_start, graph_diffs,
                )  # fmt: skip
            except _zygote.ZygoteError as exc:  # died before any agent code ran: again, once
                if attempt == 1:
                    raise SandboxUnavailableError(f"sandbox did not start: {exc}") from exc
                _replace(held, plan, program)
        raise AssertionError("unreachable")
    except SandboxUnavailableError as exc:
        if raise_unavailable:
            raise
        return SandboxResult(False, None, "sandbox_unavailable", str(exc), 0.0, "")
    finally:
        for zygote in held:
            _zygote.release(zygote)


def _run(
    code: str,
    function: str,
    argument: object,
    limits: SandboxLimits,
    preamble: str,
    raise_unavailable: bool,
    plan: _bwrap.Plan,
    program: bytes | None,
    held: list[_zygote.Zygote],
    t_start: float,
    graph_diffs: bool = False,
) -> SandboxResult:
    """The body of :func:`run_function` once the plan and the zygote (``held``: the one the
    call holds, empty on the cold path; replaced in place on a restart) are known."""
    warm_shared = bool(held) and isinstance(argument, SharedArgument)
    if warm_shared:
        assert isinstance(argument, SharedArgument)
        _share(held, plan, program, argument)
    payload = _pickle_payload(
        code, function, preamble, argument, warm_shared, limits, graph_diffs
    )
    uid = _bwrap.allocate_uid()
    cgroup = _make_cgroup(f"{SANDBOX_GROUP_PREFIX}{os.getpid()}-{uid}", limits, raise_unavailable)
    if isinstance(cgroup, SandboxResult):
        return cgroup
    controls: tuple[str, ...] = ("bwrap", "uid", "rlimits", "ipc_limits")
    controls += ("seccomp",) if program is not None else ()
    controls += ("cgroup",) if cgroup is not None else ()
    controls += ("warm",) if held else ()
    code_exit: int | None = None
    proc: Any = None
    try:
        if held:
            try:
                shared = argument if warm_shared else None
                assert shared is None or isinstance(shared, SharedArgument)
                proc, read_fd = _spawn_warm(held, plan, program, cgroup, shared)
            except SandboxUnavailableError as exc:
                if raise_unavailable:
                    raise
                return SandboxResult(False, None, "sandbox_unavailable", str(exc), 0.0, "")
            header = {"uid": uid, "scratch_bytes": limits.scratch_bytes}
            payload = json.dumps(header).encode() + b"\n" + payload
        else:
            read_fd, write_fd = os.pipe()
            seccomp_fd = None
            try:
                seccomp_fd = filled_pipe(program) if program is not None else None
                fds = (write_fd,) if seccomp_fd is None else (write_fd, seccomp_fd)
                command = _bwrap.launcher_command(
                    plan,
                    cgroup.procs_files() if cgroup is not None else [],
                    _bwrap.bwrap_command(plan, uid, limits, write_fd, seccomp_fd),
                )
                proc = _popen(command, fds)
            except OSError as exc:
                os.close(read_fd)
                raise SandboxUnavailableError(f"cannot start bwrap: {exc}") from exc
            finally:
                os.close(write_fd)
                if seccomp_fd is not None:
                    os.close(seccomp_fd)
        run = Run(t_start=time.monotonic() if held else t_start, limits=limits)
        meter = (
            LoadMeter(cgroup.task_ids, agent_tasks=cgroup.sandbox_task_ids)
            if cgroup is not None
            else None
        )
        try:
            try:
                io_loop(proc, read_fd, payload, run, meter)
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
                if held:
                    proc.close()
        finally:
            os.close(read_fd)
        if (
            held
            and code_exit == -signal.SIGKILL
            and run.killed_for is None
            and held[0].died(within_s=0.5)
        ):  # the call's pid 1 was killed by the zygote's end (PDEATHSIG), not by the agent
            if run.t_ready is None:  # no agent code ran: the caller may simply try again
                raise _zygote.ZygoteError("the warm sandbox's zygote died before the call")
            raise SandboxError("the warm sandbox's zygote died during the call")
        if run.killed_for == "exit" and run.t_done is not None and run.violation is None:
            raise SandboxExitError(
                f"the sandbox delivered its result but did not exit within {EXIT_GRACE_S} s "
                f"(killed; exit status {code_exit}): a platform fault, not a verdict"
            )
        timed_out = run.killed_for == "timeout"
        if timed_out and meter is not None and meter.overloaded(limits.wall_timeout_s):
            raise SandboxOverloadedError(
                f"agent code ran out of its {limits.wall_timeout_s} s on an overloaded host: "
                f"{meter.mean():.2f} other runnable tasks per CPU on average over "
                f"{len(meter.samples)} samples (threshold {OVERLOAD_RUNNABLE_PER_CPU}); its "
                f"tasks waited {meter.wait_s():.2f} s for a CPU"
            )
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
        start = run.t_ready_sent if run.t_ready_sent is not None else run.t_ready
        exec_s = max(0.0, end - start, reported_call_s(run, limits))
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


def check_host(limits: SandboxLimits = SandboxLimits()) -> tuple[str, ...]:  # noqa: B008
    """Check at start-up that agent code can be sandboxed here; return the layers available.

    Resolves the tools (root, bwrap, setpriv, unshare), creates and removes one probe cgroup
    with ``limits``, and runs one trivial call through :func:`run_function`: a container
    without the privileges bubblewrap needs (``unshare`` refused) has every tool and a cgroup,
    and fails only when a sandbox actually starts. A worker that runs MALT episodes calls this
    once when it starts, so that such a host fails loudly instead of per episode. With the warm
    path on it also starts this process's zygote (``"warm"`` among the layers when it did;
    when it cannot start, calls use the cold path and a warning is logged).

    Raises:
        SandboxUnavailableError: the reason, e.g. no memory limit can be enforced (unless
            ``NETARENA_SANDBOX_ALLOW_NO_CGROUP=1``).
    """
    _bwrap.plan()
    controls: tuple[str, ...] = ("bwrap", "uid", "rlimits", "ipc_limits")
    controls += ("seccomp",) if seccomp_program() is not None else ()
    probe = _make_cgroup(f"netarena-sbx-probe-{os.getpid()}", limits, raise_unavailable=True)
    if isinstance(probe, Cgroup):
        probe.destroy()
        controls += ("cgroup",)
    zygote = _warm_zygote(_bwrap.plan(), seccomp_program())
    if zygote is not None:
        _zygote.release(zygote)
        controls += ("warm",)
    probe_call = run_function("def probe(x):\n    return x + 1\n", "probe", 41, limits=limits)
    if not probe_call.ok or probe_call.value != 42:
        raise SandboxUnavailableError(
            f"a probe call did not run: {probe_call.failure}: {(probe_call.error or '')[:500]}"
        )
    return controls
