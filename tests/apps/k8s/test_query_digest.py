"""The k8s generator's output for fixed seeds is pinned by a digest (no emulator).

Why a pinned digest is honest here: a query is a pure function of (app version, seed, index,
level), and a released version never changes meaning (``Query.app_version``), so rounds can be
regenerated and re-judged from their seed. This test fails on any unintended change of the
generator -- a refactor that reorders draws from the seeded stream, a changed operand rule, a
prompt edit -- which the other generation tests (properties of the output) would let through.
A deliberate change of the generator updates the pinned value in the same commit (and, when it
changes what a released version means, the app's version).

``query_id`` is left out: it is keyed by a per-deployment secret
(:func:`evaluator.types.query_id_key`), not by the generator.
"""

from __future__ import annotations

import hashlib
import json

from apps.k8s.app import K8sApp

#: SHA-256 of :func:`_canonical_batch` (30 queries per level of seed 11: levels mixed, 1, 2, 3).
PINNED_SHA256 = "9b9bf00b59511024dc4d59abb96c519005a815365005a70188bf4be534d89d1a"


def _canonical_batch() -> bytes:
    """The batch's queries, ground truth included, as canonical JSON (sorted keys, no spaces)."""
    app = K8sApp()
    batch = []
    for level in (None, 1, 2, 3):
        for query in app.generate(30, seed=11, level=level):
            data = query.to_dict()
            del data["query_id"]
            batch.append(data)
    return json.dumps(batch, sort_keys=True, separators=(",", ":")).encode()


def test_seeded_batch_digest_is_pinned() -> None:
    assert hashlib.sha256(_canonical_batch()).hexdigest() == PINNED_SHA256
