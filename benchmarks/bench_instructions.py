"""What the instruction-counting stage adds to a campaign on the demo-5000 profile (the protocol's 5,000-request
window on the fixture harness writing the real report shapes, a comment-only change between the revisions).

The named alternative is the row's performance stage (2 timer probes, 10 warmups and 120 measured processes),
measured two ways, both printed per row and in total:
- wall time by stage, from each progress event to the next (from the row's `parity` event, right before its
  timer probes, to the `instructions` event, then `instructions` to the row's next stage): what a campaign
  waits for;
- the processes' own time: the sum of every performance process's spawn-to-reap `elapsed_s` against the sum of
  the counted runs' `seconds` (two per arm under callgrind): what the stages cost without the orchestration.

    .venv/bin/python benchmarks/bench_instructions.py [--rows vllm-agg,vllm-disagg] [--pairs 60]
        [--max-interference-ms 1e6]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from runners.pipeline.campaign import CampaignRequest, run_campaign
from runners.schema.config import load_profile

from runners.demo import REAL_HARNESS_SHAPES, prepare_demo
from runners.progress import ProgressEvent

PROFILE = "demo-5000"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    config = load_profile(PROFILE)
    parser.add_argument("--rows", default=",".join(row.id for row in config.rows),
                        help="comma-separated row ids of the demo-5000 profile (default: all four)")
    parser.add_argument("--pairs", type=int, default=None, help="measured pairs (default: the profile's 60)")
    parser.add_argument("--max-interference-ms", type=float, default=1e6,
                        help="competing-load limit (default: never fires, as the other benchmarks on this shared VM)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kv-parity-bench-instructions-"))
    repo, base, head, trace = prepare_demo(out, "identical", profile=PROFILE, base_knobs=REAL_HARNESS_SHAPES)
    invalidation = config.perf.invalidation.model_copy(update={"max_interference_ms": args.max_interference_ms})
    perf = config.perf.model_copy(update={"invalidation": invalidation, "pairs": args.pairs or config.perf.pairs})
    config = config.model_copy(update={"perf": perf})
    spent: dict[tuple[str | None, str], float] = {}
    last: dict[str, object] = {"key": (None, "pin"), "at": time.monotonic()}

    def track(event: ProgressEvent) -> None:
        now = time.monotonic()
        key = last["key"]
        assert isinstance(key, tuple) and isinstance(last["at"], float)
        spent[key] = spent.get(key, 0.0) + now - last["at"]
        last.update(key=(event.row, event.stage), at=now)

    report = run_campaign(CampaignRequest(repo=repo, base=base, head=head, config=config, config_source="bench",
                                          out_dir=out / "campaign", rows=args.rows.split(","), trace_path=trace,
                                          build_cache=None), track)
    print(f"campaign {report.campaign_id}: {report.verdicts.summary if report.verdicts else 'no verdicts'}")
    print("| row | performance stage (wall) | counting stage (wall) | ratio | performance processes | counted runs "
          "| ratio | region Ir per arm | runs agree |")
    print("|---|---|---|---|---|---|---|---|---|")
    totals = [0.0, 0.0, 0.0, 0.0]
    for row in report.rows:
        perf, counts = row.performance, row.instructions
        if perf is None or counts is None:
            print(f"| {row.row.id} | not counted: {row.perf_reason[:120]} |")
            continue
        # The stage starts at the row's `parity` event (its probes and warmups emit nothing until they are done).
        stage = spent.get((row.row.id, "parity"), 0.0) + spent.get((row.row.id, "performance"), 0.0)
        counting = spent.get((row.row.id, "instructions"), 0.0)
        processes = sum(s.elapsed_s for s in [*perf.probes, *perf.warmups, *perf.samples])
        counted = sum(run.seconds for run in counts.runs)
        figures = "/".join(f"{counts.mean(arm) or 0:,.0f}" for arm in ("baseline", "candidate"))
        agree = all(counts.agree(arm) for arm in ("baseline", "candidate"))
        print(f"| {row.row.id} | {stage:.1f} s | {counting:.1f} s | {counting / stage:.2f} | {processes:.1f} s "
              f"| {counted:.1f} s | {counted / processes:.2f} | {figures} | {agree} |")
        for index, value in enumerate((stage, counting, processes, counted)):
            totals[index] += value
    if totals[0] and totals[2]:
        print(f"| total | {totals[0]:.1f} s | {totals[1]:.1f} s | {totals[1] / totals[0]:.2f} | {totals[2]:.1f} s "
              f"| {totals[3]:.1f} s | {totals[3] / totals[2]:.2f} | | |")
    print(f"output in {out}")


if __name__ == "__main__":
    main()
