"""Power of the performance gate under reproducible node drift, with and without the dependence-aware method.

Why: the order-statistic gate is exact only for exchangeable ratios. Real nodes drift (frequency, thermal,
page cache, neighbours), and a slowdown confined to part of the work makes the ratio itself drift, so the
dependence diagnostics fire and, without a predeclared dependence-aware method, a plain 10% regression comes
back INCONCLUSIVE. This measures the verdict shares on the fixture harness for

    {A/A, 3% slower, 10% slower} x {quiet, slow drift, step, periodic, partial-work slowdown}

with `--campaigns` campaigns per cell (default 30), each only the performance stage (the real pinned sampler
and the real invalidation rule, 5 warmups per arm, 60 pairs) on prebuilt fixture binaries and a small trace.
The noise comes from the fixture's NOISE_* knobs (tests/fixtures/replay_harness/lib/bench/src/noise.rs).
Every campaign's evidence is stored (`--out`, resumable: finished campaigns are skipped), then judged twice
from the same samples: `perf.dependence_method = "none"` (diagnostics breach -> INCONCLUSIVE) and
`"batch_iut"` (the default). Campaigns of all cells are interleaved so a change in the machine's load is
spread across cells instead of landing on one.

    .venv/bin/python benchmarks/bench_gate_drift.py --out /tmp/drift [--campaigns 30]   # run, then judge
    .venv/bin/python benchmarks/bench_gate_drift.py --out /tmp/drift --judge-only
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
from bench_perf_overhead import build_fixture  # the script's directory is on sys.path
from runners.exec.harness import row_args
from runners.exec.placement import perf_placement
from runners.perf.gate import evaluate
from runners.perf.sampler import SampleHooks, disclosing_name, run_performance
from runners.perf.schedule import make_schedule, schedule_seed
from runners.perf.stats import PairObservation, decide
from runners.schema.config import InvalidationRules, PerfConfig
from runners.schema.report import Arm, PerfResult, PerfVerdict

from runners.demo import demo_config
from runners.demo_trace import generate_demo_trace

TRACE_ROWS = 300
"""A small trace keeps one process near 15 ms, so a 130-process campaign takes a few seconds."""

SCENARIOS: dict[str, dict[str, float | str]] = {
    "quiet": {},
    "slow drift": {"NOISE_DRIFT": 0.25},
    "step": {"NOISE_STEP": 0.15},
    "periodic": {"NOISE_PERIODIC": 0.05, "NOISE_PERIOD": 9.0, "NOISE_SEED": 7.0},
    "partial-work": {"SLOWED_FRACTION": 0.5, "NOISE_SCOPE": "shared", "NOISE_DRIFT": 1.0},
}
"""Knobs of both arms per scenario. Partial-work: the slowdown scales half the busy work while the other,
shared half drifts to 2x over the campaign, so the true ratio shrinks as the campaign goes on."""

EFFECTS: dict[str, tuple[float, float]] = {
    "A/A": (1.0, 1.0),
    "3% slower": (1.048, 1.097),
    "10% slower": (1.16, 1.355),
}
"""Candidate WORK_SCALE per effect: (full-work scenarios, partial-work scenario with half the work scaled).
Busy work is about 62% of replay time on the fixture, so 1.16 on all of it or 1.355 on half of it is about
10% at the campaign's start; the realized ratios are measured and printed."""

METHODS = ("none", "batch_iut")


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def _stored_build(work: Path, store: Path, name: str, knobs: dict[str, float | str]) -> Path:
    """A release build kept in `store` under `name`, so a resumed study measures the same binaries."""
    target = store / name
    if not target.exists():
        shutil.copy2(build_fixture(work, **knobs), target.with_suffix(".tmp"))
        target.with_suffix(".tmp").replace(target)
    return target


def build_binaries(work: Path, store: Path) -> dict[tuple[str, str], tuple[Path, Path]]:
    """(scenario, effect) -> (baseline, candidate) release builds; A/A runs one build against itself."""
    store.mkdir(parents=True, exist_ok=True)
    binaries: dict[tuple[str, str], tuple[Path, Path]] = {}
    for scenario, knobs in SCENARIOS.items():
        partial = scenario == "partial-work"
        baseline = _stored_build(work, store, f"{_slug(scenario)}--1.0", knobs)
        for effect, scales in EFFECTS.items():
            scale = scales[1] if partial else scales[0]
            candidate = (
                baseline
                if scale == 1.0
                else _stored_build(work, store, f"{_slug(scenario)}--{scale}", {**knobs, "WORK_SCALE": scale})
            )
            binaries[(scenario, effect)] = (baseline, candidate)
    return binaries


def run_campaigns(out: Path, campaigns: int, max_interference_ms: float | None) -> None:
    """Run every missing campaign, interleaving cells, and store each PerfResult as JSON."""
    perf = PerfConfig()
    if max_interference_ms is not None:
        perf = perf.model_copy(
            update={"invalidation": InvalidationRules(max_interference_ms=max_interference_ms)}
        )
    with tempfile.TemporaryDirectory(prefix="bench-drift-") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        binaries = build_binaries(work, out / "binaries")
        print(f"{len(binaries)} cells built in {time.monotonic() - started:.0f} s", flush=True)
        config = demo_config()
        trace = work / "trace.jsonl"
        generate_demo_trace(trace, rows=TRACE_ROWS)
        args = row_args(config, config.rows[0], trace)
        placement = perf_placement()
        print(f"niceness {os.nice(0)}, measured cpu {placement.cpu_set}", flush=True)
        loads: list[float] = []
        for index in range(campaigns):
            for (scenario, effect), (baseline, candidate) in binaries.items():
                target = out / _slug(scenario) / _slug(effect) / f"{index:03d}.json"
                if target.exists():
                    continue
                staged = work / "campaign"
                shutil.rmtree(staged, ignore_errors=True)
                staged.mkdir()
                arms: dict[Arm, Path] = {"baseline": staged / "baseline", "candidate": staged / "candidate"}
                shutil.copy2(baseline, arms["baseline"])
                shutil.copy2(candidate, arms["candidate"])
                result = run_performance(
                    row_id=f"{_slug(scenario)}-{_slug(effect)}-{index}",
                    harness_args=args,
                    binaries=arms,
                    perf=perf,
                    timing_field=config.harness.timing_field,
                    placement=placement,
                    workdir=staged / "perf",
                    hooks=SampleHooks(disclosed_name=disclosing_name("drift")),  # the noise reads the position
                )
                target.parent.mkdir(parents=True, exist_ok=True)
                temporary = target.with_suffix(".tmp")
                temporary.write_text(result.model_dump_json(), encoding="utf-8")
                temporary.replace(target)
                loads.append(os.getloadavg()[0])
            print(
                f"round {index + 1}/{campaigns} done at {time.monotonic() - started:.0f} s "
                f"(1-min load {loads[-1]:.2f})",
                flush=True,
            )
        if loads:
            print(f"1-min load average during the run: median {statistics.median(loads):.2f}, max {max(loads):.2f}")


REPLAY_SHARES = (0.38, 0.62)
"""(simulation, busy work) shares of `replay_execution_ms` on the fixture at WORK_SCALE 1 (measured: busy work
is 25 ms per 1,000 requests of about 40 ms)."""


def _splitmix64(x: int) -> int:
    """noise.rs `splitmix64` (the periodic component's phase)."""
    mask = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def _noise(index: np.ndarray, knobs: dict[str, float | str]) -> np.ndarray:
    """noise.rs `multiplier` for invocation indices of a campaign of 60 pairs."""
    t = np.minimum(index / 120.0, 1.0)
    m = 1.0 + float(knobs.get("NOISE_DRIFT", 0.0)) * t + float(knobs.get("NOISE_STEP", 0.0)) * (t >= 0.5)
    amplitude = float(knobs.get("NOISE_PERIODIC", 0.0))
    if amplitude:
        phase = (_splitmix64(int(float(knobs.get("NOISE_SEED", 0.0)))) >> 11) / float(1 << 53)
        m = m + amplitude * np.sin(2 * np.pi * (index / float(knobs["NOISE_PERIOD"]) + phase))
    return np.asarray(m, dtype=float)


def _replay_ms(index: np.ndarray, knobs: dict[str, float | str], scale: float) -> np.ndarray:
    """noise.rs `busy_units` applied to the fixture's replay time, in units of its quiet A/A value."""
    sim, busy = REPLAY_SHARES
    m = _noise(index, knobs)
    fraction = float(knobs.get("SLOWED_FRACTION", 1.0))
    slowed_noise = 1.0 if knobs.get("NOISE_SCOPE") == "shared" else m
    return sim + busy * (fraction * scale * slowed_noise + (1 - fraction) * m)


def simulate(campaigns: int, sigma: float) -> None:
    """The same grid from a model of the fixture (its noise knobs exactly, independent log-normal per-process
    noise of `sigma`), judged by the real `decide` with the real seeded schedules: what the study would show
    on a quiet node. Secondary evidence; the campaigns above are the measurement."""
    print(f"\nsimulated quiet node: {campaigns} campaigns per cell, per-process noise sigma {sigma:g}\n")
    print(
        "| scenario | effect | true ratio first → last pair | none: PASS / FAIL / INCONCL. "
        "| batch IUT: PASS / FAIL / INCONCL. | IUT applied |"
    )
    print("| --- | --- | --- | --- | --- | ---: |")
    rng = np.random.default_rng(20261201)
    base_perf = PerfConfig(bootstrap_resamples=100)  # the bootstrap never decides; fewer resamples for speed
    index = 2 * np.arange(base_perf.pairs)
    for scenario, knobs in SCENARIOS.items():
        for effect, scales in EFFECTS.items():
            scale = scales[1] if scenario == "partial-work" else scales[0]
            truth = _replay_ms(index, knobs, scale) / _replay_ms(index, knobs, 1.0)
            counts = {method: Counter[PerfVerdict]() for method in METHODS}
            applied = 0
            for number in range(campaigns):
                plan = make_schedule(schedule_seed(base_perf.seed, f"{scenario}-{effect}-{number}"), base_perf.pairs)
                candidate_first = np.array([p.order == "candidate_first" for p in plan])
                baseline_ms = _replay_ms(index + candidate_first, knobs, 1.0)
                candidate_ms = _replay_ms(index + ~candidate_first, knobs, scale)
                noise = np.exp(rng.normal(0.0, sigma, (2, base_perf.pairs)))
                ratios = candidate_ms * noise[0] / (baseline_ms * noise[1])
                pairs = [
                    PairObservation(pair=i, order=p.order, ratio=float(r), elapsed_s=0.1 * i)
                    for i, (p, r) in enumerate(zip(plan, ratios, strict=True))
                ]
                for method in METHODS:
                    decision = decide(
                        pairs, base_perf.model_copy(update={"dependence_method": method}), bootstrap_seed=number
                    )
                    counts[method][decision.verdict] += 1
                    applied += method == "batch_iut" and decision.dependence is not None
            cells = [
                " / ".join(
                    str(counts[m][v]) for v in (PerfVerdict.PASS, PerfVerdict.FAIL, PerfVerdict.INCONCLUSIVE)
                )
                for m in METHODS
            ]
            print(
                f"| {scenario} | {effect} | {truth[0]:.3f} → {truth[-1]:.3f} | {cells[0]} | {cells[1]} | {applied} |"
            )


def judge(out: Path) -> None:
    """The Markdown table: verdict shares per cell and method, from the stored evidence alone."""
    print(
        "| scenario | effect | n | median ratio (unblocked) | none: PASS / FAIL / INCONCL. / BLOCKED "
        "| batch IUT: PASS / FAIL / INCONCL. / BLOCKED | IUT applied |"
    )
    print("| --- | --- | ---: | ---: | --- | --- | ---: |")
    for scenario in SCENARIOS:
        for effect in EFFECTS:
            folder = out / _slug(scenario) / _slug(effect)
            results = [
                PerfResult.model_validate_json(p.read_bytes()) for p in sorted(folder.glob("*.json"))
            ]
            if not results:
                continue
            cells = []
            applied = 0
            ratios: list[float] = []
            for method in METHODS:
                declared = results[0].perf_config or PerfConfig()
                perf = declared.model_copy(update={"dependence_method": method})
                outcomes = [evaluate(result, perf) for result in results]
                counts = Counter(o.verdict for o in outcomes)
                cells.append(
                    " / ".join(
                        str(counts[v])
                        for v in (PerfVerdict.PASS, PerfVerdict.FAIL, PerfVerdict.INCONCLUSIVE, PerfVerdict.BLOCKED)
                    )
                )
                if method == "batch_iut":
                    applied = sum(1 for o in outcomes if o.dependence is not None)
                    ratios = [statistics.median(o.ratios) for o in outcomes if o.verdict != PerfVerdict.BLOCKED]
            median = f"{statistics.median(ratios):.4f}" if ratios else "-"
            print(f"| {scenario} | {effect} | {len(results)} | {median} | {cells[0]} | {cells[1]} | {applied} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where each campaign's evidence is stored")
    parser.add_argument("--campaigns", type=int, default=30)
    parser.add_argument("--judge-only", action="store_true")
    parser.add_argument(
        "--simulate", type=int, default=0, metavar="N", help="also judge N simulated campaigns per cell"
    )
    parser.add_argument("--sigma", type=float, default=0.02, help="per-process log-normal noise of the simulation")
    parser.add_argument(
        "--max-interference-ms",
        type=float,
        default=None,
        help="competing-load limit instead of the config's 25 ms (e.g. 1e6: never invalidate)",
    )
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)
    if not options.judge_only:
        run_campaigns(options.out, options.campaigns, options.max_interference_ms)
    judge(options.out)
    if options.simulate:
        simulate(options.simulate, options.sigma)


if __name__ == "__main__":
    main()
