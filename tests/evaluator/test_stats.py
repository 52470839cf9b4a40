"""Statistics: known interval values, edge cases, tie ranks."""

import math

import pytest

from evaluator.stats import Interval, mean_interval, sem_interval, tie_ranks, wilson_interval


def test_wilson_matches_closed_form():
    # Wilson (1927): centre (p + z²/2n)/(1 + z²/n), half-width z·sqrt(p(1-p)/n + z²/4n²)/(1 + z²/n)
    k, n, z = 37, 50, 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    got = wilson_interval(k, n)
    assert got.value == pytest.approx(0.74)
    assert got.low == pytest.approx(centre - half, abs=1e-9)
    assert got.high == pytest.approx(centre + half, abs=1e-9)


def test_wilson_at_the_bounds_stays_inside_unit_interval():
    zero, full = wilson_interval(0, 20), wilson_interval(20, 20)
    assert zero.low == 0.0 and 0.0 < zero.high < 0.2
    assert full.high == pytest.approx(1.0) and 0.8 < full.low < 1.0


def test_wilson_rejects_impossible_counts_and_handles_empty():
    with pytest.raises(ValueError):
        wilson_interval(5, 4)
    assert math.isnan(wilson_interval(0, 0).value)


def test_sem_interval_is_the_papers_normal_interval():
    outcomes = [True] * 6 + [False] * 4
    got = sem_interval(outcomes)
    sem = math.sqrt(0.6 * 0.4 / 10)  # population SD / sqrt(n)
    assert got.low == pytest.approx(0.6 - 1.959963984540054 * sem)
    assert got.high == pytest.approx(0.6 + 1.959963984540054 * sem)


def test_mean_interval_t_and_degenerate_cases():
    got = mean_interval([1.0, 2.0, 3.0, 4.0])
    assert got.value == 2.5 and got.low < 2.5 < got.high
    assert mean_interval([2.0]) == Interval(2.0, 2.0, 2.0, 1)
    assert mean_interval([1.5, 1.5]).low == 1.5


def test_tie_ranks_group_overlapping_intervals():
    a = Interval(0.9, 0.85, 0.95, 100)
    b = Interval(0.86, 0.80, 0.91, 100)  # overlaps a: tied for first
    c = Interval(0.5, 0.4, 0.6, 100)  # below both
    empty = Interval(float("nan"), float("nan"), float("nan"), 0)
    assert tie_ranks([a, b, c, empty]) == [1, 1, 3, 4]
    assert tie_ranks([c, a], higher_is_better=False) == [1, 2]


def test_mean_interval_lower_bound_is_clipped_at_the_floor():
    spread = [0.0, 0.0, 0.0, 3.0]
    assert mean_interval(spread).low == 0.0
    assert mean_interval(spread, floor=None).low < 0.0


@pytest.mark.parametrize("n", [1, 2, 7, 30, 200])
def test_wilson_agrees_with_scipy(n):
    from scipy.stats import binomtest

    for k in range(n + 1):
        ours = wilson_interval(k, n)
        ref = binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert ours.low == pytest.approx(ref.low, abs=1e-12)
        assert ours.high == pytest.approx(ref.high, abs=1e-12)


def test_mcnemar_exact_matches_the_binomial_and_ignores_concordant_queries():
    from evaluator.stats import paired_comparison

    first = {f"q{i}": True for i in range(40)}
    second = {f"q{i}": i >= 10 for i in range(40)}  # 10 discordant, all favouring the first
    comparison = paired_comparison(first, second)
    assert (comparison.shared, comparison.only_first, comparison.only_second) == (40, 10, 0)
    assert comparison.p_value == pytest.approx(2 * 0.5**10)
    assert comparison.first_is_better() and not comparison.tied()
    same = paired_comparison(first, dict(first))
    assert same.p_value == 1.0 and same.tied()
    # queries only one agent was judged on do not count
    assert paired_comparison({"a": True, "b": True}, {"b": False}).shared == 1


def test_paired_ranks_separate_what_overlapping_intervals_cannot():
    from evaluator.stats import paired_ranks, tie_ranks, wilson_interval

    n = 60
    strong = {f"q{i}": i < 36 for i in range(n)}  # 60%
    weak = {f"q{i}": i < 27 for i in range(n)}  # 45%: solves a subset of what strong solves
    noisy = {f"q{i}": (i % 2 == 0) for i in range(n)}  # 50%, different queries
    ranks, tied_with = paired_ranks([strong, weak, noisy])
    assert ranks[0] == 1 and ranks[1] == 2  # 9 discordant, all one way: p = 0.004
    assert 2 in tied_with[0] and 0 in tied_with[2]
    # independent Wilson intervals at n = 60 overlap, so the unpaired rule ties all three
    intervals = [wilson_interval(sum(o.values()), n) for o in (strong, weak, noisy)]
    assert tie_ranks(intervals) == [1, 1, 1]
