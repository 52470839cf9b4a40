"""Outcome classification of one sandbox run: what the agent did, or which setup step failed."""

from __future__ import annotations

import contextlib
import signal
from typing import Any

from evaluator.sandbox._cgroup import Cgroup
from evaluator.sandbox._io import Run
from evaluator.sandbox._types import (
    CHILD_FAILURES,
    SandboxLimits,
    SandboxSetupError,
    SandboxUnavailableError,
)

#: Longest error text (characters) kept in a result.
MAX_ERROR_CHARS = 4000


def tail(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Return ``text``, or its last ``limit`` characters after ``...`` when it is longer."""
    return text if len(text) <= limit else "..." + text[-limit:]


def exit_text(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    if code > 128 and (code - 128) in signal.valid_signals():
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(code - 128).name}"
    return f"exit status {code}"


def classify(run: Run, code: int | None, cgroup: Cgroup | None) -> tuple[Any, str | None, str]:
    """Return (value, failure, error) for a run that reached the agent phase."""
    limits = run.limits
    if run.killed_for == "timeout":
        return None, "timeout", f"no result within wall_timeout_s={limits.wall_timeout_s}"
    if run.killed_for == "output_limit":
        return None, "output_limit", f"stdout+stderr exceeded {limits.output_bytes} bytes"
    if run.killed_for == "result_too_large":
        return None, "result_too_large", f"result exceeded {limits.result_bytes} bytes"
    if run.refused is not None:
        return None, run.refused[0], run.refused[1]
    if run.violation is not None:
        return None, "bad_result", f"protocol violation: {run.violation}"
    if run.killed_for == "exit":  # no terminal message (a complete one raised in ``_run``)
        return None, "crash", "the sandbox closed its output without a result and did not exit"
    signal_no = -code if code is not None and code < 0 else (code or 0) - 128
    if signal_no == signal.SIGXCPU:
        return None, "cpu", f"CPU time limit of {limits.cpu_time_s} s exceeded (SIGXCPU)"
    if not run.messages or code != 0:
        if cgroup is not None and cgroup.oom_killed():
            return None, "memory", f"sandbox memory limit exceeded ({exit_text(code)})"
        if not run.messages:
            stderr = tail(run.stderr.decode(errors="replace"))
            return None, "crash", f"no result: {exit_text(code)}\n{stderr}".rstrip()
        return None, "crash", f"sandbox ended with {exit_text(code)} after its result"
    message = run.messages[0]
    if message["kind"] == "result" and "value" in message:
        return message["value"], None, ""
    failure = message.get("failure")
    if message["kind"] == "error" and failure in CHILD_FAILURES:
        return None, failure, tail(str(message.get("error", "")))
    return None, "bad_result", f"protocol violation: unexpected message {message['kind']!r}"


def reported_call_s(run: Run, limits: SandboxLimits) -> float:
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


def raise_setup(run: Run, code: int | None, stderr: str, raise_unavailable: bool) -> None:
    """Raise the right infrastructure error for a run that never reached the agent phase."""
    if run.messages and run.messages[0].get("kind") == "setup_error":
        raise SandboxSetupError(
            "sandbox setup failed before agent code ran:\n" + tail(str(run.messages[0]["error"]))
        )
    if run.killed_for == "setup_timeout":
        raise SandboxSetupError(
            f"sandbox setup exceeded setup_timeout_s={run.limits.setup_timeout_s}"
        )
    if run.killed_for in ("output_limit", "result_too_large") or run.violation is not None:
        raise SandboxSetupError(f"sandbox setup misbehaved ({run.killed_for or run.violation})")
    if raise_unavailable:
        raise SandboxUnavailableError(
            f"sandbox did not start ({exit_text(code)}): {tail(stderr.strip(), 1000)}"
        )
