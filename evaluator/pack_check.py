"""Checks an operator runs on a variant pack before trusting it (``manage.py check_pack``).

A held-out pack (:mod:`evaluator.variants`, docs/writing-a-variant-pack.md) is only worth its
place in a round if it is reproducible, its ground truth is sound, the reference agents score
as they must, the public scripted agent does not carry over to it, and its requests are not
the public ones reworded. :func:`check_pack` runs one check for each, on ``count`` queries of
``seed`` drawn from the pack alone, and returns a :class:`PackReport`:

``determinism``
    The pack's queries are generated in two separate Python processes (``python -m
    evaluator.pack_check --digests``, with different ``PYTHONHASHSEED`` values, so that an
    order that depends on string hashing shows) and in this process; every query's
    canonical JSON digest (:func:`query_digest`, the serialisation of
    :func:`evaluator.testing.batch_sha256`) must be equal in all three. Rule ``same-bytes``,
    per query.
``ground-truth``
    Every ground truth passes the app's own static checks
    (:meth:`evaluator.app.App.ground_truth_problems`: MALT's safety constraints on the
    expected final topology and the program's answer type, route's agent allow-list on the
    repair commands, k8s' policy model). The rule is the app's (``safety:bandwidth``,
    ``allowlist``, ...).
``reference-agents``
    Every query is played through the real episode runner
    (:func:`evaluator.runner.run_episode`, as ``benchmarks/bench_difficulty.py`` does) by the
    oracle, which must be correct and safe (rules ``oracle-correct``, ``oracle-safe``), and by
    the null agent, which must not be correct (rule ``null-incorrect``). Needs what the app's
    episodes need (MALT: root and bwrap; route: Mininet; k8s: the embedded cluster;
    :meth:`evaluator.app.App.host_check` says what is missing).
``scripted-ceiling``
    The public scripted agent (:meth:`evaluator.app.App.scripted_reply`), played in the same
    episodes, may solve at most :data:`SCRIPTED_CEILING` of the queries of any label (MALT's
    operation labels, route's and k8s' fault kinds). Rule ``scripted-ceiling``, per label.
``novelty``
    The share of the pack's clause forms (:func:`clause_forms`: the request split into
    clauses, numbers, names and units abstracted) that the public generator, or a spent pack
    given with ``spent``, already produces. Reported per source; it fails only above
    ``max_known_share`` (rule ``known-wording``).

The checks that play episodes can be skipped (``episodes=False``); a skipped check is
reported as such, never as passed. No Django here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from evaluator.agents.base import AgentClient, AgentReply
from evaluator.app import App, DependencyMissingError, EmulatorError
from evaluator.registry import get_app
from evaluator.runner import run_episode
from evaluator.types import JSON, Query
from evaluator.variants import (
    VariantPack,
    VariantPackError,
    discover_packs,
    load_pack,
    register_pack,
)

#: The public scripted agent's highest allowed solve rate on any label of a pack.
SCRIPTED_CEILING = 0.20
#: Queries drawn from the pack when none is given.
DEFAULT_QUERIES = 30
#: Public queries whose clause forms the novelty check compares with (at least ``count``).
PUBLIC_SAMPLE = 150
#: The checks, in the order they run and are reported.
CHECKS = ("determinism", "ground-truth", "reference-agents", "scripted-ceiling", "novelty")
#: Hash seeds of the two generating processes of the determinism check.
HASH_SEEDS = ("1", "2")
#: Seconds a generating process may take.
GENERATE_TIMEOUT_S = 600.0
#: Findings printed per check (the count is always printed).
FINDINGS_SHOWN = 20

_REPO_ROOT = Path(__file__).resolve().parent.parent


class PackCheckError(Exception):
    """The pack cannot be checked at all (it does not load, generation raised, a generating
    process failed): the report cannot be produced."""


@dataclass(frozen=True)
class Finding:
    """One failed rule.

    Attributes:
        rule: the rule that failed (``same-bytes``, ``oracle-correct``, ``safety:bandwidth``).
        where: the query (:func:`describe_query`) or label it failed on, or a source.
        message: what was seen.
    """

    rule: str
    where: str
    message: str

    def line(self) -> str:
        """``FAIL <rule> <where>: <message>``."""
        return f"FAIL {self.rule} {self.where}: {self.message}"


@dataclass
class CheckResult:
    """The outcome of one check.

    Attributes:
        name: one of :data:`CHECKS`.
        status: ``pass``, ``fail`` or ``skip``.
        summary: one line.
        findings: the failed rules (empty unless ``fail``).
        details: further lines (per-label rates, per-source shares).
    """

    name: str
    status: str
    summary: str
    findings: list[Finding] = field(default_factory=list)
    details: list[str] = field(default_factory=list)


@dataclass
class PackReport:
    """Every check of one pack: :attr:`passed` when none failed (skipped ones do not count)."""

    pack: str
    app_id: str
    sha256: str
    count: int
    seed: int
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when no check failed."""
        return all(check.status != "fail" for check in self.checks)

    def failures(self) -> list[Finding]:
        """Every finding of every failed check, in check order."""
        return [f for check in self.checks for f in check.findings]

    def format(self) -> str:
        """The report as printed by ``manage.py check_pack`` (see the module docstring)."""
        lines = [
            f"pack {self.pack} (app {self.app_id}, sha256 {self.sha256[:12]}): "
            f"{self.count} queries of seed {self.seed}"
        ]
        for check in self.checks:
            lines.append(f"[{check.status.upper()}] {check.name}: {check.summary}")
            lines.extend(f"    {line}" for line in check.details)
            shown = check.findings[:FINDINGS_SHOWN]
            lines.extend(f"    {finding.line()}" for finding in shown)
            if len(check.findings) > len(shown):
                lines.append(f"    ... {len(check.findings) - len(shown)} more")
        failed = [c.name for c in self.checks if c.status == "fail"]
        skipped = [c.name for c in self.checks if c.status == "skip"]
        verdict = "FAILED (" + ", ".join(failed) + ")" if failed else "passed"
        lines.append(f"pack {self.pack}: {verdict}"
                     + (f"; skipped: {', '.join(skipped)}" if skipped else ""))
        return "\n".join(lines)


# ------------------------------------------------------------------ queries and digests


def describe_query(query: Query) -> str:
    """How a report names a query: ``query 7 (remove+count, L2)``."""
    return f"query {query.index} ({query.label}, L{query.level})"


def query_digest(query: Query) -> str:
    """SHA-256 (hex) of the query's canonical JSON: sorted keys, no spaces, ground truth
    included, ``query_id`` left out (as :func:`evaluator.testing.batch_sha256` serialises)."""
    data = {key: value for key, value in query.to_dict().items() if key != "query_id"}
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def generate_pack(pack: VariantPack, count: int, seed: int) -> list[Query]:
    """Queries ``0 .. count-1`` of ``seed`` drawn from ``pack`` alone (all levels).

    Raises:
        PackCheckError: the pack's app is not registered or its generator raised.
    """
    try:
        app = get_app(pack.app_id)
        return pack.generate(app, seed, list(range(count)), None)
    except Exception as exc:  # noqa: BLE001 - any generator failure fails the whole check
        raise PackCheckError(f"pack {pack.name!r} failed to generate: "
                             f"{type(exc).__name__}: {exc}") from exc


def digests_in_subprocess(directory: Path, count: int, seed: int, hash_seed: str) -> list[str]:
    """:func:`query_digest` of every query of the pack in ``directory``, generated in a fresh
    Python process (this interpreter, ``PYTHONHASHSEED=hash_seed``).

    Raises:
        PackCheckError: the process failed, timed out or printed no digest list.
    """
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = hash_seed
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_REPO_ROOT), env.get("PYTHONPATH", "")) if p
    )
    command = [sys.executable, "-m", "evaluator.pack_check", "--digests", str(directory),
               "--queries", str(count), "--seed", str(seed)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env,
                              cwd=_REPO_ROOT, timeout=GENERATE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise PackCheckError(f"generating in a separate process took over "
                             f"{GENERATE_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise PackCheckError(f"generating in a separate process failed: {tail}")
    try:
        digests = json.loads(done.stdout)["digests"]
    except (ValueError, KeyError, TypeError) as exc:
        raise PackCheckError("the generating process printed no digest list") from exc
    return [str(d) for d in digests]


def check_determinism(pack: VariantPack, queries: Sequence[Query], seed: int) -> CheckResult:
    """The ``determinism`` check (module docstring). Raises :class:`PackCheckError` as
    :func:`digests_in_subprocess`."""
    assert pack.directory is not None
    here = [query_digest(q) for q in queries]
    runs = {f"process PYTHONHASHSEED={h}": digests_in_subprocess(pack.directory, len(queries),
                                                                  seed, h)
            for h in HASH_SEEDS}
    findings = []
    for position, query in enumerate(queries):
        seen = {name: digests[position] for name, digests in runs.items()}
        seen["this process"] = here[position]
        if len(set(seen.values())) > 1:
            parts = ", ".join(f"{name} {digest[:12]}" for name, digest in seen.items())
            findings.append(Finding("same-bytes", describe_query(query), parts))
    batch = hashlib.sha256("".join(here).encode()).hexdigest()
    if findings:
        return CheckResult("determinism", "fail",
                           f"{len(findings)} of {len(queries)} queries differ between processes",
                           findings)
    return CheckResult("determinism", "pass",
                       f"{len(queries)} queries byte-identical in 3 processes "
                       f"(batch digest {batch[:16]})")


# ------------------------------------------------------------------ ground truth


def check_ground_truth(app: App, queries: Sequence[Query]) -> CheckResult:
    """The ``ground-truth`` check: :meth:`App.ground_truth_problems` of every query."""
    findings = [
        Finding(rule, describe_query(query), message)
        for query in queries
        for rule, message in app.ground_truth_problems(query)
    ]
    if findings:
        bad = len({f.where for f in findings})
        return CheckResult("ground-truth", "fail",
                           f"{bad} of {len(queries)} ground truths fail the app's checks",
                           findings)
    return CheckResult("ground-truth", "pass",
                       f"{len(queries)} ground truths pass the {app.app_id} app's checks")


# ------------------------------------------------------------------ episodes


class _ReplyClient(AgentClient):
    """In-process agent whose reply is ``reply(messages)``."""

    def __init__(self, reply: Callable[[list[JSON]], str]) -> None:
        self.reply = reply

    def complete(self, messages: list[JSON], *, episode_id: str) -> AgentReply:
        return AgentReply(self.reply(messages), 0.0)


def _scripted(app: App, messages: list[JSON]) -> str:
    return app.scripted_reply(messages) or ""


def _clients(app: App, query: Query) -> dict[str, AgentClient]:
    clients: dict[str, AgentClient] = {
        "oracle": _ReplyClient(partial(app.oracle_reply, query.ground_truth)),
        "null": _ReplyClient(app.null_reply),
    }
    if app.has_scripted:
        clients["scripted"] = _ReplyClient(partial(_scripted, app))
    return clients


def check_episodes(
    app: App, queries: Sequence[Query], ceiling: float = SCRIPTED_CEILING
) -> tuple[CheckResult, CheckResult]:
    """The ``reference-agents`` and ``scripted-ceiling`` checks, from one pass of episodes
    (oracle, null and, when the app has one, scripted on every query).

    An episode whose emulator fails (``EmulatorError``) is a finding of rule ``emulator``,
    one that raises anything else (a pack the episode cannot find, a sandbox that stopped
    working) of rule ``episode-error``: the verdict on that query is unknown, so the pack is
    not proved.
    """
    findings: list[Finding] = []
    scripted: dict[str, list[bool]] = defaultdict(list)
    oracle_ok = null_ok = 0
    for query in queries:
        where = describe_query(query)
        for agent, client in _clients(app, query).items():
            try:
                result = run_episode(app, query, client)
            except EmulatorError as exc:
                findings.append(Finding("emulator", where, f"{agent}: {exc}"))
                continue
            except Exception as exc:  # noqa: BLE001 - report, do not crash the operator's run
                findings.append(Finding("episode-error", where,
                                        f"{agent}: {type(exc).__name__}: {exc}"))
                continue
            if agent == "oracle":
                if not result.correct:
                    findings.append(Finding("oracle-correct", where,
                                            f"failure {result.failure}: "
                                            f"{_explanation(result.details)}"))
                if not result.safe:
                    findings.append(Finding("oracle-safe", where,
                                            _explanation(result.details)))
                oracle_ok += bool(result.correct and result.safe)
            elif agent == "null":
                if result.correct:
                    findings.append(Finding("null-incorrect", where,
                                            "the null agent's reply was judged correct"))
                null_ok += not result.correct
            else:
                scripted[query.label].append(bool(result.correct))
    total = len(queries)
    reference = CheckResult(
        "reference-agents", "fail" if findings else "pass",
        f"oracle correct and safe on {oracle_ok}/{total}, null incorrect on {null_ok}/{total}",
        findings,
    )
    if not app.has_scripted:
        return reference, CheckResult("scripted-ceiling", "skip",
                                      f"app {app.app_id} has no scripted agent")
    over: list[Finding] = []
    details = []
    for label in sorted(scripted):
        wins = scripted[label]
        rate = sum(wins) / len(wins)
        details.append(f"{label:<22} {sum(wins):>3}/{len(wins):<3} {100 * rate:5.1f}%")
        if rate > ceiling:
            over.append(Finding("scripted-ceiling", f"label {label}",
                                f"solved {sum(wins)}/{len(wins)} ({100 * rate:.1f}%) > "
                                f"{100 * ceiling:.0f}%"))
    solved = sum(sum(w) for w in scripted.values())
    return reference, CheckResult(
        "scripted-ceiling", "fail" if over else "pass",
        f"scripted agent solved {solved}/{total}; at most {100 * ceiling:.0f}% per label",
        over, details,
    )


def _explanation(details: JSON) -> str:
    text = str(details.get("explanation") or details.get("error") or "")
    return text[:200] or "(no explanation)"


# ------------------------------------------------------------------ novelty

_BACKTICKED = re.compile(r"`[^`\n]*`")
_NODE_ID = re.compile(r"\bEK_[A-Z_]+:\S+")
_ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?:/\d{1,2})?\b")
_RATE = re.compile(r"\b\d+(?:\.\d+)?\s*(?:[kKMGT]?bit/s|[kKMGT]?bps|[kKMGT]b/s)(?![\w/])")
_UNIT = re.compile(r"\b(?:[kKMGT]?bit/s|[kKMGT]?bps)(?![\w/])")
_NUMBER = re.compile(r"(?<![\w<])\d+(?:\.\d+)?(?![\w>])")
_NAME = re.compile(r"(?<![\w<])[\w.\-/]*\d[\w.\-/]*")
_CLAUSE_END = re.compile(r"[.;:!?](?:\s+|$)|,\s+|\n+|\s+-\s+|\s*[()]\s*")


def clause_forms(text: str) -> list[str]:
    """The clause forms of a request text, in order, duplicates kept.

    A clause form is the shape of a clause with its operands abstracted, so that two
    requests that differ only in which nodes, numbers or units they name share their forms.
    Steps, in order:

    1. every backticked span and every node id (``EK_KIND:name``) becomes ``<name>``;
    2. IPv4 addresses, with or without ``/len``, become ``<addr>``;
    3. a number with a rate unit (``40 Gbit/s``, ``1000000000 bit/s``, ``10Gbps``) becomes
       ``<n> <unit>``, and a unit on its own (``(answer in Gbit/s)``) ``<unit>``;
    4. a bare number becomes ``<n>`` and any other word holding a digit (``ju1.a1.m1``,
       ``r0``, ``9555/TCP``) ``<name>``;
    5. the text is lowercased and split into clauses at ``. ; : ! ?`` followed by a space or
       the end, at ``, ``, at line breaks, at `` - `` and at parentheses (a parenthesis is a
       clause of its own: ``(answer in Gbit/s)``);
    6. in each clause, runs of spaces collapse to one; clauses with no letter left outside
       the placeholders are dropped.

    ``"Bump `x` to 40 Gbit/s. Then list it."`` gives ``["bump <name> to <n> <unit>",
    "then list it"]``. Used by the ``novelty`` check of :func:`check_pack`.
    """
    text = _BACKTICKED.sub(" <name> ", text)
    text = _NODE_ID.sub(" <name> ", text)
    text = _ADDRESS.sub(" <addr> ", text)
    text = _RATE.sub(" <n> <unit> ", text)
    text = _UNIT.sub(" <unit> ", text)
    text = _NUMBER.sub(" <n> ", text)
    text = _NAME.sub(" <name> ", text)
    forms = []
    for clause in _CLAUSE_END.split(text.lower()):
        form = " ".join(clause.split()).strip(" ,.()")
        if re.search(r"[a-z]", re.sub(r"<[a-z]+>", "", form)):
            forms.append(form)
    return forms


def request_text(query: Query) -> str:
    """The request a query asks: ``ground_truth["question"]`` when the app keeps it there
    (MALT), else the whole prompt (route, k8s: the task text the agent first sees)."""
    question = query.ground_truth.get("question")
    return question if isinstance(question, str) else query.prompt


def form_set(queries: Sequence[Query]) -> set[str]:
    """Every clause form of the queries' requests (:func:`request_text`, :func:`clause_forms`)."""
    return {form for query in queries for form in clause_forms(request_text(query))}


def check_novelty(
    app: App,
    queries: Sequence[Query],
    seed: int,
    *,
    public_count: int = PUBLIC_SAMPLE,
    spent: Sequence[VariantPack] = (),
    max_known_share: float = 1.0,
) -> CheckResult:
    """The ``novelty`` check (module docstring).

    The public generator's forms come from ``public_count`` public queries of ``seed``; a
    form found in *every* public request is boilerplate (a fixed task text) and is left out
    of both sides. Each spent pack contributes ``len(queries)`` of its queries of ``seed``.

    Raises:
        PackCheckError: a spent pack failed to generate.
    """
    public = app.generate(public_count, seed)
    public_sets = [set(clause_forms(request_text(q))) for q in public]
    boilerplate = set.intersection(*public_sets) if len(public_sets) > 1 else set()
    ours = form_set(queries) - boilerplate
    sources: list[tuple[str, set[str]]] = [
        (f"public generator ({public_count} queries)", set().union(*public_sets) - boilerplate)
    ]
    for pack in spent:
        theirs = form_set(generate_pack(pack, len(queries), seed)) - boilerplate
        sources.append((f"spent pack {pack.name} ({pack.sha256[:12]})", theirs))
    details, findings = [], []
    known_any: set[str] = set()
    for name, forms in sources:
        known = ours & forms
        known_any |= known
        share = len(known) / len(ours) if ours else 0.0
        details.append(f"{name}: {len(known)}/{len(ours)} forms known ({100 * share:.1f}%)")
        details.extend(f"  known: {form}" for form in sorted(known)[:5])
        if share > max_known_share:
            findings.append(Finding("known-wording", name,
                                    f"{100 * share:.1f}% of the pack's clause forms > "
                                    f"{100 * max_known_share:.0f}%"))
    public_labels = {q.label for q in public}
    pack_labels = {q.label for q in queries}
    new_labels = sorted(pack_labels - public_labels)
    details.append(f"labels: {len(new_labels)}/{len(pack_labels)} not in the public sample"
                   + (f" ({', '.join(new_labels[:8])})" if new_labels else ""))
    share_any = len(known_any) / len(ours) if ours else 0.0
    summary = (f"{len(ours)} clause forms, {len(known_any)} ({100 * share_any:.1f}%) already "
               f"in the public generator or a spent pack"
               + (f"; {len(boilerplate)} boilerplate forms left out" if boilerplate else ""))
    return CheckResult("novelty", "fail" if findings else "pass", summary, findings, details)


# ------------------------------------------------------------------ all checks


def check_pack(
    directory: Path | str,
    count: int = DEFAULT_QUERIES,
    seed: int = 0,
    *,
    spent: Sequence[Path | str] = (),
    episodes: bool = True,
    public_count: int = PUBLIC_SAMPLE,
    ceiling: float = SCRIPTED_CEILING,
    max_known_share: float = 1.0,
) -> PackReport:
    """Run every check of :data:`CHECKS` on the pack in ``directory``.

    Args:
        directory: a pack directory (holding ``pack.toml``).
        count: queries drawn from the pack (indices ``0 .. count-1`` of ``seed``).
        seed: the generation seed.
        spent: directories of spent packs (or of directories of packs) for the novelty
            check; only packs of the same app are compared.
        episodes: False skips the two checks that play episodes (reported as skipped).
        public_count: public queries the novelty check compares with.
        ceiling: the scripted agent's highest allowed rate per label.
        max_known_share: the novelty check fails above this share (1.0: report only).

    Raises:
        PackCheckError: the pack does not load or generate, a generating process failed.
        ValueError: ``count`` < 1.
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    try:
        pack = load_pack(directory)
        spent_packs = [p for p in discover_packs(list(spent)) if p.app_id == pack.app_id]
        app = get_app(pack.app_id)
    except Exception as exc:  # noqa: BLE001 - a pack that does not load cannot be checked
        raise PackCheckError(f"{type(exc).__name__}: {exc}") from exc
    register_pack(pack)  # episodes that need pack code find it in this process
    queries = generate_pack(pack, count, seed)
    report = PackReport(pack.name, pack.app_id, pack.sha256, count, seed)
    report.checks.append(check_determinism(pack, queries, seed))
    report.checks.append(check_ground_truth(app, queries))
    if not episodes:
        for name in ("reference-agents", "scripted-ceiling"):
            report.checks.append(CheckResult(name, "skip", "episodes not played (--no-episodes)"))
    else:
        try:
            app.host_check()
        except DependencyMissingError as exc:
            for name in ("reference-agents", "scripted-ceiling"):
                report.checks.append(CheckResult(
                    name, "fail", "episodes cannot run on this host",
                    [Finding("host", f"app {app.app_id}", str(exc))]))
        else:
            report.checks.extend(check_episodes(app, queries, ceiling))
    report.checks.append(check_novelty(app, queries, seed, public_count=public_count,
                                       spent=spent_packs, max_known_share=max_known_share))
    return report


#: Ground-truth keys :func:`side_by_side` shows, in order, when a query has them.
SHOWN_TRUTH_KEYS = ("program", "answer_kind", "expected", "faults", "repair", "baseline")
#: Characters shown per ground-truth key.
SHOWN_CHARS = 1200


def side_by_side(queries: Sequence[Query]) -> str:
    """Each query's request (:func:`request_text`) followed by what its ground truth does
    (:data:`SHOWN_TRUTH_KEYS`, compact JSON, each cut at :data:`SHOWN_CHARS` characters): the
    text a reviewer reads to judge whether the wording means the program. The oracle cannot
    tell (it runs the program, not the words)."""
    blocks = []
    for query in queries:
        lines = [f"=== {describe_query(query)}", request_text(query).strip(), "---"]
        for key in SHOWN_TRUTH_KEYS:
            if key in query.ground_truth:
                text = json.dumps(query.ground_truth[key], sort_keys=True, separators=(",", ":"))
                cut = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + " ..."
                lines.append(f"{key}: {cut}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``check_pack`` (shared by ``manage.py check_pack`` and ``python -m
    evaluator.pack_check``)."""
    parser.add_argument("directory", help="the pack directory (holding pack.toml)")
    parser.add_argument("--queries", type=int, default=DEFAULT_QUERIES,
                        help=f"queries drawn from the pack (default {DEFAULT_QUERIES})")
    parser.add_argument("--seed", type=int, default=0, help="generation seed (default 0)")
    parser.add_argument("--spent", action="append", default=[], metavar="DIR",
                        help="a spent pack (or directory of packs) for the novelty check; "
                        "repeatable")
    parser.add_argument("--no-episodes", action="store_true",
                        help="skip the reference-agents and scripted-ceiling checks")
    parser.add_argument("--public-queries", type=int, default=PUBLIC_SAMPLE,
                        help=f"public queries the novelty check compares with "
                        f"(default {PUBLIC_SAMPLE})")
    parser.add_argument("--max-known-share", type=float, default=1.0,
                        help="fail the novelty check above this share of known clause forms "
                        "(default 1.0: report only)")
    parser.add_argument("--show", type=int, default=0, metavar="N",
                        help="run no check: print the first N queries' requests beside their "
                        "ground truth, for a reviewer to read")


def run(options: argparse.Namespace) -> tuple[int, str]:
    """Run :func:`check_pack` for parsed :func:`add_arguments` options: ``(exit status,
    report text)``, status 0 when every check passed or was skipped, 1 otherwise, 2 when the
    pack could not be checked. With ``--show N``: status 0 and :func:`side_by_side` of the
    first N queries."""
    try:
        if options.show > 0:
            return 0, side_by_side(generate_pack(load_pack(options.directory), options.show,
                                                 options.seed))
        report = check_pack(
            options.directory, options.queries, options.seed, spent=options.spent,
            episodes=not options.no_episodes, public_count=options.public_queries,
            max_known_share=options.max_known_share,
        )
    except (PackCheckError, VariantPackError, ValueError) as exc:
        return 2, f"check_pack: cannot check {options.directory}: {exc}"
    return (0 if report.passed else 1), report.format()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m evaluator.pack_check DIR [...]``; with ``--digests`` print only the JSON
    ``{"digests": [...]}`` of the pack's queries (the determinism check's child process)."""
    parser = argparse.ArgumentParser(description="Check a variant pack before trusting it.")
    add_arguments(parser)
    parser.add_argument("--digests", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.digests:
        pack = load_pack(options.directory)
        queries = generate_pack(pack, options.queries, options.seed)
        sys.stdout.write(json.dumps({"digests": [query_digest(q) for q in queries]}) + "\n")
        return 0
    status, text = run(options)
    sys.stdout.write(text + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
