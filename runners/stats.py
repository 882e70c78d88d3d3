"""Stage 7 statistics: exact order-statistic bounds, serial-dependence diagnostics, paired bootstrap.

Pure functions of the recorded pairs, so the campaign and `kv-parity verify` compute the same numbers. The
gate is distribution-free but conditional on exchangeable ratios; the diagnostics are how that assumption is
checked, and a breach replaces the whole-series gate by the predeclared dependence-aware method (contiguous
batches combined as an intersection-union test), or by INCONCLUSIVE when none is declared (Stage 7.4-7.5).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from runners.rank_tests import kendall_tau_b, mann_whitney_u
from runners.schema.config import DiagnosticsThresholds, PerfConfig
from runners.schema.report import (
    BatchBounds,
    Bootstrap,
    Bounds,
    DependenceResult,
    DiagnosticCheck,
    PairPlan,
    PerfVerdict,
    Sample,
)

SAMPLING_ASSUMPTION = (
    "paired ratios are exchangeable across pairs: one pinned fresh process at a time, adjacent pair members, "
    "balanced arm order in a seeded random sequence; checked by the predeclared dependence diagnostics"
)

BATCH_IUT_ASSUMPTION = (
    "pairs are independent of one another given the node's drift; ratios need not be identically "
    "distributed, so drift, steps and periodic load are allowed. Within each contiguous batch the exact bound "
    "X(k) covers the median of that batch's average ratio distribution with at least the stated coverage "
    "(Hoeffding 1956, Theorem 4: a sum of independent non-identical Bernoulli trials is no more spread out "
    "than the binomial with the same mean). FAIL claims every batch's median exceeds the threshold and PASS "
    "that every batch's median is at most it; each claim is an intersection-union test, so its error rate is "
    "at most one batch's, 1 - coverage, without multiplicity correction"
)


@dataclass(frozen=True)
class PairObservation:
    """One completed pair as the statistics see it: the final valid attempt only."""

    pair: int
    order: str
    ratio: float
    elapsed_s: float
    """Start of the pair's first invocation, relative to the first measured invocation of the row."""
    telemetry: dict[str, float] = field(default_factory=dict)
    """Per-key mean over the pair's two invocations, only for keys both recorded."""


def _binomial_half_cdf(n: int, k: int) -> Fraction:
    """Exact P(Binomial(n, 1/2) <= k)."""
    return Fraction(sum(math.comb(n, i) for i in range(0, k + 1)), 2**n)


@functools.lru_cache(maxsize=64)
def order_statistic_bounds(n: int, confidence: float) -> tuple[int, int, float, float]:
    """1-based (lower, upper) order-statistic indices of one-sided bounds for the median, with exact coverage.

    X_(k) <= median unless at most k-1 observations fall below it, so P(X_(k) <= median) = 1 - F(k-1) with F
    the Binomial(n, 1/2) CDF; the lower index is the largest k whose coverage still reaches `confidence`. The
    upper index mirrors it (n + 1 - k) by symmetry of Binomial(n, 1/2).
    """
    if n < 1:
        raise ValueError("order-statistic bounds need at least one ratio")
    alpha = Fraction(1) - Fraction(repr(confidence))
    lower = 0
    for k in range(1, n + 1):
        if _binomial_half_cdf(n, k - 1) <= alpha:
            lower = k
        else:
            break
    if lower == 0:
        raise ValueError(
            f"{n} ratios cannot give a one-sided {confidence:.0%} bound on the median; add pairs"
        )
    coverage = float(1 - _binomial_half_cdf(n, lower - 1))
    return lower, n + 1 - lower, coverage, coverage


def bounds(ratios: list[float], confidence: float) -> Bounds:
    """The conditional distribution-free one-sided bounds on the population median ratio (Stage 7.6)."""
    lower_index, upper_index, coverage_lower, coverage_upper = order_statistic_bounds(len(ratios), confidence)
    ordered = sorted(ratios)
    return Bounds(
        n=len(ratios),
        confidence=confidence,
        lower_index=lower_index,
        upper_index=upper_index,
        lower=ordered[lower_index - 1],
        upper=ordered[upper_index - 1],
        median=float(np.median(ordered)),
        coverage_lower=coverage_lower,
        coverage_upper=coverage_upper,
    )


def gate(result: Bounds, threshold: float) -> PerfVerdict:
    """Stage 7.7-7.9: pass on upper <= threshold, fail on lower > threshold, otherwise inconclusive."""
    if result.upper <= threshold:
        return PerfVerdict.PASS
    if result.lower > threshold:
        return PerfVerdict.FAIL
    return PerfVerdict.INCONCLUSIVE


def autocorrelation(values: list[float], lag: int) -> float | None:
    """Sample autocorrelation at `lag` (None when the series is constant or too short)."""
    x = np.asarray(values, dtype=float)
    if lag < 1 or lag >= len(x):
        return None
    centred = x - x.mean()
    denominator = float(np.dot(centred, centred))
    if denominator == 0.0:
        return None
    return float(np.dot(centred[:-lag], centred[lag:]) / denominator)


def _kendall(name: str, x: list[float], y: list[float], min_p: float, what: str) -> DiagnosticCheck:
    """Kendall's tau between a covariate and the log ratios; a small p means a trend (breach)."""
    threshold = f"p >= {min_p:g}"
    if len(set(x)) < 2 or len(set(y)) < 2:
        return DiagnosticCheck(
            name=name,
            statistic=None,
            p_value=None,
            threshold=threshold,
            breached=False,
            detail=f"not available: {what} is constant",
        )
    result = kendall_tau_b(x, y)
    tau, p = result.statistic, result.p_value
    return DiagnosticCheck(
        name=name,
        statistic=tau,
        p_value=p,
        threshold=threshold,
        breached=p < min_p,
        detail=f"Kendall tau of log ratio against {what}: {tau:+.3f} (p={p:.3g})",
    )


def diagnostics(
    observations: list[PairObservation], thresholds: DiagnosticsThresholds
) -> list[DiagnosticCheck]:
    """Serial-dependence and order checks of the log ratios in run order, against predeclared thresholds."""
    logs = [math.log(o.ratio) for o in observations]
    checks: list[DiagnosticCheck] = []
    for lag in thresholds.autocorr_lags:
        r = autocorrelation(logs, lag)
        limit = f"|r| <= {thresholds.max_abs_autocorr:g}"
        if r is None:
            checks.append(
                DiagnosticCheck(
                    name=f"autocorrelation lag {lag}",
                    statistic=None,
                    p_value=None,
                    threshold=limit,
                    breached=False,
                    detail="not available: series constant or shorter than the lag",
                )
            )
            continue
        checks.append(
            DiagnosticCheck(
                name=f"autocorrelation lag {lag}",
                statistic=r,
                p_value=None,
                threshold=limit,
                breached=abs(r) > thresholds.max_abs_autocorr,
                detail=f"lag-{lag} autocorrelation of log ratios in run order: {r:+.3f}",
            )
        )
    checks.append(
        _kendall(
            "trend vs pair index",
            [float(o.pair) for o in observations],
            logs,
            thresholds.min_trend_p,
            "pair index",
        )
    )
    checks.append(
        _kendall(
            "trend vs elapsed time",
            [o.elapsed_s for o in observations],
            logs,
            thresholds.min_trend_p,
            "elapsed time",
        )
    )
    checks.append(_order_effect(observations, logs, thresholds.min_order_effect_p))
    checks.extend(_telemetry(observations, logs, thresholds.min_telemetry_p))
    return checks


def _order_effect(observations: list[PairObservation], logs: list[float], min_p: float) -> DiagnosticCheck:
    """Mann-Whitney U of log ratios, baseline-first pairs against candidate-first pairs."""
    first = [v for o, v in zip(observations, logs, strict=True) if o.order == "baseline_first"]
    second = [v for o, v in zip(observations, logs, strict=True) if o.order == "candidate_first"]
    threshold = f"p >= {min_p:g}"
    if not first or not second:
        return DiagnosticCheck(
            name="order effect",
            statistic=None,
            p_value=None,
            threshold=threshold,
            breached=False,
            detail="not available: only one arm order present",
        )
    result = mann_whitney_u(first, second)
    u, p = result.statistic, result.p_value
    detail = (
        f"Mann-Whitney U {u:g} (p={p:.3g}); median ratio baseline-first "
        f"{math.exp(float(np.median(first))):.4f}, candidate-first {math.exp(float(np.median(second))):.4f}"
    )
    return DiagnosticCheck(
        name="order effect", statistic=u, p_value=p, threshold=threshold, breached=p < min_p, detail=detail
    )


def _telemetry(observations: list[PairObservation], logs: list[float], min_p: float) -> list[DiagnosticCheck]:
    """Kendall tau against each telemetry series every pair recorded; "not available" when there is none."""
    keys = sorted(set.intersection(*(set(o.telemetry) for o in observations))) if observations else []
    if not keys:
        return [
            DiagnosticCheck(
                name="telemetry",
                statistic=None,
                p_value=None,
                threshold=f"p >= {min_p:g}",
                breached=False,
                detail="not available: no telemetry recorded for every pair",
            )
        ]
    return [
        _kendall(f"telemetry {key}", [o.telemetry[key] for o in observations], logs, min_p, key)
        for key in keys
    ]


def bootstrap(ratios: list[float], resamples: int, seed: int, confidence: float = 0.95) -> Bootstrap:
    """Percentile bootstrap of the median log ratio (secondary effect size; never decides the gate)."""
    logs = np.log(np.asarray(ratios, dtype=float))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(logs), size=(resamples, len(logs)))
    medians = np.median(logs[draws], axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(medians, [tail, 1.0 - tail])
    return Bootstrap(
        resamples=resamples,
        seed=seed,
        median_ratio=float(math.exp(float(np.median(logs)))),
        ci_low=float(math.exp(float(low))),
        ci_high=float(math.exp(float(high))),
    )


def reported_metric(sample: Sample) -> float | None:
    """The harness's own timing figure: what the gate decides on."""
    return sample.metric_ms


def observations(
    schedule: list[PairPlan], samples: list[Sample], measure: Callable[[Sample], float | None] = reported_metric
) -> list[PairObservation]:
    """The final valid attempt of each scheduled pair that has one, in pair order, its ratio of `measure`.

    A valid attempt has both members measured with status ok; reruns happen only after an invalidation, so
    the highest such attempt is the one the gate uses, whichever figure (reported or kernel) is compared.
    """
    measured = [s for s in samples if s.kind == "measured" and s.pair is not None]
    if not measured:
        return []
    origin = min(s.started_unix for s in measured)
    result: list[PairObservation] = []
    for plan in schedule:
        attempts: dict[int, list[Sample]] = {}
        for sample in measured:
            if sample.pair == plan.pair and sample.status == "ok":
                attempts.setdefault(sample.attempt, []).append(sample)
        complete = [
            a for a, members in attempts.items() if {m.arm for m in members} == {"baseline", "candidate"}
        ]
        if not complete:
            continue
        members = attempts[max(complete)]
        by_arm = {m.arm: m for m in members}
        baseline, candidate = measure(by_arm["baseline"]), measure(by_arm["candidate"])
        if baseline is None or candidate is None:
            continue
        shared = set(by_arm["baseline"].telemetry) & set(by_arm["candidate"].telemetry)
        result.append(
            PairObservation(
                pair=plan.pair,
                order=plan.order,
                ratio=candidate / baseline,
                elapsed_s=min(m.started_unix for m in members) - origin,
                telemetry={
                    k: (by_arm["baseline"].telemetry[k] + by_arm["candidate"].telemetry[k]) / 2
                    for k in shared
                },
            )
        )
    return result


def _values(label: str, values: list[float]) -> str:
    return f"{label} " + ", ".join(f"{v:.4f}" for v in values)


def batch_iut(ratios: list[float], perf: PerfConfig, breached: list[str]) -> DependenceResult:
    """The predeclared dependence-aware method: contiguous batches, each gated exactly, combined by IUT.

    FAIL only when every batch's lower bound exceeds the threshold, PASS only when every batch's upper bound
    is at most it, otherwise INCONCLUSIVE (BATCH_IUT_ASSUMPTION says why this keeps the level).
    """
    count = perf.batch_count()
    edges = [index * len(ratios) // count for index in range(count + 1)]
    sizes = [end - start for start, end in zip(edges, edges[1:], strict=False)]
    shape = f"{count}×{sizes[0]}" if len(set(sizes)) == 1 else f"{count} batches of {min(sizes)}–{max(sizes)}"
    head = f"diagnostics breached ({', '.join(breached)}) → batch IUT over {shape} pairs applied"
    if 0.5 ** min(sizes) > 1 - perf.confidence:
        return DependenceResult(
            method="batch_iut",
            assumption=BATCH_IUT_ASSUMPTION,
            batches=[],
            verdict=PerfVerdict.INCONCLUSIVE,
            line=f"{head}: INCONCLUSIVE, batches of {min(sizes)} pairs are too small for an exact "
            f"{perf.confidence:.0%} bound",
        )
    batches = []
    for index, (start, end) in enumerate(zip(edges, edges[1:], strict=False)):
        result = bounds(ratios[start:end], perf.confidence)
        batches.append(
            BatchBounds(
                batch=index,
                first_pair=start,
                last_pair=end - 1,
                bounds=result,
                verdict=gate(result, perf.threshold),
            )
        )
    verdicts = {b.verdict for b in batches}
    verdict = verdicts.pop() if len(verdicts) == 1 else PerfVerdict.INCONCLUSIVE
    lower_indices = {b.bounds.lower_index for b in batches}
    upper_indices = {b.bounds.upper_index for b in batches}
    lower_label = f" X({lower_indices.pop()})" if len(lower_indices) == 1 else ""
    upper_label = f" X({upper_indices.pop()})" if len(upper_indices) == 1 else ""
    lowers = _values(f"batch lower bounds{lower_label}", [b.bounds.lower for b in batches])
    uppers = _values(f"upper bounds{upper_label}", [b.bounds.upper for b in batches])
    threshold = f"{perf.threshold:g}"
    if verdict == PerfVerdict.FAIL:
        line = f"{head}: FAIL with every batch lower bound > {threshold} ({lowers})"
    elif verdict == PerfVerdict.PASS:
        line = f"{head}: PASS with every batch upper bound ≤ {threshold} ({uppers})"
    else:
        line = f"{head}: INCONCLUSIVE, the batches do not all clear {threshold} ({lowers}; {uppers})"
    return DependenceResult(
        method="batch_iut", assumption=BATCH_IUT_ASSUMPTION, batches=batches, verdict=verdict, line=line
    )


@dataclass(frozen=True)
class Decision:
    """A complete series' verdict and everything it was computed from."""

    verdict: PerfVerdict
    reason: str
    bounds: Bounds
    diagnostics: list[DiagnosticCheck]
    bootstrap: Bootstrap
    dependence: DependenceResult | None
    """The dependence-aware method's result, present only when it was applied."""


def decide(pairs: list[PairObservation], perf: PerfConfig, bootstrap_seed: int) -> Decision:
    """Verdict for a complete series: diagnostics first; the order-statistic gate only when none breached.

    A breach makes the whole-series gate inapplicable; the predeclared dependence-aware method then decides,
    or the row is INCONCLUSIVE when the config declared none.
    """
    ratios = [p.ratio for p in pairs]
    result = bounds(ratios, perf.confidence)
    checks = diagnostics(pairs, perf.diagnostics)
    effect = bootstrap(ratios, perf.bootstrap_resamples, bootstrap_seed, perf.confidence)
    breached = [c for c in checks if c.breached]
    if breached:
        names = "; ".join(f"{c.name} ({c.detail}, threshold {c.threshold})" for c in breached)
        whole = (
            f"dependence diagnostic breached: {names}; exchangeability not justified, so the whole-series "
            f"order-statistic gate was not applied (its bounds, for reference: lower X({result.lower_index})="
            f"{result.lower:.4f}, upper X({result.upper_index})={result.upper:.4f})"
        )
        if perf.dependence_method == "none":
            return Decision(
                PerfVerdict.INCONCLUSIVE,
                f"{whole}; no dependence-aware method was declared (perf.dependence_method = \"none\")",
                result,
                checks,
                effect,
                None,
            )
        dependence = batch_iut(ratios, perf, [c.name for c in breached])
        return Decision(dependence.verdict, f"{dependence.line}; {whole}", result, checks, effect, dependence)
    verdict = gate(result, perf.threshold)
    span = (
        f"{result.confidence:.0%} one-sided bounds on the median ratio over {result.n} pairs: "
        f"lower X({result.lower_index})={result.lower:.4f}, upper X({result.upper_index})={result.upper:.4f}"
    )
    if verdict == PerfVerdict.PASS:
        reason = f"{span}; upper <= {perf.threshold:g}"
    elif verdict == PerfVerdict.FAIL:
        reason = f"{span}; lower > {perf.threshold:g}: candidate is slower than the accepted window"
    else:
        reason = f"{span}; the interval straddles {perf.threshold:g} (no adaptive resampling)"
    return Decision(verdict, reason, result, checks, effect, None)
