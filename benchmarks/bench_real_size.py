"""A whole campaign at the protocol's real size: the demo-5000 profile's 5,000-request window on the fixture
harness writing the real report shapes (REAL_SHAPES on both revisions, a comment-only change between them).

What it prints, each against its named alternative:
- the bot's peak memory (this process's own high-water RSS; harness processes and builds are children) against
  the largest canonical line any harness process wrote, and the memory the campaign added above the process's
  RSS before it started;
- report.json's size against the canonical lines it stands for (matching rows keep digests, never full reports;
  the script checks that no per-request record and no kept report reached the output);
- the campaign's wall time against its floor: both release builds plus every harness process's own wall time
  (determinism waves count their slowest process, as in bench_campaign_floor.py), and the wall time by stage
  (from each progress event to the next), to set against the floor's parts.

    .venv/bin/python benchmarks/bench_real_size.py [--rows vllm-disagg] [--pairs 10] [--sandbox bwrap|none]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from runners.exec.sandbox import SANDBOX_KINDS, check
from runners.pipeline.campaign import CampaignRequest, run_campaign
from runners.schema.config import load_profile
from runners.schema.report import CampaignReport

from runners.demo import REAL_HARNESS_SHAPES, prepare_demo
from runners.progress import ProgressEvent

PROFILE = "demo-5000"


def floor_seconds(report: CampaignReport) -> tuple[float, float, float]:
    """Builds, determinism waves (slowest process of each) and performance processes (the timer probes, warmups
    and samples: every harness process the gate starts), in seconds."""
    builds = sum(artifact.build_seconds for artifact in report.artifacts)
    determinism = samples = 0.0
    for row in report.rows:
        if row.determinism is not None:
            runs = row.determinism.runs
            width = len({tuple(run.cpu_set) for run in runs}) if row.determinism.concurrent else 1
            determinism += sum(max(run.seconds for run in runs[i:i + width]) for i in range(0, len(runs), width))
        if row.performance is not None:
            samples += sum(s.elapsed_s for s in [*row.performance.probes, *row.performance.warmups,
                                                 *row.performance.samples])
    return builds, determinism, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="vllm-disagg", help="comma-separated row ids of the demo-5000 profile")
    parser.add_argument("--pairs", type=int, default=None,
                        help="measured pairs of the performance gate (default: the profile's, the protocol's 60)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sandbox", choices=SANDBOX_KINDS, default="bwrap")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kv-parity-real-size-"))
    repo, base, head, trace = prepare_demo(out, "identical", profile=PROFILE, base_knobs=REAL_HARNESS_SHAPES)
    config = load_profile(PROFILE)
    if args.pairs is not None:
        config = config.model_copy(update={"perf": config.perf.model_copy(update={"pairs": args.pairs})})
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    growth: dict[str, int] = {}
    """How much the high-water RSS rose between a stage's first progress event and the next stage's."""
    spent: dict[str, float] = {}
    """Wall time from each progress event to the next, by the earlier event's stage."""
    started = time.monotonic()
    last: dict[str, Any] = {"stage": "pin", "kib": before_kib, "at": started}

    def track(event: ProgressEvent) -> None:
        now, at = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.monotonic()
        growth[last["stage"]] = growth.get(last["stage"], 0) + now - last["kib"]
        spent[last["stage"]] = spent.get(last["stage"], 0.0) + at - last["at"]
        last.update(stage=event.stage, kib=now, at=at)

    report = run_campaign(CampaignRequest(repo=repo, base=base, head=head, config=config, config_source="bench",
                                          out_dir=out / "campaign", rows=args.rows.split(","), trace_path=trace,
                                          sandbox=check(args.sandbox), keep_work=True), track)
    wall = time.monotonic() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    lines = sorted((out / "campaign" / "work").rglob("canonical.jsonl"), key=lambda p: p.stat().st_size)
    largest = lines[-1].stat().st_size if lines else 0
    report_json = out / "campaign" / "report.json"
    report_json.write_text(report.model_dump_json(indent=2), encoding="utf-8")
    text = report_json.read_text(encoding="utf-8")
    # Section names appear as digest keys; these keys appear only inside per-request records.
    leaked = [marker for marker in ('"routing_history"', '"admission_history"', '"terminal_status"') if marker in text]
    kept = sorted(p.name for p in (out / "campaign" / "evidence").glob("*")) if (
        out / "campaign" / "evidence").exists() else []

    builds, determinism, samples = floor_seconds(report)
    floor = builds + determinism + samples
    mib = 1024 * 1024
    print(f"profile {PROFILE}, rows {args.rows}, {args.pairs} pairs, sandbox {args.sandbox}; "
          f"verdicts: {report.verdicts.summary if report.verdicts else 'none'}")
    print("| measure | value |\n|---|---|")
    print(f"| largest canonical line | {largest:,} bytes ({largest / mib:.1f} MiB) of {len(lines)} lines |")
    print(f"| bot peak RSS | {peak_kib / 1024:.1f} MiB ({peak_kib * 1024 / largest:.1f}x the line) |"
          if largest else f"| bot peak RSS | {peak_kib / 1024:.1f} MiB |")
    added = (peak_kib - before_kib) * 1024
    print(f"| RSS the campaign added above {before_kib / 1024:.1f} MiB | {added / mib:.1f} MiB "
          f"({added / largest:.1f}x the line) |" if largest else "")
    rises = ", ".join(f"{stage} +{kib / 1024:.1f}" for stage, kib in growth.items() if kib > 0)
    print(f"| where the high-water RSS rose (MiB, by stage) | {rises or 'nowhere'} |")
    print(f"| report.json | {len(text.encode()):,} bytes; per-request content in it: {leaked or 'none'}; "
          f"kept full reports: {kept or 'none'} |")
    print(f"| builds (2 release builds) | {builds:.2f} s |")
    print(f"| determinism (waves of concurrent processes) | {determinism:.2f} s |")
    print(f"| performance samples (process wall time) | {samples:.2f} s |")
    print(f"| floor | {floor:.2f} s |")
    print(f"| campaign wall | {wall:.2f} s ({wall / floor:.3f}x the floor) |")
    stages = ", ".join(f"{stage} {seconds:.2f}" for stage, seconds in spent.items())
    print(f"| wall by stage, from each progress event to the next (s) | {stages} |")
    if report.verdicts is None or report.verdicts.performance.value != "PASS":
        # A blocked or short gate ran fewer processes than the protocol's: its wall/floor is not the campaign's.
        raise SystemExit(f"bench_real_size: the performance gate did not complete with PASS "
                         f"({report.verdicts.summary if report.verdicts else 'no verdicts'}); measure again "
                         "on a quiet node")


if __name__ == "__main__":
    main()
