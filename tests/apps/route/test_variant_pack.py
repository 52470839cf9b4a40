"""The route test pack (tests/variant_packs/route/heldout-faults): fault kinds outside the
public catalogue on public topologies. The oracle repairs every pack query on real Mininet, the
null agent none, and the scripted agent, written against the public catalogue, at most a fifth
of levels 2 and 3 -- the gap the board measures."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.route.allowlist import check_command
from apps.route.app import RouteApp
from apps.route.faults import with_prefix
from evaluator.testing import play_reference
from evaluator.variants import load_pack
from tests.apps.route.helpers import require_emulator

APP = RouteApp()
PACK_DIR = Path(__file__).resolve().parents[2] / "variant_packs" / "route" / "heldout-faults"
SEED = 2026
#: Scripted agent's ceiling on the pack's levels 2 and 3.
HELD_OUT_CEILING = 0.20


@pytest.fixture(scope="module")
def pack():
    return load_pack(PACK_DIR)


def test_pack_queries_are_deterministic_and_carry_held_out_faults(pack) -> None:
    queries = pack.generate(APP, SEED, list(range(12)), None)
    again = load_pack(PACK_DIR).generate(APP, SEED, list(range(12)), None)
    assert [q.fingerprint() for q in again] == [q.fingerprint() for q in queries]
    assert {q.pack for q in queries} == {"heldout-faults"}
    assert {q.level for q in queries} == {1, 2, 3}
    for query in queries:
        kinds = {f["label"] for f in query.ground_truth["faults"]}
        assert kinds & {"NB", "BR", "LT"}, query.labels
        machines = [f["machine"] for f in query.ground_truth["faults"]]
        assert len(machines) == len(set(machines))  # one fault per machine
        for step in query.ground_truth["repair"]:
            # the oracle's repair is something an agent is allowed to type
            argv, refusal = check_command(with_prefix(step["command"], "nab1_"))
            assert argv is not None, (step, refusal)


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_oracle_repairs_the_pack_and_the_null_agent_does_not(pack) -> None:
    require_emulator()
    for query in pack.generate(APP, SEED, list(range(6)), None):
        oracle = play_reference(APP, query, "oracle")
        assert oracle.correct and oracle.safe, (query.labels, oracle.failure)
        assert not play_reference(APP, query, "null").correct, query.labels


@pytest.mark.root
@pytest.mark.netns
@pytest.mark.slow
def test_the_scripted_agent_does_not_carry_over_to_held_out_faults(pack) -> None:
    require_emulator()
    hard = pack.generate(APP, SEED, [0, 1, 2], 2) + pack.generate(APP, SEED, [3, 4, 5], 3)
    solved = sum(bool(v.correct and v.safe)
                 for v in (play_reference(APP, q, "scripted") for q in hard))
    assert solved / len(hard) <= HELD_OUT_CEILING
