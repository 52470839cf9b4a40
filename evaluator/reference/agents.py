"""Reference agents served by the deployment: oracle, null, heuristic, scripted, llm.

See docs/architecture.md §6.

A reference agent turns the chat so far (``[{"role", "content"}, ...]``, newest observation
last) into one reply text, exactly as a team's agent would; :mod:`evaluator.reference.server`
puts it behind either wire protocol. They are stateless: everything they know comes from the
request (and, for the oracle, from the oracle vault entry named by the episode token).
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

from evaluator import registry
from evaluator.app import App, UnknownAppError
from evaluator.oracle_vault import OracleVault
from evaluator.reference.base import AgentConfigError, AgentReplyError, ReferenceAgent
from evaluator.reference.llm import make_llm_agent
from evaluator.types import JSON

logger = logging.getLogger(__name__)

#: Reference agent names accepted by :func:`make_agent` and the ``serve_agent`` command.
AGENT_NAMES: tuple[str, ...] = ("oracle", "null", "heuristic", "scripted", "llm")


def load_app(spec: str) -> App:
    """Return the app for a registered id (``malt``) or a ``module:Class`` path.

    The dotted form lets an app author serve reference agents for an app that is not yet
    registered (and lets tests use a throwaway app in a subprocess).

    Raises:
        AgentConfigError: unknown id, import failure, or the class is not an :class:`App`.
    """
    if spec in registry.APP_PATHS or ":" not in spec:
        try:
            return registry.get_app(spec)
        except UnknownAppError as exc:
            raise AgentConfigError(str(exc)) from None
    module_name, _, class_name = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise AgentConfigError(f"cannot load app {spec!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, App)):
        raise AgentConfigError(f"{spec!r} is not an evaluator.app.App subclass")
    return cls()


class OracleAgent(ReferenceAgent):
    """Answers from the hidden ground truth found in the oracle vault.

    The evaluator deposits each episode's query in the vault under the episode token it
    sends as ``X-NetArena-Episode`` (``evaluator/oracle_vault.py``); the oracle reads it and
    answers ``App.oracle_reply(query.ground_truth, history)`` of the query's app.
    """

    name = "oracle"

    def __init__(self, app: App, vault: OracleVault) -> None:
        super().__init__(app)
        self.vault = vault

    def reply(self, messages: list[JSON], episode_id: str | None) -> str:
        """Return the app's oracle reply. Raises :class:`AgentReplyError` 400/404."""
        if not episode_id:
            raise AgentReplyError(400, "the oracle needs the X-NetArena-Episode header")
        query = self.vault.get(episode_id)
        if query is None:
            raise AgentReplyError(
                404,
                f"no oracle vault entry for episode {episode_id[:40]!r} in "
                f"{self.vault.directory}: was the evaluation started with this vault?",
            )
        return self._app_named(query.app_id).oracle_reply(query.ground_truth, messages)

    def _app_named(self, app_id: str) -> App:
        if app_id == self.app.app_id:
            return self.app
        try:
            return registry.get_app(app_id)
        except UnknownAppError as exc:
            raise AgentReplyError(404, f"vault entry names an unknown app: {exc}") from None

    def app_of(self, messages: list[JSON], episode_id: str | None) -> App:
        """The app of the episode's vault entry (else the served app)."""
        query = self.vault.get(episode_id) if episode_id else None
        return self.app if query is None else self._app_named(query.app_id)


class NullAgent(ReferenceAgent):
    """Always gives the app's well-formed do-nothing reply (``App.null_reply``)."""

    name = "null"

    def reply(self, messages: list[JSON], episode_id: str | None) -> str:
        """Return ``app.null_reply(messages)``."""
        return self.app.null_reply(messages)


class HeuristicAgent(ReferenceAgent):
    """A scripted operator without LLM or ground truth: ``app.heuristic_reply(history)``.

    Raises:
        AgentConfigError: the app has no floor agent (:attr:`App.has_heuristic` is false).
    """

    name = "heuristic"

    def __init__(self, app: App) -> None:
        super().__init__(app)
        if not app.has_heuristic:
            raise AgentConfigError(
                f"app {app.app_id!r} has no heuristic operator (no heuristic_reply); "
                "serve the oracle, null or llm agent for it instead"
            )

    def reply(self, messages: list[JSON], episode_id: str | None) -> str:
        """Return ``app.heuristic_reply(messages)`` (``""`` if it declines to answer)."""
        return self.app.heuristic_reply(messages) or ""


class ScriptedAgent(ReferenceAgent):
    """The app's determined overfit agent: ``app.scripted_reply(history)`` (no model, no
    ground truth, written against the public generator; see :meth:`App.scripted_reply`).

    Raises:
        AgentConfigError: the app has no scripted agent (:attr:`App.has_scripted` is false).
    """

    name = "scripted"

    def __init__(self, app: App) -> None:
        super().__init__(app)
        if not app.has_scripted:
            raise AgentConfigError(
                f"app {app.app_id!r} has no scripted agent (no scripted_reply); "
                "serve the oracle, null or llm agent for it instead"
            )

    def reply(self, messages: list[JSON], episode_id: str | None) -> str:
        """Return ``app.scripted_reply(messages)`` (``""`` if it declines to answer)."""
        return self.app.scripted_reply(messages) or ""


def make_agent(
    name: str,
    app: App,
    *,
    vault_dir: str | Path | None = None,
    llm_options: JSON | None = None,
) -> ReferenceAgent:
    """Build a reference agent.

    Args:
        name: one of :data:`AGENT_NAMES`.
        app: the app it answers (see :func:`load_app`).
        vault_dir: oracle vault directory (required for ``oracle``).
        llm_options: keyword arguments of :func:`evaluator.reference.llm.make_llm_agent`
            (required for ``llm``: at least ``upstream_url``).

    Raises:
        AgentConfigError: unknown name or missing/invalid options.
    """
    if name == "oracle":
        if vault_dir is None:
            raise AgentConfigError(
                "the oracle agent needs a vault directory (--vault DIR), the one the "
                "evaluation writes episode queries to"
            )
        return OracleAgent(app, OracleVault(vault_dir))
    if name == "null":
        return NullAgent(app)
    if name == "heuristic":
        return HeuristicAgent(app)
    if name == "scripted":
        return ScriptedAgent(app)
    if name == "llm":
        return make_llm_agent(app, **(llm_options or {}))
    raise AgentConfigError(f"unknown reference agent {name!r}; known: {', '.join(AGENT_NAMES)}")


def _first_user_text(messages: list[JSON]) -> str:
    return next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")


class MultiAppAgent(ReferenceAgent):
    """One reference agent kind answering several apps behind one endpoint.

    Each request goes to the member agent of the episode's app: the app named by the oracle
    vault entry of the episode when there is one, else the only app whose
    :attr:`App.prompt_marker` occurs in the task message.

    Raises (from ``reply``):
        AgentReplyError: 400 when the app of the request cannot be told.
    """

    def __init__(self, members: dict[str, ReferenceAgent], vault: OracleVault | None) -> None:
        first = next(iter(members.values()))
        super().__init__(first.app)
        self.name = first.name
        self.members = members
        self.vault = vault

    @property
    def app_ids(self) -> list[str]:
        """Ids of the member apps."""
        return list(self.members)

    def app_for(self, messages: list[JSON], episode_id: str | None) -> str:
        """Return the id of the app ``messages`` belong to. Raises :class:`AgentReplyError`."""
        if self.vault is not None and episode_id:
            query = self.vault.get(episode_id)
            if query is not None and query.app_id in self.members:
                return query.app_id
        task = _first_user_text(messages)
        matches = []
        for app_id, member in self.members.items():
            if member.app.prompt_marker in task:
                matches.append(app_id)
        if len(matches) != 1:
            raise AgentReplyError(
                400,
                f"cannot tell which app this request is for (serving {', '.join(self.members)}; "
                f"prompt markers matched: {matches or 'none'}); serve one app per endpoint",
            )
        return matches[0]

    def reply(self, messages: list[JSON], episode_id: str | None) -> str:
        """Return the reply of the member agent of the request's app."""
        return self.members[self.app_for(messages, episode_id)].reply(messages, episode_id)

    def app_of(self, messages: list[JSON], episode_id: str | None) -> App:
        """The member app of the request (:meth:`app_for`)."""
        return self.members[self.app_for(messages, episode_id)].app

    def tool_reply(self, messages: list[JSON], episode_id: str | None) -> JSON:
        """The tool call of the member agent of the request's app."""
        return self.members[self.app_for(messages, episode_id)].tool_reply(messages, episode_id)


def make_served_agent(
    name: str,
    app_spec: str,
    *,
    vault_dir: str | Path | None = None,
    llm_options: JSON | None = None,
) -> ReferenceAgent:
    """Build the agent a server answers with, for one app or several.

    Args:
        name: one of :data:`AGENT_NAMES`.
        app_spec: an app id, a ``module:Class`` path, a comma-separated list of those, or
            ``all`` (every registered app that loads; apps the agent kind does not support,
            e.g. ``heuristic`` for an app without a floor agent, are left out).
        vault_dir, llm_options: as :func:`make_agent`.

    Raises:
        AgentConfigError: an unknown or unsupported app in an explicit list, or no app at all.
    """
    if app_spec.strip() == "all":
        members: dict[str, ReferenceAgent] = {}
        reasons = []
        for app_id in registry.app_ids():
            try:
                members[app_id] = make_agent(
                    name, load_app(app_id), vault_dir=vault_dir, llm_options=llm_options
                )
            except AgentConfigError as exc:
                reasons.append(f"{app_id}: {exc}")
                logger.warning("the %s agent leaves out app %s: %s", name, app_id, exc)
        if not members:
            raise AgentConfigError(f"no app can serve the {name} agent: {'; '.join(reasons)}")
    else:
        specs = [part.strip() for part in app_spec.split(",") if part.strip()]
        if not specs:
            raise AgentConfigError("no app given")
        members = {}
        for spec in specs:
            agent = make_agent(name, load_app(spec), vault_dir=vault_dir, llm_options=llm_options)
            members[agent.app.app_id] = agent
    if len(members) == 1:
        return next(iter(members.values()))
    vault = OracleVault(vault_dir) if vault_dir is not None else None
    return MultiAppAgent(members, vault)
