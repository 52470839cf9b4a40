"""Gymnasium environments over the benchmark apps (paper §5.1).

Every app of the registry (``evaluator.registry.APP_PATHS``) is an environment
``netarena/<app_id>-v1`` (:func:`env_id`; registered when the ``training`` package is imported,
and again by :func:`register_envs` for apps registered later), wrapping that one app.
``reset(seed=...)`` draws a query with the environment's seeded generator (same seed, same
query) and resets a real episode of it (MALT: the sandbox; route: a private Mininet network;
k8s: a namespace on the embedded cluster); ``step(text)`` passes the text to ``Episode.step``
unchanged, exactly as an agent's reply on the leaderboard.

Observations and actions are ``gymnasium.spaces.Text`` over :data:`CHARSET` (printable ASCII,
tab, newline, carriage return, and a few typographic characters the prompts use); any other
character of an observation is shown as ``?`` and an observation longer than
:data:`OBSERVATION_MAX_CHARS` is cut (with a note).

Instance names: a live route episode prefixes its nodes (``nq7x_r0``) and a k8s episode runs
in its own namespace (``k8s-ep-<16 hex>``). Observations show canonical names instead
(:data:`CANONICAL_NAMES`: route prefix ``ep_``, k8s namespace ``k8s-ep-env``) and actions may
use them: the environment rewrites canonical names that start a word to the live ones in every
action (``ep_r0`` but not ``keep_out``), and live names to canonical ones in every
observation, so that the same seed gives the same observation and concurrent environments
never collide. ``info["instance_names"]`` after ``reset`` holds the
live names.

Rewards (:class:`RewardScheme`; pass ``rewards=`` to ``gymnasium.make``). Per step:

* ``invalid`` (default -100) when the reply was refused or unparseable (route, k8s), or held
  no runnable code (MALT: no code block, the sandbox run failed);
* ``fix`` (default +100) when the step brought the failing count below its lowest value so
  far in the episode (a new best, so breaking and re-fixing earns nothing); MALT: the answer
  is correct and safe. The failing count is read from the step's ``info["failing"]`` and the
  episode's ``Verdict.details["initial_failing"]`` (any app may report them), else from the
  shipped apps' own keys (:data:`FAILING_KEYS`: route's pingall loss percentage, k8s's
  connectivity mismatches); an app reporting none gets no ``fix`` reward;
* ``diagnostic`` (default +10) for any other valid step that changed nothing (read-only);
* ``change`` (default 0) for a valid state-changing step that is no fix;
* ``correct_stop`` (default +100) when the agent ends the episode (``{"done": true}`` /
  ``done`` / ``healthy``) and the verdict is correct (a healthy control declared healthy);
* ``unsafe`` (default 0, added on top) when the step broke something that worked
  (``StepResult.safe_step`` is false; MALT: the returned topology is unsafe).

The route defaults are the paper's scheme (§5.1: invalid -100, valid diagnostic +10, correct
fix +100); k8s uses the same numbers and MALT the single-step reading of them.

Episode end: ``terminated`` when the episode reached its end (the failures are repaired, the
agent stopped, MALT's one answer was judged) or when the judge could not handle a reply
(broken beyond repair: the runner scores that ``bad_output``, here the step's reward is
``invalid``); ``truncated`` when the step budget (``max_steps``, default the app's) ran out.
``info["verdict"]`` on the last step carries ``correct``, ``safe``, ``failure``, ``steps``.
``close()`` tears the episode down (route: no interface or namespace of its prefix remains;
k8s: the namespace is deleted).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any, SupportsFloat

import gymnasium as gym
from evaluator.app import App, EmulatorError, Episode
from evaluator.registry import app_ids, get_app
from evaluator.types import JSON, Query, StepResult, Verdict
from gymnasium import spaces

#: Characters of observations and actions: printable ASCII (less vertical tab and form feed)
#: and typographic characters the app prompts use.
CHARSET = "".join(sorted(set(string.printable) - {"\x0b", "\x0c"})) + "—–…→←≤≥§°µ×’‘“”•"
_CHARSET_SET = frozenset(CHARSET)
#: Longest observation in characters (route/k8s outputs are capped at 16 KiB per command).
OBSERVATION_MAX_CHARS = 65_536
#: Longest action in characters (MALT answers are whole Python programs).
ACTION_MAX_CHARS = 32_768
#: Canonical instance names shown in observations, by ``Episode.instance_names()`` key.
CANONICAL_NAMES = {"prefix": "ep_", "namespace": "k8s-ep-env"}
_CUT_NOTE = "\n[observation cut]"
#: Step-info keys passed through from ``StepResult.info`` (deterministic ones, no timings).
_INFO_KEYS = ("step", "error", "stopped", "changed_state", "status", "loss_percent", "mismatches")


@dataclass(frozen=True)
class RewardScheme:
    """Step rewards; see the module docstring for when each applies.

    Defaults: the paper's route scheme (§5.1), invalid -100, diagnostic +10, fix +100.
    """

    invalid: float = -100.0
    diagnostic: float = 10.0
    fix: float = 100.0
    change: float = 0.0
    correct_stop: float = 100.0
    unsafe: float = 0.0


#: The default scheme of every app (route: the paper's; k8s and MALT: the same numbers).
DEFAULT_REWARDS = RewardScheme()


#: Where a step's failing count is read: (step info key, verdict details key used when the
#: step info has none, verdict details key of the count before the first step). The generic
#: keys come first; the others are those the shipped multi-step apps report (route: pingall
#: loss percentage; k8s: connectivity mismatches).
FAILING_KEYS: tuple[tuple[str, str | None, str], ...] = (
    ("failing", None, "initial_failing"),
    ("loss_percent", "final_loss_percent", "initial_loss_percent"),
    ("mismatches", None, "initial_mismatches"),
)


def _failing(info: JSON, verdict: Verdict) -> float | None:
    """The failing count after a step (:data:`FAILING_KEYS`); None when not measured."""
    for step_key, final_key, initial_key in FAILING_KEYS:
        if step_key not in info and initial_key not in verdict.details:
            continue
        value = info.get(step_key)
        if value is None and final_key is not None:
            value = verdict.details.get(final_key)
        return None if value is None else float(value)
    return None


def _initial_failing(verdict: Verdict) -> float | None:
    """The failing count before the first step (:data:`FAILING_KEYS`); None when not measured."""
    for _step_key, _final_key, initial_key in FAILING_KEYS:
        value = verdict.details.get(initial_key)
        if value is not None:
            return float(value)
    return None


def sanitize(text: str, max_chars: int = OBSERVATION_MAX_CHARS) -> str:
    """``text`` inside the observation space: characters outside :data:`CHARSET` become
    ``?`` and text longer than ``max_chars`` is cut with a note."""
    clean = "".join(c if c in _CHARSET_SET else "?" for c in text)
    if len(clean) > max_chars:
        clean = clean[: max_chars - len(_CUT_NOTE)] + _CUT_NOTE
    return clean


class NetArenaEnv(gym.Env[str, str]):
    """One benchmark app as a Gymnasium environment (text in, text out).

    Args:
        app_id: a registered app id (``evaluator.registry.app_ids()``).
        level: generate only this level (default: all levels mixed).
        max_steps: step budget (default: the app's ``max_steps``).
        rewards: the reward scheme (default :data:`DEFAULT_REWARDS`).
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns the last observation).
        app: an app instance to use instead of the registry's (tests, custom apps).
        episode_options: extra keyword options for ``App.episode`` (e.g. route's
            ``probe_timeout_s``).

    ``reset(options={"query": Query})`` runs that query instead of drawing one.

    Raises:
        UnknownAppError: no such app; ValueError: a level the app does not have.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}  # Gymnasium's class attribute

    def __init__(
        self,
        app_id: str,
        *,
        level: int | None = None,
        max_steps: int | None = None,
        rewards: RewardScheme | None = None,
        render_mode: str | None = None,
        app: App | None = None,
        episode_options: JSON | None = None,
    ) -> None:
        self.app = app if app is not None else get_app(app_id)
        if level is not None and level not in self.app.levels:
            raise ValueError(f"{self.app.app_id} has levels {self.app.levels}, not {level}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', not {render_mode!r}")
        self.level = level
        self.max_steps = max_steps if max_steps is not None else self.app.max_steps
        self.rewards = rewards if rewards is not None else DEFAULT_REWARDS
        self.render_mode = render_mode
        self.episode_options = dict(episode_options or {})
        self.observation_space = spaces.Text(max_length=OBSERVATION_MAX_CHARS, charset=CHARSET)
        self.action_space = spaces.Text(max_length=ACTION_MAX_CHARS, charset=CHARSET)
        self.query: Query | None = None
        self._episode: Episode | None = None
        self._renames: list[tuple[str, str]] = []  # (live, canonical)
        self._best: float | None = None
        self._ended = True
        self._steps = 0
        self._last_observation = ""

    # names --------------------------------------------------------------------------------
    def _to_canonical(self, text: str) -> str:
        for live, canonical in self._renames:
            text = text.replace(live, canonical)
        return sanitize(text)

    def _to_live(self, text: str) -> str:
        """Canonical names that start a word (``ep_r0``, not ``keep_out``) become live ones."""
        for live, canonical in self._renames:
            pattern = r"(?<![A-Za-z0-9_.-])" + re.escape(canonical)
            text = re.sub(pattern, live.replace("\\", "\\\\"), text)
        return text

    # Env API ------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Draw a query (or take ``options["query"]``), reset a fresh episode, return its
        first observation and ``info`` (query id, level, labels, live instance names).

        Raises:
            EmulatorError: the emulator could not be set up (infrastructure).
        """
        super().reset(seed=seed)
        self._close_episode()
        query = (options or {}).get("query")
        if query is None:
            query_seed = int(self.np_random.integers(0, 2**62))
            query = self.app.generate(1, query_seed, self.level)[0]
        self.query = query
        episode = self.app.episode(query, max_steps=self.max_steps, **self.episode_options)
        self._episode = episode
        try:
            observation = episode.reset()
            names = episode.instance_names()
            initial = _initial_failing(episode.verdict())
        except BaseException:
            self._close_episode()
            raise
        self._renames = [
            (live, CANONICAL_NAMES[key])
            for key, live in names.items()
            if key in CANONICAL_NAMES and live
        ]
        self._best = initial
        self._steps = 0
        self._ended = False
        self._last_observation = self._to_canonical(observation)
        info = {
            "query_id": query.query_id,
            "level": query.level,
            "labels": list(query.labels),
            "instance_names": names,
        }
        return self._last_observation, info

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        """Pass ``action`` (canonical names rewritten to live ones) to the episode.

        Raises:
            RuntimeError: called before :meth:`reset` or after the episode ended.
            EmulatorError: the emulator failed (infrastructure, never the agent's doing).
        """
        episode = self._episode
        if episode is None or self._ended:
            raise RuntimeError("call reset() before step() (the episode is over or not started)")
        try:
            result = episode.step(self._to_live(str(action)))
        except EmulatorError:
            raise
        except Exception as exc:  # noqa: BLE001 - the judge could not handle the reply
            self._ended = True
            summary = _verdict_summary(None, f"bad_output:{type(exc).__name__}")
            self._last_observation = sanitize(
                f"Your reply could not be handled ({type(exc).__name__}); the episode is over."
            )
            ended: dict[str, Any] = {"reward_kind": "invalid", "verdict": summary}
            return self._last_observation, self.rewards.invalid, True, False, ended
        self._steps += 1
        verdict = episode.verdict()
        reward, kind = self._reward(result, verdict)
        terminated = result.terminated
        # the episodes of the registered apps truncate themselves; enforce the budget anyway
        truncated = result.truncated or (not terminated and self._steps >= self.max_steps)
        self._ended = terminated or truncated
        info: dict[str, Any] = {k: result.info[k] for k in _INFO_KEYS if k in result.info}
        info["reward_kind"] = kind
        info["safe_step"] = result.safe_step
        if self._ended:
            info["verdict"] = _verdict_summary(verdict, verdict.failure)
        self._last_observation = self._to_canonical(result.observation)
        return self._last_observation, reward, terminated, truncated, info

    def _reward(self, result: StepResult, verdict: Verdict) -> tuple[float, str]:
        """(reward, kind) of one step; kind is ``invalid``, ``fix``, ``correct_stop``,
        ``diagnostic``, ``change`` or ``none``."""
        scheme = self.rewards
        info = result.info
        extra = 0.0 if result.safe_step else scheme.unsafe
        if self.app.max_steps == 1:  # single-step apps (MALT): the answer is the whole episode
            failure = verdict.failure or ""
            if verdict.correct and verdict.safe:
                return scheme.fix + extra, "fix"
            if failure.startswith(("no_code", "sandbox:", "bad_output", "no_reply")):
                return scheme.invalid + extra, "invalid"
            return extra, "none"
        if info.get("error") in ("refused", "unparseable"):
            return scheme.invalid + extra, "invalid"
        if info.get("stopped"):
            if verdict.correct:
                return scheme.correct_stop + extra, "correct_stop"
            return extra, "none"
        failing = _failing(info, verdict)
        if failing is not None and self._best is not None and failing < self._best:
            self._best = failing
            return scheme.fix + extra, "fix"
        if info.get("changed_state"):
            return scheme.change + extra, "change"
        return scheme.diagnostic + extra, "diagnostic"

    def render(self) -> str | None:
        """The last observation when ``render_mode == "ansi"``, else ``None``."""
        return self._last_observation if self.render_mode == "ansi" else None

    def _close_episode(self) -> None:
        episode, self._episode = self._episode, None
        self._renames = []
        self._ended = True
        if episode is not None:
            episode.close()

    def close(self) -> None:
        """Tear the current episode down (idempotent)."""
        self._close_episode()
        super().close()


def _verdict_summary(verdict: Verdict | None, failure: str | None) -> JSON:
    if verdict is None:
        return {"correct": False, "safe": False, "failure": failure, "steps": None}
    return {
        "correct": verdict.correct,
        "safe": verdict.safe,
        "failure": failure,
        "steps": verdict.steps,
    }


def env_id(app_id: str) -> str:
    """The Gymnasium id of ``app_id``'s environment: ``netarena/<app_id>-v1``."""
    return f"netarena/{app_id}-v1"


#: Environment ids of the registered apps, by app id (``gymnasium.make(ENV_IDS[app_id])``);
#: kept up to date by :func:`register_envs`.
ENV_IDS: dict[str, str] = {}


def register_envs() -> None:
    """Register an environment for every app of the registry with Gymnasium and record it in
    :data:`ENV_IDS` (idempotent; done on ``import training``; call it again after registering
    an app at run time)."""
    for app_id in app_ids():
        ENV_IDS[app_id] = env_id(app_id)
        if ENV_IDS[app_id] in gym.registry:
            continue
        gym.register(
            id=ENV_IDS[app_id],
            entry_point="training.gym_envs:NetArenaEnv",
            kwargs={"app_id": app_id},
            disable_env_checker=False,
        )
