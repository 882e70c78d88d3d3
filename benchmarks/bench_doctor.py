"""What `kv-parity doctor` costs: the command, its parts, and what it adds to a campaign row.

    .venv/bin/python benchmarks/bench_doctor.py [--repeat 5] [--row vllm-agg] [--no-campaign]

1. The command as an operator or a row job runs it (a fresh interpreter: imports, every check, the 0.5 s
   /proc/stat window), against `kv-parity --help` (the interpreter and CLI start alone).
2. In process, what `run_row` adds per row: `run_doctor()`, against the same checks without the load window and
   against the sandbox probe alone (`runners.exec.sandbox.check`, which every command already runs once).
3. One real row of the demo (both builds, determinism, parity, the default 60-pair performance gate), whose
   recorded doctor is set against the campaign's wall time and the row's performance stage.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from runners.exec.sandbox import check
from runners.pipeline.campaign import CampaignRequest, run_campaign
from runners.stages.doctor import run_doctor

from runners.demo import demo_config, prepare_demo

KV_PARITY = Path(sys.executable).parent / "kv-parity"


def timed(repeat: int, action: Callable[[], object]) -> list[float]:
    seconds = []
    for _ in range(repeat):
        started = time.monotonic()
        action()
        seconds.append(time.monotonic() - started)
    return seconds


def line(label: str, seconds: list[float]) -> str:
    return f"| {label} | median {statistics.median(seconds) * 1000:.0f} ms (min {min(seconds) * 1000:.0f}, " \
           f"max {max(seconds) * 1000:.0f}) |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--row", default="vllm-agg")
    parser.add_argument("--no-campaign", action="store_true", help="skip part 3 (two release builds and a row)")
    args = parser.parse_args()

    def command(*argv: str) -> None:
        subprocess.run([str(KV_PARITY), *argv], capture_output=True, check=False)

    print("| what | wall time |\n|---|---|")
    print(line("`kv-parity doctor` (fresh process)", timed(args.repeat, lambda: command("doctor"))))
    print(line("alternative: `kv-parity --help` (interpreter and CLI start)",
               timed(args.repeat, lambda: command("--help"))))
    print(line("`run_doctor()` in process (what a row adds)", timed(args.repeat, run_doctor)))
    print(line("the checks without the load window", timed(args.repeat, lambda: run_doctor(load_window_s=0))))
    print(line("alternative: the sandbox probe alone (`check('bwrap')`)", timed(args.repeat, lambda: check("bwrap"))))
    if args.no_campaign:
        return
    out = Path(tempfile.mkdtemp(prefix="kv-parity-doctor-bench-"))
    repo, base, head, trace = prepare_demo(out, "identical")
    started = time.monotonic()
    report = run_campaign(CampaignRequest(repo=repo, base=base, head=head, config=demo_config(),
                                          config_source="bench", out_dir=out / "campaign", rows=[args.row],
                                          trace_path=trace, sandbox=check("bwrap")))
    wall = time.monotonic() - started
    row = report.rows[0]
    assert row.doctor is not None
    doctor = row.doctor.seconds
    print(f"\none-row campaign ({args.row}): wall {wall:.2f} s, doctor {doctor:.2f} s "
          f"({doctor / wall:.1%} of the campaign); doctor {row.doctor.summary}")
    if row.performance is not None and row.performance.samples:
        samples = [*row.performance.warmups, *row.performance.samples]
        span = max(s.ended_unix for s in samples) - min(s.started_unix for s in samples)
        print(f"performance stage {span:.2f} s ({len(samples)} processes, verdict {row.perf_verdict.value}): "
              f"the doctor is {doctor / span:.1%} of it")


if __name__ == "__main__":
    main()
