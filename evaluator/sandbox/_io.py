"""The parent side of one sandbox run: the I/O loop and the result-channel protocol.

The payload goes in on stdin; stdout and stderr are read with a shared cap; the result channel
carries newline-delimited JSON: ``ready`` first, then exactly one terminal message
(``evaluator/sandbox/_child.py`` describes the child side). The loop stops at the first
violation or deadline and records why in :class:`Run` (it never kills anything itself).
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from evaluator.sandbox._load import SAMPLE_INTERVAL_S, LoadMeter
from evaluator.sandbox._types import SandboxLimits

#: Seconds the sandbox may take to exit after it delivered its terminal message.
EXIT_GRACE_S = 2.0


@dataclass
class Run:
    """Mutable state of the parent-side I/O loop of one run."""

    t_start: float
    limits: SandboxLimits
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    channel: bytearray = field(default_factory=bytearray)
    channel_bytes: int = 0
    messages: list[Any] = field(default_factory=list)
    t_ready: float | None = None
    #: When the harness sent ``ready`` by its own CLOCK_MONOTONIC (the same clock: no time
    #: namespace), kept only when it lies between ``t_start`` and ``t_ready``.
    t_ready_sent: float | None = None
    t_done: float | None = None
    t_end: float | None = None
    killed_for: str | None = None
    violation: str | None = None
    #: (failure, error) when the terminal message was well-formed but refused before decoding
    #: (too many items, too deep, non-finite numbers).
    refused: tuple[str, str] | None = None

    @property
    def output_total(self) -> int:
        return len(self.stdout) + len(self.stderr)


#: Every byte but the four JSON brackets (``bytes.translate`` deletes them).
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def outside_string_parts(line: bytes) -> list[bytes]:
    """The pieces of ``line`` that lie outside JSON strings, in order.

    Escape pairs are dropped first (``\\\\`` then ``\\"``: left to right, as a JSON scanner
    pairs them), then every other quote-delimited segment. Exact on any valid JSON text and on
    the valid prefix of an invalid one (outside strings JSON has no backslash), which is all that
    ``json.loads`` ever turns into objects. Linear time, a few C-level passes (the former
    per-character regex took ~90 ms on a 1 MB graph result); the pieces are not joined, so a
    large line is copied once, not twice.
    """
    if b"\\" in line:
        line = line.replace(b"\\\\", b"").replace(b'\\"', b"")
    return line.split(b'"')[0::2]


def outside_strings(line: bytes) -> bytes:
    """The bytes of ``line`` outside JSON strings, joined (see :func:`outside_string_parts`)."""
    return b"".join(outside_string_parts(line))


def shape_refusal(line: bytes, max_items: int, max_depth: int) -> tuple[str, str] | None:
    """Refuse a JSON line whose decoding would cost more than the limits allow.

    Counted on the raw bytes, before ``json.loads`` builds any object (64 MiB
    of empty dicts grew the evaluator to 1.7 GB): items = commas + opening brackets outside
    strings, depth = deepest bracket nesting. Returns ``(failure, error)`` or ``None``.
    """
    parts = outside_string_parts(line)
    items = sum(part.count(b",") + part.count(b"[") + part.count(b"{") for part in parts)
    if items > max_items:
        return "result_too_large", f"result has about {items} JSON items, limit {max_items}"
    depth = 0
    for part in parts:
        for byte in part.translate(None, _NOT_BRACKETS):
            if byte in (0x5B, 0x7B):  # [ {
                depth += 1
                if depth > max_depth:
                    return "bad_result", f"result nests deeper than {max_depth} levels"
            else:
                depth -= 1
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} in the result (not JSON)")


def parse_lines(run: Run, now: float) -> None:
    """Consume complete lines of the result channel and apply the protocol rules."""
    while True:
        newline = run.channel.find(b"\n")
        if newline < 0:
            return
        with memoryview(run.channel) as view:  # one copy of the line, not two
            line = bytes(view[:newline])
        del run.channel[: newline + 1]
        if run.violation is not None:
            continue
        if run.t_done is not None:  # never decode what follows the terminal message
            run.violation = "more than one result message"
            continue
        if run.t_ready is not None:
            refusal = shape_refusal(
                line, run.limits.result_max_items, run.limits.result_max_depth + 2
            )
            if refusal is not None:  # +2: the message object around the value
                run.t_done = now
                run.refused = refusal
                run.messages.append({"kind": "refused"})
                continue
        try:
            message = json.loads(line, parse_constant=_refuse_constant)
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
                sent = message.get("t")
                if isinstance(sent, float) and run.t_start <= sent <= now:
                    run.t_ready_sent = sent
            elif kind == "setup_error":
                run.messages.append(message)
            else:
                run.violation = f"first message was {kind!r}, not 'ready'"
            continue
        run.t_done = now
        run.messages.append(message)


def deadline(run: Run) -> float:
    if run.t_done is not None:
        return run.t_done + EXIT_GRACE_S
    if run.t_ready is not None:
        return run.t_ready + run.limits.wall_timeout_s
    return run.t_start + run.limits.setup_timeout_s


def io_loop(
    proc: subprocess.Popen[bytes],
    channel_fd: int,
    payload: bytes,
    run: Run,
    meter: LoadMeter | None = None,
) -> None:
    """Feed the payload, read stdout/stderr/result with caps, stop at the first violation.

    ``meter``, when given, samples host contention while agent code runs (``_load``).
    """
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
    tick_s = 1.0 if meter is None else SAMPLE_INTERVAL_S
    try:
        while open_reads:
            now = time.monotonic()
            if meter is not None and run.t_ready is not None and run.t_done is None:
                meter.sample(now)
            remaining = deadline(run) - now
            if remaining <= 0:
                run.killed_for = (
                    "exit" if run.t_done is not None
                    else "timeout" if run.t_ready is not None
                    else "setup_timeout"
                )  # fmt: skip
                return
            for key, _ in selector.select(timeout=min(remaining, tick_s)):
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
                    parse_lines(run, now)
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
