"""The route episode: one agent attempt at one query on a private Mininet network.

Each episode builds its own prefixed Mininet network (or, with a pool, leases a built one that
was restored and verified after its previous episode: :mod:`apps.route.pool`), checks that it
is healthy, injects the faults of the query (:mod:`apps.route.queries`) and checks that
pingall is really broken (an :class:`EmulatorError` otherwise -- the per-method test keeps
that from happening).

Episode loop: the first observation is the task, the topology and the initial pingall
(:mod:`apps.route.prompt`). Each step takes one reply ``{"machine", "command"}`` (or
``{"done": true}``; :mod:`apps.route.replies`), runs the command in the sandbox
(:mod:`apps.route.commands`) and answers with its output and a fresh pingall; the episode
terminates when every pair answers, when the agent stops, or is truncated after ``max_steps``
steps. Unparseable or refused replies are steps with an error observation. The verdict is
:mod:`apps.route.scoring`'s. A variant pack may write the topology of the first observation in
its own layout (:func:`apps.route.prompt.topology_writer`).
"""

from __future__ import annotations

import shlex
import subprocess
import time

from evaluator.app import EmulatorError, Episode, ResetNeededError
from evaluator.multistep import episode_over, step_end, stop_result
from evaluator.types import JSON, Query, StepResult, Verdict
from evaluator.variants import VariantPackError

from apps.route.commands import (
    COMMAND_TIMEOUT_S,
    OUTPUT_CAP_BYTES,
    check_command,
    run_sandboxed,
)
from apps.route.faults import with_prefix
from apps.route.network import RouteNetwork
from apps.route.pool import RoutePool, default_pool
from apps.route.probe import PROBE_TIMEOUT_S, PingallResult
from apps.route.prompt import (
    PINGALL_MARKER,
    render_reset_observation,
    render_step_observation,
    topology_writer,
)
from apps.route.replies import parse_reply
from apps.route.scoring import StepTally
from apps.route.topology import RouteTopology


class RouteEpisode(Episode):
    """One agent attempt at one routing query on a private Mininet network.

    Options: ``max_steps`` (default 10), ``probe_timeout_s`` (pingall wait per attempt, 0.2),
    ``command_timeout_s`` (5), ``output_cap_bytes`` (16 KiB), ``pool`` (a
    :class:`~apps.route.pool.RoutePool` to lease the network from; None: the process's pool
    when ``NETARENA_ROUTE_POOL`` > 0, else none; True: the process's pool in any case; False:
    never a pool). Without a pool the
    episode builds its own network at :meth:`reset` and tears it down at :meth:`close`; with
    one it leases a verified pristine network and :meth:`close` returns it (restored and
    verified, or destroyed).

    Raises (at construction):
        VariantPackError: the query asks for its pack's observation format and that pack is
            not loaded here or has no ``describe`` (:func:`apps.route.prompt.topology_writer`).
    """

    def __init__(
        self,
        query: Query,
        *,
        max_steps: int = 10,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
        command_timeout_s: float = COMMAND_TIMEOUT_S,
        output_cap_bytes: int = OUTPUT_CAP_BYTES,
        pool: RoutePool | bool | None = None,
    ) -> None:
        self.query = query
        self.max_steps = max_steps
        self.probe_timeout_s = probe_timeout_s
        self.command_timeout_s = command_timeout_s
        self.output_cap_bytes = output_cap_bytes
        self.network = RouteNetwork(RouteTopology.from_dict(query.ground_truth["topology"]))
        # a pack's observation format (or a missing pack) is known before any network is built
        self._write_topology = topology_writer(query)
        if pool is None or pool is True:
            self._pool = default_pool(create=pool is True)
        else:
            self._pool = pool or None
        self._leased = False
        self._closed = False
        self._ended = False
        self._tally: StepTally | None = None
        self._started = 0.0
        self._last_step_end = 0.0
        self.setup_s = 0.0
        self._settle_s = 0.0

    # helpers ------------------------------------------------------------------------------
    def _probe(self, settle_on: str | None = None) -> PingallResult:
        if settle_on is not None:
            self._settle_s += self.network.wait_links_settled(settle_on)
        return self.network.pingall(timeout_s=self.probe_timeout_s)

    def _resolve_machine(self, name: str) -> tuple[str | None, str | None]:
        topo = self.network.topology
        machines = topo.machines()
        for candidate in (name, topo.prefix + name):
            if candidate in machines:
                return candidate, None
        bare = name[len(topo.prefix) :] if name.startswith(topo.prefix) else name
        if bare.startswith("s") and bare[1:].isdigit():
            return None, (
                f"{name} is a switch (a Linux bridge outside the emulated hosts); run commands "
                "on r0 or a host"
            )
        shown = ", ".join([topo.router, *topo.hosts()[:3], "..."])
        return None, f"unknown machine {name!r}; machines are {shown}"

    # Episode API --------------------------------------------------------------------------
    def reset(self) -> str:
        """Build the network, inject the faults, return task + topology + initial pingall.

        Raises:
            EmulatorError: the network failed to build, was unhealthy before injection, an
                injection command failed, or the faults did not break pingall.
            VariantPackError: the query's pack failed to write the topology text.
        """
        started = time.perf_counter()
        if self._leased or (self._pool is None and self.network.running):
            self.close()
        self._closed = False
        if self._pool is not None:
            self.network = self._pool.acquire(self.network.topology)
            self._leased = True
        else:
            self.network.start()
        topo = self.network.topology
        healthy = self._probe()
        if healthy.lost:
            self.close()
            raise EmulatorError(
                f"fresh network is not fully connected ({healthy.loss_percent:.1f}% lost); "
                "is the host's FORWARD policy dropping bridged traffic?"
            )
        truth = self.query.ground_truth
        # distractors first (harmless, part of the network the agent finds), then the faults,
        # each on its machine (version 1 truths have no machine: r0)
        changes = [(d["machine"], d["command"]) for d in truth.get("distractors", [])]
        changes += [
            (fault.get("machine", "r0"), command)
            for fault in truth["faults"]
            for command in fault["inject"]
        ]
        for machine, command in changes:
            status, output = self.network.exec(
                topo.prefix + machine, shlex.split(with_prefix(command, topo.prefix))
            )
            if status != 0:
                self.close()
                raise EmulatorError(f"fault injection failed on {machine}: {command}: {output}")
        if any(f["label"] == "DT" and f["method"] == 4 for f in truth["faults"]):
            # drain the shaper's token bucket, so that the one frame its burst lets through
            # does not count a pair as reachable in the baseline of the safety check
            self._probe()
        for machine in sorted({fault.get("machine", "r0") for fault in truth["faults"]}):
            self._settle_s += self.network.wait_links_settled(topo.prefix + machine)
        initial = self._probe()
        if truth.get("healthy"):
            if initial.lost:
                self.close()
                raise EmulatorError(
                    f"healthy control lost {initial.lost} pairs after its distractors "
                    f"({initial.loss_percent:.1f}%): the emulator, not the agent, is at fault"
                )
        elif initial.lost == 0:
            self.close()
            raise EmulatorError(f"injected faults {self.query.label} did not break pingall")
        try:
            topology = self._write_topology(topo)
        except VariantPackError:
            self.close()
            raise
        self._tally = StepTally(initial=initial, last=initial, losses=[initial.loss_percent])
        self._ended = False
        self.setup_s = time.perf_counter() - started
        self._started = self._last_step_end = time.perf_counter()
        return render_reset_observation(
            self.query.prompt,
            prefix=topo.prefix,
            topology=topology,
            initial_pingall=initial.render(),
        )

    def step(self, agent_text: str) -> StepResult:
        """Apply one agent reply; see the module docstring. Never raises for agent reasons.

        Raises:
            ResetNeededError: called before :meth:`reset`.
        """
        tally = self._tally
        if tally is None:
            raise ResetNeededError("call reset() first")
        if self._ended or self._closed:
            # after close() a pooled network may already serve another episode
            return episode_over()
        tally.steps += 1
        n = tally.steps
        parsed = parse_reply(agent_text)
        info: JSON = {"step": n}
        if parsed.done:
            tally.stopped_by_agent = True
            tally.declared_healthy = parsed.healthy
            self._ended = True
            self._last_step_end = time.perf_counter()
            return stop_result(
                n, f"Step {n}: you stopped the episode.\n\nFinal pingall:\n{tally.last.render()}"
            )
        if parsed.error is not None:
            tally.unparseable += 1
            info["error"] = "unparseable"
            return self._finish_step(n, f"Step {n}: reply not used: {parsed.error}", info)
        assert parsed.machine is not None and parsed.command is not None
        machine, problem = self._resolve_machine(parsed.machine)
        argv, refusal = check_command(parsed.command)
        if machine is None or argv is None:
            tally.refused += 1
            info["error"] = "refused"
            reason = problem or refusal
            return self._finish_step(n, f"Step {n}: refused: {reason}", info)
        before_state = self.network.fingerprint_parts(machine)
        before = tally.last
        try:
            result = run_sandboxed(
                self.network.pid_of(machine),
                argv,
                timeout_s=self.command_timeout_s,
                output_cap_bytes=self.output_cap_bytes,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            # agent text that the allow-list passed but the OS would not run (not expected:
            # control characters are refused) is a refused step, never a crash of the run
            tally.refused += 1
            info["error"] = "refused"
            return self._finish_step(
                n, f"Step {n}: refused: the command could not be run ({type(exc).__name__})", info
            )
        after_state = self.network.fingerprint_parts(machine)
        changed = after_state != before_state
        # link or qdisc changes take effect through the kernel's link-watch (<= 1 s later)
        link_changed = after_state[0] != before_state[0] or after_state[4] != before_state[4]
        after = self._probe(settle_on=machine if link_changed else None)
        safe_step, newly_lost = tally.record_change(n, before, after, changed=changed)
        info.update(
            {
                "machine": machine,
                "argv": argv,
                "status": result.status,
                "changed_state": changed,
                "loss_percent": after.loss_percent,
                "newly_unreachable": newly_lost[:50],
                "command_s": round(result.elapsed_s, 4),
            }
        )
        status = "killed (timeout)" if result.timed_out else str(result.status)
        text = render_step_observation(n, machine, parsed.command, status, result.output)
        return self._finish_step(n, text, info, safe_step=safe_step)

    def _finish_step(self, n: int, text: str, info: JSON, *, safe_step: bool = True) -> StepResult:
        assert self._tally is not None
        last = self._tally.last
        self._tally.losses.append(last.loss_percent)
        self._last_step_end = time.perf_counter()
        # the episode ends by itself when a step turns a failing pingall into a full one (a
        # healthy control never does: it ends when the agent stops, or on the step budget)
        solved, truncated = step_end(
            n, self.max_steps, solved=self._tally.initial.lost > 0 and last.lost == 0
        )
        self._ended = solved or truncated
        return StepResult(
            f"{text}{PINGALL_MARKER}\n{last.render()}",
            terminated=solved,
            truncated=truncated,
            safe_step=safe_step,
            info=info,
        )

    def verdict(self) -> Verdict:
        """Score the episode so far. Raises :class:`ResetNeededError` before reset."""
        if self._tally is None:
            raise ResetNeededError("call reset() first")
        return self._tally.verdict(
            self.query,
            latency_s=max(0.0, self._last_step_end - self._started),
            extra={
                "prefix": self.network.topology.prefix,
                "setup_s": round(self.setup_s, 4),
                "link_settle_s": round(self._settle_s, 4),
            },
        )

    def instance_names(self) -> dict[str, str]:
        """The episode's node-name prefix, which observations show and commands quote."""
        return {"prefix": self.network.topology.prefix}

    def close(self) -> None:
        """Tear the network down, or return a leased one to its pool, which restores and
        verifies it (idempotent). Later steps are ignored."""
        self._closed = True
        if self._pool is not None:
            # a pooled network belongs to the pool once released: never stop it here
            if self._leased:
                self._leased = False
                self._pool.release(self.network)
            return
        self.network.stop()
