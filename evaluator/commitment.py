"""Commit-reveal for rounds and the public listing of a batch's queries (issue 13 item 1).

When a round starts, the site publishes :func:`round_commitment` of its seed and the apps'
generator versions; when it closes, it publishes the seed. Anyone can then check the
commitment and regenerate the exact queries with ``python manage.py generate_queries --app A
--seed S --count N`` (:func:`query_listing`), comparing each query's ``fingerprint`` (SHA-256
over prompt and ground truth; it does not depend on the server's query-id key).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from evaluator.app import App
from evaluator.types import JSON

#: Version of the commitment text below; bump if its layout ever changes.
COMMITMENT_FORMAT = 1


def commitment_text(seed: int, versions: Mapping[str, int]) -> str:
    """The committed text: canonical JSON of the format, the seed and the app versions.

    ``versions`` maps app id to generator version (``App.version``); the seed is written as a
    decimal string so that 128-bit seeds survive every JSON reader.
    """
    return json.dumps(
        {
            "format": COMMITMENT_FORMAT,
            "seed": str(int(seed)),
            "versions": {app_id: int(v) for app_id, v in sorted(versions.items())},
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def round_commitment(seed: int, versions: Mapping[str, int]) -> str:
    """SHA-256 hex digest of :func:`commitment_text` (64 characters).

    The seed is 128 random bits (``evaluator.types.new_seed``), so the digest cannot be
    inverted by trying seeds; publishing it before the round fixes the queries without
    revealing them.
    """
    return hashlib.sha256(commitment_text(seed, versions).encode()).hexdigest()


def query_listing(
    app: App, seed: int, count: int, *, level: int | None = None, ground_truth: bool = False
) -> list[JSON]:
    """The batch ``app.generate(count, seed, level)`` as JSON rows, in index order.

    Each row: ``{"app_id", "app_version", "seed", "index", "level", "labels", "fingerprint",
    "prompt"}`` plus ``"ground_truth"`` when asked (only for closed rounds: it is what the
    judge knows). Raises ``ValueError`` for bad counts or levels (from ``generate``).
    """
    rows: list[JSON] = []
    for query in app.generate(count, seed, level=level):
        row: JSON = {
            "app_id": query.app_id,
            "app_version": query.app_version,
            "seed": str(query.seed),
            "index": query.index,
            "level": query.level,
            "labels": list(query.labels),
            "fingerprint": query.fingerprint(),
            "prompt": query.prompt,
        }
        if ground_truth:
            row["ground_truth"] = query.ground_truth
        rows.append(row)
    return rows
