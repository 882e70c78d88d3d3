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

from bench_perf_overhead import build_fixture  # the script's directory is on sys.path

from runners.config import PerfConfig
from runners.demo import demo_config
from runners.demo_trace import generate_demo_trace
from runners.harness import row_args
from runners.perf import evaluate, run_performance
from runners.placement import perf_placement
from runners.report import Arm, PerfResult, PerfVerdict

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


def build_binaries(work: Path) -> dict[tuple[str, str], tuple[Path, Path]]:
    """(scenario, effect) -> (baseline, candidate) release builds; A/A runs one build against itself."""
    binaries: dict[tuple[str, str], tuple[Path, Path]] = {}
    for scenario, knobs in SCENARIOS.items():
        partial = scenario == "partial-work"
        baseline = build_fixture(work, **knobs)
        for effect, scales in EFFECTS.items():
            scale = scales[1] if partial else scales[0]
            candidate = baseline if scale == 1.0 else build_fixture(work, **knobs, WORK_SCALE=scale)
            binaries[(scenario, effect)] = (baseline, candidate)
    return binaries


def run_campaigns(out: Path, campaigns: int) -> None:
    """Run every missing campaign, interleaving cells, and store each PerfResult as JSON."""
    perf = PerfConfig()
    with tempfile.TemporaryDirectory(prefix="bench-drift-") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        binaries = build_binaries(work)
        print(f"{len(binaries)} cells built in {time.monotonic() - started:.0f} s", flush=True)
        config = demo_config()
        trace = work / "trace.jsonl"
        generate_demo_trace(trace, rows=TRACE_ROWS)
        args = row_args(config, config.rows[0], trace)
        placement = perf_placement()
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


def judge(out: Path) -> None:
    """The Markdown table: verdict shares per cell and method, from the stored evidence alone."""
    print(
        "| scenario | effect | n | median ratio | none: PASS / FAIL / INCONCL. / BLOCKED "
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
                perf = PerfConfig(dependence_method=method)
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
                    ratios = [statistics.median(o.ratios) for o in outcomes if o.ratios]
            median = f"{statistics.median(ratios):.4f}" if ratios else "-"
            print(f"| {scenario} | {effect} | {len(results)} | {median} | {cells[0]} | {cells[1]} | {applied} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where each campaign's evidence is stored")
    parser.add_argument("--campaigns", type=int, default=30)
    parser.add_argument("--judge-only", action="store_true")
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)
    if not options.judge_only:
        run_campaigns(options.out, options.campaigns)
    judge(options.out)


if __name__ == "__main__":
    main()
