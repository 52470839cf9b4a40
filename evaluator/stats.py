"""Statistics for leaderboard figures: rate intervals, mean intervals, CI overlap, tie ranks.

Rates (correctness, safety) are binomial: we report the Wilson score interval (Wilson 1927;
Brown, Cai & DasGupta 2001 recommend it over the Wald interval for small n), and the
paper's normal interval ``mean ± 1.96·SEM`` (NetArena §4; population SD, as its scripts use)
for comparison. Latency means get a Student-t interval. docs/architecture.md §7.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cache

from scipy import stats as scipy_stats

from evaluator.types import JSON

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval.

    ``value``, ``low`` and ``high`` share a unit (a rate in [0, 1], or seconds); ``n`` is the
    number of observations. With ``n == 0`` all three are NaN.
    """

    value: float
    low: float
    high: float
    n: int

    def overlaps(self, other: Interval) -> bool:
        """True when the two closed intervals share at least one point."""
        return self.low <= other.high and other.low <= self.high

    def to_dict(self) -> JSON:
        """JSON form; NaN becomes ``None``."""
        return {
            k: (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in asdict(self).items()
        }


_NAN = float("nan")


@cache
def _z(confidence: float) -> float:
    """Two-sided standard-normal quantile (1.959964 for 95%)."""
    return float(scipy_stats.norm.ppf(0.5 + confidence / 2))


def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson score interval of a binomial rate.

    Closed form (Wilson 1927), identical to ``scipy.stats.binomtest(...).proportion_ci(
    method="wilson")`` (a test checks this) but ~100x cheaper, which matters on pages that
    show hundreds of intervals.

    Raises:
        ValueError: ``successes`` outside ``[0, n]``.
    """
    if n == 0:
        return Interval(_NAN, _NAN, _NAN, 0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes={successes} outside [0, {n}]")
    z = _z(confidence)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n)


def difference_interval(
    successes_a: int, n_a: int, successes_b: int, n_b: int, confidence: float = CONFIDENCE
) -> Interval:
    """Interval of the difference of two independent rates, ``a - b`` (Newcombe 1998, method
    10: the hybrid score interval built from each rate's Wilson interval).

    For rates on two different sets of queries (an agent's held-out and public queries are not
    the same queries, so no pairing applies). Newcombe, "Interval estimation for the difference
    between independent proportions", Statistics in Medicine 17 (1998) 873-890.

    Returns an interval with ``n = n_a + n_b``; NaN when either set is empty.

    Raises:
        ValueError: a count outside its ``[0, n]``.
    """
    a = wilson_interval(successes_a, n_a, confidence)
    b = wilson_interval(successes_b, n_b, confidence)
    if n_a == 0 or n_b == 0:
        return Interval(_NAN, _NAN, _NAN, n_a + n_b)
    difference = a.value - b.value
    low = difference - math.sqrt((a.value - a.low) ** 2 + (b.high - b.value) ** 2)
    high = difference + math.sqrt((a.high - a.value) ** 2 + (b.value - b.low) ** 2)
    return Interval(difference, max(-1.0, low), min(1.0, high), n_a + n_b)


def sem_interval(outcomes: Sequence[bool | float], confidence: float = CONFIDENCE) -> Interval:
    """The paper's interval: mean ± z·SEM with the population SD (``ddof=0``), clipped to [0, 1]
    for binary outcomes. NetArena §4 / its plotting scripts use z = 1.96 for 95%."""
    n = len(outcomes)
    if n == 0:
        return Interval(_NAN, _NAN, _NAN, 0)
    values = [float(v) for v in outcomes]
    mean = sum(values) / n
    sem = float(scipy_stats.sem(values, ddof=0)) if n > 1 else 0.0
    z = _z(confidence)
    low, high = mean - z * sem, mean + z * sem
    if all(v in (0.0, 1.0) for v in values):
        low, high = max(0.0, low), min(1.0, high)
    return Interval(mean, low, high, n)


def mean_interval(
    values: Sequence[float], confidence: float = CONFIDENCE, floor: float | None = 0.0
) -> Interval:
    """Student-t interval of a mean (latency in seconds, steps); one value gives a zero width.

    ``floor`` clips the lower bound (latencies and step counts cannot be negative); pass
    ``None`` for quantities without one.
    """
    n = len(values)
    if n == 0:
        return Interval(_NAN, _NAN, _NAN, 0)
    mean = sum(values) / n
    if n == 1:
        return Interval(mean, mean, mean, 1)
    sem = float(scipy_stats.sem(values))
    if sem == 0.0:
        return Interval(mean, mean, mean, n)
    low, high = scipy_stats.t.interval(confidence, n - 1, loc=mean, scale=sem)
    if floor is not None:
        low = max(floor, low)
    return Interval(mean, float(low), float(high), n)


def tie_ranks(intervals: Sequence[Interval], higher_is_better: bool = True) -> list[int]:
    """Rank with ties by confidence interval (the Chatbot Arena rule).

    An entry's rank is 1 + the number of entries whose interval lies entirely better than its
    own, so entries whose intervals overlap the leader's all share rank 1. Entries without data
    (NaN) rank last.
    """
    ranks = []
    for mine in intervals:
        if math.isnan(mine.value):
            ranks.append(len(intervals))
            continue
        better = 0
        for other in intervals:
            if other is mine or math.isnan(other.value):
                continue
            if (other.low > mine.high) if higher_is_better else (other.high < mine.low):
                better += 1
        ranks.append(1 + better)
    return ranks


#: Significance level of paired comparisons (two-sided).
PAIRED_ALPHA = 0.05


@dataclass(frozen=True)
class PairedComparison:
    """Two agents on the queries both were judged on (McNemar's exact test).

    Attributes:
        shared: number of queries both agents have a verdict on.
        only_first, only_second: discordant pairs: queries the first agent solved and the
            second did not, and the reverse.
        p_value: two-sided exact McNemar p-value (binomial test of ``only_first`` out of
            ``only_first + only_second`` at 1/2; 1.0 without discordant pairs).
    """

    shared: int
    only_first: int
    only_second: int
    p_value: float

    def first_is_better(self, alpha: float = PAIRED_ALPHA) -> bool:
        """The first agent solved significantly more of the shared queries."""
        return self.p_value < alpha and self.only_first > self.only_second

    def tied(self, alpha: float = PAIRED_ALPHA) -> bool:
        """Neither agent is significantly better on the shared queries."""
        return self.p_value >= alpha


def paired_comparison(first: dict[str, bool], second: dict[str, bool]) -> PairedComparison:
    """Compare two agents' per-query outcomes (query id -> success) on their shared queries.

    McNemar's test (McNemar 1947) in its exact form: under the null hypothesis a discordant
    query is equally likely to favour either agent, so ``only_first`` is Binomial(b + c, 1/2)
    (``scipy.stats.binomtest``). Pairing removes the variance that comes from which queries
    were drawn, so agents judged on the same round separate with fewer queries than
    independent Wilson intervals need.
    """
    shared = first.keys() & second.keys()
    only_first = sum(1 for q in shared if first[q] and not second[q])
    only_second = sum(1 for q in shared if second[q] and not first[q])
    discordant = only_first + only_second
    p_value = (
        1.0
        if discordant == 0
        else float(scipy_stats.binomtest(only_first, discordant, 0.5).pvalue)
    )
    return PairedComparison(len(shared), only_first, only_second, min(1.0, p_value))


def paired_ranks(
    outcomes: Sequence[dict[str, bool]], alpha: float = PAIRED_ALPHA
) -> tuple[list[int], list[list[int]]]:
    """Ranks and tie groups from pairwise paired comparisons on shared queries.

    ``outcomes[i]`` maps query id to success for agent ``i``. An agent's rank is 1 + the
    number of agents significantly better than it (:meth:`PairedComparison.first_is_better`);
    ``tied_with[i]`` lists the other agents that are not significantly different from it
    ("statistically tied with"). No correction for multiple comparisons is applied: each pair
    is one test at ``alpha`` (docs/metrics.md). O(agents² × queries).
    """
    count = len(outcomes)
    ranks = [1] * count
    tied_with: list[list[int]] = [[] for _ in range(count)]
    for i in range(count):
        for j in range(i + 1, count):
            comparison = paired_comparison(outcomes[i], outcomes[j])
            if comparison.tied(alpha):
                tied_with[i].append(j)
                tied_with[j].append(i)
            elif comparison.first_is_better(alpha):
                ranks[j] += 1
            else:
                ranks[i] += 1
    return ranks, tied_with
