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
