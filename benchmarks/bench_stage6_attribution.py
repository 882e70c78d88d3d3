"""What Stage 6 fixtures and regression attribution add to a campaign, against the work they sit beside.

1. Stage 6: the demo profile's fixtures (determinism + parity + assertions on both revisions, small traces)
   timed as one stage, against the whole one-row campaign they ran in.
2. Attribution: a slowed candidate (the HOT_SPOT_WORK knob, added work in one named function) makes the row's
   performance gate FAIL, which triggers attribution (callgrind on both arms + 3 alternating perf runs per arm);
   its wall time against the row's own sampling time (warmups + 60 pairs).

    .venv/bin/python benchmarks/bench_stage6_attribution.py [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from runners.exec.sandbox import check
from runners.pipeline.campaign import CampaignRequest, run_campaign

from runners.demo import commit_change, demo_config, prepare_demo
from runners.progress import ProgressEvent


class StageClock:
    """Seconds between the first event of a stage and the first event of the next one."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []

    def __call__(self, event: ProgressEvent) -> None:
        self.events.append((event.stage, event.unix))

    def seconds(self, stage: str) -> float:
        total, start = 0.0, None
        for name, unix in self.events:
            if name == stage and start is None:
                start = unix
            elif name != stage and start is not None:
                total, start = total + unix - start, None
        return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kv-parity-stage6-"))
    repo, base, head, trace = prepare_demo(out, "identical")
    config = demo_config()

    clock = StageClock()
    started = time.monotonic()
    report = run_campaign(CampaignRequest(repo=repo, base=base, head=head, config=config, config_source="bench",
                                          out_dir=out / "identical", trace_path=trace, sandbox=check("bwrap")),
                          clock)
    wall = time.monotonic() - started
    fixtures = clock.seconds("fixtures")
    print(f"identical: {report.verdicts.summary if report.verdicts else 'none'}")
    print(f"| Stage 6 fixtures ({len(report.fixtures)}) | {fixtures:.2f} s | {fixtures / wall:.1%} of the "
          f"{wall:.1f} s campaign ({len(report.rows)} rows) |")

    slow = commit_change(repo, "perf: hot spot", knobs={"HOT_SPOT_WORK": 1.0})
    clock = StageClock()
    # This measures what attribution costs, not the gate: competing load on a shared machine must not block the
    # row before its FAIL triggers attribution, so the interference bound is lifted here (and only here).
    tolerant = config.model_copy(update={"perf": config.perf.model_copy(update={
        "invalidation": config.perf.invalidation.model_copy(update={"max_interference_ms": 1e9})})})
    report = run_campaign(CampaignRequest(repo=repo, base=base, head=slow, config=tolerant, config_source="bench",
                                          out_dir=out / "slow", trace_path=trace, rows=["vllm-agg"],
                                          sandbox=check("bwrap")), clock)
    row = report.rows[0]
    sampling = sum(s.elapsed_s for s in [*row.performance.warmups, *row.performance.samples]) \
        if row.performance else 0.0
    attribution = clock.seconds("attribution")
    print(f"slowed: {report.verdicts.summary if report.verdicts else 'none'}")
    print(f"| attribution of the failing row | {attribution:.2f} s | {attribution / sampling:.2f}x the row's "
          f"{sampling:.1f} s of sampling |")
    if row.attribution is not None:
        for line in row.attribution.findings:
            print(f"  finding: {line}")


if __name__ == "__main__":
    main()
