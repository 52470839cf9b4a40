"""Public value types and errors of the agent-code sandbox (re-exported by the package)."""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass, field
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
CHILD_FAILURES = frozenset({"exception", "no_function", "bad_result", "memory", "result_too_large"})


class SandboxError(EmulatorError):
    """The sandbox itself failed (infrastructure, never the agent's fault)."""


class SandboxUnavailableError(SandboxError, DependencyMissingError):
    """bubblewrap/setpriv/root are missing or the sandbox could not be started on this host."""


class SandboxSetupError(SandboxError):
    """The trusted part (argument pickling, preamble) failed before any agent code ran."""


class SandboxOverloadedError(SandboxError):
    """Agent code ran out of wall-clock time on a host too busy to run it (``_load``)."""


class SandboxExitError(SandboxError):
    """The sandbox delivered a complete terminal message but did not exit within
    ``EXIT_GRACE_S`` (``_io``) of it: a late teardown (e.g. on a loaded host) is a platform
    fault, so the episode runner retries it; agent code that keeps running after forging a
    result gets the same retries and, when every attempt fails, the ``agent_caused`` verdict
    (``evaluator.runner.agent_could_cause``)."""


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
        result_max_items: most JSON items (values and containers) a result may hold, counted
            before it is decoded (``result_too_large`` beyond).
        result_max_depth: deepest container nesting of a result, checked before it is
            decoded (``bad_result`` beyond).
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
    result_bytes: int = 16 * 1024**2
    result_max_items: int = 500_000
    result_max_depth: int = 32
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


class SharedArgument:
    """A public argument of many sandboxed calls, pickled once (e.g. the MALT topology).

    ``run_function(code, name, SharedArgument(graph))`` passes ``graph`` as it was when this
    object was made (a snapshot: later changes to ``graph`` are not seen). On the warm path the
    worker's zygote unpickles it once and every call gets its own copy by fork instead of a
    pickle through its stdin; a zygote holds at most one shared argument (another one restarts
    it) and every call of that zygote could read it, so share only data that every agent may
    see (never per-episode or secret data). On the cold path the pickle is sent as usual.

    Attributes:
        data: the pickle (protocol ``pickle.HIGHEST_PROTOCOL``).
        digest: SHA-256 of ``data``, hex.

    Raises:
        SandboxSetupError: ``value`` cannot be pickled.
    """

    def __init__(self, value: object) -> None:
        try:
            self.data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
            raise SandboxSetupError(f"argument cannot be pickled: {exc}") from exc
        self.digest = hashlib.sha256(self.data).hexdigest()
