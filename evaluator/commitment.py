"""Commit-reveal for rounds and the public listing of a batch's queries.

When a round starts, the site publishes :func:`round_commitment` of its seed, the apps'
generator versions, the held-out variant packs it draws from (name and content digest per
app, :func:`evaluator.variants.packs_commitment`) with the share of queries drawn from them,
and a random salt; when it closes, it publishes the seed, the salt and the packs. Anyone can
then check the commitment and regenerate the exact queries with ``python manage.py
generate_queries --app A --seed S --count N --salt SALT [--variant-pack DIR]``
(:func:`query_listing`), comparing each query's ``fingerprint`` (SHA-256 over prompt and ground
truth; it does not depend on the server's query-id key).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping, Sequence

from evaluator.app import App
from evaluator.types import JSON
from evaluator.variants import VariantPack, generate_batch

#: Version of the commitment text below; bump if its layout ever changes.
COMMITMENT_FORMAT = 1
#: Random bytes of a commitment salt (shown as hex).
SALT_BYTES = 16


def new_salt() -> str:
    """A fresh random salt: :data:`SALT_BYTES` bytes as hex (``secrets``)."""
    return secrets.token_hex(SALT_BYTES)


def commitment_text(
    seed: int,
    versions: Mapping[str, int],
    salt: str,
    packs: Mapping[str, Mapping[str, str]] | None = None,
    held_out_share: float | None = None,
) -> str:
    """The committed text: canonical JSON of the format, the salt, the seed and the versions,
    and -- when the round draws from held-out packs -- the packs and their share.

    ``versions`` maps app id to generator version (``App.version``); ``packs`` maps app id to
    ``{pack name: sha256}``; the seed is written as a decimal string so that 128-bit seeds
    survive every JSON reader. Without packs the text is the one of rounds before packs existed.
    """
    body: JSON = {
        "format": COMMITMENT_FORMAT,
        "salt": salt,
        "seed": str(int(seed)),
        "versions": {app_id: int(v) for app_id, v in sorted(versions.items())},
    }
    if packs:
        body["packs"] = {app_id: dict(sorted(p.items())) for app_id, p in sorted(packs.items())}
        body["held_out_share"] = repr(float(held_out_share if held_out_share is not None else 0))
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def round_commitment(
    seed: int,
    versions: Mapping[str, int],
    salt: str,
    packs: Mapping[str, Mapping[str, str]] | None = None,
    held_out_share: float | None = None,
) -> str:
    """SHA-256 hex digest of :func:`commitment_text` (64 characters).

    A salted hash: with a 128-bit seed (``evaluator.types.new_seed``) and a
    128-bit salt, the digest can be neither inverted nor matched against precomputed seeds;
    publishing it before the round fixes the queries without revealing them.
    """
    text = commitment_text(seed, versions, salt, packs, held_out_share)
    return hashlib.sha256(text.encode()).hexdigest()


def query_listing(
    app: App,
    seed: int,
    count: int,
    *,
    level: int | None = None,
    ground_truth: bool = False,
    packs: Sequence[VariantPack] = (),
    held_out_share: float = 0.0,
) -> list[JSON]:
    """The batch of ``count`` queries of ``seed`` as JSON rows, in index order: the public
    generator's, or -- with ``packs`` -- the mix :func:`evaluator.variants.generate_batch` draws.

    Each row: ``{"app_id", "app_version", "seed", "index", "level", "labels", "pack",
    "fingerprint", "prompt"}`` plus ``"ground_truth"`` when asked (only for closed rounds: it
    is what the judge knows). Raises ``ValueError`` for bad counts or levels (from
    ``generate``).
    """
    rows: list[JSON] = []
    batch = generate_batch(app, count, seed, level, packs=list(packs), share=held_out_share)
    for query in batch:
        row: JSON = {
            "app_id": query.app_id,
            "app_version": query.app_version,
            "seed": str(query.seed),
            "index": query.index,
            "level": query.level,
            "labels": list(query.labels),
            "pack": query.pack,
            "fingerprint": query.fingerprint(),
            "prompt": query.prompt,
        }
        if ground_truth:
            row["ground_truth"] = query.ground_truth
        rows.append(row)
    return rows
