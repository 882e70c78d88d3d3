"""A whole single-node campaign's wall time against its floor.

The floor is the time the protocol itself needs: both release builds, the determinism processes (their
waves run concurrently on disjoint cores, so each wave costs its slowest process) and every performance
sample's process wall time. Everything above the floor is our orchestration: worktrees, checksums, trace
slicing, canonicalisation, parity, coverage, statistics and writing the report.

    .venv/bin/python benchmarks/bench_campaign_floor.py [--rows vllm-agg] [--out DIR] [--sandbox bwrap|none]

With the sandbox, each build and process's own time includes its sandbox's setup, so the floor grows with it:
compare the campaign wall of `--sandbox bwrap` against `--sandbox none` to see what containment costs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from runners.exec.sandbox import SANDBOX_KINDS, check
from runners.pipeline.campaign import CampaignRequest, run_campaign

from runners.demo import demo_config, prepare_demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", default="vllm-agg")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sandbox", choices=SANDBOX_KINDS, default="bwrap")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kv-parity-floor-"))
    repo, base, head, trace = prepare_demo(out, "identical")
    config = demo_config()
    started = time.monotonic()
    report = run_campaign(CampaignRequest(repo=repo, base=base, head=head, config=config, config_source="bench",
                                          out_dir=out / "campaign", rows=args.rows.split(","), trace_path=trace,
                                          sandbox=check(args.sandbox)))
    wall = time.monotonic() - started

    builds = sum(artifact.build_seconds for artifact in report.artifacts)
    determinism = 0.0
    samples = 0.0
    for row in report.rows:
        if row.determinism is not None:
            runs = row.determinism.runs
            width = len({tuple(run.cpu_set) for run in runs}) if row.determinism.concurrent else 1
            waves = [runs[i:i + width] for i in range(0, len(runs), width)]
            determinism += sum(max(run.seconds for run in wave) for wave in waves)
        if row.performance is not None:
            samples += sum(s.elapsed_s for s in [*row.performance.warmups, *row.performance.samples])
    floor = builds + determinism + samples
    print(f"sandbox {args.sandbox}; verdicts: {report.verdicts.summary if report.verdicts else 'none'}")
    print("| part | seconds |\n|---|---|")
    print(f"| builds (2 release builds) | {builds:.2f} |")
    print(f"| determinism (waves of concurrent processes) | {determinism:.2f} |")
    print(f"| performance samples (process wall time) | {samples:.2f} |")
    print(f"| floor | {floor:.2f} |")
    print(f"| campaign wall | {wall:.2f} |")
    print(f"| overhead above the floor | {wall - floor:.2f} ({(wall / floor - 1) * 100:+.1f}%) |")


if __name__ == "__main__":
    main()
