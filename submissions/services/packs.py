"""The held-out variant packs a submission or a round records (docs/writing-a-variant-pack.md).

A submission fixes the names and digests of the packs its queries are drawn from when it is
created (a round's submissions: the round's), so that the queries cannot change between
creation and preparation.
"""

from __future__ import annotations

from collections.abc import Sequence

from evaluator.variants import (
    VariantPack,
    find_pack,
    held_out_packs,
    held_out_share,
    packs_commitment,
)
from submissions.models import Submission


def held_out_packs_now(apps: Sequence[str]) -> tuple[dict[str, dict[str, str]], float]:
    """The configured held-out packs of ``apps`` (``{app: {name: sha256}}``) and the share of
    held-out queries (``NETARENA_HELD_OUT_SHARE``; 0.0 without packs).

    Raises:
        VariantPackError: ``NETARENA_VARIANT_DIRS`` names a missing or malformed pack.
    """
    packs = packs_commitment([p for app_id in apps for p in held_out_packs(app_id)])
    return packs, (held_out_share() if packs else 0.0)


def submission_packs(submission: Submission, app_id: str) -> list[VariantPack]:
    """The loaded packs the submission recorded for ``app_id`` (exact name and digest).

    Raises:
        VariantPackError: one of them is not loaded in this process (or changed since).
    """
    recorded = submission.packs.get(app_id) or {}
    return [find_pack(app_id, {"name": n, "sha256": d}) for n, d in sorted(recorded.items())]
