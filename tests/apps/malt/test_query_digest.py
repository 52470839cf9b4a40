"""Public MALT queries are pinned byte for byte: the canonical JSON of the first 50 queries of
seeds 1 to 5 (every field but the per-installation ``query_id``), recorded before the query
generator was split into fabric, phrasing and queries modules and fabric variants were added.
A change of any prompt, label or ground truth of a public query fails here; a deliberate one
bumps ``MaltApp.version`` and re-records these digests."""

from __future__ import annotations

import pytest

from apps.malt.app import MaltApp
from evaluator.testing import batch_sha256

APP = MaltApp()
#: seed -> :func:`evaluator.testing.batch_sha256` of ``APP.generate(50, seed)``.
DIGESTS = {
    1: "83fe7740f202fe3f92fa44924bf246705723c4dd4222486d7bc3c4a687d84fb2",
    2: "b3e7a865477050340b518e74ce74525e8b40a7c46d2c6bd269e644c31f558772",
    3: "ee7c3c7a9a8bf4914d63fff44ee3169c046906b8b791a3fc76138e27669ffd27",
    4: "1f6bdc72ad037f40efc9c27257e09d2b9a1dc577dd6cfa5e5cab05099544fb04",
    5: "2a26fd9008f0ef75630babb1480c6fda4f5561701b45eb6a498751282e174e6d",
}


@pytest.mark.parametrize("seed", sorted(DIGESTS))
def test_public_queries_are_byte_identical_to_the_recorded_ones(seed: int) -> None:
    queries = APP.generate(50, seed)
    assert all("fabric" not in q.ground_truth for q in queries)  # public: the shipped fabric
    assert batch_sha256([queries]) == DIGESTS[seed]
