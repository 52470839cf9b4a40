"""The route queries rank agents, not scripts (issue 11 items 4-6), on real Mininet.

On a seeded sample per level: the oracle fixes every query (correct and safe); the scripted
heuristic floor agent, which keeps all of its diagnostics, stays at or under the targets
(<= 50% correct at level 1, <= 20% at levels 2 and 3); null fixes nothing. Every query starts
broken (reset raises otherwise).
"""

from __future__ import annotations

import pytest

from apps.route.app import RouteApp
from evaluator.types import JSON, Query
from tests.apps.route.helpers import require_emulator

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.slow]

APP = RouteApp()
#: level -> (sample size, highest share of correct heuristic episodes) -- issue 11 item 6
TARGETS = {1: (16, 0.5), 2: (10, 0.2), 3: (10, 0.2)}
SEED = 20261123


@pytest.fixture(autouse=True)
def _emulator() -> None:
    require_emulator()


def _play(query: Query, agent: str) -> tuple[bool, bool]:
    with APP.episode(query) as episode:
        history: list[JSON] = [{"role": "user", "content": episode.reset()}]
        for _ in range(APP.max_steps):
            if agent == "oracle":
                reply = APP.oracle_reply(query.ground_truth, history)
            elif agent == "heuristic":
                reply = APP.heuristic_reply(history)
            else:
                reply = APP.null_reply(history)
            result = episode.step(reply)
            history += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": result.observation},
            ]
            if result.terminated or result.truncated:
                break
        verdict = episode.verdict()
    return verdict.correct, verdict.safe


@pytest.mark.parametrize("level", [1, 2, 3])
def test_oracle_solves_all_heuristic_stays_under_the_target_null_solves_none(level: int) -> None:
    size, ceiling = TARGETS[level]
    queries = APP.generate(size, SEED, level=level)
    oracle = [_play(q, "oracle") for q in queries]
    assert all(correct and safe for correct, safe in oracle), oracle
    heuristic = sum(_play(q, "heuristic")[0] for q in queries)
    assert heuristic <= ceiling * size, f"heuristic {heuristic}/{size} at level {level}"
    assert not any(_play(q, "null")[0] for q in queries[:4])
