"""Does the performance gate pass identical revisions and fail a real 10% slowdown, on this machine?

Why: the gate's exact bounds are conditional on exchangeable ratios and its diagnostics have false alarms, so
its operating characteristics on a real node are an empirical question. This runs N A/A campaigns (two
copies of one fixture build) and N campaigns against a build whose busy work is scaled to about a 10% real
slowdown (`--slow-scale`; the realized slowdown is measured and printed), each with its own row id and
therefore its own seeded schedule. Every campaign is then re-evaluated, from its recorded samples alone, under

- two timing fields: the protocol's wall-clock `replay_execution_ms` and the thread-CPU `replay_cpu_ms`;
- two diagnostic threshold sets: the campaign config defaults and the stricter-against-false-alarm set the
  tests declare (|r| > 0.45, p < 0.001).

It also prints a resampled estimate: 10,000 synthetic campaigns of 60 ratios drawn from the pooled ratios,
gated without diagnostics (i.e. assuming iid pairs), to put the small-N shares in context.
N is small (default 10 per arm) because each campaign is 130 processes; shares of 10 are coarse.

    .venv/bin/python benchmarks/bench_gate_power.py [--campaigns 10] [--slow-scale 1.15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from bench_perf_overhead import build_fixture, demo_args  # the script's directory is on sys.path
from runners.exec.placement import perf_placement
from runners.perf.gate import classify, evaluate
from runners.perf.sampler import run_performance
from runners.perf.stats import bounds, gate, order_statistic_bounds
from runners.schema.config import DiagnosticsThresholds, InvalidationRules, PerfConfig
from runners.schema.report import Arm, PerfResult, PerfVerdict, Sample

FIELDS = ("replay_execution_ms", "replay_cpu_ms")
TEST_DIAGNOSTICS = DiagnosticsThresholds(
    max_abs_autocorr=0.45, min_trend_p=0.001, min_order_effect_p=0.001, min_telemetry_p=0.001
)


def reinterpret(result: PerfResult, field: str) -> PerfResult:
    """The same recorded samples read with another timing field (metric re-derived from each record)."""

    def remetric(samples: list[Sample]) -> list[Sample]:
        return [
            s.model_copy(
                update={"metric_ms": classify(s.exit_code, s.timing_record, s.failure, field).metric_ms}
            )
            for s in samples
        ]

    return result.model_copy(
        update={
            "timing_field": field,
            "warmups": remetric(result.warmups),
            "samples": remetric(result.samples),
        }
    )


def resampled_share(
    ratios: list[float], pairs: int, verdict: PerfVerdict, threshold: float, draws: int = 10_000
) -> float:
    """Share of iid-resampled campaigns the order-statistic gate alone gives `verdict`."""
    lower, upper, _, _ = order_statistic_bounds(pairs, 0.95)
    rng = np.random.default_rng(20261129)
    picks = np.sort(np.asarray(ratios)[rng.integers(0, len(ratios), size=(draws, pairs))], axis=1)
    lows, highs = picks[:, lower - 1], picks[:, upper - 1]
    if verdict == PerfVerdict.PASS:
        return float((highs <= threshold).mean())
    return float((lows > threshold).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--slow-scale", type=float, default=1.15)
    parser.add_argument(
        "--max-interference-ms",
        type=float,
        default=1e6,
        help="competing-load limit; the default never invalidates (this VM is shared)",
    )
    options = parser.parse_args()
    invalidation = InvalidationRules(max_interference_ms=options.max_interference_ms)
    rule_sets = {
        "config defaults": PerfConfig(pairs=options.pairs, invalidation=invalidation),
        "test thresholds": PerfConfig(
            pairs=options.pairs, invalidation=invalidation, diagnostics=TEST_DIAGNOSTICS
        ),
    }
    with tempfile.TemporaryDirectory(prefix="bench-power-") as tmp:
        work = Path(tmp)
        builds = {
            "identical": build_fixture(work),
            "slow": build_fixture(work, WORK_SCALE=options.slow_scale),
        }
        args = demo_args(work)
        placement = perf_placement()
        print(
            f"host {placement.host.cpu_model}, {placement.host.logical_cpus} logical CPUs, measured cpu "
            f"{placement.cpu_set}; {options.campaigns} campaigns per arm of {options.pairs} pairs"
        )
        results: dict[str, list[PerfResult]] = {"identical": [], "slow": []}
        loads = []
        started = time.monotonic()
        for index in range(options.campaigns):
            for kind, candidate in builds.items():
                staged = work / f"{kind}-{index}"
                staged.mkdir()
                binaries: dict[Arm, Path] = {
                    "baseline": staged / "baseline",
                    "candidate": staged / "candidate",
                }
                shutil.copy2(builds["identical"], binaries["baseline"])
                shutil.copy2(candidate, binaries["candidate"])
                results[kind].append(
                    run_performance(
                        row_id=f"{kind}-{index}",
                        harness_args=args,
                        binaries=binaries,
                        perf=rule_sets["test thresholds"],
                        timing_field=FIELDS[0],
                        placement=placement,
                        workdir=staged / "perf",
                    )
                )
                loads.append(os.getloadavg()[0])
                shutil.rmtree(staged / "perf" / "logs")
        print(
            f"{2 * options.campaigns} campaigns in {time.monotonic() - started:.0f} s; 1-min load average "
            f"during the run: median {statistics.median(loads):.2f}, max {max(loads):.2f}"
        )
        for field in FIELDS:
            slow_ratios = [
                r
                for result in results["slow"]
                for r in evaluate(reinterpret(result, field), rule_sets["config defaults"]).ratios
            ]
            print(
                f"\n{field}: realized slowdown of the slow build, pooled median ratio "
                f"{statistics.median(slow_ratios):.4f}"
            )
            for name, perf in rule_sets.items():
                for kind, goal in (("identical", PerfVerdict.PASS), ("slow", PerfVerdict.FAIL)):
                    outcomes = [evaluate(reinterpret(result, field), perf) for result in results[kind]]
                    verdicts = Counter(o.verdict.value for o in outcomes)
                    breached = Counter(c.name for o in outcomes for c in o.diagnostics if c.breached)
                    share = verdicts[goal.value] / len(outcomes)
                    spans = ", ".join(
                        f"[{o.bounds.lower:.3f}, {o.bounds.upper:.3f}]" for o in outcomes if o.bounds
                    )
                    print(
                        f"  {name:15s} {kind:9s}: {goal.value} {share:.0%} {dict(verdicts)}"
                        + (f"; breached {dict(breached)}" if breached else "")
                    )
                    print(f"      bounds {spans}")
            for kind, goal in (("identical", PerfVerdict.PASS), ("slow", PerfVerdict.FAIL)):
                pooled = [
                    r
                    for result in results[kind]
                    for r in evaluate(reinterpret(result, field), rule_sets["config defaults"]).ratios
                ]
                share = resampled_share(pooled, options.pairs, goal, rule_sets["config defaults"].threshold)
                whole = gate(bounds(pooled, 0.95), rule_sets["config defaults"].threshold).value
                print(
                    f"  resampled iid campaigns, {kind}: {goal.value} {share:.1%} "
                    f"(pooled {len(pooled)} ratios gate {whole})"
                )


if __name__ == "__main__":
    main()
