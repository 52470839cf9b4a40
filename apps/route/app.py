"""The registered ``route`` app: routing misconfiguration on real Mininet (paper App. C).

:class:`RouteApp` wires the modules: seeded queries (:mod:`apps.route.queries`), the episode
on a private Mininet network (:mod:`apps.route.episode`), the reply parser
(:mod:`apps.route.replies`), the reference agents (:mod:`apps.route.reference`,
:mod:`apps.route.scripted`) and the tools (:mod:`apps.route.tools`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from evaluator.app import App, DependencyMissingError, ReplyFormat
from evaluator.sampling import HEALTHY_SHARE
from evaluator.types import JSON, Query

from apps.route import examples, reference
from apps.route import tools as route_tools
from apps.route.commands import sandbox_argv
from apps.route.episode import RouteEpisode
from apps.route.mn import mininet_api
from apps.route.pool import RoutePool
from apps.route.probe import PROBE_TIMEOUT_S
from apps.route.prompt import PROMPT_MARKER
from apps.route.queries import generate_queries
from apps.route.replies import parse_reply

if TYPE_CHECKING:
    from evaluator.green.declarations import ConfigKey, NetArenaProfile


class RouteApp(App):
    """Routing misconfiguration troubleshooting (paper Appendix C, Table 5).

    Args:
        switches: inclusive range of the subnet count S (default: the level's, see
            ``queries.LEVEL_SHAPES``; the paper's 2-4 at level 1).
        hosts: inclusive range of hosts per subnet H (default: the level's).
        probe_timeout_s: pingall wait per attempt in seconds (default 0.2).
        healthy_share: share of each batch that is a healthy control (default
            :data:`evaluator.sampling.HEALTHY_SHARE`, 10%; 0 for none).
        pool: where episodes get their networks: a :class:`~apps.route.pool.RoutePool`,
            True for the process's pool, False for a fresh build per episode, or None
            (default) for the process's pool when ``NETARENA_ROUTE_POOL`` > 0 and a fresh
            build otherwise.
    """

    app_id: ClassVar[str] = "route"
    title: ClassVar[str] = "Routing misconfiguration (Mininet)"
    #: 2: faults on any node and interface, more methods, distractors, topologies by level;
    #: 3: healthy controls, a prompt that reports a suspected problem, the healthy reply
    version: ClassVar[int] = 3
    levels: ClassVar[tuple[int, ...]] = (1, 2, 3)
    #: The step budget (the reference harness's ``max_iterations``).
    max_steps: ClassVar[int] = 10
    needs_root: ClassVar[bool] = True
    reply_format: ClassVar[ReplyFormat] = "json"
    prompt_marker: ClassVar[str] = PROMPT_MARKER

    def __init__(
        self,
        switches: tuple[int, int] | None = None,
        hosts: tuple[int, int] | None = None,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
        healthy_share: float = HEALTHY_SHARE,
        pool: RoutePool | bool | None = None,
    ) -> None:
        if not 0.0 <= healthy_share <= 1.0:
            raise ValueError("healthy_share must be in [0, 1]")
        for bounds in (switches, hosts):
            if bounds is not None and not 1 <= bounds[0] <= bounds[1]:
                raise ValueError("switches/hosts must be increasing ranges of positive integers")
        self.switches = switches
        self.hosts = hosts
        self.probe_timeout_s = probe_timeout_s
        self.healthy_share = healthy_share
        self.pool = pool

    def generate(self, count: int, seed: int, level: int | None = None) -> list[Query]:
        """Return ``count`` queries for ``seed``; labels cycle through a seeded order of the
        Table 5 combinations of ``level`` (all 15 when ``level`` is None), so a batch covers
        them evenly; ``healthy_share`` of them are healthy controls (label ``HEALTHY``, no
        fault). No emulator is touched.

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
            switches=self.switches,
            hosts=self.hosts,
            max_steps=self.max_steps,
            healthy_share=self.healthy_share,
        )

    def episode(self, query: Query, **options: Any) -> RouteEpisode:
        """Return a fresh, not yet reset episode. Options: see :class:`RouteEpisode`."""
        options.setdefault("max_steps", self.max_steps)
        options.setdefault("probe_timeout_s", self.probe_timeout_s)
        options.setdefault("pool", self.pool)
        return RouteEpisode(query, **options)

    def oracle_reply(self, ground_truth: JSON, history: list[JSON]) -> str:
        """Next command of the hidden repair (see :func:`reference.oracle_reply`)."""
        return reference.oracle_reply(ground_truth, history)

    def ground_truth_problems(self, query: Query) -> list[tuple[str, str]]:
        """Static checks of the query's ground truth
        (:func:`apps.route.queries.ground_truth_problems`)."""
        from apps.route.queries import ground_truth_problems

        return ground_truth_problems(query.ground_truth)

    def reply_problem(self, reply: str) -> str | None:
        """The parser's error for ``reply`` (:func:`apps.route.replies.parse_reply`), or None."""
        return parse_reply(reply).error

    def null_reply(self, history: list[JSON]) -> str:
        """``{"done": true}``: stop without changing anything."""
        return reference.null_reply(history)

    def heuristic_reply(self, history: list[JSON]) -> str:
        """Scripted operator without ground truth (see :func:`reference.heuristic_reply`)."""
        return reference.heuristic_reply(history)

    def scripted_reply(self, history: list[JSON]) -> str:
        """The scripted agent written against the public fault catalogue
        (:func:`apps.route.scripted.scripted_reply`): no model, no ground truth."""
        from apps.route.scripted import scripted_reply

        return scripted_reply(history)

    def green_config_keys(self) -> tuple[ConfigKey, ...]:
        """NetArena's ``config`` keys for route and ours (:data:`apps.route.green.CONFIG_KEYS`)."""
        from apps.route.green import CONFIG_KEYS

        return CONFIG_KEYS

    def netarena_profile(self) -> NetArenaProfile:
        """How NetArena counts and reports route queries
        (:data:`apps.route.green.NETARENA_PROFILE`)."""
        from apps.route.green import NETARENA_PROFILE

        return NETARENA_PROFILE

    def operand_feature(self, query: Query) -> str | None:
        """Kinds of the faulted machines (``router``, ``host`` or ``host+router``; machines
        ``r…`` are routers, ``h…`` hosts); ``None`` for a query without faults."""
        faults = query.ground_truth.get("faults") or []
        kinds = {"router" if str(f.get("machine", "")).startswith("r") else "host" for f in faults}
        return "+".join(sorted(kinds)) or None

    def few_shot_examples(self) -> list[tuple[str, str]]:
        """(situation, next reply) pairs for few-shot prompting, one per level, drawn from this
        generator on the reserved seed ``FEW_SHOT_SEED`` (:mod:`apps.route.examples`): the
        situation written from the query's ground truth, the answer the oracle's first reply.
        Pure Python (no Mininet)."""
        return examples.few_shot_examples(self.generate, self.levels)

    def tools(self) -> list[JSON]:
        """The app's actions as OpenAI function tools (:mod:`apps.route.tools`)."""
        return route_tools.tools()

    def reply_from_tool_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """The reply text of a tool call, judged by the reply parser (:mod:`apps.route.tools`)."""
        return route_tools.reply_from_tool_call(name, arguments)

    def tool_call_from_reply(self, reply: str) -> tuple[str, JSON]:
        """The tool call carrying a reply text (:mod:`apps.route.tools`)."""
        return route_tools.tool_call_from_reply(reply)

    def host_check(self) -> None:
        """Root, Mininet (package and ``mnexec``), bubblewrap and nsenter must be present.

        Raises:
            DependencyMissingError: naming what is missing.
        """
        if os.geteuid() != 0:
            raise DependencyMissingError("route episodes need root (network namespaces, veths)")
        mininet_api()
        sandbox_argv()
