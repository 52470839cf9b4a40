"""MaltApp: the MALT capacity-planning application (paper Appendix B).

The app wires its modules together: queries (:mod:`apps.malt.queries`), the episode
(:mod:`apps.malt.episode`), the reference agents (:mod:`apps.malt.reference`,
:mod:`apps.malt.scripted`), few-shot examples and tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from evaluator.app import App, DependencyMissingError
from evaluator.types import JSON, Query

from apps.malt import tools as malt_tools
from apps.malt.episode import MaltEpisode
from apps.malt.examples import EXAMPLES, FEW_SHOT_SEED
from apps.malt.prompt import PROMPT_MARKER, render_prompt
from apps.malt.queries import draft, ground_truth, label_at
from apps.malt.reference import NULL_REPLY, oracle_reply_text, template_reply
from apps.malt.replies import code_problem

if TYPE_CHECKING:
    from evaluator.green.declarations import ConfigKey, NetArenaProfile


class MaltApp(App):
    """The MALT capacity-planning app (``malt``, levels 1-3, one step per episode)."""

    app_id = "malt"
    title = "Datacenter capacity planning (MALT)"
    version = 2  # v2: varied wording, property operands, per-query capacities
    levels = (1, 2, 3)
    max_steps = 1
    needs_root = True  # evaluator.sandbox needs root (per-run uids via setpriv) and bwrap
    reply_format = "python"
    prompt_marker = PROMPT_MARKER

    def generate(self, count: int, seed: int, level: int | None = None) -> list[Query]:
        """Return ``count`` queries of ``seed``'s stream (only ``level`` if given).

        Deterministic: the query at (seed, index) never depends on ``count`` or ``level``
        (filtering keeps stream indices). Raises ``ValueError`` for a negative count or an
        unknown level.
        """
        if count < 0:
            raise ValueError("count must be >= 0")
        if level is not None and level not in self.levels:
            raise ValueError(f"MALT has levels {self.levels}, not {level!r}")
        queries: list[Query] = []
        index = 0
        while len(queries) < count:
            if level is None or label_at(seed, index, self.version)[1] == level:
                queries.append(self._query(seed, index))
            index += 1
        return queries

    def _query(self, seed: int, index: int) -> Query:
        made = draft(seed, index, self.version)
        truth, _ = ground_truth(made.program, made.graph)
        prompt = render_prompt(made.question, truth["answer_kind"], truth["changes_topology"])
        truth["question"] = made.question
        return Query(
            app_id=self.app_id,
            app_version=self.version,
            seed=seed,
            index=index,
            level=made.level,
            labels=made.labels,
            prompt=prompt,
            ground_truth=truth,
        )

    def episode(self, query: Query, **options: Any) -> MaltEpisode:
        """Return a fresh episode. Option ``limits``: an ``evaluator.sandbox.SandboxLimits``."""
        return MaltEpisode(query, limits=options.get("limits"))

    def oracle_reply(self, ground_truth: JSON, history: list[JSON]) -> str:
        """Correct code for the query, generated from its ground-truth program."""
        return oracle_reply_text(ground_truth)

    def ground_truth_problems(self, query: Query) -> list[tuple[str, str]]:
        """Safety and consistency of the query's ground truth
        (:func:`apps.malt.scoring.ground_truth_problems`)."""
        from apps.malt.scoring import ground_truth_problems

        return ground_truth_problems(query.ground_truth)

    def reply_problem(self, reply: str) -> str | None:
        """Why no runnable ``process_graph`` code is in ``reply``
        (:func:`apps.malt.replies.code_problem`), or None."""
        return code_problem(reply)

    def null_reply(self, history: list[JSON]) -> str:
        """Well-formed code that returns ``{"answer": None}`` (incorrect on every query)."""
        return NULL_REPLY

    def heuristic_reply(self, history: list[JSON]) -> str:
        """The ``template`` floor agent: pattern matching on the prompt, no model, no ground
        truth (:func:`apps.malt.reference.template_reply`)."""
        return template_reply(history)

    def scripted_reply(self, history: list[JSON]) -> str:
        """The scripted agent written against the public generator
        (:func:`apps.malt.scripted.scripted_reply`): no model, no ground truth."""
        from apps.malt.scripted import scripted_reply

        return scripted_reply(history)

    def host_check(self) -> None:
        """Agent code must be sandboxable here (bwrap, setpriv, root, a memory cgroup).

        Raises:
            DependencyMissingError: the sandbox's reason (``evaluator.sandbox.check_host``).
        """
        from evaluator.sandbox import SandboxUnavailableError, check_host

        try:
            check_host()
        except SandboxUnavailableError as exc:
            raise DependencyMissingError(f"MALT agent code cannot be sandboxed: {exc}") from exc

    def green_config_keys(self) -> tuple[ConfigKey, ...]:
        """NetArena's ``config`` keys for MALT and ours (:data:`apps.malt.green.CONFIG_KEYS`)."""
        from apps.malt.green import CONFIG_KEYS

        return CONFIG_KEYS

    def netarena_profile(self) -> NetArenaProfile:
        """How NetArena counts and reports MALT queries
        (:data:`apps.malt.green.NETARENA_PROFILE`)."""
        from apps.malt.green import NETARENA_PROFILE

        return NETARENA_PROFILE

    def few_shot_examples(self) -> list[tuple[str, str]]:
        """Worked examples for few-shot prompting: one (question, answer) pair per level.

        The questions come from the reserved seed ``FEW_SHOT_SEED`` (scored queries use
        non-negative seeds) and the answers are hand-written (:mod:`apps.malt.examples`).
        """
        return [
            (self._query(FEW_SHOT_SEED, index).ground_truth["question"], reply)
            for index, reply in EXAMPLES
        ]

    def tools(self) -> list[JSON]:
        """The app's actions as OpenAI function tools (:mod:`apps.malt.tools`)."""
        return malt_tools.tools()

    def reply_from_tool_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """The reply text of a tool call, judged by the reply parser (:mod:`apps.malt.tools`)."""
        return malt_tools.reply_from_tool_call(name, arguments)

    def tool_call_from_reply(self, reply: str) -> tuple[str, JSON]:
        """The tool call carrying a reply text (:mod:`apps.malt.tools`)."""
        return malt_tools.tool_call_from_reply(reply)
