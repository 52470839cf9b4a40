"""Round commitments bind the seed and generator versions; listings regenerate batches."""

from __future__ import annotations

import hashlib

import pytest

from evaluator.commitment import commitment_text, query_listing, round_commitment
from evaluator.registry import get_app


def test_the_commitment_is_the_sha256_of_a_canonical_text_and_binds_everything() -> None:
    seed = 2**127 + 12345  # a 128-bit seed survives as a decimal string
    text = commitment_text(seed, {"route": 2, "malt": 1})
    assert str(seed) in text and text.index('"malt"') < text.index('"route"')
    digest = round_commitment(seed, {"route": 2, "malt": 1})
    assert digest == hashlib.sha256(text.encode()).hexdigest()
    assert digest == round_commitment(seed, {"malt": 1, "route": 2})  # order-free
    assert digest != round_commitment(seed + 1, {"malt": 1, "route": 2})
    assert digest != round_commitment(seed, {"malt": 2, "route": 2})
    assert digest != round_commitment(seed, {"malt": 1})


def test_a_listing_is_the_generated_batch_and_hides_ground_truth_unless_asked() -> None:
    app = get_app("malt")
    rows = query_listing(app, 99, 5)
    queries = app.generate(5, 99)
    assert [r["fingerprint"] for r in rows] == [q.fingerprint() for q in queries]
    assert [r["index"] for r in rows] == list(range(5))
    assert all("ground_truth" not in r for r in rows)
    full = query_listing(app, 99, 5, ground_truth=True)
    assert [r["ground_truth"] for r in full] == [q.ground_truth for q in queries]
    with pytest.raises(ValueError):
        query_listing(app, 99, -1)
