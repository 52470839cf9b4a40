"""Conformance of every registered app to the App contract (the Gymnasium ``check_env`` idea).

Parametrized over ``evaluator.registry.app_ids()``: an app is covered by registering it. The
pure checks (generation, JSON round-trip, prompts, declarations) run everywhere; the episode
checks run the real emulator of the app, so apps with ``needs_root`` need root (and whatever
their emulator needs: a missing tool is reported by the app as ``DependencyMissingError``,
which fails under ``CI=true`` and skips locally, as :func:`tests.conftest.require` does).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, get_args

import pytest

from evaluator.agents.base import AgentClient, AgentReply
from evaluator.app import App, DependencyMissingError, Episode, ReplyFormat
from evaluator.registry import (
    APP_ID_MAX_LENGTH,
    APP_PATHS,
    CONTROL_QUEUE,
    app_ids,
    get_app,
    worker_queues,
)
from evaluator.rejudge import rejudge
from evaluator.runner import run_episode
from evaluator.sampling import HEALTHY_LABEL, HEALTHY_SHARE
from evaluator.types import JSON, Query
from tests.conftest import require, require_root

ROOT = Path(__file__).resolve().parents[1]
SEED = 7
#: An app id: lower-case letters, digits, ``_`` and ``-``, starting with a letter (it is a
#: Celery queue name, a URL query value, a Gymnasium id part and a folder name).
APP_ID_RE = re.compile(r"[a-z][a-z0-9_-]*")
REPLY_FORMATS = get_args(ReplyFormat)


class ReplyClient(AgentClient):
    """In-process agent whose reply is ``reply(messages)`` (the HTTP path is tested elsewhere)."""

    def __init__(self, reply: Callable[[list[JSON]], str]) -> None:
        self.reply = reply

    def complete(self, messages: list[JSON], *, episode_id: str) -> AgentReply:
        return AgentReply(self.reply(messages), 0.0)


def _episode_params() -> list[Any]:
    params = []
    for app_id in app_ids():
        marks = [pytest.mark.root, pytest.mark.slow] if get_app(app_id).needs_root else []
        params.append(pytest.param(app_id, marks=marks, id=app_id))
    return params


def _one_per_level(app: App, seed: int = SEED) -> list[Query]:
    return [app.generate(1, seed=seed, level=level)[0] for level in app.levels]


@pytest.fixture(params=app_ids())
def app(request: pytest.FixtureRequest) -> App:
    return get_app(request.param)


def test_declarations(app: App) -> None:
    assert get_app(app.app_id) is app  # the registry key is the app's own id
    assert app.app_id in worker_queues()
    assert len(app.app_id) <= APP_ID_MAX_LENGTH, "app_id longer than the site's column"
    assert APP_ID_RE.fullmatch(app.app_id) and app.app_id != CONTROL_QUEUE
    assert app.prompt_marker.strip()
    assert app.title.strip() and app.title != app.app_id
    assert app.reply_format in REPLY_FORMATS
    assert app.max_steps >= 1 and app.version >= 1 and app.levels
    assert app.describe()["app_id"] == app.app_id
    for question, answer in app.few_shot_examples():
        assert question.strip() and answer.strip()
    if app.has_heuristic:
        query = app.generate(1, seed=SEED)[0]
        reply = app.heuristic_reply([{"role": "user", "content": query.prompt}])
        assert isinstance(reply, str)
    else:
        assert app.heuristic_reply([]) is None


def test_generation_is_seeded(app: App) -> None:
    first = [q.fingerprint() for q in app.generate(6, seed=SEED)]
    assert first == [q.fingerprint() for q in app.generate(6, seed=SEED)]
    assert first != [q.fingerprint() for q in app.generate(6, seed=SEED + 1)]
    for level in app.levels:
        assert {q.level for q in app.generate(3, seed=SEED, level=level)} == {level}
    with pytest.raises(ValueError):
        app.generate(-1, seed=SEED)
    with pytest.raises(ValueError):
        app.generate(1, seed=SEED, level=max(app.levels) + 1)


def test_queries_round_trip_through_json(app: App) -> None:
    for query in app.generate(6, seed=SEED):
        assert query.app_id == app.app_id and query.app_version == app.version
        again = Query.from_dict(json.loads(json.dumps(query.to_dict())))
        assert again == query and again.fingerprint() == query.fingerprint()


def test_prompts_carry_the_marker_and_no_ground_truth(app: App) -> None:
    for query in app.generate(12, seed=SEED):
        assert app.prompt_marker in query.prompt
        assert json.dumps(query.ground_truth) not in query.prompt
        assert "ground_truth" not in query.prompt
        # no composite part of the ground truth (answer lists, repair scripts) is spelled out
        for key, value in query.ground_truth.items():
            if isinstance(value, dict) or (isinstance(value, list) and len(value) > 1):
                assert json.dumps(value) not in query.prompt, key
                assert repr(value) not in query.prompt, key


def test_prompt_markers_are_unique_across_registered_apps() -> None:
    """A reference server answering several apps routes a task to the first app whose
    ``prompt_marker`` it contains: no app's marker may occur in another app's prompts."""
    apps = [get_app(app_id) for app_id in app_ids()]
    prompts = {app.app_id: [q.prompt for q in app.generate(12, seed=SEED)] for app in apps}
    for app in apps:
        for other in apps:
            if other is app:
                continue
            assert app.prompt_marker not in other.prompt_marker, (app.app_id, other.app_id)
            for prompt in prompts[other.app_id]:
                assert app.prompt_marker not in prompt, (app.app_id, other.app_id)


def test_healthy_controls_follow_the_shared_sampling(app: App) -> None:
    """Apps with healthy controls place them with :mod:`evaluator.sampling`: label
    ``HEALTHY`` alone, ``HEALTHY_SHARE`` of a batch to within one (docs/writing-an-app.md)."""
    queries = app.generate(40, seed=SEED)
    controls = [q for q in queries if HEALTHY_LABEL in q.labels]
    if not controls:
        return  # an app without healthy controls (single-step question answering)
    assert all(q.labels == (HEALTHY_LABEL,) for q in controls)
    share = getattr(app, "healthy_share", HEALTHY_SHARE)
    assert abs(len(controls) - 40 * share) <= 1


def test_the_green_agent_takes_its_config(app: App) -> None:
    """The AgentBeats green agent's keys of the app (``App.green_config_keys``) hold those it
    reads, its defaults parse, and a NetArena profile (``App.netarena_profile``) only names
    the app's levels (docs/writing-an-app.md)."""
    from evaluator.green.request import config_keys, parse_config

    names = {key.name for key in config_keys(app.app_id)}
    assert {"num_queries", "complexity_level", "prompt_type", "seed", "trials"} <= names
    config = parse_config(app.app_id, {})
    assert config.levels and set(config.levels) <= set(app.levels)
    profile = app.netarena_profile()
    if profile is not None:
        assert set(profile.types) <= set(app.levels)
        assert set(profile.labels_per_level) >= set(profile.types)


def test_shipped_apps_pin_their_query_digest(app: App) -> None:
    """An app shipped under ``apps/`` has ``tests/apps/<app_id>/test_query_digest.py``, which
    pins its generator's output (:func:`evaluator.testing.batch_sha256`)."""
    if not APP_PATHS[app.app_id].startswith("apps."):
        return  # a test-only app (evaluator.testing)
    digest_test = ROOT / "tests" / "apps" / app.app_id / "test_query_digest.py"
    assert digest_test.is_file(), f"missing {digest_test.relative_to(ROOT)}"
    assert "batch_sha256" in digest_test.read_text()


def test_oracle_and_null_replies_are_text(app: App) -> None:
    for query in _one_per_level(app):
        history: list[JSON] = [{"role": "user", "content": query.prompt}]
        assert isinstance(app.oracle_reply(query.ground_truth, history), str)
        assert isinstance(app.null_reply(history), str)


def _run_or_require(app: App, query: Query, client: AgentClient) -> Any:
    try:
        return run_episode(app, query, client)
    except DependencyMissingError as exc:  # the app's emulator is not installed here
        require(False, str(exc))


@pytest.mark.parametrize("app_id", _episode_params())
def test_oracle_correct_and_safe_null_incorrect(app_id: str) -> None:
    app = get_app(app_id)
    if app.needs_root:
        require_root()
    for query in _one_per_level(app):
        oracle_client = ReplyClient(partial(app.oracle_reply, query.ground_truth))
        oracle = _run_or_require(app, query, oracle_client)
        assert oracle.correct and oracle.safe, (query.label, oracle.failure)
        # every query of every registered app needs a change (an answer or a repair)
        null = _run_or_require(app, query, ReplyClient(app.null_reply))
        assert not null.correct, query.label
        # the action rate is defined for every app: the null agent never changes the state
        assert null.changed_state is False, (query.label, null.changed_state)
        assert isinstance(oracle.changed_state, bool), (query.label, oracle.changed_state)


@pytest.mark.parametrize("app_id", _episode_params())
def test_stored_episodes_are_rejudged_to_the_same_verdict(app_id: str) -> None:
    """Replaying stored replies in a fresh emulator reproduces the verdict
    (oracle, null and, where the app has one, the heuristic: correct, incorrect, unsafe mixes)."""
    app = get_app(app_id)
    if app.needs_root:
        require_root()
    query = app.generate(1, seed=SEED + 1, level=max(app.levels))[0]
    clients = [
        ReplyClient(partial(app.oracle_reply, query.ground_truth)),
        ReplyClient(app.null_reply),
    ]
    if app.has_heuristic:
        clients.append(ReplyClient(lambda messages: app.heuristic_reply(messages) or ""))
    for client in clients:
        stored = _run_or_require(app, query, client)
        outcome = rejudge(app, Query.from_dict(query.to_dict()), stored.to_dict())
        assert outcome.reproduced, (query.label, outcome.differences)


@pytest.mark.parametrize("app_id", _episode_params())
def test_host_check_passes_where_the_episodes_run(app_id: str) -> None:
    """A worker runs ``host_check()`` at start: on a host that runs the episodes it passes."""
    app = get_app(app_id)
    if app.needs_root:
        require_root()
    try:
        app.host_check()
    except DependencyMissingError as exc:
        require(False, str(exc))


@pytest.mark.parametrize("app_id", _episode_params())
def test_close_is_idempotent(app_id: str) -> None:
    app = get_app(app_id)
    if app.needs_root:
        require_root()
    query = app.generate(1, seed=SEED)[0]
    episode: Episode = app.episode(query)
    episode.close()  # before reset
    episode = app.episode(query)
    try:
        episode.reset()
    except DependencyMissingError as exc:
        episode.close()
        require(False, str(exc))
    episode.close()
    episode.close()
