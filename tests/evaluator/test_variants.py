"""Variant packs: loading, hashing, per-index mixing and the errors of malformed packs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from evaluator.registry import get_app
from evaluator.variants import (
    PUBLIC_PACK,
    VariantPackError,
    discover_packs,
    generate_batch,
    load_pack,
    pack_digest,
    pack_for_index,
    packs_commitment,
    public_pack,
)

# A pack that re-phrases the public MALT query of the same index: enough to exercise the
# mixing machinery without depending on any real pack's content.
RELABEL_PACK = '''
from dataclasses import replace
from evaluator.variants import with_pack

def generate(app, pack, seed, indices, level):
    public = app.generate(max(indices) + 1, seed, level=level)
    return [
        with_pack(replace(public[i], prompt="[held out] " + public[i].prompt), pack)
        for i in indices
    ]
'''


def make_pack(root: Path, name: str, body: str = RELABEL_PACK, app: str = "malt") -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "pack.toml").write_text(f'name = "{name}"\napp = "{app}"\nlevels = [1, 2, 3]\n')
    (directory / "pack.py").write_text(textwrap.dedent(body))
    return directory


def test_digest_changes_with_any_file_and_ignores_caches(tmp_path: Path) -> None:
    directory = make_pack(tmp_path, "alpha")
    before = pack_digest(directory)
    (directory / "__pycache__").mkdir()
    (directory / "__pycache__" / "pack.cpython-311.pyc").write_bytes(b"\x00")
    assert pack_digest(directory) == before
    (directory / "data.json").write_text("{}")
    assert pack_digest(directory) != before


def test_mixed_batch_is_deterministic_and_keeps_public_queries(tmp_path: Path) -> None:
    app = get_app("malt")
    pack = load_pack(make_pack(tmp_path, "alpha"))
    batch = generate_batch(app, 12, seed=5, packs=[pack], share=0.5)
    again = generate_batch(app, 12, seed=5, packs=[pack], share=0.5)
    public = app.generate(12, seed=5)
    assert [q.fingerprint() for q in batch] == [q.fingerprint() for q in again]
    held = [q for q in batch if q.pack == "alpha"]
    assert 0 < len(held) < 12
    for query in batch:
        expected = pack_for_index(app, 5, query.index, [pack], 0.5)
        assert query.pack == (PUBLIC_PACK if expected is None else "alpha")
        if query.pack == PUBLIC_PACK:
            assert query.fingerprint() == public[query.index].fingerprint()
        else:
            assert query.prompt.startswith("[held out] ")
            assert query.ground_truth["variant_pack"] == pack.identity()
    # the draw for an index never depends on the batch size
    assert [q.pack for q in generate_batch(app, 5, seed=5, packs=[pack], share=0.5)] == [
        q.pack for q in batch[:5]
    ]


def test_share_bounds_and_no_packs_equal_public(tmp_path: Path) -> None:
    app = get_app("malt")
    pack = load_pack(make_pack(tmp_path, "alpha"))
    assert all(q.pack == "alpha" for q in generate_batch(app, 6, 3, packs=[pack], share=1.0))
    public = [q.fingerprint() for q in app.generate(6, 3)]
    assert [q.fingerprint() for q in generate_batch(app, 6, 3, packs=[pack], share=0.0)] == public
    assert [q.fingerprint() for q in generate_batch(app, 6, 3, packs=[], share=1.0)] == public


def test_malformed_packs_are_refused_with_the_reason(tmp_path: Path) -> None:
    no_manifest = tmp_path / "empty"
    no_manifest.mkdir()
    with pytest.raises(VariantPackError, match="pack.toml"):
        load_pack(no_manifest)
    bad_name = make_pack(tmp_path, "beta")
    (bad_name / "pack.toml").write_text('name = "public"\napp = "malt"\n')
    with pytest.raises(VariantPackError, match="name"):
        load_pack(bad_name)
    broken = make_pack(tmp_path, "gamma", body="raise RuntimeError('boom')\n")
    with pytest.raises(VariantPackError, match="boom"):
        load_pack(broken)
    lying = make_pack(
        tmp_path,
        "delta",
        body="def generate(app, pack, seed, indices, level):\n"
        "    return app.generate(len(indices), seed, level=level)\n",
    )
    with pytest.raises(VariantPackError, match="pack"):
        generate_batch(get_app("malt"), 4, 1, packs=[load_pack(lying)], share=1.0)


def test_discovery_and_commitment(tmp_path: Path) -> None:
    make_pack(tmp_path / "packs", "alpha")
    make_pack(tmp_path / "packs", "beta")
    packs = discover_packs([tmp_path / "packs"])
    assert [p.name for p in packs] == ["alpha", "beta"]
    commitment = packs_commitment([public_pack(get_app("malt")), *packs])
    assert sorted(commitment["malt"]) == ["alpha", "beta", "public"]
    assert all(len(h) == 64 for h in commitment["malt"].values())
    with pytest.raises(VariantPackError, match="does not exist"):
        discover_packs([tmp_path / "missing"])
    make_pack(tmp_path / "dupe", "alpha")
    with pytest.raises(VariantPackError, match="two variant packs"):
        discover_packs([tmp_path / "packs", tmp_path / "dupe" / "alpha"])
