"""Supervised fine-tuning (SFT) export: oracle episodes as chat-format JSONL.

Every example is one real episode: the query's first observation is the first user turn, the
oracle's replies (:meth:`evaluator.app.App.oracle_reply`) are the assistant turns, and the
observation that each reply produced is the next user turn (MALT: one turn, the code; route
and k8s: the command sequence with its outputs). The episode runs in the real emulator
(``App.episode``: reset, step, ..., verdict) and an example is written only when our own
judge scored it correct and safe; others are dropped and counted (the paper's §4.3 argues for
execution-checked SFT data). The final observation, which no assistant turn answers, is not
part of the messages.

Train / held-out split by disjoint seed ranges (documented in ``docs/training.md``):

* ``train``: generation seed ``S`` for ``0 <= S < 2**127`` (:data:`TRAIN_SEEDS`);
* ``heldout``: generation seed ``2**127 + S`` (:data:`HELDOUT_SEEDS`).

So the same ``--seed`` never gives overlapping batches, and held-out seeds are never used for
training batches. Two different seeds could in principle draw the same query (same prompt and
ground truth); ``exclude`` drops such held-out queries by :meth:`Query.fingerprint` against a
training file, and the tests check the fingerprints of both splits are disjoint.

Each line: ``{"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...],
"metadata": {app, app_version, seed, index, level, labels, query_id, fingerprint, split,
batch: {seed, level, count}, instance_names, steps}}``; seeds are decimal strings (128-bit
integers overflow the 64-bit integers of common JSON readers). ``batch`` regenerates the
query (:func:`regenerate`); ``instance_names`` are the live episode's names the observations
and replies show (route's node prefix, k8s's namespace), mapped onto a fresh episode's when
the answers are re-scored (:func:`rescore`).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from evaluator.app import App, EmulatorError
from evaluator.reference.llm import system_prompt
from evaluator.registry import get_app
from evaluator.rejudge import ReplayClient
from evaluator.runner import INFRASTRUCTURE_ATTEMPTS, run_episode_guarded
from evaluator.types import JSON, EpisodeResult, Query, Verdict

logger = logging.getLogger(__name__)

Split = Literal["train", "heldout"]
#: Half-open ranges of generation seeds of each split (128-bit seeds, evaluator.types.SEED_BITS).
SEED_SPAN = 2**127
TRAIN_SEEDS = range(0, SEED_SPAN)
HELDOUT_SEEDS = range(SEED_SPAN, 2 * SEED_SPAN)
SPLITS: dict[str, range] = {"train": TRAIN_SEEDS, "heldout": HELDOUT_SEEDS}
#: Name of the dataset card written next to the exported files.
CARD_NAME = "README.md"
#: Suffix of the per-file card data the README is built from (``train.card.json``).
CARD_DATA_SUFFIX = ".card.json"


def split_seed(split: str, seed: int) -> int:
    """Generation seed of ``seed`` in ``split`` (``train``: ``seed``; ``heldout``: 2**127 + seed).

    Raises:
        ValueError: unknown split, or ``seed`` outside ``[0, 2**127)``.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, not {split!r}")
    if not 0 <= seed < SEED_SPAN:
        raise ValueError(f"seed must be in [0, 2**127), not {seed}")
    return SPLITS[split].start + seed


def split_of(generation_seed: int) -> str:
    """The split whose seed range holds ``generation_seed``. Raises ``ValueError`` outside both."""
    for name, seeds in SPLITS.items():
        if generation_seed in seeds:
            return name
    raise ValueError(f"seed {generation_seed} is in no split")


def system_message(app: App) -> str:
    """The system turn of every example of ``app``: the zero-shot system prompt of our LLM
    reference agent (``evaluator.reference.llm.system_prompt``) for the app's reply format."""
    return system_prompt("zero-shot", app.reply_format, multi_turn=app.max_steps > 1)


@dataclass(frozen=True)
class OracleEpisode:
    """One oracle episode played in the real emulator.

    Attributes:
        messages: ``user`` / ``assistant`` turns (no system turn), ending with the oracle's
            last reply.
        verdict: the judge's verdict of the episode.
        instance_names: ``Episode.instance_names()`` of the live episode.
        failed_step: ``"<ExceptionType>"`` when a step raised for a non-infrastructure
            reason (the judge rejected the reply), else ``None``.
    """

    messages: list[JSON]
    verdict: Verdict | None
    instance_names: dict[str, str]
    failed_step: str | None = None


def play_oracle(app: App, query: Query, *, max_steps: int | None = None) -> OracleEpisode:
    """Play the oracle on ``query`` in a fresh episode of ``app`` and judge it.

    The loop is the runner's (``evaluator.runner.run_episode``) without clipping: reset, then
    up to ``max_steps`` (default ``app.max_steps``) oracle replies, each stepped, stopping when
    the episode terminates or is truncated.

    Raises:
        EmulatorError: the emulator failed (infrastructure; retried by :func:`export_sft`).
    """
    budget = max_steps if max_steps is not None else app.max_steps
    messages: list[JSON] = []
    with app.episode(query, max_steps=budget) as episode:
        messages.append({"role": "user", "content": episode.reset()})
        names = episode.instance_names()
        for _ in range(budget):
            reply = app.oracle_reply(query.ground_truth, messages)
            messages.append({"role": "assistant", "content": reply})
            try:
                result = episode.step(reply)
            except EmulatorError:
                raise
            except Exception as exc:  # noqa: BLE001 - the judge refused the reply: drop it
                return OracleEpisode(messages, None, names, type(exc).__name__)
            if result.terminated or result.truncated:
                break
            messages.append({"role": "user", "content": result.observation})
        return OracleEpisode(messages, episode.verdict(), names)


@dataclass
class ExportSummary:
    """What one export wrote and dropped (also the card data of the file).

    Attributes:
        app, app_version: the app and its generator version.
        split: ``train`` or ``heldout``; seed: the ``--seed`` given; generation_seed: the seed
            the queries were generated with (:func:`split_seed`); seed_range: the split's
            ``[start, stop)``.
        levels: the levels exported; count_per_level: queries generated per level.
        written: examples written; by_level / by_label: their counts (label ``RI+CP``,
            ``HEALTHY``, ...).
        dropped_incorrect: episodes the judge scored incorrect or unsafe (or whose reply the
            judge refused); dropped_infrastructure: episodes whose emulator failed
            :data:`evaluator.runner.INFRASTRUCTURE_ATTEMPTS` times; dropped_overlap:
            held-out queries whose fingerprint is in the ``exclude`` file.
        file: the JSONL file name; command: the command line that made it; seconds: wall time.
    """

    app: str
    app_version: int
    split: str
    seed: int
    generation_seed: int
    seed_range: list[int]
    levels: list[int]
    count_per_level: int
    written: int = 0
    by_level: dict[str, int] = field(default_factory=dict)
    by_label: dict[str, int] = field(default_factory=dict)
    dropped_incorrect: int = 0
    dropped_infrastructure: int = 0
    dropped_overlap: int = 0
    file: str = ""
    command: str = ""
    seconds: float = 0.0

    def to_dict(self) -> JSON:
        """JSON form (the ``*.card.json`` next to the file)."""
        return asdict(self)


def _play_with_retries(app: App, query: Query) -> OracleEpisode | None:
    """:func:`play_oracle`, retried on emulator failures; ``None`` when every attempt failed."""
    for attempt in range(1, INFRASTRUCTURE_ATTEMPTS + 1):
        try:
            return play_oracle(app, query)
        except EmulatorError as exc:
            logger.warning("export %s attempt %d: %s", query.query_id, attempt, exc)
    return None


def example_for(
    app: App, query: Query, played: OracleEpisode, *, split: str, batch: JSON
) -> JSON:
    """The JSONL record of a played episode (see the module docstring for its shape)."""
    return {
        "messages": [{"role": "system", "content": system_message(app)}, *played.messages],
        "metadata": {
            "app": query.app_id,
            "app_version": query.app_version,
            "seed": str(query.seed),
            "index": query.index,
            "level": query.level,
            "labels": list(query.labels),
            "query_id": query.query_id,
            "fingerprint": query.fingerprint(),
            "split": split,
            "batch": batch,
            "instance_names": played.instance_names,
            "steps": played.verdict.steps if played.verdict else None,
        },
    }


def read_examples(path: Path) -> Iterator[JSON]:
    """The records of an exported JSONL file, in order. Raises ``ValueError`` on a bad line."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
            if not isinstance(record, dict) or "messages" not in record:
                raise ValueError(f"{path}:{number}: not an SFT record")
            yield record


def export_sft(
    app_id: str,
    *,
    count: int,
    seed: int,
    levels: Sequence[int],
    out: Path,
    split: str = "train",
    exclude: Path | None = None,
    command: str = "",
    app: App | None = None,
) -> ExportSummary:
    """Generate ``count`` queries per level of ``levels``, play the oracle on each in the real
    emulator, and write the correct-and-safe episodes to ``out`` (JSONL), its card data to
    ``<out stem>.card.json`` and the directory's card ``README.md``.

    ``exclude``: an exported file whose query fingerprints must not appear in this one (use
    the training file when exporting the held-out split). ``app`` overrides the registry's
    instance (tests). Returns the summary; never raises for an episode's outcome.

    Raises:
        ValueError: bad split, seed, count or level (before anything is written).
        UnknownAppError: no such app.
        DependencyMissingError: this host cannot run the app's episodes
            (``App.host_check``; route and k8s need root, Mininet or the cluster binaries).
    """
    app = app if app is not None else get_app(app_id)
    generation_seed = split_seed(split, seed)
    app.host_check()  # a host that cannot run the episodes fails here, not once per query
    if count < 0:
        raise ValueError("count must be >= 0")
    for level in levels:
        if level not in app.levels:
            raise ValueError(f"{app.app_id} has levels {app.levels}, not {level}")
    excluded: set[str] = set()
    if exclude is not None:
        excluded = {
            str(r.get("metadata", {}).get("fingerprint")) for r in read_examples(exclude)
        }
    summary = ExportSummary(
        app=app.app_id,
        app_version=app.version,
        split=split,
        seed=seed,
        generation_seed=generation_seed,
        seed_range=[SPLITS[split].start, SPLITS[split].stop],
        levels=list(levels),
        count_per_level=count,
        file=out.name,
        command=command,
    )
    started = time.perf_counter()
    by_level: Counter[str] = Counter()
    by_label: Counter[str] = Counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:
        for level in levels:
            batch = {"seed": str(generation_seed), "level": level, "count": count}
            for query in app.generate(count, generation_seed, level):
                if query.fingerprint() in excluded:
                    summary.dropped_overlap += 1
                    continue
                played = _play_with_retries(app, query)
                if played is None:
                    summary.dropped_infrastructure += 1
                    continue
                verdict = played.verdict
                if verdict is None or not (verdict.correct and verdict.safe):
                    summary.dropped_incorrect += 1
                    logger.warning(
                        "export %s: oracle episode not correct and safe (%s)",
                        query.query_id,
                        played.failed_step or (verdict.failure if verdict else None),
                    )
                    continue
                record = example_for(app, query, played, split=split, batch=batch)
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                summary.written += 1
                by_level[str(query.level)] += 1
                by_label[query.label] += 1
    summary.by_level = dict(sorted(by_level.items()))
    summary.by_label = dict(sorted(by_label.items()))
    summary.seconds = round(time.perf_counter() - started, 2)
    card_data = out.with_name(out.stem + CARD_DATA_SUFFIX)
    card_data.write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf-8")
    write_card(out.parent)
    return summary


def _card_rows(counts: dict[str, int]) -> list[str]:
    return [f"| {key} | {value} |" for key, value in counts.items()] or ["| (none) | 0 |"]


def write_card(directory: Path) -> Path:
    """(Re)write ``directory/README.md`` from every ``*.card.json`` in it and return its path.

    The card lists, per exported file: app and generator version, split and seed range, the
    command, counts per level and per label, and what was dropped.
    """
    cards = [
        json.loads(p.read_text(encoding="utf-8"))
        for p in sorted(directory.glob("*" + CARD_DATA_SUFFIX))
    ]
    lines = [
        "# NetArena SFT dataset",
        "",
        "Chat-format examples (`messages` with system, user and assistant turns; `metadata`",
        "with app, version, seed, index, level, labels, query id and fingerprint). The",
        "assistant turns are the oracle reference agent's replies, played in the real",
        "emulator; every example was judged correct and safe by the NetArena judge when it",
        "was exported. Made by `training/sft.py` (see docs/training.md).",
        "",
        "Splits use disjoint generation-seed ranges: train `[0, 2**127)`, held-out",
        "`[2**127, 2**128)`.",
        "",
    ]
    for card in cards:
        lines += [
            f"## {card['file']}",
            "",
            f"- app: `{card['app']}` version {card['app_version']}",
            f"- split: {card['split']}; seed range `[{card['seed_range'][0]}, "
            f"{card['seed_range'][1]})`; seed {card['seed']} (generation seed "
            f"{card['generation_seed']})",
            f"- levels: {card['levels']}, {card['count_per_level']} queries per level",
            f"- command: `{card['command'] or '(library call)'}`",
            f"- examples: {card['written']}; dropped: {card['dropped_incorrect']} not correct "
            f"and safe, {card['dropped_infrastructure']} infrastructure failures, "
            f"{card['dropped_overlap']} overlapping a training file",
            f"- export time: {card['seconds']} s",
            "",
            "| level | examples |",
            "|---|---|",
            *_card_rows(card["by_level"]),
            "",
            "| label | examples |",
            "|---|---|",
            *_card_rows(card["by_label"]),
            "",
        ]
    path = directory / CARD_NAME
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def regenerate(app: App, records: Iterable[JSON]) -> list[tuple[JSON, Query]]:
    """Pair each record with its query, regenerated from ``metadata.batch`` and checked.

    Raises:
        ValueError: a record's regenerated query has another fingerprint (other generator
            version or a tampered record).
    """
    batches: dict[tuple[int, int, int], dict[int, Query]] = {}
    paired: list[tuple[JSON, Query]] = []
    for record in records:
        meta = record["metadata"]
        batch = meta["batch"]
        key = (int(batch["seed"]), int(batch["level"]), int(batch["count"]))
        if key not in batches:
            queries = app.generate(key[2], key[0], key[1])
            batches[key] = {q.index: q for q in queries}
        query = batches[key].get(int(meta["index"]))
        if query is None or query.fingerprint() != meta["fingerprint"]:
            raise ValueError(f"record {meta.get('query_id')} does not regenerate its query")
        paired.append((record, query))
    return paired


def rescore(path: Path, *, app: App | None = None) -> list[EpisodeResult]:
    """Re-score every exported answer of ``path``: replay its assistant turns in a fresh
    episode (names of the exporting episode mapped onto the fresh one's) through the runner
    and return the results in file order.

    Raises:
        ValueError: a record does not regenerate its query (see :func:`regenerate`).
    """
    records = list(read_examples(path))
    if not records:
        return []
    app = app if app is not None else get_app(records[0]["metadata"]["app"])
    results = []
    for record, query in regenerate(app, records):
        replies = [m["content"] for m in record["messages"] if m["role"] == "assistant"]
        client = ReplayClient(
            replies, stored_names=record["metadata"].get("instance_names") or {}
        )
        results.append(run_episode_guarded(app, query, client, backoff_s=(0.5,)))
    return results
