"""The rank tests behind the dependence diagnostics (scipy.stats' `kendalltau` and `mannwhitneyu`, method "auto"),
asserted where the protocol leans on them: exact p-values for the small series the quick gate samples, valid
(conservative) ones at the profiles' 60 pairs near the declared p >= 0.001, ties, and scipy loaded only when the
diagnostics run. The exact null distributions are counted here from their definitions."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from fractions import Fraction

import pytest

from runners.perf.stats import PairObservation, diagnostics
from runners.schema.config import DiagnosticsThresholds
from runners.schema.report import DiagnosticCheck

THRESHOLD = DiagnosticsThresholds().min_trend_p


def _checks(logs: list[float], telemetry: list[float] | None = None) -> dict[str, DiagnosticCheck]:
    """The diagnostics of a series whose log ratios are `logs`, pairs alternating baseline-first/candidate-first."""
    observations = [
        PairObservation(pair=i, order="baseline_first" if i % 2 == 0 else "candidate_first", ratio=math.exp(value),
                        elapsed_s=float(i), telemetry={} if telemetry is None else {"cpu_mhz": telemetry[i]})
        for i, value in enumerate(logs)
    ]
    return {check.name: check for check in diagnostics(observations, DiagnosticsThresholds())}


def _with_inversions(n: int, inversions: int) -> list[float]:
    """A permutation of 0..n-1 with exactly `inversions` inversions (from its Lehmer code), as log-ratio-like values."""
    code = []
    for position in range(n):
        step = min(n - 1 - position, inversions)
        code.append(step)
        inversions -= step
    remaining = list(range(n))
    return [remaining.pop(step) / 1000 for step in code]


def _inversion_counts(n: int) -> list[int]:
    """How many permutations of n items have k = 0..n(n-1)/2 inversions (Kendall's S = pairs - 2 inversions)."""
    counts = [1]
    for j in range(2, n + 1):
        grown = [0] * (len(counts) + j - 1)
        for k, count in enumerate(counts):
            for extra in range(j):
                grown[k + extra] += count
        counts = grown
    return counts


def _exact_kendall_p(n: int, inversions: int) -> float:
    counts = _inversion_counts(n)
    tail = sum(counts[: min(inversions, len(counts) - 1 - inversions) + 1])
    return min(1.0, float(Fraction(2 * tail, math.factorial(n))))


def _u_counts(small: int, large: int) -> list[int]:
    """How many ways to place `small` of `small + large` distinct values in the first sample give U = 0..small*large."""
    ways = [[0] * (small * large + 1) for _ in range(small + 1)]
    ways[0][0] = 1
    for value in range(1, small + large + 1):
        for chosen in range(min(value, small), 0, -1):
            below = value - chosen  # values of the other sample smaller than this one
            for u in range(small * large, below - 1, -1):
                ways[chosen][u] += ways[chosen - 1][u - below]
    return ways[small]


def _exact_u_p(small: int, large: int, u: int) -> float:
    counts = _u_counts(small, large)
    tail = sum(counts[: min(u, small * large - u) + 1])
    return min(1.0, float(Fraction(2 * tail, math.comb(small + large, small))))


@pytest.mark.parametrize("n", [6, 8])
def test_the_trend_p_value_is_the_exact_permutation_test_for_short_series(n: int) -> None:
    """The quick gate's short series (tests' 10 pairs; any series up to 33 pairs without ties) get the exact
    p-value: here every ordering of the log ratios against the pair index is enumerated."""
    statistics: dict[tuple[int, ...], int] = {}
    for permutation in itertools.permutations(range(n)):
        statistics[permutation] = sum(1 if permutation[j] > permutation[i] else -1
                                      for i, j in itertools.combinations(range(n), 2))
    observed = (2, 0, 1, *range(3, n - 2), n - 1, n - 2)
    score = statistics[observed]
    extreme = sum(1 for value in statistics.values() if abs(value) >= abs(score))
    check = _checks([value / 1000 for value in observed])["trend vs pair index"]
    assert check.p_value == pytest.approx(extreme / math.factorial(n), rel=1e-12)
    assert check.statistic == pytest.approx(score / (n * (n - 1) / 2), rel=1e-12)


@pytest.mark.parametrize("inversions", [0, 1, 3, 11, 22])
def test_the_trend_p_value_is_exact_at_ten_pairs(inversions: int) -> None:
    check = _checks(_with_inversions(10, inversions))["trend vs pair index"]
    assert check.p_value == pytest.approx(_exact_kendall_p(10, inversions), rel=1e-12)


def test_the_order_effect_p_value_is_exact_for_five_pairs_each_way() -> None:
    """Ten pairs: five baseline-first against five candidate-first, every split of the ten values enumerated."""
    logs = [0.9, 0.1, 0.8, 0.2, 0.7, 0.4, 0.6, 0.3, 0.5, 0.0]
    first, second = logs[::2], logs[1::2]
    u_observed = sum(a > b for a in first for b in second)
    splits = [sum(logs[i] > logs[j] for i in chosen for j in range(10) if j not in chosen)
              for chosen in itertools.combinations(range(10), 5)]
    centre = 25 / 2
    extreme = sum(1 for u in splits if abs(u - centre) >= abs(u_observed - centre))
    check = _checks(logs)["order effect"]
    assert check.statistic == u_observed
    assert check.p_value == pytest.approx(extreme / len(splits), rel=1e-12)


def test_at_sixty_pairs_the_trend_test_is_conservative_near_the_declared_threshold() -> None:
    """Past 33 pairs the p-value is the normal approximation: never below the exact one where it matters (a breach
    the exact test would not make), and within 40% of it."""
    compared = 0
    for inversions in range(560, 700, 4):
        exact = _exact_kendall_p(60, inversions)
        if not 5e-4 <= exact <= 1e-2:
            continue
        check = _checks(_with_inversions(60, inversions))["trend vs pair index"]
        assert check.p_value is not None and exact <= check.p_value <= 1.4 * exact, (inversions, exact)
        assert check.breached == (check.p_value < THRESHOLD)
        compared += 1
    assert compared >= 15


def test_at_sixty_pairs_the_order_effect_is_conservative_near_the_declared_threshold() -> None:
    """30 baseline-first against 30 candidate-first pairs: the continuity-corrected approximation against the
    exact distribution of U."""
    compared = 0
    for u in range(200, 300, 5):
        exact = _exact_u_p(30, 30, u)
        if not 5e-4 <= exact <= 1e-2:
            continue
        # first sample's values: the ranks whose U against the rest is u (the smallest 30, the top ones moved up)
        ranks, left = list(range(30)), u
        for index in range(29, -1, -1):
            step = min(30 + index - ranks[index], left)
            ranks[index] += step
            left -= step
        rest = [rank for rank in range(60) if rank not in ranks]
        logs = [value / 1000 for pair in zip(ranks, rest, strict=True) for value in pair]
        check = _checks(logs)["order effect"]
        assert check.statistic == u
        assert check.p_value is not None and exact <= check.p_value <= 1.4 * exact, (u, exact)
        compared += 1
    assert compared >= 6


def test_tied_telemetry_is_tau_b_with_the_tie_corrected_variance() -> None:
    """CPU frequency readings repeat: ties count neither way, tau is tau-b and the p-value the normal
    approximation with the variance corrected for the tied groups (Kendall 1945), worked here by hand."""
    telemetry = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    logs = [0.01, 0.03, 0.02, 0.05, 0.04, 0.06]
    score = sum((1 if logs[j] > logs[i] else -1) * (telemetry[j] != telemetry[i])
                for i, j in itertools.combinations(range(6), 2))
    pairs, tied = 15, 3  # three groups of two equal readings
    variance = (6 * 5 * 17 - 3 * (2 * 1 * 9)) / 18
    check = _checks(logs, telemetry)["telemetry cpu_mhz"]
    assert check.statistic == pytest.approx(score / math.sqrt((pairs - tied) * pairs), rel=1e-12)
    assert check.p_value == pytest.approx(math.erfc(abs(score) / math.sqrt(variance) / math.sqrt(2)), rel=1e-12)


def test_identical_ratios_have_no_order_effect_and_no_trend() -> None:
    checks = _checks([0.0] * 10)
    assert checks["order effect"].p_value == 1.0 and not checks["order effect"].breached
    assert checks["trend vs pair index"].p_value is None
    assert "constant" in checks["trend vs pair index"].detail


def test_scipy_is_loaded_only_when_the_diagnostics_run() -> None:
    """`kv-parity --help` (and every command that judges no row) starts without scipy: it costs about a second
    of CPU to import."""
    program = (
        "import contextlib, io, sys\n"
        "from bot.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "print('scipy' in sys.modules)\n"
        "from runners.perf.stats import PairObservation, diagnostics\n"
        "from runners.schema.config import DiagnosticsThresholds\n"
        "series = [PairObservation(pair=i, order=('baseline_first', 'candidate_first')[i % 2], ratio=1 + i / 100,\n"
        "                          elapsed_s=float(i)) for i in range(10)]\n"
        "diagnostics(series, DiagnosticsThresholds())\n"
        "print('scipy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]
