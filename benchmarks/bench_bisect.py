"""What a bisect of 8 commits costs against 8 full campaigns: the same 8 first-parent commits after good, the
first bad one at position 5 (twice the replay work), either bisected (`runners.pipeline.bisect.run_bisect`: the bad end,
then binary search) or measured one campaign per commit against good (what finding it without a bisect takes).
Each side starts with an empty build cache of its own, so both pay for the compiles they need: good once as the
baseline, each probed commit once as a candidate.

    .venv/bin/python benchmarks/bench_bisect.py [--row vllm-agg] [--pairs 10] [--rounds 1]
                                                [--order bisect-first|linear-first]

The gate is the bisect test's (tests/test_bisect.py): one row, `replay_cpu_ms`, threshold 1.3, lenient
diagnostics, 1 warmup per arm; `--pairs` sets the pairs. Prints per side: wall seconds, campaigns run, arm builds
compiled and their `cargo build` seconds, harness processes started; then bisect / linear ratios.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from runners.exec.sandbox import check
from runners.pipeline.bisect import BisectRequest, run_bisect
from runners.pipeline.campaign import CampaignRequest, run_campaign
from runners.schema.config import CampaignConfig
from runners.schema.report import CampaignReport

from runners.demo import commit_change, demo_config, init_fixture_repo
from runners.demo_trace import generate_demo_trace

FIRST_BAD = 5
COMMITS = 8


@dataclass
class Cost:
    wall: float
    campaigns: int
    compiled: int
    build_seconds: float
    processes: int
    found: str

    def line(self, side: str) -> str:
        return (f"{side:>7}: {self.wall:7.1f} s wall, {self.campaigns} campaigns, {self.compiled} arm builds compiled "
                f"({self.build_seconds:.1f} s of cargo build), {self.processes} harness processes; {self.found}")


def config(row: str, pairs: int, trace: Path) -> CampaignConfig:
    """tests/test_bisect.py's gate: diagnostics and competing load never decide, the CPU clock does."""
    base = demo_config()
    diagnostics = base.perf.diagnostics.model_copy(update={
        "max_abs_autocorr": 1.0, "min_trend_p": 1e-9, "min_order_effect_p": 1e-9, "min_telemetry_p": 1e-9})
    invalidation = base.perf.invalidation.model_copy(update={"max_interference_ms": 1e6})
    perf = base.perf.model_copy(update={"threshold": 1.3, "pairs": pairs, "warmups_per_arm": 1,
                                        "diagnostics": diagnostics, "invalidation": invalidation})
    harness = base.harness.model_copy(update={"timing_field": "replay_cpu_ms"})
    return base.model_copy(update={"rows": [r for r in base.rows if r.id == row], "fixtures": [], "perf": perf,
                                   "harness": harness, "trace": base.trace.model_copy(update={"path": str(trace)})})


def history(root: Path) -> tuple[Path, list[str]]:
    repo = root / "repo"
    shas = [init_fixture_repo(repo)]
    for position in range(1, COMMITS + 1):
        if position == FIRST_BAD:
            shas.append(commit_change(repo, "perf: twice the replay work", knobs={"WORK_SCALE": 2.0}))
        else:
            shas.append(commit_change(repo, f"docs: reword {position}", touch_comment=True))
    return repo, shas


def _tally(reports: list[CampaignReport]) -> tuple[int, float, int]:
    compiled, seconds, processes = 0, 0.0, 0
    for report in reports:
        for artifact in report.artifacts:
            if artifact.build_cache is None or artifact.build_cache.reused_from is None:
                compiled += 1
                seconds += artifact.build_seconds
        for row in report.rows:
            processes += len(row.determinism.runs) if row.determinism else 0
            if row.declared_exclusions is not None:
                processes += len(row.declared_exclusions.evidence_runs)
            if row.performance is not None:
                perf = row.performance
                processes += len(perf.probes) + len(perf.warmups) + len(perf.samples)
    return compiled, seconds, processes


def bisect_side(repo: Path, shas: list[str], cfg: CampaignConfig, out: Path, trace: Path) -> Cost:
    started = time.monotonic()
    result = run_bisect(BisectRequest(repo=repo, good=shas[0], bad=shas[-1], config=cfg, config_source="bench",
                                      out_dir=out, trace_path=trace, sandbox=check("bwrap"),
                                      build_cache=out / "cache"), lambda report, directory: None)
    wall = time.monotonic() - started
    reports = [attempt.report for probe in result.probes for attempt in probe.attempts]
    compiled, seconds, processes = _tally(reports)
    return Cost(wall, len(reports), compiled, seconds, processes, result.result.last_line)


def linear_side(repo: Path, shas: list[str], cfg: CampaignConfig, out: Path, trace: Path) -> Cost:
    started = time.monotonic()
    reports = [run_campaign(CampaignRequest(repo=repo, base=shas[0], head=sha, config=cfg, config_source="bench",
                                            out_dir=out / sha[:12], trace_path=trace, sandbox=check("bwrap"),
                                            build_cache=out / "cache", attribute_failures=False))
               for sha in shas[1:]]
    wall = time.monotonic() - started
    failing = [sha for sha, report in zip(shas[1:], reports, strict=True) if report.concluded.failed]
    compiled, seconds, processes = _tally(reports)
    return Cost(wall, len(reports), compiled, seconds, processes,
                f"first FAIL: {failing[0] if failing else 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", default="vllm-agg")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--order", choices=("bisect-first", "linear-first"), default="bisect-first")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-bisect-") as scratch:
        root = Path(scratch)
        repo, shas = history(root)
        trace = root / "trace.jsonl"
        generate_demo_trace(trace, rows=1000)
        cfg = config(args.row, args.pairs, trace)
        print(f"8 commits after {shas[0][:12]}, first bad {shas[FIRST_BAD][:12]} (position {FIRST_BAD}); row "
              f"{args.row}, {args.pairs} pairs")
        for round_number in range(1, args.rounds + 1):
            sides = ["bisect", "linear"] if args.order == "bisect-first" else ["linear", "bisect"]
            costs = {}
            for side in sides:
                out = root / f"round{round_number}-{side}"
                run = bisect_side if side == "bisect" else linear_side
                costs[side] = run(repo, shas, cfg, out, trace)
                print(f"round {round_number} {costs[side].line(side)}", flush=True)
            b, lin = costs["bisect"], costs["linear"]
            print(f"round {round_number} bisect/linear: wall {b.wall / lin.wall:.2f}, campaigns "
                  f"{b.campaigns}/{lin.campaigns}, compiles {b.compiled}/{lin.compiled}, processes "
                  f"{b.processes / lin.processes:.2f}", flush=True)


if __name__ == "__main__":
    main()
