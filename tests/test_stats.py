"""Stage 7 statistics: exact bounds against scipy's binomial, the gate, diagnostics and the bootstrap."""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
import pytest
from runners.perf.stats import (
    PairObservation,
    autocorrelation,
    bootstrap,
    bounds,
    decide,
    diagnostics,
    gate,
    observations,
    order_statistic_bounds,
)
from runners.schema.config import DiagnosticsThresholds, PerfConfig
from runners.schema.report import PairPlan, PerfVerdict, Sample


def _scipy_indices(scipy_stats: ModuleType, n: int, confidence: float) -> tuple[int, int]:
    """Largest k with P(Bin(n, 1/2) <= k-1) <= 1 - confidence, straight from scipy."""
    lower = max(k for k in range(1, n + 1) if scipy_stats.binom.cdf(k - 1, n, 0.5) <= 1 - confidence + 1e-15)
    return lower, n + 1 - lower


@pytest.mark.parametrize("n", [20, 60, 100])
def test_order_statistic_indices_agree_with_scipy_binomial(scipy_stats: ModuleType, n: int) -> None:
    lower, upper, coverage_lower, coverage_upper = order_statistic_bounds(n, 0.95)
    assert (lower, upper) == _scipy_indices(scipy_stats, n, 0.95)
    assert coverage_lower == pytest.approx(1 - scipy_stats.binom.cdf(lower - 1, n, 0.5), rel=1e-12)
    assert coverage_upper == pytest.approx(scipy_stats.binom.cdf(upper - 1, n, 0.5), rel=1e-12)
    assert coverage_lower >= 0.95
    assert scipy_stats.binom.cdf(lower, n, 0.5) > 0.05, "one index higher would lose the 95% coverage"


def test_protocol_indices_for_sixty_pairs() -> None:
    assert order_statistic_bounds(60, 0.95)[:2] == (24, 37)


@pytest.mark.parametrize("confidence", [0.9, 0.99])
@pytest.mark.parametrize("n", [10, 33, 61, 200])
def test_other_sizes_and_levels_agree_with_scipy(scipy_stats: ModuleType, n: int, confidence: float) -> None:
    assert order_statistic_bounds(n, confidence)[:2] == _scipy_indices(scipy_stats, n, confidence)


def test_too_few_ratios_for_the_confidence_is_an_error() -> None:
    with pytest.raises(ValueError, match="cannot give"):
        order_statistic_bounds(4, 0.95)


def test_bounds_pick_the_order_statistics() -> None:
    ratios = [1.0 + i / 1000 for i in range(60)][::-1]
    result = bounds(ratios, 0.95)
    assert (result.lower, result.upper) == (1.023, 1.036)
    assert result.median == pytest.approx(1.0295)


@pytest.mark.parametrize(
    ("low", "high", "verdict"),
    [
        (0.98, 1.05, PerfVerdict.PASS),
        (1.051, 1.2, PerfVerdict.FAIL),
        (1.0, 1.06, PerfVerdict.INCONCLUSIVE),
        (1.05, 1.07, PerfVerdict.INCONCLUSIVE),
    ],
)
def test_gate(low: float, high: float, verdict: PerfVerdict) -> None:
    ratios = [low] * 30 + [high] * 30
    result = bounds(ratios, 0.95).model_copy(update={"lower": low, "upper": high})
    assert gate(result, 1.05) == verdict


def test_autocorrelation_matches_the_textbook_formula() -> None:
    x = [1.0, 3.0, 2.0, 5.0, 4.0, 6.0]
    mean = sum(x) / len(x)
    expected = sum((x[i] - mean) * (x[i + 1] - mean) for i in range(5)) / sum((v - mean) ** 2 for v in x)
    assert autocorrelation(x, 1) == pytest.approx(expected)
    assert autocorrelation([2.0] * 6, 1) is None


def _pairs(
    logs: list[float], orders: list[str] | None = None, telemetry: list[float] | None = None
) -> list[PairObservation]:
    orders = orders or ["baseline_first" if i % 2 else "candidate_first" for i in range(len(logs))]
    return [
        PairObservation(
            pair=i,
            order=orders[i],
            ratio=math.exp(v),
            elapsed_s=2.0 * i,
            telemetry={} if telemetry is None else {"temperature_c": telemetry[i]},
        )
        for i, v in enumerate(logs)
    ]


THRESHOLDS = DiagnosticsThresholds()


def _iid_logs(n: int = 60, seed: int = 7) -> list[float]:
    return [float(v) for v in np.random.default_rng(seed).normal(0.0, 0.01, n)]


def test_iid_series_breaches_nothing_and_reports_missing_telemetry() -> None:
    checks = diagnostics(_pairs(_iid_logs()), THRESHOLDS)
    assert not [c for c in checks if c.breached]
    names = [c.name for c in checks]
    assert names == [
        "autocorrelation lag 1",
        "autocorrelation lag 2",
        "autocorrelation lag 3",
        "trend vs pair index",
        "trend vs elapsed time",
        "order effect",
        "telemetry",
    ]
    telemetry = checks[-1]
    assert telemetry.statistic is None and telemetry.detail.startswith("not available")


def test_trend_breaches_both_trend_checks() -> None:
    logs = [0.001 * i + v for i, v in enumerate(_iid_logs())]
    breached = {c.name for c in diagnostics(_pairs(logs), THRESHOLDS) if c.breached}
    assert {"trend vs pair index", "trend vs elapsed time"} <= breached


def test_random_walk_breaches_autocorrelation() -> None:
    logs = list(np.cumsum(_iid_logs()))
    breached = {c.name for c in diagnostics(_pairs(logs), THRESHOLDS) if c.breached}
    assert "autocorrelation lag 1" in breached


def test_order_effect_is_detected() -> None:
    orders = ["baseline_first" if i % 2 else "candidate_first" for i in range(60)]
    logs = [v + (0.03 if o == "baseline_first" else 0.0) for v, o in zip(_iid_logs(), orders, strict=True)]
    check = next(c for c in diagnostics(_pairs(logs, orders), THRESHOLDS) if c.name == "order effect")
    assert check.breached and check.p_value is not None and check.p_value < 0.01


def test_telemetry_correlation_is_checked_when_recorded() -> None:
    logs = _iid_logs()
    temperature = [60.0 + 500 * v for v in logs]
    check = next(
        c
        for c in diagnostics(_pairs(logs, telemetry=temperature), THRESHOLDS)
        if c.name == "telemetry temperature_c"
    )
    assert check.breached and check.statistic == pytest.approx(1.0)


def test_bootstrap_is_reproducible_from_its_seed() -> None:
    ratios = [math.exp(v) for v in _iid_logs()]
    first, second = bootstrap(ratios, 500, seed=11), bootstrap(ratios, 500, seed=11)
    assert first == second
    assert first.ci_low <= first.median_ratio <= first.ci_high
    assert bootstrap(ratios, 500, seed=12) != first


def test_decide_never_applies_the_whole_series_gate_after_a_breach() -> None:
    logs = [0.2 + 0.002 * i for i in range(60)]
    decision = decide(_pairs(logs), PerfConfig(dependence_method="none"), bootstrap_seed=1)
    assert decision.bounds.lower > 1.05, "the gate alone would say FAIL"
    assert decision.verdict == PerfVerdict.INCONCLUSIVE
    assert "trend vs pair index" in decision.reason and "not applied" in decision.reason
    assert 'perf.dependence_method = "none"' in decision.reason
    assert decision.dependence is None
    assert any(c.breached for c in decision.diagnostics)


@pytest.mark.parametrize(
    ("centre", "verdict"),
    [(1.0, PerfVerdict.PASS), (1.2, PerfVerdict.FAIL), (1.05, PerfVerdict.INCONCLUSIVE)],
)
def test_decide_applies_the_gate_to_a_clean_series(centre: float, verdict: PerfVerdict) -> None:
    logs = [math.log(centre) + v for v in _iid_logs()]
    decision = decide(_pairs(logs), PerfConfig(), bootstrap_seed=1)
    assert decision.verdict == verdict
    assert decision.dependence is None, "the dependence-aware method runs only after a breach"


def _sample(arm: str, pair: int, attempt: int, position: int, metric: float, status: str = "ok") -> Sample:
    return Sample.model_validate(
        {
            "kind": "measured",
            "arm": arm,
            "pair": pair,
            "attempt": attempt,
            "position": position,
            "argv": [],
            "started_unix": 100.0 + 10 * pair + attempt + position / 2,
            "ended_unix": 0.0,
            "elapsed_s": 0.1,
            "exit_code": 0,
            "timing_record": None,
            "metric_ms": metric,
            "status": status,
            "cpu_set": [1],
            "affinity_observed": [1],
            "affinity_ok": True,
            "interference_ms": 0.0,
            "telemetry": {"frequency_mhz": 2000.0 + pair},
        }
    )


def test_observations_use_the_final_valid_attempt() -> None:
    schedule = [PairPlan(pair=0, order="baseline_first"), PairPlan(pair=1, order="candidate_first")]
    samples = [
        _sample("baseline", 0, 0, 0, 100.0, "invalidated"),
        _sample("candidate", 0, 0, 1, 300.0, "invalidated"),
        _sample("baseline", 0, 1, 0, 100.0),
        _sample("candidate", 0, 1, 1, 110.0),
        _sample("candidate", 1, 0, 0, 90.0),
        _sample("baseline", 1, 0, 1, 100.0),
    ]
    found = observations(schedule, samples)
    assert [(o.pair, o.order, o.ratio) for o in found] == [
        (0, "baseline_first", pytest.approx(1.1)),
        (1, "candidate_first", pytest.approx(0.9)),
    ]
    assert found[0].elapsed_s == pytest.approx(1.0)
    assert found[1].telemetry == {"frequency_mhz": 2001.0}
