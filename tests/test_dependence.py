"""The predeclared dependence-aware method (contiguous batches, exact bounds, intersection-union test).

Its level is proven two ways, neither timed: exactly, by the Poisson-binomial distribution of the count of
ratios below the threshold when pairs are independent but not identically distributed (drift), and by seeded
simulation of A/A campaigns under the fixture's noise shapes and of the least favourable null.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest
from runners.perf.stats import PairObservation, batch_iut, decide, order_statistic_bounds
from runners.schema.config import PROFILES_DIR, ConfigError, PerfConfig, parse_config
from runners.schema.report import PerfVerdict

from runners.verify import verify_performance
from tests.report_factory import make_report

ALPHA = 0.05
BATCH = 20
"""Default batch size: 60 pairs in 3 batches."""


def _poisson_binomial_cdf(probabilities: list[float], k: int) -> float:
    """Exact P(S <= k) for S a sum of independent Bernoulli(p_i) (dynamic programming over the trials)."""
    distribution = [1.0]
    for p in probabilities:
        step = [0.0] * (len(distribution) + 1)
        for count, mass in enumerate(distribution):
            step[count] += mass * (1 - p)
            step[count + 1] += mass * p
        distribution = step
    return sum(distribution[: k + 1])


def _profile(name: str) -> list[float]:
    """q_i = P(ratio_i <= threshold) across one batch, averaging exactly 1/2 (the batch median at the threshold)."""
    i = np.arange(BATCH)
    if name == "linear drift":
        return list(np.linspace(0.02, 0.98, BATCH))
    if name == "step":
        return [0.9 if j < BATCH // 2 else 0.1 for j in i]
    if name == "periodic":
        return list(0.5 + 0.45 * np.sin(2 * math.pi * i / 9) - np.mean(0.45 * np.sin(2 * math.pi * i / 9)))
    return [0.5] * BATCH


@pytest.mark.parametrize("profile", ["identical", "linear drift", "step", "periodic"])
def test_one_batch_keeps_its_level_when_pairs_drift_exactly(profile: str) -> None:
    """Hoeffding (1956): with independent non-identical pairs, X(k) > t is no likelier than for iid pairs."""
    q = _profile(profile)
    assert sum(q) == pytest.approx(BATCH / 2)
    lower, upper, coverage_lower, coverage_upper = order_statistic_bounds(BATCH, 1 - ALPHA)
    false_fail = _poisson_binomial_cdf(q, lower - 1)  # lower bound > t  <=>  at most k-1 ratios <= t
    false_pass = _poisson_binomial_cdf([1 - p for p in q], BATCH - upper)  # upper <= t  <=>  <= n-u ratios > t
    binomial = float(Fraction(sum(math.comb(BATCH, j) for j in range(lower)), 2**BATCH))
    assert false_fail <= binomial + 1e-12
    assert false_pass <= binomial + 1e-12
    assert binomial == pytest.approx(1 - coverage_lower) and binomial == pytest.approx(1 - coverage_upper)
    assert binomial <= ALPHA


def test_level_holds_for_many_random_drift_profiles() -> None:
    """500 seeded heterogeneous profiles, each averaging 1/2: none exceeds the binomial tail."""
    lower = order_statistic_bounds(BATCH, 1 - ALPHA)[0]
    binomial = float(Fraction(sum(math.comb(BATCH, j) for j in range(lower)), 2**BATCH))
    rng = np.random.default_rng(20261201)
    worst = 0.0
    for _ in range(500):
        half = rng.uniform(-0.5, 0.5, BATCH // 2)
        q = list(0.5 + half) + list(0.5 - half)
        worst = max(worst, _poisson_binomial_cdf(q, lower - 1))
    assert worst <= binomial + 1e-12


def test_iut_level_is_that_of_the_batch_at_the_threshold() -> None:
    """FAIL needs every batch; when one batch's median sits at the threshold and the others are far above it,
    P(FAIL) is the product of the batch probabilities, at most that one batch's 1 - coverage."""
    lower, _, coverage_lower, _ = order_statistic_bounds(BATCH, 1 - ALPHA)
    batches = [_profile("linear drift"), [0.01] * BATCH, [0.01] * BATCH]
    per_batch = [_poisson_binomial_cdf(q, lower - 1) for q in batches]
    false_fail = math.prod(per_batch)
    assert false_fail <= min(per_batch) <= 1 - coverage_lower <= ALPHA


def test_least_favourable_null_simulated_false_fail_rate_matches_the_exact_value() -> None:
    """5,000 seeded campaigns: batch 0's true median ratio is exactly the threshold (with drift inside the
    batch), batches 1 and 2 are 20% slower. The simulated FAIL share is within 4 standard errors of the
    exact 1 - coverage and below alpha."""
    perf = PerfConfig()
    rng = np.random.default_rng(7)
    _, _, coverage_lower, _ = order_statistic_bounds(BATCH, perf.confidence)
    exact = 1 - coverage_lower
    runs, fails = 5_000, 0
    shift = np.linspace(-0.02, 0.02, BATCH)  # drift inside batch 0, symmetric so its median stays at t
    for _ in range(runs):
        noise = rng.normal(0.0, 0.01, 3 * BATCH)
        signs = rng.choice([-1.0, 1.0], BATCH)  # each pair of batch 0 is as likely below t as above it
        logs = np.concatenate(
            [math.log(perf.threshold) + signs * np.abs(noise[:BATCH] + shift), math.log(1.2) + noise[BATCH:]]
        )
        result = batch_iut([float(v) for v in np.exp(logs)], perf, ["simulated"])
        fails += result.verdict == PerfVerdict.FAIL
    share = fails / runs
    assert share <= ALPHA
    assert abs(share - exact) <= 4 * math.sqrt(exact * (1 - exact) / runs)


def _fixture_noise(index: np.ndarray, shape: str) -> np.ndarray:
    """The fixture's noise multiplier (noise.rs) over invocation indices of a 60-pair campaign."""
    t = np.minimum(index / 120.0, 1.0)
    if shape == "slow drift":
        return 1.0 + 0.25 * t
    if shape == "step":
        return 1.0 + 0.15 * (t >= 0.5)
    if shape == "periodic":
        return 1.0 + 0.05 * np.sin(2 * math.pi * (index / 9.0 + 0.3))
    return 1.0 + 1.0 * t  # partial-work: the shared half of the work drifts to 2x


SEEDS = {"slow drift": 11, "step": 12, "periodic": 13, "partial-work": 14}


@pytest.mark.parametrize("shape", sorted(SEEDS))
def test_aa_under_drift_fails_less_often_than_alpha(shape: str) -> None:
    """100 seeded A/A campaigns per noise shape of the fixture, through the whole decision (diagnostics, then
    the whole-series gate or the batch IUT): no more than alpha of them FAIL."""
    perf = PerfConfig(bootstrap_resamples=100)
    rng = np.random.default_rng(SEEDS[shape])
    fails = 0
    runs = 100
    for _ in range(runs):
        first = rng.permutation(np.repeat([0, 1], 30))  # 1: candidate first
        index = 2 * np.arange(60)
        base_index, cand_index = index + first, index + (1 - first)
        shared = 0.5 if shape == "partial-work" else 1.0
        base = (1 - shared) + shared * _fixture_noise(base_index, shape)
        cand = (1 - shared) + shared * _fixture_noise(cand_index, shape)
        ratios = cand * np.exp(rng.normal(0, 0.015, 60)) / (base * np.exp(rng.normal(0, 0.015, 60)))
        pairs = [
            PairObservation(
                pair=i,
                order="candidate_first" if first[i] else "baseline_first",
                ratio=float(r),
                elapsed_s=0.05 * i,
            )
            for i, r in enumerate(ratios)
        ]
        decision = decide(pairs, perf, bootstrap_seed=1)
        fails += decision.verdict == PerfVerdict.FAIL
    assert fails / runs <= ALPHA


def _drifting(start: float, end: float, seed: int = 3) -> list[PairObservation]:
    rng = np.random.default_rng(seed)
    centre = np.linspace(math.log(start), math.log(end), 60)
    return [
        PairObservation(
            pair=i,
            order="candidate_first" if i % 2 else "baseline_first",
            ratio=float(math.exp(c + rng.normal(0, 0.004))),
            elapsed_s=2.0 * i,
        )
        for i, c in enumerate(centre)
    ]


def test_drifting_ten_percent_slowdown_is_decided_fail_with_both_results_shown() -> None:
    decision = decide(_drifting(1.12, 1.085), PerfConfig(), bootstrap_seed=1)
    assert any(c.breached and c.name == "trend vs pair index" for c in decision.diagnostics)
    assert decision.verdict == PerfVerdict.FAIL
    assert decision.dependence is not None
    assert all(b.bounds.lower > 1.05 for b in decision.dependence.batches)
    assert "→ batch IUT over 3×20 pairs applied: FAIL with every batch lower bound > 1.05" in decision.reason
    assert f"X(24)={decision.bounds.lower:.4f}" in decision.reason, "the whole-series bounds are shown too"


def test_drifting_aa_is_decided_pass() -> None:
    decision = decide(_drifting(0.985, 1.015), PerfConfig(), bootstrap_seed=1)
    assert decision.dependence is not None and decision.verdict == PerfVerdict.PASS
    assert "PASS with every batch upper bound ≤ 1.05" in decision.dependence.line


def test_ratio_drifting_across_the_threshold_stays_inconclusive() -> None:
    """The issue's case: thirds' lower bounds 1.09, 1.08, 1.01; no batch-wise claim holds for all batches."""
    decision = decide(_drifting(1.12, 1.0), PerfConfig(), bootstrap_seed=1)
    assert decision.dependence is not None
    assert {b.verdict for b in decision.dependence.batches} >= {PerfVerdict.FAIL}
    assert decision.verdict == PerfVerdict.INCONCLUSIVE
    assert "INCONCLUSIVE, the batches do not all clear 1.05" in decision.reason


def test_batches_are_contiguous_in_run_order() -> None:
    ratios = [1.0] * 20 + [1.1] * 20 + [1.2] * 20
    result = batch_iut(ratios, PerfConfig(), ["x"])
    assert [(b.first_pair, b.last_pair, b.bounds.median) for b in result.batches] == [
        (0, 19, 1.0),
        (20, 39, 1.1),
        (40, 59, 1.2),
    ]
    assert [b.verdict for b in result.batches] == [PerfVerdict.PASS, PerfVerdict.FAIL, PerfVerdict.FAIL]
    assert result.verdict == PerfVerdict.INCONCLUSIVE


def test_method_is_declared_on_by_default_and_batches_are_validated() -> None:
    assert PerfConfig().dependence_method == "batch_iut" and PerfConfig().batch_count() == 3
    assert PerfConfig(pairs=10).batch_count() == 2, "short series still get two batches of five"
    assert PerfConfig(pairs=100).batch_count() == 5 and PerfConfig(dependence_batches=4).batch_count() == 4
    with pytest.raises(ValueError, match="batches of 4 pairs cannot give"):
        PerfConfig(pairs=20, dependence_batches=5)
    assert PerfConfig(pairs=20, dependence_batches=5, dependence_method="none").dependence_method == "none"


def test_uneven_batches_differ_by_at_most_one_pair_and_cover_every_pair() -> None:
    result = batch_iut([1.2] * 62, PerfConfig(pairs=62), ["x"])
    assert [(b.first_pair, b.last_pair) for b in result.batches] == [(0, 19), (20, 40), (41, 61)]
    assert result.verdict == PerfVerdict.FAIL
    assert "3 batches of 20–21 pairs" in result.line and "X(6)" not in result.line


def test_batches_too_small_for_an_exact_bound_cannot_decide() -> None:
    """A config copied without validation (as tests and tools do) still never raises or decides blindly."""
    perf = PerfConfig().model_copy(update={"pairs": 20, "dependence_batches": 5})
    result = batch_iut([1.3] * 20, perf, ["x"])
    assert result.verdict == PerfVerdict.INCONCLUSIVE and result.batches == []
    assert "batches of 4 pairs are too small for an exact 95% bound" in result.line


def test_config_errors_name_the_key() -> None:
    text = (PROFILES_DIR / "demo.toml").read_text(encoding="utf-8")
    assert "[sizes]" in text
    for line, key in (
        ('dependence_method = "block_bootstrap"', "perf.dependence_method"),
        ("dependence_batches = 13", "perf: Value error, batches of 4 pairs cannot give"),
    ):
        with pytest.raises(ConfigError, match=re.escape(key)):
            parse_config(text.replace("[sizes]", f"{line}\n\n[sizes]"), "demo.toml")


def test_verify_recomputes_the_dependence_result() -> None:
    report = make_report("perf_fail_after_breach")
    row = next(r for r in report.rows if r.performance is not None and r.performance.dependence is not None)
    perf = row.performance
    assert perf is not None and perf.dependence is not None
    config = report.config.perf
    assert verify_performance(perf, config, row.row.id) == []
    batches = list(perf.dependence.batches)
    batches[1] = batches[1].model_copy(update={"bounds": batches[1].bounds.model_copy(update={"lower": 1.04})})
    forged = perf.model_copy(update={"dependence": perf.dependence.model_copy(update={"batches": batches})})
    assert "performance dependence differ from their recomputation" in verify_performance(forged, config, row.row.id)
    undeclared = perf.model_copy(update={"verdict": PerfVerdict.INCONCLUSIVE, "dependence": None})
    problems = verify_performance(undeclared, config, row.row.id)
    assert "performance verdict INCONCLUSIVE, recomputed FAIL" in problems
