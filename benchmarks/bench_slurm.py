"""What going through Slurm costs (issue 21), against the local backend, on a real single-node cluster.

1. The same demo campaign (`kv-parity demo --rows vllm-agg`, identical scenario) with `--backend local` and
   `--backend slurm`, alternated: wall time of each and the ratio slurm / local. The Slurm run pays for
   scheduling (each stage starts `afterok` the previous one), job start-up and the extra processes of the split
   pipeline (plan, two builds, manifest, row, merge) over the single-process local campaign.
2. How long the bot takes to notice a job's end: a job that ends by itself (it writes the time just before it
   exits) and a job killed with `scancel --signal=KILL` (a lost node), each followed by the pipeline's own
   `SlurmCampaign._refresh` at the default `poll_seconds` (the lifecycle's 1 s tick comes on top in the
   service).

    script/slurm-cluster start
    SLURM_CONF=/tmp/kv-parity-slurm/slurm.conf .venv/bin/python benchmarks/bench_slurm.py [--repeat 3]

Figures go in benchmarks/README.md, never in assertions.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runners.pipeline.slurm import SlurmCampaign, SlurmJob, SlurmOptions  # noqa: E402
from runners.pipeline.slurm_client import SlurmClient  # noqa: E402

KV_PARITY = str(Path(sys.executable).with_name("kv-parity"))


def demo_seconds(backend: str, out: Path) -> float:
    started = time.monotonic()
    done = subprocess.run([KV_PARITY, "demo", "--rows", "vllm-agg", "--quiet", "--backend", backend, "--out",
                           str(out)], capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if done.returncode not in (0, 1, 3, 4):  # a verdict, not a failure to run
        raise SystemExit(f"demo --backend {backend} exited {done.returncode}: {done.stderr[-2000:]}")
    return elapsed


def notice_seconds(work: Path, kill: bool) -> float:
    """Seconds from a job's end (its own timestamp, or the scancel) to the poll that sees it final."""
    options = SlurmOptions()
    campaign = SlurmCampaign(work, options, client=SlurmClient())
    stamp = work / "ended"
    script = work / "job.sh"
    body = "sleep 30\n" if kill else f"sleep 2\ndate +%s.%N > {stamp}\n"
    script.write_text("#!/bin/bash\n" + body)
    job_id = campaign.client.sbatch([f"--output={work / '%j.out'}"], script, work)
    job = SlurmJob(role="row", slot="row-0", job_id=job_id, name="bench", exit_file=str(work / "none.exit"))
    if kill:
        while True:
            campaign._refresh(job)
            if job.state == "RUNNING":
                break
            time.sleep(0.1)  # waiting for the job to start, not measured
        ended = time.time()
        subprocess.run(["scancel", "--signal=KILL", job_id], check=True)
    while True:
        campaign._refresh(job)
        if job.final:
            noticed = time.time()
            break
        time.sleep(options.poll_seconds)  # the backend's own poll interval
    if not kill:
        ended = float(stamp.read_text().strip())
    return noticed - ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    local: list[float] = []
    slurm: list[float] = []
    finished: list[float] = []
    lost: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as scratch:
        root = Path(scratch)
        for index in range(args.repeat):
            local.append(demo_seconds("local", root / f"local-{index}"))
            slurm.append(demo_seconds("slurm", root / f"slurm-{index}"))
            for kill, into in ((False, finished), (True, lost)):
                work = root / f"notice-{index}-{kill}"
                work.mkdir()
                into.append(notice_seconds(work, kill))
            print(f"run {index + 1}: local {local[-1]:.1f} s, slurm {slurm[-1]:.1f} s "
                  f"(x{slurm[-1] / local[-1]:.2f}); noticed finished {finished[-1]:.2f} s, lost {lost[-1]:.2f} s")
    ratios = [s / loc for s, loc in zip(slurm, local, strict=True)]
    print(f"demo campaign (vllm-agg): local median {statistics.median(local):.1f} s, slurm median "
          f"{statistics.median(slurm):.1f} s, ratio median x{statistics.median(ratios):.2f} "
          f"(range x{min(ratios):.2f}-x{max(ratios):.2f})")
    print(f"noticed a finished job after median {statistics.median(finished):.2f} s (max {max(finished):.2f}); "
          f"a killed job after median {statistics.median(lost):.2f} s (max {max(lost):.2f}); poll_seconds "
          f"{SlurmOptions().poll_seconds:g}")


if __name__ == "__main__":
    main()
