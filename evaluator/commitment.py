"""Commit-reveal for rounds and the public listing of a batch's queries.

When a round starts, the site publishes :func:`round_commitment` of its seed, the apps'
generator versions and a random salt; when it closes, it publishes the seed and the salt.
Anyone can then check the commitment and regenerate the exact queries with ``python manage.py
generate_queries --app A --seed S --count N --salt SALT`` (:func:`query_listing`), comparing
each query's ``fingerprint`` (SHA-256 over prompt and ground truth; it does not depend on the
server's query-id key).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping

from evaluator.app import App
from evaluator.types import JSON

#: Version of the commitment text below; bump if its layout ever changes.
COMMITMENT_FORMAT = 1
#: Random bytes of a commitment salt (shown as hex).
SALT_BYTES = 16


def new_salt() -> str:
    """A fresh random salt: :data:`SALT_BYTES` bytes as hex (``secrets``)."""
    return secrets.token_hex(SALT_BYTES)


def commitment_text(seed: int, versions: Mapping[str, int], salt: str) -> str:
    """The committed text: canonical JSON of the format, the salt, the seed and the versions.

    ``versions`` maps app id to generator version (``App.version``); the seed is written as a
    decimal string so that 128-bit seeds survive every JSON reader.
    """
    return json.dumps(
        {
            "format": COMMITMENT_FORMAT,
            "salt": salt,
            "seed": str(int(seed)),
            "versions": {app_id: int(v) for app_id, v in sorted(versions.items())},
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def round_commitment(seed: int, versions: Mapping[str, int], salt: str) -> str:
    """SHA-256 hex digest of :func:`commitment_text` (64 characters).

    A salted hash: with a 128-bit seed (``evaluator.types.new_seed``) and a
    128-bit salt, the digest can be neither inverted nor matched against precomputed seeds;
    publishing it before the round fixes the queries without revealing them.
    """
    return hashlib.sha256(commitment_text(seed, versions, salt).encode()).hexdigest()


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
