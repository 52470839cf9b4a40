"""Adversarial query search: find the labels and operands where an agent fails.

The generator is dynamic (paper §4.3, §5): instead of ranking an agent on a fixed batch, we can
spend an episode budget where the agent is weakest. This module does that with a bandit.

Method
------

* **Arms.** An arm is a label combination (``Query.label``, e.g. ``"DR+WR"``; ``HEALTHY`` for a
  healthy control) plus, where the ground truth gives one cheaply, an *operand feature*
  (:data:`OPERAND_FEATURES`): for ``route`` the kinds of the faulted machines (``router``,
  ``host`` or ``host+router``, from ``ground_truth["faults"][i]["machine"]``); for ``k8s`` the
  role of the faulted policies' services (``frontend``, ``caller`` -- a service that calls
  others, :data:`apps.k8s.manifests.CALLS` -- or ``leaf``, deduplicated and sorted). Other apps
  (MALT, the toy apps) use the labels alone. The key is ``"<label>|<feature>"``.
* **Query supply.** Queries are the board's own: :meth:`App.generate` with ``level=None`` on
  seeds derived from the search seed ``S`` (:func:`derive_seed`, SHA-256 of ``S`` and a tag), in
  chunks of :data:`CHUNK` queries. The arms are those found in the first :data:`POOL_QUERIES`
  generated queries. A pull of an arm takes the next unused query of that arm from the pool,
  generating further chunks (up to :data:`MAX_GENERATED` queries in all) when it has none
  left; an arm that still has none is retired. Every query keeps its ``(seed, index)`` so it
  is regenerated exactly by ``app.generate(index + 1, seed)[index]`` (:func:`read_batch`
  checks this by fingerprint).
* **Bandit.** Thompson sampling (Thompson 1933; Chapelle & Li 2011) on the failure rate: each
  arm has a Beta(1 + failures, 1 + successes) posterior; every pull draws one sample per live
  arm (with a generator seeded from ``S``) and plays the arm with the largest draw; the
  episode's outcome updates that arm. A *failure* is a scored episode that is not correct
  (agent errors such as timeouts included, as on the board); infrastructure failures use up
  budget but update nothing and are reported apart.
* **Baseline.** The same budget on the generator's own distribution (``app.generate(budget,
  derive_seed(S, "uniform"))``: the label combinations cycled evenly, operands as drawn) --
  what the board samples. ``lift = bandit failure rate / uniform failure rate``; both rates
  carry 95% Wilson intervals (:func:`evaluator.stats.wilson_interval`) and the ratio a 95%
  Katz log interval (Katz et al. 1978, ``exp(ln(lift) ± z·sqrt(1/a - 1/n1 + 1/b - 1/n2))``;
  undefined when either side has no failure).
* **Output.** The hardest queries: every failed query of either phase (deduplicated by
  fingerprint), arms with the highest posterior failure mean over both phases first, as a
  batch JSONL of :meth:`Query.to_dict` lines (:func:`write_batch`; ``Query.from_dict``
  replays them), plus the report (:meth:`SearchResult.report`).

For a deterministic agent the whole run is deterministic for ``S``: the pool, the Thompson
draws and hence the pulls repeat.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evaluator.agents.base import AgentClient, AgentReply
from evaluator.app import App
from evaluator.oracle_vault import OracleVault
from evaluator.registry import get_app
from evaluator.runner import new_episode_id, run_episode_guarded
from evaluator.stats import CONFIDENCE, Interval, wilson_interval
from evaluator.types import JSON, EpisodeResult, Query

#: Queries per generated chunk of the pool.
CHUNK = 64
#: Queries generated before the arms are fixed (the arms are the keys found among them).
POOL_QUERIES = 256
#: Upper bound on queries generated for the pool in one search (refills included).
MAX_GENERATED = 8192
#: Feature of a query without faults (healthy controls) or of an app without a feature.
NO_FEATURE = "-"

ClientFactory = Callable[[Query], AgentClient]
#: Reference agents played in process (``--agent NAME``).
REFERENCE_AGENTS = ("oracle", "heuristic", "null")


class _ReplyClient(AgentClient):
    """In-process agent whose reply is ``reply(messages)`` (no HTTP, no latency)."""

    def __init__(self, name: str, reply: Callable[[list[JSON]], str]) -> None:
        self.name = name
        self.reply = reply

    def complete(self, messages: list[JSON], *, episode_id: str) -> AgentReply:
        return AgentReply(self.reply(messages), 0.0)

    def describe(self) -> JSON:
        return {"protocol": "in-process", "agent": self.name}


def reference_clients(name: str, app: App) -> ClientFactory:
    """Client factory of reference agent ``name`` on ``app``, played in process: ``oracle``
    (``App.oracle_reply`` from the query's ground truth), ``heuristic`` (the app's floor agent,
    ``App.heuristic_reply``; no ground truth) or ``null`` (``App.null_reply``).

    Raises:
        ValueError: unknown name, or ``heuristic`` for an app without a floor agent.
    """
    if name == "oracle":
        return lambda query: _ReplyClient(
            name, lambda messages: app.oracle_reply(query.ground_truth, messages)
        )
    if name == "heuristic":
        if not app.has_heuristic:
            raise ValueError(f"app {app.app_id!r} has no heuristic (floor) agent")
        client = _ReplyClient(name, lambda messages: app.heuristic_reply(messages) or "")
        return lambda query: client
    if name == "null":
        client = _ReplyClient(name, app.null_reply)
        return lambda query: client
    raise ValueError(f"unknown reference agent {name!r}; known: {', '.join(REFERENCE_AGENTS)}")


def arm_of(query: Query, *, app: App | None = None, features: bool = True) -> str:
    """The arm key of ``query``: ``"<label>|<feature>"``, the feature from the app's
    :meth:`~evaluator.app.App.operand_feature` (``app``, else the registered app of
    ``query.app_id``), ``-`` when none applies or ``features`` is false.

    Raises:
        KeyError: no ``app`` given and ``query.app_id`` is not registered.
    """
    feature = None
    if features:
        feature = (app or get_app(query.app_id)).operand_feature(query)
    return f"{query.label}|{feature or NO_FEATURE}"


def derive_seed(seed: int, *parts: object) -> int:
    """A 128-bit seed from ``seed`` and ``parts`` (SHA-256 of their ``repr``s joined by ``/``)."""
    # The tag stays "probe" (the module's earlier name) so published seeds derive the same queries.
    text = "/".join(["probe", repr(seed), *map(repr, parts)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:16], "big")


class QueryPool:
    """The search's supply of generated queries, grouped by arm (see the module docstring).

    Raises (from :meth:`App.generate`): ``ValueError`` on a bad app generator.
    """

    def __init__(
        self,
        app: App,
        seed: int,
        *,
        features: bool = True,
        chunk: int = CHUNK,
        pool_queries: int = POOL_QUERIES,
        max_generated: int = MAX_GENERATED,
    ) -> None:
        self.app = app
        self.seed = seed
        self.features = features
        self.chunk = chunk
        self.max_generated = max(max_generated, pool_queries)
        self.generated = 0
        self.chunks = 0
        self.unused: dict[str, list[Query]] = {}
        while self.generated < pool_queries:
            self._grow()
        self.arms: tuple[str, ...] = tuple(sorted(self.unused))

    def _grow(self) -> bool:
        """Generate one more chunk; False when :attr:`max_generated` is reached."""
        if self.generated >= self.max_generated:
            return False
        chunk_seed = derive_seed(self.seed, "pool", self.chunks)
        self.chunks += 1
        for query in self.app.generate(self.chunk, chunk_seed):
            self.unused.setdefault(arm_of(query, app=self.app, features=self.features), []).append(
                query
            )
        self.generated += self.chunk
        return True

    def take(self, arm: str) -> Query | None:
        """The next unused query of ``arm`` (generating more chunks if needed), or None."""
        while not self.unused.get(arm):
            if not self._grow():
                return None
        return self.unused[arm].pop(0)


@dataclass
class ArmStats:
    """Outcomes of one arm: scored pulls, failures among them, infrastructure failures."""

    key: str
    pulls: int = 0
    failures: int = 0
    infrastructure: int = 0

    def posterior(self) -> tuple[float, float]:
        """The Beta posterior ``(alpha, beta)`` of the failure rate (uniform prior)."""
        return 1.0 + self.failures, 1.0 + self.pulls - self.failures

    def posterior_mean(self) -> float:
        """``(1 + failures) / (2 + pulls)``."""
        alpha, beta = self.posterior()
        return alpha / (alpha + beta)

    def to_dict(self) -> JSON:
        """JSON form with the failure rate's 95% Wilson interval."""
        return {
            "arm": self.key,
            "pulls": self.pulls,
            "failures": self.failures,
            "infrastructure": self.infrastructure,
            "posterior_mean": self.posterior_mean(),
            "failure_rate": wilson_interval(self.failures, self.pulls).to_dict(),
        }


def thompson_choice(arms: Sequence[ArmStats], rng: random.Random) -> ArmStats:
    """The arm with the largest draw from its Beta failure posterior (ties: first in order).

    Raises:
        ValueError: no arm.
    """
    if not arms:
        raise ValueError("no arm left to pull")
    draws = [rng.betavariate(*arm.posterior()) for arm in arms]
    return arms[max(range(len(arms)), key=draws.__getitem__)]


@dataclass(frozen=True)
class Pull:
    """One played episode of the search: its phase, arm, query and result."""

    phase: str  # "bandit" or "uniform"
    arm: str
    query: Query
    result: EpisodeResult

    @property
    def failed(self) -> bool:
        """A scored episode that is not correct."""
        return self.result.scored and not self.result.correct


def ratio_interval(
    failures_a: int, n_a: int, failures_b: int, n_b: int, confidence: float = CONFIDENCE
) -> Interval:
    """Ratio of two independent binomial rates ``(a/n_a) / (b/n_b)`` with the Katz log interval
    (Katz, Baptista, Azen & Pike 1978). NaN when a rate is undefined or either count is 0."""
    if min(failures_a, failures_b, n_a, n_b) <= 0:
        value = (
            (failures_a / n_a) / (failures_b / n_b) if n_a and n_b and failures_b else float("nan")
        )
        return Interval(value, float("nan"), float("nan"), n_a + n_b)
    value = (failures_a / n_a) / (failures_b / n_b)
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    spread = z * math.sqrt(1 / failures_a - 1 / n_a + 1 / failures_b - 1 / n_b)
    log = math.log(value)
    return Interval(value, math.exp(log - spread), math.exp(log + spread), n_a + n_b)


def _rate(pulls: Iterable[Pull]) -> tuple[int, int]:
    scored = [p for p in pulls if p.result.scored]
    return sum(p.failed for p in scored), len(scored)


@dataclass
class SearchResult:
    """Everything one search measured; :meth:`report` is its JSON summary."""

    app_id: str
    app_version: int
    agent: JSON
    seed: int
    budget: int
    features: bool
    arms: dict[str, ArmStats]
    pulls: list[Pull] = field(default_factory=list)
    generated: int = 0
    retired: list[str] = field(default_factory=list)

    def phase(self, name: str) -> list[Pull]:
        """The pulls of phase ``name`` (``bandit`` or ``uniform``), in play order."""
        return [p for p in self.pulls if p.phase == name]

    def combined_arms(self) -> dict[str, ArmStats]:
        """Arm outcomes over both phases (the ranking of the hardest queries uses them)."""
        combined: dict[str, ArmStats] = {}
        for pull in self.pulls:
            stats = combined.setdefault(pull.arm, ArmStats(pull.arm))
            if pull.result.scored:
                stats.pulls += 1
                stats.failures += pull.failed
            else:
                stats.infrastructure += 1
        return combined

    def hardest(self) -> list[Query]:
        """Failed queries of both phases, once each (by fingerprint), most-failing arms first
        (posterior failure mean over both phases, then more pulls, then the key)."""
        combined = self.combined_arms()
        order = sorted(combined.values(), key=lambda a: (-a.posterior_mean(), -a.pulls, a.key))
        rank = {arm.key: position for position, arm in enumerate(order)}
        failed = sorted(
            (p for p in self.pulls if p.failed),
            key=lambda p: (rank[p.arm], p.phase != "bandit"),
        )
        seen: set[str] = set()
        queries = []
        for pull in failed:
            fingerprint = pull.query.fingerprint()
            if fingerprint not in seen:
                seen.add(fingerprint)
                queries.append(pull.query)
        return queries

    def report(self) -> JSON:
        """JSON report: both failure rates with 95% Wilson intervals, the lift with its Katz
        interval, the bandit's per-arm outcomes (most pulled first) and the counts."""
        bandit_failures, bandit_n = _rate(self.phase("bandit"))
        uniform_failures, uniform_n = _rate(self.phase("uniform"))
        lift = ratio_interval(bandit_failures, bandit_n, uniform_failures, uniform_n)
        arms = sorted(self.arms.values(), key=lambda a: (-a.pulls, -a.failures, a.key))
        return {
            "app": self.app_id,
            "app_version": self.app_version,
            "agent": self.agent,
            "seed": str(self.seed),
            "budget": self.budget,
            "method": "thompson sampling, Beta(1+failures, 1+successes) per arm",
            "arms_by": "label+operand feature" if self.features else "label",
            "bandit": {
                "failures": bandit_failures,
                "scored": bandit_n,
                "infrastructure": len(self.phase("bandit")) - bandit_n,
                "failure_rate": wilson_interval(bandit_failures, bandit_n).to_dict(),
            },
            "uniform": {
                "failures": uniform_failures,
                "scored": uniform_n,
                "infrastructure": len(self.phase("uniform")) - uniform_n,
                "failure_rate": wilson_interval(uniform_failures, uniform_n).to_dict(),
            },
            "lift": lift.to_dict(),
            "arms": [a.to_dict() for a in arms],
            "arm_count": len(self.arms),
            "retired_arms": self.retired,
            "generated_queries": self.generated,
            "hardest_queries": len(self.hardest()),
        }


def _pct(interval: JSON) -> str:
    if interval.get("value") is None:
        return "n/a"
    low, high = interval.get("low"), interval.get("high")
    bounds = "" if low is None or high is None else f" [{100 * low:.1f}, {100 * high:.1f}]"
    return f"{100 * interval['value']:.1f}%{bounds}"


def format_report(report: JSON, *, top_arms: int = 12) -> str:
    """Human-readable lines of :meth:`SearchResult.report` (rates in percent, 95% intervals)."""
    bandit, uniform, lift = report["bandit"], report["uniform"], report["lift"]
    lift_text = "n/a" if lift.get("value") is None else f"{lift['value']:.2f}"
    if lift.get("low") is not None:
        lift_text += f" [{lift['low']:.2f}, {lift['high']:.2f}]"
    lines = [
        f"adversarial search app={report['app']} v{report['app_version']} seed={report['seed']} "
        f"budget={report['budget']} arms={report['arm_count']} ({report['arms_by']})",
        f"bandit  failure rate {bandit['failures']}/{bandit['scored']} = "
        f"{_pct(bandit['failure_rate'])} (95% Wilson)",
        f"uniform failure rate {uniform['failures']}/{uniform['scored']} = "
        f"{_pct(uniform['failure_rate'])} (95% Wilson)",
        f"lift {lift_text} (bandit/uniform, 95% Katz log interval)",
        f"{'arm':<28} {'pulls':>5} {'fail':>5} {'posterior':>9}",
    ]
    for arm in report["arms"][:top_arms]:
        lines.append(
            f"{arm['arm']:<28} {arm['pulls']:>5} {arm['failures']:>5} {arm['posterior_mean']:>9.2f}"
        )
    infra = bandit["infrastructure"] + uniform["infrastructure"]
    if infra:
        lines.append(f"infrastructure failures (not scored): {infra}")
    return "\n".join(lines)


def _play(
    app: App,
    query: Query,
    client_for: ClientFactory,
    vault: OracleVault | None,
    max_steps: int | None,
) -> EpisodeResult:
    """One guarded episode of ``query`` (deposited in ``vault`` while it runs)."""
    episode_id = new_episode_id()
    deposit = vault.deposit(query, episode_id) if vault is not None else contextlib.nullcontext()
    with deposit:
        return run_episode_guarded(
            app, query, client_for(query), max_steps=max_steps, episode_id=episode_id
        )


def adversarial_search(
    app: App,
    client_for: ClientFactory,
    *,
    budget: int,
    seed: int,
    agent: JSON | None = None,
    features: bool = True,
    uniform: bool = True,
    vault: OracleVault | None = None,
    max_steps: int | None = None,
    on_pull: Callable[[Pull], None] | None = None,
    pool_queries: int = POOL_QUERIES,
    max_generated: int = MAX_GENERATED,
) -> SearchResult:
    """Spend ``budget`` episodes with Thompson sampling over arms, then (with ``uniform``) the
    same budget on the generator's distribution; see the module docstring for the method.

    ``client_for(query)`` returns the agent client of an episode (one shared client for an
    endpoint; a per-query one for the in-process oracle). ``on_pull`` sees every episode as it
    ends. Episodes run one at a time (the bandit is sequential).

    Raises:
        ValueError: ``budget < 1``, or the app generated no query.
    """
    if budget < 1:
        raise ValueError(f"budget must be at least 1, not {budget}")
    pool = QueryPool(
        app, seed, features=features, pool_queries=pool_queries, max_generated=max_generated
    )
    if not pool.arms:
        raise ValueError(f"app {app.app_id!r} generated no query")
    result = SearchResult(
        app_id=app.app_id,
        app_version=app.version,
        agent=agent or {},
        seed=seed,
        budget=budget,
        features=features,
        arms={key: ArmStats(key) for key in pool.arms},
    )
    rng = random.Random(derive_seed(seed, "thompson"))
    live = [result.arms[key] for key in pool.arms]
    played = 0
    while played < budget and live:
        arm = thompson_choice(live, rng)
        query = pool.take(arm.key)
        if query is None:
            live.remove(arm)
            result.retired.append(arm.key)
            continue
        episode = _play(app, query, client_for, vault, max_steps)
        played += 1
        pull = Pull("bandit", arm.key, query, episode)
        if episode.scored:
            arm.pulls += 1
            arm.failures += pull.failed
        else:
            arm.infrastructure += 1
        result.pulls.append(pull)
        if on_pull is not None:
            on_pull(pull)
    if uniform:
        for query in app.generate(budget, derive_seed(seed, "uniform")):
            episode = _play(app, query, client_for, vault, max_steps)
            pull = Pull("uniform", arm_of(query, app=app, features=features), query, episode)
            result.pulls.append(pull)
            if on_pull is not None:
                on_pull(pull)
    result.generated = pool.generated
    return result


def write_batch(path: Path, queries: Iterable[Query]) -> int:
    """Write ``queries`` as JSONL, one :meth:`Query.to_dict` per line; returns the count."""
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        for query in queries:
            handle.write(json.dumps(query.to_dict(), sort_keys=True) + "\n")
            count += 1
    return count


def read_batch(path: Path, *, verify_with: App | None = None) -> list[Query]:
    """Read a batch written by :func:`write_batch` (``Query.from_dict`` per line).

    With ``verify_with``, every query is regenerated (``app.generate(index + 1, seed)[index]``;
    the search generates with ``level=None``) and must have the stored fingerprint.

    Raises:
        ValueError: a line is not a query, or a regenerated query differs.
    """
    queries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            query = Query.from_dict(json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: not a query: {exc}") from None
        if verify_with is not None:
            fresh = verify_with.generate(query.index + 1, query.seed)[query.index]
            if fresh.fingerprint() != query.fingerprint() or fresh.labels != query.labels:
                raise ValueError(
                    f"{path}:{number}: query {query.query_id} does not regenerate from its "
                    f"seed and index (app version {verify_with.version} vs {query.app_version})"
                )
        queries.append(query)
    return queries
