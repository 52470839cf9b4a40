"""The registered ``k8s`` app: NetworkPolicy troubleshooting on Online Boutique (paper App. D).

The app wires its modules together: query generation is pure (no cluster; the seed fixes the
Table 6 labels and every fault operand, :mod:`apps.k8s.queries`); an episode
(:class:`apps.k8s.episode.K8sEpisode`) runs in its own namespace on the shared embedded
cluster (:mod:`apps.k8s.namespace`, :mod:`apps.k8s.pool`, :mod:`apps.k8s.cluster`); the
reference agents are in :mod:`apps.k8s.reference` and :mod:`apps.k8s.scripted`; the host
check in :mod:`apps.k8s.host_check`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from evaluator.app import App, ReplyFormat
from evaluator.sampling import HEALTHY_SHARE
from evaluator.types import JSON, Query

from apps.k8s import examples, prompt, reference, scripted
from apps.k8s import tools as k8s_tools
from apps.k8s.cluster.config import ClusterConfig
from apps.k8s.episode import K8sEpisode
from apps.k8s.host_check import check_host
from apps.k8s.queries import generate_queries
from apps.k8s.replies import parse_reply

if TYPE_CHECKING:
    from evaluator.green.declarations import ConfigKey, NetArenaProfile


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
    #: the few-shot examples once made (:meth:`few_shot_examples`)
    _few_shot: list[tuple[str, str]] | None = None

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

    def ground_truth_problems(self, query: Query) -> list[tuple[str, str]]:
        """Static checks of the query's ground truth
        (:func:`apps.k8s.queries.ground_truth_problems`)."""
        from apps.k8s.queries import ground_truth_problems

        return ground_truth_problems(query.ground_truth)

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

    def green_config_keys(self) -> tuple[ConfigKey, ...]:
        """NetArena's ``config`` keys for k8s and ours (:data:`apps.k8s.green.CONFIG_KEYS`)."""
        from apps.k8s.green import CONFIG_KEYS

        return CONFIG_KEYS

    def netarena_profile(self) -> NetArenaProfile:
        """How NetArena counts and reports k8s queries
        (:data:`apps.k8s.green.NETARENA_PROFILE`)."""
        from apps.k8s.green import NETARENA_PROFILE

        return NETARENA_PROFILE

    def operand_feature(self, query: Query) -> str | None:
        """Roles of the services whose policies the faults edit: ``frontend``, ``caller`` (a
        service that calls others, :data:`apps.k8s.manifests.CALLS`) or ``leaf``,
        deduplicated and sorted; ``None`` for a query without faults."""
        from apps.k8s.manifests import CALLS

        roles = set()
        for fault in query.ground_truth.get("faults") or []:
            service = str(fault.get("policy", ""))
            roles.add(
                "frontend" if service == "frontend" else "caller" if service in CALLS else "leaf"
            )
        return "+".join(sorted(roles)) or None

    def few_shot_examples(self) -> list[tuple[str, str]]:
        """(situation, next reply) pairs for few-shot prompting, one per level, drawn from this
        generator on the reserved seed ``FEW_SHOT_SEED`` (:mod:`apps.k8s.examples`): the
        report and the changed policies from the query's ground truth, the answer the
        oracle's first reply. Pure Python (no cluster), but half a second of generation: kept
        on the instance after the first call (the registry's apps are one per process)."""
        if self._few_shot is None:
            self._few_shot = examples.few_shot_examples(self.generate, self.levels)
        return list(self._few_shot)

    def tools(self) -> list[JSON]:
        """The app's actions as OpenAI function tools (:mod:`apps.k8s.tools`)."""
        return k8s_tools.tools()

    def reply_from_tool_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """The reply text of a tool call, judged by the reply parser (:mod:`apps.k8s.tools`)."""
        return k8s_tools.reply_from_tool_call(name, arguments)

    def tool_call_from_reply(self, reply: str) -> tuple[str, JSON]:
        """The tool call carrying a reply text (:mod:`apps.k8s.tools`)."""
        return k8s_tools.tool_call_from_reply(reply)
