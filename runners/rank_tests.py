"""The two rank tests the dependence diagnostics use: Kendall's tau-b and the Mann-Whitney U, two-sided.

They follow scipy.stats' `kendalltau` and `mannwhitneyu` defaults exactly (method "auto": the exact null
distribution for small samples without ties, else the normal approximation with tie and continuity corrections),
and tests/test_rank_tests.py checks them against scipy. They live here rather than in scipy because a row job
imported all of scipy.stats for these two p-values: 0.9 s of CPU per kv-parity process and 110 MB per install.
The exact distributions are counted in Python integers, so they carry no rounding until the final division.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RankTest:
    statistic: float
    p_value: float


def normal_cdf(x: float) -> float:
    """Phi(x), split as cephes' `ndtr` is (erf near zero, erfc in the tails) so tail p-values keep their digits."""
    scaled = x / math.sqrt(2.0)
    if abs(scaled) < 1.0 / math.sqrt(2.0):
        return 0.5 + 0.5 * math.erf(scaled)
    tail = 0.5 * math.erfc(abs(scaled))
    return 1.0 - tail if scaled > 0 else tail


def _tie_groups(values: np.ndarray) -> np.ndarray:
    """Sizes of the groups of equal values that have more than one member."""
    counts = np.unique(values, return_counts=True)[1].astype(np.int64)
    return counts[counts > 1]


def _permutations_with_inversions(n: int, most: int) -> list[int]:
    """How many permutations of n items have k inversions, k = 0..most: the product over j of 1 + q + ... + q^(j-1),
    each factor applied as (1 - q^j) / (1 - q), i.e. a running sum over a window of j coefficients."""
    counts = [1] + [0] * most
    for j in range(2, n + 1):
        running = list(itertools.accumulate(counts))
        counts = [running[k] - (running[k - j] if k >= j else 0) for k in range(most + 1)]
    return counts


def kendall_tau_b(x: list[float], y: list[float]) -> RankTest:
    """Kendall's tau-b of two equally long series with its two-sided p-value; neither series may be constant."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = a.size
    if n != b.size or n < 2:
        raise ValueError(f"Kendall's tau needs two series of one length >= 2, got {a.size} and {b.size}")
    score = sum(int(np.sum(np.sign(a[i + 1 :] - a[i]) * np.sign(b[i + 1 :] - b[i]))) for i in range(n - 1))
    pairs = n * (n - 1) // 2
    x_ties, y_ties = _tie_groups(a), _tie_groups(b)
    x_tied, y_tied = int(np.sum(x_ties * (x_ties - 1) // 2)), int(np.sum(y_ties * (y_ties - 1) // 2))
    if x_tied == pairs or y_tied == pairs:
        raise ValueError("Kendall's tau is undefined for a constant series")
    tau = min(1.0, max(-1.0, score / math.sqrt(pairs - x_tied) / math.sqrt(pairs - y_tied)))
    discordant = (pairs - score) // 2 if not (x_tied or y_tied) else None
    if discordant is not None and (n <= 33 or min(discordant, pairs - discordant) <= 1):
        concordant = min(pairs - discordant, discordant)
        if 4 * concordant == n * (n - 1):
            return RankTest(tau, 1.0)
        counts = _permutations_with_inversions(n, concordant)
        return RankTest(tau, min(1.0, 2 * sum(counts) / math.factorial(n)))
    m = n * (n - 1)

    def moments(ties: np.ndarray) -> tuple[int, int]:
        return int(np.sum(ties * (ties - 1) * (ties - 2))), int(np.sum(ties * (ties - 1) * (2 * ties + 5)))

    (x0, x1), (y0, y1) = moments(x_ties), moments(y_ties)
    variance = (m * (2 * n + 5) - x1 - y1) / 18 + 2 * x_tied * y_tied / m + x0 * y0 / (9 * m * (n - 2))
    return RankTest(tau, min(1.0, 2 * normal_cdf(-abs(score) / math.sqrt(variance))))


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, tied values sharing the mean of the ranks they span."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size, dtype=float)
    sorted_values = values[order]
    start = 0
    for end in range(1, values.size + 1):
        if end == values.size or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + 1 + end) / 2
            start = end
    return ranks


def mann_whitney_u(first: list[float], second: list[float]) -> RankTest:
    """U of `first` against `second` with its two-sided p-value (continuity-corrected when approximated)."""
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    n1, n2 = a.size, b.size
    if not n1 or not n2:
        raise ValueError("the Mann-Whitney U needs two non-empty samples")
    combined = np.concatenate([a, b])
    u1 = float(np.sum(_average_ranks(combined)[:n1])) - n1 * (n1 + 1) / 2
    u = max(u1, n1 * n2 - u1)
    ties = _tie_groups(combined)
    if (n1 <= 8 or n2 <= 8) and not ties.size:
        # P(U >= u) = P(U <= n1*n2 - u) by symmetry, u being the larger of the two U's.
        arrangements = _u_distribution(min(n1, n2), max(n1, n2))
        tail = sum(arrangements[: n1 * n2 - int(u) + 1])
        return RankTest(u1, min(1.0, 2 * tail / math.comb(n1 + n2, n1)))
    n = n1 + n2
    spread = math.sqrt(n1 * n2 / 12 * ((n + 1) - float(np.sum(ties**3 - ties)) / (n * (n - 1))))
    if spread == 0.0:
        return RankTest(u1, 1.0)  # every value tied: no order to find, U sits at its mean
    z = (u - n1 * n2 / 2 - 0.5) / spread
    return RankTest(u1, min(1.0, max(0.0, 2 * normal_cdf(-z))))


def _u_distribution(small: int, large: int) -> list[int]:
    """How many arrangements give each U = 0..small*large: the q-binomial [small + large choose small]."""
    top = small * large
    # [m+n, m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i), built one factor at a time on integer coefficients.
    counts = [1] + [0] * top
    for i in range(1, small + 1):
        for power in range(top, large + i - 1, -1):
            counts[power] -= counts[power - large - i]
        for power in range(i, top + 1):
            counts[power] += counts[power - i]
    return counts
