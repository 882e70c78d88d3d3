"""runners/rank_tests.py against scipy.stats (a dev dependency only): same statistics, same p-values, in every
branch scipy's method "auto" takes: exact small samples, the normal approximation, ties, and the edges."""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
import pytest

from runners.rank_tests import kendall_tau_b, mann_whitney_u, normal_cdf


def _series(rng: np.random.Generator, n: int, tied: bool) -> list[float]:
    """Log-ratio-like values; `tied` rounds them onto a coarse grid so equal values occur."""
    values = rng.normal(0.0, 0.03, n)
    return [float(v) for v in (np.round(values, 2) if tied else values)]


@pytest.mark.parametrize("n", [3, 7, 20, 33, 34, 60])
@pytest.mark.parametrize("tied", [False, True])
def test_kendall_tau_b_matches_scipy(scipy_stats: ModuleType, n: int, tied: bool) -> None:
    rng = np.random.default_rng(n * 2 + tied)
    for _ in range(10):
        x = [float(i) for i in range(n)] if rng.random() < 0.5 else _series(rng, n, tied)
        y = _series(rng, n, tied)
        if len(set(x)) < 2 or len(set(y)) < 2:
            continue
        ours, theirs = kendall_tau_b(x, y), scipy_stats.kendalltau(x, y)
        assert ours.statistic == pytest.approx(float(theirs.statistic), rel=1e-12, abs=1e-15)
        assert ours.p_value == pytest.approx(float(theirs.pvalue), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("n", [5, 8, 40, 60])
def test_kendall_exact_edges_match_scipy(scipy_stats: ModuleType, n: int) -> None:
    """Perfect order (no discordant pair, scipy's exact branch even past 33), one swap, and its reversal."""
    ordered = [float(i) for i in range(n)]
    swapped = ordered[:]
    swapped[0], swapped[1] = swapped[1], swapped[0]
    for y in (ordered, swapped, ordered[::-1], swapped[::-1]):
        ours, theirs = kendall_tau_b(ordered, y), scipy_stats.kendalltau(ordered, y)
        assert ours.statistic == pytest.approx(float(theirs.statistic), rel=1e-12)
        assert ours.p_value == pytest.approx(float(theirs.pvalue), rel=1e-9, abs=1e-300)


def test_kendall_with_no_trend_at_all_has_p_one(scipy_stats: ModuleType) -> None:
    """n(n-1) = 4c: exactly half the pairs concordant, the centre of the exact distribution."""
    x, y = [0.0, 1.0, 2.0, 3.0], [2.0, 0.0, 3.0, 1.0]
    assert kendall_tau_b(x, y).statistic == 0.0
    assert kendall_tau_b(x, y).p_value == pytest.approx(float(scipy_stats.kendalltau(x, y).pvalue))


@pytest.mark.parametrize(("n1", "n2"), [(1, 1), (1, 5), (4, 9), (8, 30), (9, 9), (31, 29)])
@pytest.mark.parametrize("tied", [False, True])
def test_mann_whitney_u_matches_scipy(scipy_stats: ModuleType, n1: int, n2: int, tied: bool) -> None:
    rng = np.random.default_rng(n1 * 100 + n2 * 2 + tied)
    for _ in range(10):
        first, second = _series(rng, n1, tied), [v + rng.choice([0.0, 0.02]) for v in _series(rng, n2, tied)]
        ours = mann_whitney_u(first, second)
        theirs = scipy_stats.mannwhitneyu(first, second, alternative="two-sided")
        assert ours.statistic == float(theirs.statistic)
        assert ours.p_value == pytest.approx(float(theirs.pvalue), rel=1e-9, abs=1e-300)


def test_fully_separated_samples_reach_the_exact_tail(scipy_stats: ModuleType) -> None:
    first, second = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]
    ours = mann_whitney_u(first, second)
    assert ours.statistic == 0.0
    assert ours.p_value == pytest.approx(2 / math.comb(7, 3))
    assert ours.p_value == pytest.approx(float(scipy_stats.mannwhitneyu(first, second).pvalue))


def test_the_normal_cdf_keeps_tail_digits(scipy_stats: ModuleType) -> None:
    for x in (-40.0, -8.5, -3.0, -0.5, 0.0, 0.3, 2.0, 9.0):
        assert normal_cdf(x) == pytest.approx(float(scipy_stats.norm.cdf(x)), rel=1e-13, abs=1e-300)


def test_all_tied_samples_have_p_one(scipy_stats: ModuleType) -> None:
    for first, second in (([0.05], [0.05]), ([0.05, 0.05], [0.05, 0.05, 0.05])):
        theirs = scipy_stats.mannwhitneyu(first, second)
        assert mann_whitney_u(first, second).p_value == float(theirs.pvalue) == 1.0


def test_degenerate_input_is_refused() -> None:
    with pytest.raises(ValueError, match="constant series"):
        kendall_tau_b([1.0, 2.0, 3.0], [5.0, 5.0, 5.0])
    with pytest.raises(ValueError, match="one length"):
        kendall_tau_b([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="non-empty"):
        mann_whitney_u([], [1.0])
