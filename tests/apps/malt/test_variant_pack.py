"""The MALT test pack (tests/variant_packs/malt/heldout-wording): public query families asked in
held-out wording. The oracle solves every pack query (ground truth by execution), the null agent
none, and the scripted agent, written against the public generator, at most a fifth of
levels 2 and 3 -- the gap the board measures."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.malt.app import MaltApp
from evaluator.testing import play_reference
from evaluator.variants import load_pack

APP = MaltApp()
PACK_DIR = Path(__file__).resolve().parents[2] / "variant_packs" / "malt" / "heldout-wording"
SEED, COUNT = 2026, 30
#: Scripted agent's ceiling on the pack's levels 2 and 3.
HELD_OUT_CEILING = 0.20


@pytest.fixture(scope="module")
def pack_queries():
    pack = load_pack(PACK_DIR)
    return pack, pack.generate(APP, SEED, list(range(COUNT)), None)


def test_pack_queries_name_their_pack_and_are_deterministic(pack_queries) -> None:
    pack, queries = pack_queries
    assert {q.pack for q in queries} == {"heldout-wording"}
    assert all(q.ground_truth["variant_pack"] == pack.reference() for q in queries)
    again = load_pack(PACK_DIR).generate(APP, SEED, list(range(COUNT)), None)
    assert [q.fingerprint() for q in again] == [q.fingerprint() for q in queries]
    assert {q.level for q in queries} == {1, 2, 3}
    level_two = load_pack(PACK_DIR).generate(APP, SEED, [0, 1, 2], 2)
    assert [q.level for q in level_two] == [2, 2, 2] and [q.index for q in level_two] == [0, 1, 2]


@pytest.mark.slow
def test_oracle_solves_the_pack_and_the_null_agent_does_not(pack_queries) -> None:
    _, queries = pack_queries
    for query in queries:
        oracle = play_reference(APP, query, "oracle")
        assert oracle.correct and oracle.safe, (query.ground_truth["question"], oracle.failure)
        null = play_reference(APP, query, "null")
        assert not null.correct, query.ground_truth["question"]


@pytest.mark.slow
def test_the_scripted_agent_does_not_carry_over_to_held_out_wording(pack_queries) -> None:
    _, queries = pack_queries
    hard = [q for q in queries if q.level in (2, 3)]
    assert len(hard) >= 10
    solved = sum(bool(v.correct and v.safe)
                 for v in (play_reference(APP, q, "scripted") for q in hard))
    assert solved / len(hard) <= HELD_OUT_CEILING
