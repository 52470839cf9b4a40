"""The two abstractions every benchmark application implements: ``App`` and ``Episode``.

An ``App`` generates seeded queries with hidden ground truth; an ``Episode`` runs one query
against an emulator in the Gymnasium shape ``reset() -> observation``, ``step(text) ->
StepResult``, then ``verdict()``, and ``close()`` which always restores or tears down the
emulator. Agent mistakes (unparseable output, failed or refused commands) become
observations, never exceptions; only infrastructure failures raise (``EmulatorError``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from evaluator.types import JSON, Query, StepResult, Verdict

if TYPE_CHECKING:
    from evaluator.green.declarations import ConfigKey, NetArenaProfile

ReplyFormat = Literal["python", "json", "command"]
"""Shape of an agent's reply: a fenced ``python`` block (MALT code), one JSON object (route's
``{"machine", "command"}``), or one command in a bare fence (k8s ``kubectl``)."""


#: Name of the one tool of an app that declares no tools of its own (:meth:`App.tools`).
ANSWER_TOOL = "answer"


def function_tool(name: str, description: str, properties: JSON, required: list[str]) -> JSON:
    """Return one OpenAI function tool definition (``{"type": "function", "function": {...}}``)
    whose parameters are a JSON Schema object with ``properties`` (no other keys allowed) and
    the ``required`` property names."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


def tool_names(tools: list[JSON]) -> list[str]:
    """The function names of OpenAI tool definitions (entries without one are skipped)."""
    names = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


class EvaluatorError(Exception):
    """Base class of the engine's errors."""


class UnknownAppError(EvaluatorError):
    """No app is registered under the requested id."""


class EmulatorError(EvaluatorError):
    """The emulator could not be set up, driven or torn down (infrastructure, not the agent).

    Attributes:
        details: JSON evidence kept with the episode's infrastructure failure (e.g. the k8s
            cross-check's expected and measured matrices); ``{}`` by default.
        judge_disagreement: True for failures where the judge itself may be wrong (the
            enforcement differs from the specification's reading): never charged to the agent,
            even when raised after its reply (``evaluator.runner.agent_could_cause``).
    """

    judge_disagreement: bool = False

    def __init__(self, *args: object, details: JSON | None = None) -> None:
        super().__init__(*args)
        self.details: JSON = dict(details or {})


class DependencyMissingError(EmulatorError):
    """A tool the app needs (mininet, kubectl, bwrap, cluster binaries) is not installed."""


class ResetNeededError(EvaluatorError):
    """``step`` or ``verdict`` was called before ``reset``."""


class Episode(ABC):
    """One agent attempt at one query. Use as a context manager so ``close`` always runs."""

    query: Query

    @abstractmethod
    def reset(self) -> str:
        """Build or restore the emulator state and return the first observation (the prompt)."""

    @abstractmethod
    def step(self, agent_text: str) -> StepResult:
        """Apply one agent reply (raw text) and return what happened."""

    @abstractmethod
    def verdict(self) -> Verdict:
        """Score the episode so far. May be called once the episode ended or the agent failed."""

    @abstractmethod
    def close(self) -> None:
        """Tear down or restore the emulator. Idempotent; never raises for agent reasons."""

    def instance_names(self) -> dict[str, str]:
        """Names unique to this live episode that the observations show and replies may quote
        (route: the node-name prefix, ``{"prefix": "nq7x_"}``); valid after :meth:`reset`.

        Rejudging (``evaluator.rejudge``) maps a stored episode's names onto the replay's so
        that stored replies address the fresh emulator. Default: none.
        """
        return {}

    def __enter__(self) -> Episode:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class App(ABC):
    """A benchmark application (not a Django app): everything the engine, the reference agents,
    the site and the worker queues need to know about it is declared here.

    Class attributes:
        app_id: registry id, also the Celery queue name.
        title: human title shown on the site.
        version: bump when generation or scoring changes meaning.
        levels: the complexity levels this app generates (paper Tables 4-6).
        max_steps: the step budget of an episode (1 for single-shot apps); the one place it
            is decided.
        needs_root: True when episodes need root / network namespaces.
        reply_format: the shape of an agent's reply (:data:`ReplyFormat`).
        prompt_marker: text that occurs in every task prompt of this app and in no other
            app's (a reference server answering several apps routes requests on it).
    """

    app_id: ClassVar[str]
    title: ClassVar[str]
    version: ClassVar[int] = 1
    levels: ClassVar[tuple[int, ...]] = (1, 2, 3)
    max_steps: ClassVar[int] = 1
    needs_root: ClassVar[bool] = False
    reply_format: ClassVar[ReplyFormat]
    prompt_marker: ClassVar[str]

    @abstractmethod
    def generate(self, count: int, seed: int, level: int | None = None) -> list[Query]:
        """Return ``count`` queries for ``seed`` (all levels mixed, or only ``level``).

        The same arguments always return the same queries. Raises ``ValueError`` on a level
        this app does not have or a negative count.
        """

    @abstractmethod
    def episode(self, query: Query, **options: Any) -> Episode:
        """Return a fresh, not yet reset episode for ``query``."""

    @abstractmethod
    def oracle_reply(self, ground_truth: JSON, history: list[JSON]) -> str:
        """Reply of the oracle reference agent, scripted from the hidden ground truth.

        ``history`` is the chat so far (``[{"role", "content"}, ...]``, last one the newest
        observation). Used by reference agents and the conformance check only.
        """

    def null_reply(self, history: list[JSON]) -> str:
        """Reply of the null reference agent: a well-formed reply that changes nothing."""
        return ""

    def heuristic_reply(self, history: list[JSON]) -> str | None:
        """Reply of the app's no-model floor agent (no ground truth, no LLM), or ``None``.

        Apps that have a floor agent override this; ``None`` means the app has none (see
        :attr:`has_heuristic`).
        """
        return None

    @property
    def has_heuristic(self) -> bool:
        """True when the app overrides :meth:`heuristic_reply` (it has a floor agent)."""
        return type(self).heuristic_reply is not App.heuristic_reply

    def scripted_reply(self, history: list[JSON]) -> str | None:
        """Reply of the app's *scripted* agent, or ``None`` when the app has none.

        The scripted agent is the strongest program without a language model and without
        the ground truth that its authors could write with full knowledge of the public
        generator (its phrasings, query families, topologies and fault catalogue). It is the
        honesty check of the benchmark: it should score high on public queries and low on
        held-out variant packs (``benchmarks/bench_difficulty.py``), and it is updated
        whenever the public generator changes. ``history`` is the chat so far, as for
        :meth:`oracle_reply`.
        """
        return None

    @property
    def has_scripted(self) -> bool:
        """True when the app overrides :meth:`scripted_reply`."""
        return type(self).scripted_reply is not App.scripted_reply

    def few_shot_examples(self) -> list[tuple[str, str]]:
        """Solved (question, answer) pairs for the few-shot prompting strategy; ``[]`` if none."""
        return []

    def operand_feature(self, query: Query) -> str | None:
        """A coarse feature of what ``query``'s faults act on, read cheaply from its ground
        truth (route: the kinds of faulted machines), which the adversarial search adds to the
        label to split its arms (training/adversarial_search.py); ``None`` (the default):
        the labels alone."""
        return None

    def ground_truth_problems(self, query: Query) -> list[tuple[str, str]]:
        """What is unsafe or inconsistent in ``query``'s ground truth under this app's own
        checks, without running an emulator: ``[(rule, message), ...]``, empty when sound.

        ``rule`` names the app's check that fails (a safety constraint, an allow-list, a
        model); ``message`` says where. ``manage.py check_pack`` runs it on every query of a
        variant pack (:mod:`evaluator.pack_check`). Never raises for a malformed ground truth:
        that is a problem too. Default: nothing to check.
        """
        return []

    def reply_problem(self, reply: str) -> str | None:
        """Why ``reply`` (an agent's answer to this app's task prompt) could not be used as an
        action, or ``None`` when the app's reply parser accepts it. Nothing is run; never
        raises. The site's agent pre-flight sends one canary prompt per app and reports this
        (docs/agents.md). Default: only an empty reply is refused; apps override it with their
        own parser (``replies.py``).
        """
        return None if reply.strip() else "the reply is empty"

    def tools(self) -> list[JSON]:
        """The app's actions as OpenAI function tools, for agents on the ``openai-tools``
        protocol (docs/agent-protocols.md): a list of ``{"type": "function", "function":
        {"name", "description", "parameters"}}`` whose parameters are JSON Schema objects.

        Default: one tool :data:`ANSWER_TOOL` taking ``{"text": <the reply text>}``. Apps
        override it together with :meth:`reply_from_tool_call` and
        :meth:`tool_call_from_reply`.
        """
        return [
            function_tool(
                ANSWER_TOOL,
                "Give your reply to the task, written exactly in the answer format the task "
                "describes.",
                {"text": {"type": "string", "description": "The reply text."}},
                ["text"],
            )
        ]

    def reply_from_tool_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """The reply text one tool call stands for, which the app's own parser then judges
        exactly as a text reply (so a verdict never depends on the protocol).

        ``name`` is one of :meth:`tools` (the client refuses other names); ``arguments`` is
        the decoded argument object (``{}`` when the call carried none or nothing decodable).
        Missing or mistyped arguments must give a text the parser refuses with its usual
        reason, never an exception. Default: ``arguments["text"]`` (``""`` when absent).
        """
        text = arguments.get("text")
        return text if isinstance(text, str) else ""

    def tool_call_from_reply(self, reply: str) -> tuple[str, JSON]:
        """The tool call ``(name, arguments)`` that carries ``reply`` (a reply text of this
        app's format), so that reference agents can answer on ``openai-tools``:
        ``reply_from_tool_call(*tool_call_from_reply(r))`` is judged as ``r`` is.
        Default: ``(ANSWER_TOOL, {"text": reply})``.
        """
        return ANSWER_TOOL, {"text": reply}

    def host_check(self) -> None:  # noqa: B027 - optional hook, nothing to check by default
        """Check once, when a worker for this app starts, that this host can run its episodes
        (tools installed, sandbox usable), so that a broken host fails at start instead of
        turning every episode into an infrastructure failure. Default: nothing to check.
        (Not to be confused with an agent's pre-flight, which checks an agent's endpoint.)

        Raises:
            DependencyMissingError: a tool or facility the app needs is missing (the message
                says which and how to install it).
        """

    def green_config_keys(self) -> tuple[ConfigKey, ...] | None:
        """The ``config`` keys the AgentBeats green agent of this app accepts
        (``serve_green --app <id>``, docs/agentbeats.md): a tuple of
        :class:`evaluator.green.declarations.ConfigKey`, each with its default, its check and
        whether it has an effect (a key without one is reported in ``not_applied``).

        It must hold ``num_queries``, ``complexity_level``, ``prompt_type``, ``seed`` and
        ``trials``; ``max_iterations``, ``queries_per_level``, ``start_index``, ``end_index``
        and one ``regenerate_*`` flag are read when present. The helpers of
        :mod:`evaluator.green.request` build them. Default: ``None``, the generic keys
        (:func:`evaluator.green.request.generic_config_keys`: ``num_queries`` per level, the
        app's levels, ``prompt_type``, ``seed``, ``trials``, and ``max_iterations`` for a
        multi-step app). NetArena's apps override it with the keys of NetArena's config class
        for the app (``apps/<app>/green.py``).
        """
        return None

    def netarena_profile(self) -> NetArenaProfile | None:
        """How NetArena's own green agent counts and reports this app's queries
        (:class:`evaluator.green.declarations.NetArenaProfile`: its query types per level, their
        caps, its result format), or ``None`` when the app reproduces none of NetArena's.

        Without one, the green agent plans ``num_queries`` queries per level (the first of
        each level's batch) and its records carry no NetArena fields. Default: ``None``.
        """
        return None

    def describe(self) -> JSON:
        """Short JSON description for result files and the site."""
        return {
            "app_id": self.app_id,
            "title": self.title,
            "version": self.version,
            "levels": list(self.levels),
        }
