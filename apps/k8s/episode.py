"""One ``k8s`` episode: an agent repairs the NetworkPolicies of a private namespace (paper
App. D).

Each episode gets its own namespace on the shared embedded cluster, created healthy (checked:
measured matrix == intended), then the faulted policies are written and the faults checked to
be visible. The agent works with the real ``kubectl`` and namespace-scoped credentials
(:func:`apps.k8s.kubectl.run_reply`); after every step that changed pods or policies the
connectivity is measured from inside the pods and cross-checked against the exact policy model
(:meth:`apps.k8s.namespace.EpisodeNamespace.measure_services`, :mod:`apps.k8s.crosscheck`: a
disagreement raises :class:`~apps.k8s.crosscheck.CrossCheckError`, an infrastructure failure
carrying both matrices). Scoring: :mod:`apps.k8s.scoring`. Namespaces come from the process's
pool (:mod:`apps.k8s.pool`): teardown revokes the agent's credentials and hands the namespace
back, which restores and verifies it before the next episode; with the pool off, teardown
deletes the namespace and waits until it is gone (pods, their network namespaces and veths
with it).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from evaluator.app import DependencyMissingError, EmulatorError, Episode, ResetNeededError
from evaluator.multistep import episode_over, step_end, stop_result
from evaluator.types import JSON, Query, StepResult, Verdict

from apps.k8s import manifests, prompt
from apps.k8s.cluster.config import ClusterConfig
from apps.k8s.kubectl import COMMAND_TIMEOUT_S, OUTPUT_CAP_BYTES, kubectl_binary, run_reply
from apps.k8s.namespace import EpisodeNamespace, cluster_faults, shared_cluster
from apps.k8s.pool import NamespacePool, namespace_pool, pool_enabled
from apps.k8s.replies import parse_reply
from apps.k8s.scoring import Mismatch, Scorer, mismatches


class K8sEpisode(Episode):
    """One agent attempt at one k8s query in a private namespace.

    Reset takes a namespace holding the public healthy set
    (:func:`apps.k8s.manifests.healthy_policies`), checks it against the *public* intended
    connectivity (:func:`apps.k8s.manifests.expected_edges`), then writes the query's starting
    policies (:func:`apps.k8s.manifests.starting_policies`, the k8s variant-pack hook) over it
    and measures the mismatches against the *query's* intended connectivity
    ``ground_truth["expected"]`` from then on.

    Options: ``max_steps`` (default :attr:`K8sApp.max_steps`), ``command_timeout_s`` (10),
    ``output_cap_bytes`` (16 KiB), ``cluster_config`` (default instance), ``cross_check``
    (True; tests of the judge itself may turn it off), ``pool`` (take the namespace from the
    process's :class:`apps.k8s.pool.NamespacePool` and give it back on close; default: on
    unless ``NETARENA_K8S_POOL=0``).
    """

    def __init__(
        self,
        query: Query,
        *,
        max_steps: int = 10,
        command_timeout_s: float = COMMAND_TIMEOUT_S,
        output_cap_bytes: int = OUTPUT_CAP_BYTES,
        cluster_config: ClusterConfig | None = None,
        cross_check: bool = True,
        pool: bool | None = None,
    ) -> None:
        self.query = query
        self.use_pool = pool_enabled(pool)
        self._pool: NamespacePool | None = None
        self.max_steps = max_steps
        self.command_timeout_s = command_timeout_s
        self.output_cap_bytes = output_cap_bytes
        self.cluster_config = cluster_config
        self.cross_check = cross_check
        self.expected = {tuple(e) for e in query.ground_truth["expected"]}
        self.ns: EpisodeNamespace | None = None
        self._home: Path | None = None
        self._scorer: Scorer | None = None
        self._fingerprint: tuple[tuple[str, str], ...] = ()
        self._reset_done = False
        self._changed_any = False
        self._ended = False
        self._stopped = False
        self._declared_healthy = False
        self._steps = 0
        self._refused = 0
        self._unparseable = 0
        self._crosschecks = 0
        self._started = 0.0
        self._last_step_end = 0.0
        self.timings: dict[str, list[float]] = {
            "setup_s": [], "step_s": [], "probe_s": [], "wait_s": [], "crosscheck_s": [],
            "teardown_s": [],
        }  # fmt: skip

    # helpers ------------------------------------------------------------------------------
    def _measure(
        self,
        *,
        check: bool,
        wait: bool = True,
        expected: set[tuple[str, str, str]] | None = None,
    ) -> list[Mismatch]:
        """Probe and return the mismatches against ``expected`` (default: the query's
        intended connectivity); ``check``/``wait``: see
        :meth:`apps.k8s.namespace.EpisodeNamespace.measure_services` (cross-checked unless
        the episode's ``cross_check`` is off)."""
        assert self.ns is not None
        matrix, checked = self.ns.measure_services(
            check=check, wait=wait, cross_check=self.cross_check, timings=self.timings)
        self._crosschecks += checked
        intended = self.expected if expected is None else expected
        return mismatches(intended, matrix)

    # Episode API --------------------------------------------------------------------------
    def reset(self) -> str:
        """See :meth:`_reset`; a cluster that stops answering is an :class:`EmulatorError`."""
        with cluster_faults("reset"):
            return self._reset()

    def _reset(self) -> str:
        """Create the namespace healthy (or take a verified healthy one from the pool), verify
        it, inject the faults, return the task, the namespace and the initial mismatch report.

        Raises:
            DependencyMissingError: kubectl or the cluster binaries are missing.
            EmulatorError: set-up failed, the healthy namespace had mismatches, the faults
                were not visible, or the cross-check disagreed (:class:`CrossCheckError`).
        """
        if kubectl_binary() is None:
            raise DependencyMissingError("kubectl not found (PATH or NETARENA_KUBECTL)")
        started = time.perf_counter()
        self.close()
        cluster = shared_cluster(self.cluster_config)
        if self.use_pool:
            # verified healthy after a dataplane barrier, unchanged since (its fingerprint)
            self._pool = namespace_pool(cluster)
            self.ns = self._pool.acquire()
        else:
            self.ns = EpisodeNamespace(cluster)
        self._home = Path(tempfile.mkdtemp(prefix=f"{self.ns.name}-home-"))
        try:
            if self._pool is None:
                self.ns.create(manifests.healthy_policies())
            public = manifests.expected_edges()
            healthy = self._measure(check=True, wait=self._pool is None, expected=public)
            if healthy:
                raise EmulatorError(
                    f"healthy namespace {self.ns.name} has {len(healthy)} mismatches: "
                    f"{healthy[:5]}"
                )
            written = manifests.starting_policies(self.query.ground_truth)
            if written:
                self.ns.replace_policies(written)
                initial = self._measure(check=True)
            elif self.expected == public:
                initial = healthy  # a public healthy control: nothing is written
            else:
                initial = self._measure(check=False)
            if not initial and not self.query.ground_truth.get("healthy"):
                raise EmulatorError(f"injected faults {self.query.label} left no mismatch")
            self._fingerprint = self.ns.fingerprint()
        except BaseException:
            self.close()
            raise
        self._scorer = Scorer(initial)
        self._reset_done = True
        self._ended = self._stopped = self._declared_healthy = False
        self._steps = self._refused = self._unparseable = 0
        self._changed_any = False
        self.timings["setup_s"].append(time.perf_counter() - started)
        self._started = self._last_step_end = time.perf_counter()
        return (
            f"{self.query.prompt}\n{prompt.NAMESPACE_LINE}{self.ns.name}\n\n"
            f"{prompt.render_report(initial, 'before your first step')}"
        )

    def step(self, agent_text: str) -> StepResult:
        """See :meth:`_step`; a cluster that stops answering is an :class:`EmulatorError`, never
        the agent's failure."""
        with cluster_faults("step"):
            return self._step(agent_text)

    def _step(self, agent_text: str) -> StepResult:
        """Run one agent reply; agent mistakes become observations. Never raises for agent
        reasons.

        Raises:
            ResetNeededError: called before :meth:`reset`.
            CrossCheckError: the dataplane disagrees with the policies (infrastructure).
            EmulatorError: the cluster failed.
        """
        if not self._reset_done or self._scorer is None or self.ns is None:
            raise ResetNeededError("call reset() first")
        if self._ended:
            return episode_over()
        t0 = time.perf_counter()
        self._steps += 1
        n = self._steps
        info: JSON = {"step": n}
        parsed = parse_reply(agent_text)
        if parsed.done:
            self._stopped = self._ended = True
            self._declared_healthy = parsed.healthy
            self._last_step_end = time.perf_counter()
            report = prompt.render_report(self._scorer.current, "at the end")
            return stop_result(n, f"Step {n}: you ended the episode.\n\n{report}")
        command = run_reply(parsed, kubeconfig=self.ns.kubeconfig, home=self._home,
                            timeout_s=self.command_timeout_s,
                            output_cap_bytes=self.output_cap_bytes)
        info.update(command.info)
        if command.info.get("error") == "refused":
            self._refused += 1
        elif command.info.get("error") == "unparseable":
            self._unparseable += 1
        text = f"Step {n}: {command.text}"
        if not command.ran:
            return self._finish(n, text, info, t0, changed=False)
        fingerprint = self.ns.fingerprint()
        changed = fingerprint != self._fingerprint
        self._fingerprint = fingerprint
        self._changed_any = self._changed_any or changed
        return self._finish(n, text, info, t0, changed=changed)

    def _finish(self, n: int, text: str, info: JSON, t0: float, *, changed: bool) -> StepResult:
        assert self._scorer is not None
        after = self._measure(check=changed)
        safe = self._scorer.record(n, after)
        info["changed_state"] = changed
        info["mismatches"] = len(after)
        self._last_step_end = time.perf_counter()
        self.timings["step_s"].append(self._last_step_end - t0)
        # the episode ends by itself when a step clears a non-empty report (never on a healthy
        # control: it ends when the agent stops, or on the step budget)
        solved, truncated = step_end(
            n, self.max_steps, solved=bool(self._scorer.initial) and self._scorer.solved
        )
        self._ended = solved or truncated
        report = prompt.render_report(after, f"after step {n}")
        return StepResult(f"{text}\n\n{report}", terminated=solved, truncated=truncated,
                          safe_step=safe, info=info)

    def verdict(self) -> Verdict:
        """Score the episode so far. Raises :class:`ResetNeededError` before reset."""
        if not self._reset_done or self._scorer is None:
            raise ResetNeededError("call reset() first")
        details: JSON = {
            "labels": list(self.query.labels),
            "namespace": self.ns.name if self.ns else None,
            "refused_steps": self._refused,
            "unparseable_steps": self._unparseable,
            "stopped_by_agent": self._stopped,
            "declared_healthy": self._declared_healthy,
            "cross_checks": self._crosschecks,
            "setup_s": round(self.timings["setup_s"][-1], 4) if self.timings["setup_s"] else None,
        }
        return self._scorer.verdict(
            max(0.0, self._last_step_end - self._started), self._steps, self._stopped, details,
            changed_state=self._changed_any,
            control=bool(self.query.ground_truth.get("healthy")),
            declared_healthy=self._declared_healthy,
        )

    def instance_names(self) -> dict[str, str]:
        """``{"namespace": name}`` of the live episode (the first observation shows it and
        replies may quote it, e.g. ``-n k8s-ep-…``); empty before :meth:`reset`."""
        return {"namespace": self.ns.name} if self.ns is not None else {}

    def close(self) -> None:
        """See :meth:`_close`; a cluster that stops answering is an :class:`EmulatorError`."""
        with cluster_faults("teardown"):
            self._close()

    def _close(self) -> None:
        """Give the namespace back to the pool (its credentials revoked at once, restored
        and verified in the background) or, without the pool, delete it (waiting until it is
        gone); remove the private HOME. Idempotent.

        Raises:
            EmulatorError: a namespace to delete did not go away in time.
        """
        if self._home is not None:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None
        if self.ns is not None:
            t0 = time.perf_counter()
            ns, self.ns = self.ns, None
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.release(ns)
            else:
                ns.delete()
            self.timings["teardown_s"].append(time.perf_counter() - t0)
