"""The k8s generator's output for fixed seeds is pinned by a digest (no emulator).

Why a pinned digest is honest here: a query is a pure function of (app version, seed, index,
level), and a released version never changes meaning (``Query.app_version``), so rounds can be
regenerated and rejudged from their seed. This test fails on any unintended change of the
generator -- a refactor that reorders draws from the seeded stream, a changed operand rule, a
prompt edit -- which the other generation tests (properties of the output) would let through.
A deliberate change of the generator updates the pinned value in the same commit (and, when it
changes what a released version means, the app's version).
"""

from __future__ import annotations

from apps.k8s.app import K8sApp
from evaluator.testing import batch_sha256

#: :func:`evaluator.testing.batch_sha256` of 30 queries per level of seed 11 (levels mixed, 1,
#: 2, 3).
PINNED_SHA256 = "9b9bf00b59511024dc4d59abb96c519005a815365005a70188bf4be534d89d1a"


def test_seeded_batch_digest_is_pinned() -> None:
    app = K8sApp()
    batches = [app.generate(30, seed=11, level=level) for level in (None, 1, 2, 3)]
    assert batch_sha256(batches) == PINNED_SHA256
