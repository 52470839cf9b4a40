"""Run untrusted agent Python code in a separate, locked-down process (docs/architecture.md §8).

The MALT app calls :func:`run_function` with the agent's code (which defines
``process_graph(graph_data)``) and a networkx graph (a :class:`SharedArgument`). By default
each call runs in a fresh process forked from this worker's zygote, which was started once
inside bubblewrap (the *warm path*, module ``_zygote``: each call gets its own pid, mount, IPC,
network, UTS and cgroup namespaces, ``/proc``, ``/tmp``, uid, seccomp filter and cgroups, see
docs/sandbox.md "Warm path"); with ``NETARENA_SANDBOX_WARM=0`` each call runs in a fresh
interpreter inside its own bubblewrap (``bwrap``) sandbox (the *cold path*). Either way with:

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

The package exposes only its public names; its private modules hold the layers:
``_types`` (limits, result, errors), ``_seccomp`` (the syscall filter), ``_bwrap`` (the
bubblewrap + setpriv command line), ``_cgroup`` (memory and process groups), ``_io`` (the
parent-side I/O loop and result-channel protocol), ``_outcome`` (classification of a run),
``_run`` (``run_function``) and ``_child`` (the harness that runs inside the sandbox).

``run_function`` raises :class:`SandboxUnavailableError` when bubblewrap, ``setpriv`` or root
are missing or the sandbox cannot start (infrastructure, not the agent's fault; pass
``raise_unavailable=False`` to get ``failure="sandbox_unavailable"`` instead), and
:class:`SandboxSetupError` when the trusted part (preamble, argument) fails before any agent
code ran, and :class:`SandboxOverloadedError` when agent code timed out on a host too busy to
run it (``_load``), and :class:`SandboxExitError` when the sandbox delivered its result but did
not exit within ``EXIT_GRACE_S`` of it (a late teardown: retried by the episode runner).
Every agent behaviour ends as a :class:`SandboxResult`.
"""

from evaluator.sandbox._run import check_host, run_function
from evaluator.sandbox._types import (
    FAILURES,
    SandboxError,
    SandboxExitError,
    SandboxLimits,
    SandboxOverloadedError,
    SandboxResult,
    SandboxSetupError,
    SandboxUnavailableError,
    SharedArgument,
)

__all__ = [
    "FAILURES",
    "SandboxError",
    "SandboxExitError",
    "SandboxLimits",
    "SandboxOverloadedError",
    "SandboxResult",
    "SandboxSetupError",
    "SandboxUnavailableError",
    "SharedArgument",
    "check_host",
    "run_function",
]
