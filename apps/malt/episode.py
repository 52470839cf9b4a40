"""MaltEpisode: one MALT query played against one agent (paper Appendix B).

One episode = one query, one agent reply (``max_steps = 1``). ``reset()`` returns the full
prompt; ``step(text)`` extracts the agent's code, runs ``process_graph(graph)`` in the sandbox
(``evaluator.sandbox.run_function``: separate process, the graph goes in by value and only JSON
comes back, so agent code can never touch the evaluator's graph; a returned graph comes back as
its change against the query's graph, which the judge applies to its own copy) and
terminates; ``verdict()`` judges the returned value.

The verdict rules live in :mod:`apps.malt.scoring`; the prompt in :mod:`apps.malt.prompt`.
"""

from __future__ import annotations

from typing import Any

from evaluator.app import Episode, ResetNeededError
from evaluator.deadline import Deadline
from evaluator.types import Query, StepResult, Verdict

from apps.malt.fabric import GraphRef, graph_ref, query_graph
from apps.malt.prompt import SANDBOX_PREAMBLE
from apps.malt.replies import extract_code
from apps.malt.scoring import JUDGE_BUDGET_S, failed_verdict, judge


class MaltEpisode(Episode):
    """One MALT query: prompt, one sandboxed code run, verdict. Holds no emulator state."""

    def __init__(self, query: Query, limits: Any = None) -> None:
        self.query = query
        self.limits = limits
        self._reset = False
        self._steps = 0
        self._verdict: Verdict | None = None
        self._graph: GraphRef | None = None

    def reset(self) -> str:
        """Return the prompt (instructions + request + answer format).

        The query's graph is resolved here, before any agent reply, so a worker without the
        variant pack of a fabric variant fails before the agent is called.

        Raises:
            evaluator.variants.VariantPackError: the query names a fabric variant whose pack
                this process has not loaded (a configuration fault of the worker).
        """
        self._graph = graph_ref(self.query.ground_truth)
        query_graph(self._graph)
        self._reset = True
        self._steps = 0
        self._verdict = None
        return self.query.prompt

    def step(self, agent_text: str) -> StepResult:
        """Extract and run the agent's code, judge it, terminate.

        Raises:
            ResetNeededError: ``reset`` was not called.
            evaluator.sandbox.SandboxUnavailableError / SandboxSetupError: infrastructure.
            evaluator.sandbox.SandboxOverloadedError / SandboxExitError: the host was too
                busy (a timeout on an overloaded host, a sandbox that did not exit in time
                after its result); the runner retries the episode.
            evaluator.deadline.JudgeBudgetExceeded: handling the reply took more than
                :data:`JUDGE_BUDGET_S` (the agent's failure).
        """
        if not self._reset:
            raise ResetNeededError("call reset() before step()")
        self._steps += 1
        deadline = Deadline(JUDGE_BUDGET_S)
        extraction = extract_code(agent_text, deadline)
        if extraction.code is None:
            self._verdict = failed_verdict(
                self._steps, "no_code", extraction.reason, safe=True, latency_s=0.0
            )
            return StepResult(f"No code was run: {extraction.reason}.", terminated=True)
        from evaluator.sandbox import SandboxLimits, run_function

        limits = self.limits if self.limits is not None else SandboxLimits()
        with deadline.paused():
            result = run_function(
                extraction.code,
                "process_graph",
                query_graph(self._graph or graph_ref(self.query.ground_truth)),
                limits=limits,
                preamble=SANDBOX_PREAMBLE,
                graph_diffs=True,  # a returned graph comes back as its change (judge applies)
            )
        if not result.ok:
            reason = result.error or result.failure or "the code failed"
            self._verdict = failed_verdict(
                self._steps,
                f"sandbox:{result.failure}",
                reason,
                safe=True,
                latency_s=result.exec_s,
                extra={"extraction": extraction.method, "stdout_tail": result.stdout[-2000:]},
            )
            return StepResult(
                f"Your code failed ({result.failure}): {reason}",
                terminated=True,
                info={"failure": result.failure, "exec_s": result.exec_s},
            )
        self._verdict = judge(
            self.query.ground_truth, result.value, result.exec_s, self._steps, deadline
        )
        self._verdict.details["extraction"] = extraction.method
        return StepResult(
            f"Your code ran in {result.exec_s:.3f} s and returned a result.",
            terminated=True,
            safe_step=self._verdict.safe,
            info={"exec_s": result.exec_s},
        )

    def verdict(self) -> Verdict:
        """The verdict; an episode without a step is a failed ``no_reply`` (safe, 0 s)."""
        if not self._reset:
            raise ResetNeededError("call reset() before verdict()")
        if self._verdict is None:
            return failed_verdict(
                self._steps, "no_reply", "the agent gave no reply", safe=True, latency_s=0.0
            )
        return self._verdict

    def close(self) -> None:
        """Nothing to tear down: the sandbox process is gone when ``run_function`` returns."""
