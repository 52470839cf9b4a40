"""Variant packs: the sources an app's generator draws queries from.

A benchmark whose generator is public can be scripted against: any finite public grammar or
fault catalogue can be matched by a program written for it. What separates an agent that
understands networks from one written for the benchmark is how it does on tasks it has never
seen, so every app draws its queries from *packs* (docs/writing-a-variant-pack.md):

* the **public pack** (:data:`PUBLIC_PACK`): the app's own generator in this repository, with
  its phrasings, query families, topologies and fault catalogue;
* **held-out packs**: directories an operator keeps outside the repository and lists in
  :data:`VARIANT_DIRS_ENV`. Each holds a manifest (:data:`PACK_MANIFEST`, TOML) and generator
  code (:data:`PACK_MODULE`) that adds phrasings, query families, topology variants or fault
  kinds the public pack does not have.

A batch mixes them per query: :func:`pack_for_index` draws, from ``(app, version, seed,
index)``, whether query ``index`` comes from a held-out pack (with probability
``held_out_share``) and from which. A round's commitment covers the content hash
(:func:`pack_digest`) of every pack it draws from, so once the packs are published with the
seed anyone can regenerate and rejudge the round.

Pack module contract (``pack.py``)::

    def generate(app: App, pack: VariantPack, seed: int, indices: list[int],
                 level: int | None) -> list[Query]

returns one query per index, in order, each with ``query.index == index``, ``query.level`` in
``app.levels`` (equal to ``level`` when given), ``query.pack == pack.name`` and
``ground_truth["variant_pack"] == pack.identity()``. The app's episode finds the pack again
with :func:`find_pack` when the query's execution needs pack code (a fault kind, a topology
variant). Optional module attributes are documented per app (docs/writing-a-variant-pack.md).

No Django here.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import os
import random
import sys
import tarfile
import threading
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from evaluator.types import JSON, Query

if TYPE_CHECKING:
    from evaluator.app import App

#: Name of the public pack: the app's own generator in the repository.
PUBLIC_PACK = "public"
#: Environment variable listing held-out pack directories (``os.pathsep``-separated). Each
#: entry is a pack directory (it holds :data:`PACK_MANIFEST`) or a directory of pack directories.
VARIANT_DIRS_ENV = "NETARENA_VARIANT_DIRS"
#: Environment variable of the share of each batch drawn from held-out packs (0..1).
HELD_OUT_SHARE_ENV = "NETARENA_HELD_OUT_SHARE"
#: Default share of a batch drawn from held-out packs when any are loaded: half.
DEFAULT_HELD_OUT_SHARE = 0.5
#: The manifest of a pack directory.
PACK_MANIFEST = "pack.toml"
#: The generator module of a pack directory.
PACK_MODULE = "pack.py"
#: Version of the content digest below; bump if its layout ever changes.
DIGEST_FORMAT = 1

_IGNORED_DIRS = frozenset({"__pycache__", ".git", ".mypy_cache", ".ruff_cache", ".pytest_cache"})


class VariantPackError(Exception):
    """A pack directory is malformed, cannot be imported, or a named pack is not loaded.

    An episode whose query names a pack this process has not loaded cannot be run: the
    worker's configuration is at fault (infrastructure), not the agent.
    """


@dataclass(frozen=True)
class VariantPack:
    """One loaded pack.

    Attributes:
        name: pack name from the manifest, unique per app (``[a-z0-9_-]``, not ``public``).
        app_id: the app the pack generates queries for.
        sha256: :func:`pack_digest` of the directory (64 hex digits), or of the app's source
            for the public pack.
        held_out: True for packs kept outside the repository (every pack but the public one).
        directory: where the pack was loaded from (``None`` for the public pack).
        description: one line from the manifest.
        levels: the levels the pack can generate (a subset of the app's).
        module: the imported ``pack.py`` (``None`` for the public pack).
        manifest: the whole manifest as parsed (pack-specific settings live here).
    """

    name: str
    app_id: str
    sha256: str
    held_out: bool = True
    directory: Path | None = None
    description: str = ""
    levels: tuple[int, ...] = (1, 2, 3)
    module: ModuleType | None = field(default=None, compare=False, repr=False)
    manifest: JSON = field(default_factory=dict, compare=False, repr=False)

    def identity(self) -> JSON:
        """``{"name", "sha256"}``: how a query's ground truth names its pack."""
        return {"name": self.name, "sha256": self.sha256}

    def generate(
        self, app: App, seed: int, indices: Sequence[int], level: int | None
    ) -> list[Query]:
        """Queries ``indices`` of the batch of ``seed`` drawn from this pack.

        Raises:
            VariantPackError: the public pack (use ``app.generate``), or the pack's module
                returned a malformed batch (wrong count, index, level, pack name).
            ValueError: ``level`` is not one of the pack's levels.
        """
        if self.module is None:
            raise VariantPackError("the public pack is generated by App.generate")
        if level is not None and level not in self.levels:
            raise ValueError(f"pack {self.name!r} has no level {level} (levels {self.levels})")
        queries = list(self.module.generate(app, self, seed, list(indices), level))
        if len(queries) != len(indices):
            raise VariantPackError(
                f"pack {self.name!r} returned {len(queries)} queries for {len(indices)} indices"
            )
        for query, index in zip(queries, indices, strict=True):
            problems = []
            if query.index != index:
                problems.append(f"index {query.index} != {index}")
            if query.app_id != app.app_id or query.app_version != app.version:
                problems.append(f"app {query.app_id} v{query.app_version}")
            if query.level not in app.levels or (level is not None and query.level != level):
                problems.append(f"level {query.level}")
            if query.pack != self.name:
                problems.append(f"pack {query.pack!r}")
            if query.ground_truth.get("variant_pack") != self.identity():
                problems.append("ground_truth['variant_pack'] does not name the pack")
            if problems:
                raise VariantPackError(f"pack {self.name!r} query {index}: {'; '.join(problems)}")
        return queries


def pack_digest(directory: Path) -> str:
    """SHA-256 (hex) over every file under ``directory``: relative path and bytes, sorted.

    Caches (``__pycache__``, ``.git``, lint caches) and ``*.pyc`` are left out, so the digest
    names what an operator publishes and anyone can recompute it from the published files.

    Raises:
        VariantPackError: ``directory`` is not a directory.
    """
    if not directory.is_dir():
        raise VariantPackError(f"{directory} is not a directory")
    digest = hashlib.sha256(f"netarena-pack/{DIGEST_FORMAT}\n".encode())
    for path in sorted(_pack_files(directory)):
        relative = path.relative_to(directory).as_posix()
        data = path.read_bytes()
        digest.update(f"{relative}\n{len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()


def pack_archive(pack: VariantPack) -> bytes:
    """The pack's files (those :func:`pack_digest` covers) as a reproducible ``.tar.gz``: the
    directory named after the pack, files sorted, owner, mode and times zeroed, so the same
    pack always gives the same bytes and the digest can be recomputed from the unpacked files.

    Raises:
        VariantPackError: the public pack (it is the repository) or a pack without directory.
    """
    if pack.directory is None:
        raise VariantPackError(f"pack {pack.name!r} has no directory to publish")
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped:
        with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(_pack_files(pack.directory)):
                data = path.read_bytes()
                info = tarfile.TarInfo(f"{pack.name}/{path.relative_to(pack.directory).as_posix()}")
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def pack_unarchive(archive: Path | str, into: Path | str) -> Path:
    """Unpack a published pack archive (:func:`pack_archive`) under ``into`` and return the
    pack's directory, whose :func:`pack_digest` equals the digest it was published under.

    Only regular files and directories are extracted, never outside ``into`` (tarfile's
    ``data`` filter).

    Raises:
        VariantPackError: not a readable ``.tar.gz``, an unsafe member, or not exactly one
            top-level pack directory.
    """
    target = Path(into)
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            tops = {Path(m.name).parts[0] for m in tar.getmembers() if m.name.strip("/")}
            if len(tops) != 1:
                raise VariantPackError(f"{archive}: not one pack directory ({sorted(tops)})")
            tar.extractall(target, filter="data")
    except (OSError, tarfile.TarError) as exc:
        raise VariantPackError(f"{archive}: {exc}") from exc
    return target / tops.pop()


def _pack_files(directory: Path) -> list[Path]:
    files: list[Path] = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in _IGNORED_DIRS)
        files.extend(Path(root) / n for n in names if not n.endswith(".pyc"))
    return files


def public_pack(app: App) -> VariantPack:
    """The public pack of ``app``: its generator in the repository, hashed over the source of
    the app's package (``apps/<app_id>/``, or the module's directory for apps elsewhere)."""
    with _LOCK:
        cached = _PUBLIC.get(app.app_id)
        if cached is not None:
            return cached
        module = sys.modules.get(type(app).__module__)
        source = Path(module.__file__).parent if module and module.__file__ else None
        sha256 = pack_digest(source) if source is not None else hashlib.sha256(b"").hexdigest()
        pack = VariantPack(
            name=PUBLIC_PACK,
            app_id=app.app_id,
            sha256=sha256,
            held_out=False,
            description="the app's own generator in this repository",
            levels=tuple(app.levels),
        )
        _PUBLIC[app.app_id] = pack
        return pack


def load_pack(directory: Path | str) -> VariantPack:
    """Load the pack in ``directory``: parse the manifest, hash the files, import the module.

    Manifest (TOML): ``name`` (required, ``[a-z0-9_-]{1,40}``, not ``public``), ``app``
    (required, an app id), ``description``, ``levels`` (list of ints, default ``[1, 2, 3]``),
    plus anything the pack's module reads. The module is imported under a private name so
    that two packs never share module state.

    Raises:
        VariantPackError: a missing or malformed manifest, a missing ``pack.py``, a module
            without ``generate``, or an import error (its message included).
    """
    directory = Path(directory).resolve()
    manifest_path = directory / PACK_MANIFEST
    module_path = directory / PACK_MODULE
    if not manifest_path.is_file():
        raise VariantPackError(f"{directory}: no {PACK_MANIFEST}")
    if not module_path.is_file():
        raise VariantPackError(f"{directory}: no {PACK_MODULE}")
    try:
        manifest = tomllib.loads(manifest_path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise VariantPackError(f"{manifest_path}: {exc}") from exc
    name = manifest.get("name")
    app_id = manifest.get("app")
    if not isinstance(name, str) or not _valid_name(name) or name == PUBLIC_PACK:
        raise VariantPackError(
            f"{manifest_path}: 'name' must match [a-z0-9_-]{{1,40}} and not be 'public'"
        )
    if not isinstance(app_id, str) or not _valid_name(app_id):
        raise VariantPackError(f"{manifest_path}: 'app' must name an app")
    levels = manifest.get("levels", [1, 2, 3])
    if not isinstance(levels, list) or not levels or not all(isinstance(v, int) for v in levels):
        raise VariantPackError(f"{manifest_path}: 'levels' must be a non-empty list of ints")
    sha256 = pack_digest(directory)
    module_name = f"netarena_pack_{app_id}_{name.replace('-', '_')}_{sha256[:12]}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, module_path)
        if spec is None or spec.loader is None:
            raise VariantPackError(f"{module_path}: cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            raise VariantPackError(f"{module_path}: {type(exc).__name__}: {exc}") from exc
    if not callable(getattr(module, "generate", None)):
        raise VariantPackError(f"{module_path}: no generate(app, pack, seed, indices, level)")
    return VariantPack(
        name=name,
        app_id=app_id,
        sha256=sha256,
        held_out=True,
        directory=directory,
        description=str(manifest.get("description", "")),
        levels=tuple(sorted(set(levels))),
        module=module,
        manifest=manifest,
    )


def _valid_name(text: str) -> bool:
    allowed = all(c.isascii() and (c.isalnum() or c in "_-") for c in text)
    return 0 < len(text) <= 40 and allowed and text == text.lower()


def discover_packs(entries: Sequence[Path | str]) -> list[VariantPack]:
    """Load every pack under ``entries``: each entry is a pack directory, a directory whose
    immediate subdirectories are packs, or one level above that (``<root>/<app>/<pack>``).
    Sorted by (app, name).

    Raises:
        VariantPackError: an entry that does not exist or holds no pack, a malformed pack, or
            two packs with the same (app, name).
    """
    packs: list[VariantPack] = []
    for entry in entries:
        path = Path(entry)
        if (path / PACK_MANIFEST).is_file():
            packs.append(load_pack(path))
            continue
        if not path.is_dir():
            raise VariantPackError(f"variant pack directory {path} does not exist")
        found = [p for p in sorted(path.iterdir()) if (p / PACK_MANIFEST).is_file()]
        if not found:
            found = sorted(
                p for group in path.iterdir() if group.is_dir() and group.name not in _IGNORED_DIRS
                for p in group.iterdir() if (p / PACK_MANIFEST).is_file()
            )
        if not found:
            raise VariantPackError(f"{path} holds no variant pack (no */{PACK_MANIFEST})")
        packs.extend(load_pack(p) for p in found)
    seen: set[tuple[str, str]] = set()
    for pack in packs:
        key = (pack.app_id, pack.name)
        if key in seen:
            raise VariantPackError(f"two variant packs named {pack.name!r} for app {pack.app_id!r}")
        seen.add(key)
    return sorted(packs, key=lambda p: (p.app_id, p.name))


_LOCK = threading.RLock()
_PUBLIC: dict[str, VariantPack] = {}
_CONFIGURED: list[VariantPack] | None = None
_EXTRA: dict[tuple[str, str, str], VariantPack] = {}


def configured_packs() -> list[VariantPack]:
    """The held-out packs of :data:`VARIANT_DIRS_ENV`, loaded once per process.

    Raises:
        VariantPackError: as :func:`discover_packs` (a worker with a broken pack list must
            fail at start, not episode by episode).
    """
    global _CONFIGURED
    with _LOCK:
        if _CONFIGURED is None:
            raw = os.environ.get(VARIANT_DIRS_ENV, "")
            entries = [e for e in raw.split(os.pathsep) if e.strip()]
            _CONFIGURED = discover_packs(entries)
        return list(_CONFIGURED)


def reset_configured_packs() -> None:
    """Forget the packs loaded from the environment (tests that change the variable)."""
    global _CONFIGURED
    with _LOCK:
        _CONFIGURED = None
        _EXTRA.clear()


def register_pack(pack: VariantPack) -> None:
    """Make ``pack`` findable by :func:`find_pack` in this process without listing it in the
    environment (``evaluate --variant-pack DIR`` loads its pack this way)."""
    with _LOCK:
        _EXTRA[(pack.app_id, pack.name, pack.sha256)] = pack


def held_out_packs(app_id: str) -> list[VariantPack]:
    """The configured held-out packs of ``app_id`` (see :func:`configured_packs`)."""
    return [p for p in configured_packs() if p.app_id == app_id]


def find_pack(app_id: str, reference: JSON) -> VariantPack:
    """The loaded pack a query's ``ground_truth["variant_pack"]`` names (name and sha256).

    Raises:
        VariantPackError: no pack with that name and content hash is loaded in this process
            (the worker lacks the pack, or holds another version of it).
    """
    name = str(reference.get("name", ""))
    sha256 = str(reference.get("sha256", ""))
    with _LOCK:
        extra = _EXTRA.get((app_id, name, sha256))
    if extra is not None:
        return extra
    for pack in configured_packs():
        if pack.app_id == app_id and pack.name == name and pack.sha256 == sha256:
            return pack
    raise VariantPackError(
        f"variant pack {name!r} ({sha256[:12]}) of app {app_id!r} is not loaded here; "
        f"list its directory in {VARIANT_DIRS_ENV}"
    )


def held_out_share() -> float:
    """:data:`HELD_OUT_SHARE_ENV` as a float in [0, 1] (default :data:`DEFAULT_HELD_OUT_SHARE`).

    Raises:
        ValueError: the variable is not a number in [0, 1].
    """
    raw = os.environ.get(HELD_OUT_SHARE_ENV, "").strip()
    if not raw:
        return DEFAULT_HELD_OUT_SHARE
    value = float(raw)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{HELD_OUT_SHARE_ENV} must be in [0, 1], not {raw}")
    return value


def pack_for_index(
    app: App,
    seed: int,
    index: int,
    packs: Sequence[VariantPack],
    share: float,
    level: int | None = None,
) -> VariantPack | None:
    """The held-out pack query ``index`` of the batch of ``seed`` is drawn from, or ``None``
    for the public pack.

    Drawn from ``(app_id, version, seed, index)`` alone, so the answer for an index never
    depends on the batch size. Only packs that have ``level`` (when given) are candidates.
    """
    candidates = [p for p in packs if level is None or level in p.levels]
    if not candidates or share <= 0.0:
        return None
    rng = random.Random(f"{app.app_id}/v{app.version}/pack/{seed}/{index}")
    if rng.random() >= share:
        return None
    ordered = sorted(candidates, key=lambda p: p.name)
    return ordered[rng.randrange(len(ordered))]


def generate_batch(
    app: App,
    count: int,
    seed: int,
    level: int | None = None,
    *,
    packs: Sequence[VariantPack] | None = None,
    share: float | None = None,
) -> list[Query]:
    """The batch of ``count`` queries of ``seed``, each drawn from the public pack or a
    held-out pack (:func:`pack_for_index`).

    ``packs`` defaults to the app's configured packs (:func:`held_out_packs`) and ``share`` to
    :func:`held_out_share`; with no packs the batch equals ``app.generate(count, seed, level)``.
    ``share=1.0`` with one pack draws every query from it.

    Raises:
        ValueError: bad count or level (from the app or the pack).
        VariantPackError: a pack returned a malformed batch.
    """
    if count < 0:
        raise ValueError(f"count must be non-negative, got {count}")
    chosen_packs = held_out_packs(app.app_id) if packs is None else list(packs)
    chosen_share = held_out_share() if share is None else share
    by_pack: dict[str, list[int]] = {}
    by_name = {p.name: p for p in chosen_packs}
    public_indices: list[int] = []
    for index in range(count):
        pack = pack_for_index(app, seed, index, chosen_packs, chosen_share, level)
        if pack is None:
            public_indices.append(index)
        else:
            by_pack.setdefault(pack.name, []).append(index)
    if not by_pack:
        return app.generate(count, seed, level=level)
    queries: dict[int, Query] = {}
    if public_indices:
        public = app.generate(public_indices[-1] + 1, seed, level=level)
        queries.update((i, public[i]) for i in public_indices)
    for name, indices in by_pack.items():
        for query in by_name[name].generate(app, seed, indices, level):
            queries[query.index] = query
    return [queries[i] for i in range(count)]


def pack_query(app: App, pack: VariantPack, **fields: Any) -> Query:
    """A :class:`Query` of ``app`` drawn from ``pack``: sets ``app_id``, ``app_version``,
    ``pack`` and ``ground_truth["variant_pack"]`` (the other fields as given). For packs'
    ``generate`` functions."""
    ground_truth = dict(fields.pop("ground_truth", {}))
    ground_truth["variant_pack"] = pack.identity()
    return Query(
        app_id=app.app_id,
        app_version=app.version,
        pack=pack.name,
        ground_truth=ground_truth,
        **fields,
    )


def packs_commitment(packs: Sequence[VariantPack]) -> dict[str, dict[str, str]]:
    """``{app_id: {pack_name: sha256}}`` of ``packs``: what a round's commitment covers."""
    result: dict[str, dict[str, str]] = {}
    for pack in packs:
        result.setdefault(pack.app_id, {})[pack.name] = pack.sha256
    return {app_id: dict(sorted(names.items())) for app_id, names in sorted(result.items())}


def with_pack(query: Query, pack: VariantPack) -> Query:
    """``query`` relabelled as drawn from ``pack`` (pack name and ground-truth reference)."""
    ground_truth = dict(query.ground_truth)
    ground_truth["variant_pack"] = pack.identity()
    return replace(query, pack=pack.name, ground_truth=ground_truth)
