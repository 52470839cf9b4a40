"""The registered ``k8s`` app: NetworkPolicy troubleshooting on Online Boutique (paper App. D).

Query generation is pure (no cluster): the seed fixes the Table 6 labels and every fault
operand (:mod:`apps.k8s.queries`). Each episode gets its own namespace on the shared embedded
cluster, created healthy (checked: measured matrix == intended), then the faulted policies are
written and the faults checked to be visible. The agent works with the real ``kubectl`` and
namespace-scoped credentials (:mod:`apps.k8s.kubectl`); after every step the connectivity is
measured from inside the pods and cross-checked against the exact policy model
(:mod:`apps.k8s.crosscheck`: a disagreement raises :class:`CrossCheckError`, an infrastructure
failure carrying both matrices). Scoring: :mod:`apps.k8s.scoring`. Namespaces come from the
process's pool (:mod:`apps.k8s.pool`): teardown revokes the agent's credentials and hands the
namespace back, which restores and verifies it before the next episode; with the pool off,
teardown deletes the namespace and waits until it is gone (pods, their network namespaces and
veths with it).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import urllib3
from evaluator.app import (
    App,
    DependencyMissingError,
    EmulatorError,
    Episode,
    ReplyFormat,
    ResetNeededError,
)
from evaluator.sampling import HEALTHY_SHARE
from evaluator.types import JSON, Query, StepResult, Verdict
from kubernetes.client.rest import ApiException

from apps.k8s import crosscheck, manifests, prompt, reference, scripted
from apps.k8s import tools as k8s_tools
from apps.k8s.cluster.admission import refusal_in_output
from apps.k8s.cluster.config import ClusterConfig
from apps.k8s.cluster.control_plane import ClusterError
from apps.k8s.cluster.health import NotEnforcedError
from apps.k8s.cluster.netns import NetnsError
from apps.k8s.cluster.sync import SyncTimeoutError
from apps.k8s.examples import EXAMPLES
from apps.k8s.host_check import check_host
from apps.k8s.kubectl import (
    COMMAND_TIMEOUT_S,
    OUTPUT_CAP_BYTES,
    check_command,
    check_manifest,
    kubectl_binary,
    run_kubectl,
)
from apps.k8s.namespace import EpisodeNamespace, service_matrix, shared_cluster
from apps.k8s.pool import NamespacePool, namespace_pool, pool_enabled
from apps.k8s.queries import generate_queries
from apps.k8s.replies import parse_reply
from apps.k8s.scoring import Mismatch, Scorer, mismatches

#: What the cluster raises when it fails under us (transport, API, node agent, time-outs):
#: infrastructure, never the agent's fault (the agent's own commands run in a subprocess whose
#: failures are observations).
CLUSTER_FAULTS: tuple[type[BaseException], ...] = (
    ApiException,
    urllib3.exceptions.HTTPError,
    ClusterError,
    NetnsError,
    SyncTimeoutError,
    NotEnforcedError,
    OSError,
)


REFUSED_BY_CLUSTER = "Refused by the cluster (limits of this namespace): "
"""Observation line of a step whose write the episode namespace's admission rule or quota
refused (:mod:`apps.k8s.cluster.admission`); such a step counts as refused."""


@contextmanager
def cluster_faults(action: str) -> Iterator[None]:
    """Turn a :data:`CLUSTER_FAULTS` exception raised during ``action`` into EmulatorError.

    Raises:
        EmulatorError: the cluster failed (``EmulatorError`` itself passes unchanged).
    """
    try:
        yield
    except EmulatorError:
        raise
    except CLUSTER_FAULTS as exc:
        raise EmulatorError(f"cluster failed during {action}: {type(exc).__name__}: {exc}") from exc


class K8sEpisode(Episode):
    """One agent attempt at one k8s query in a private namespace.

    Reset takes a namespace holding the public healthy set
    (:func:`apps.k8s.manifests.healthy_policies`), checks it against the *public* intended
    connectivity (:func:`apps.k8s.manifests.expected_edges`), then writes the query's starting
    policies over it and measures the mismatches against the *query's* intended connectivity
    ``ground_truth["expected"]`` from then on. The starting policies are
    ``ground_truth["policies"][name]`` for every name of ``ground_truth["repair"]`` plus every
    ``{name: policy}`` of the optional ``ground_truth["baseline"]`` (created when the public
    set has no policy of that name). Public queries have no baseline and expect the public
    connectivity; a variant pack (docs/writing-a-variant-pack.md, "k8s packs") may declare
    another intended connectivity and another healthy set, as long as the repair (applied by
    the oracle) together with the baseline and the untouched public policies realises it.

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
        intended connectivity). When ``check`` (pods or policies changed), first wait for the
        dataplane (unless not ``wait``: nothing was written since the last barrier) and
        afterwards cross-check the matrix with the policies."""
        assert self.ns is not None
        t0 = time.perf_counter()
        if check and wait:
            self.ns.wait()
        t1 = time.perf_counter()
        pod_matrix, apps = self.ns.measure()
        t2 = time.perf_counter()
        if check and wait:
            self.timings["wait_s"].append(t1 - t0)
        self.timings["probe_s"].append(t2 - t1)
        if check and self.cross_check:
            crosscheck.check(self.ns.rest.api, self.ns.name, pod_matrix, self.ns.last_endpoints,
                             self.ns.cluster.config)
            self._crosschecks += 1
            self.timings["crosscheck_s"].append(time.perf_counter() - t2)
        intended = self.expected if expected is None else expected
        return mismatches(intended, service_matrix(pod_matrix, apps))

    # Episode API --------------------------------------------------------------------------
    def _starting_policies(self) -> dict[str, Any]:
        """The policies written over the healthy public set at reset, by name: the injected
        version (``ground_truth["policies"][name]``) of every name in ``ground_truth["repair"]``
        and every entry of the optional ``ground_truth["baseline"]`` (see the class
        docstring). Empty for a public healthy control."""
        truth = self.query.ground_truth
        written = {name: truth["policies"][name] for name in truth.get("repair") or {}}
        written.update(truth.get("baseline") or {})
        return written

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
            written = self._starting_policies()
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
            return StepResult("The episode is over.", terminated=True, info={"ignored": True})
        t0 = time.perf_counter()
        self._steps += 1
        n = self._steps
        info: JSON = {"step": n}
        parsed = parse_reply(agent_text)
        if parsed.done:
            self._stopped = self._ended = True
            self._declared_healthy = parsed.healthy
            self._last_step_end = time.perf_counter()
            info["stopped"] = True
            report = prompt.render_report(self._scorer.current, "at the end")
            return StepResult(f"Step {n}: you ended the episode.\n\n{report}",
                              terminated=True, info=info)
        refusal = parsed.error
        if refusal is None:
            assert parsed.argv is not None
            refusal = check_command(parsed.argv, parsed.stdin is not None)
            if refusal is None and parsed.stdin is not None:
                refusal = check_manifest(parsed.stdin)
            if refusal is not None:
                self._refused += 1
                info["error"] = "refused"
        else:
            self._unparseable += 1
            info["error"] = "unparseable"
        if refusal is not None:
            text = f"Step {n}: not run: {refusal}"
            return self._finish(n, text, info, t0, changed=False)
        assert parsed.argv is not None and self.ns.kubeconfig is not None and self._home
        try:
            result = run_kubectl(
                parsed.argv, kubeconfig=self.ns.kubeconfig, home=self._home,
                stdin=parsed.stdin, timeout_s=self.command_timeout_s,
                output_cap_bytes=self.output_cap_bytes,
            )
        except FileNotFoundError as exc:
            raise DependencyMissingError(str(exc)) from exc
        status = "killed (timeout)" if result.timed_out else str(result.status)
        info.update({"argv": list(parsed.argv), "status": result.status,
                     "command_s": round(result.elapsed_s, 4)})
        refused_by_cluster = refusal_in_output(result.output or "")
        refused_line = ""
        if refused_by_cluster is not None:
            # the admission rule or the quota of the episode namespace refused (part of) the
            # write: the agent's command, the agent's refused step (writes it made before
            # the refusal stay)
            self._refused += 1
            info["error"] = "refused"
            info["refused_by"] = "cluster"
            refused_line = f"{REFUSED_BY_CLUSTER}{refused_by_cluster}\n"
        text = (
            f"Step {n}: {parsed.text}\nExit status: {status}\n{refused_line}"
            f"{prompt.OUTPUT_MARKER}{result.output or '(no output)'}"
        )
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
        solved = bool(self._scorer.initial) and self._scorer.solved
        truncated = not solved and n >= self.max_steps
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


class K8sApp(App):
    """Kubernetes NetworkPolicy troubleshooting (paper Appendix D, Table 6).

    Args:
        cluster_config: the cluster instance (default: the embedded default instance).
        healthy_share: share of healthy controls per batch.
        pool: episodes take their namespace from the process's namespace pool
            (:mod:`apps.k8s.pool`); None: on unless ``NETARENA_K8S_POOL=0``.
    """

    app_id: ClassVar[str] = "k8s"
    title: ClassVar[str] = "Kubernetes NetworkPolicy troubleshooting"
    #: 2: healthy controls, the ``healthy`` reply, a prompt that reports a suspected problem
    version: ClassVar[int] = 2
    levels: ClassVar[tuple[int, ...]] = (1, 2, 3)
    max_steps: ClassVar[int] = 10
    needs_root: ClassVar[bool] = True
    reply_format: ClassVar[ReplyFormat] = "command"
    prompt_marker: ClassVar[str] = prompt.PROMPT_MARKER

    def __init__(
        self,
        cluster_config: ClusterConfig | None = None,
        healthy_share: float = HEALTHY_SHARE,
        pool: bool | None = None,
    ) -> None:
        if not 0.0 <= healthy_share <= 1.0:
            raise ValueError("healthy_share must be in [0, 1]")
        self.cluster_config = cluster_config
        self.healthy_share = healthy_share
        self.pool = pool

    def generate(self, count: int, seed: int, level: int | None = None) -> list[Query]:
        """``count`` queries for ``seed``; labels cycle through a seeded order of the Table 6
        combinations of ``level`` (all 15 when None); ``healthy_share`` of them are healthy
        controls (label ``HEALTHY``, no fault). No cluster is touched.

        Raises:
            ValueError: negative count or unknown level.
        """
        return generate_queries(
            count,
            seed,
            level,
            app_id=self.app_id,
            version=self.version,
            levels=self.levels,
            max_steps=self.max_steps,
            healthy_share=self.healthy_share,
        )

    def episode(self, query: Query, **options: Any) -> K8sEpisode:
        """A fresh, not yet reset episode. Options: see :class:`K8sEpisode`."""
        options.setdefault("max_steps", self.max_steps)
        options.setdefault("cluster_config", self.cluster_config)
        options.setdefault("pool", self.pool)
        return K8sEpisode(query, **options)

    def oracle_reply(self, ground_truth: JSON, history: list[JSON]) -> str:
        """Revert the hidden faults (see :func:`reference.oracle_reply`)."""
        return reference.oracle_reply(ground_truth, history)

    def reply_problem(self, reply: str) -> str | None:
        """The parser's error for ``reply`` (:func:`apps.k8s.replies.parse_reply`), or None."""
        return parse_reply(reply).error

    def null_reply(self, history: list[JSON]) -> str:
        """``done`` at once: changes nothing."""
        return reference.null_reply(history)

    def heuristic_reply(self, history: list[JSON]) -> str:
        """Report-driven floor agent without ground truth (:func:`reference.heuristic_reply`)."""
        return reference.heuristic_reply(history)

    def scripted_reply(self, history: list[JSON]) -> str:
        """The scripted agent written against the public generator
        (:func:`apps.k8s.scripted.scripted_reply`): no model, no ground truth; it puts the
        public healthy policy set back."""
        return scripted.scripted_reply(history)

    def host_check(self) -> None:
        """Root, network namespaces, the cluster binaries, kubectl and the host tools the
        cluster runs must be here (:func:`apps.k8s.host_check.check_host`).

        Raises:
            DependencyMissingError: naming everything missing and how to get it
                (``make k8s-binaries``).
        """
        check_host(self.cluster_config)

    def few_shot_examples(self) -> list[tuple[str, str]]:
        """Hand-written (situation, next command) pairs for few-shot prompting."""
        return list(EXAMPLES)

    def tools(self) -> list[JSON]:
        """The app's actions as OpenAI function tools (:mod:`apps.k8s.tools`)."""
        return k8s_tools.tools()

    def reply_from_tool_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """The reply text of a tool call, judged by the reply parser (:mod:`apps.k8s.tools`)."""
        return k8s_tools.reply_from_tool_call(name, arguments)

    def tool_call_from_reply(self, reply: str) -> tuple[str, JSON]:
        """The tool call carrying a reply text (:mod:`apps.k8s.tools`)."""
        return k8s_tools.tool_call_from_reply(reply)
