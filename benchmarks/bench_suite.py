"""How long the suite takes: in-process (`-n 0`, the old way) against the workers pyproject.toml sets, and the
developer's fast lane (`-m "not slow"`), each timed as a whole pytest process on this machine.

    .venv/bin/python benchmarks/bench_suite.py [--lanes serial,workers,fast] [--workers 3]

Each lane is one `python -m pytest -q -p no:cacheprovider` run from the repository root (its own session build
cache, so nothing carries over between lanes); the figure is its wall time and the ratio against the serial
lane. A lane whose pytest fails is reported as failed, never timed as if it had passed (exit 1).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANES = {
    "serial": ["-n", "0"],
    "workers": [],
    "fast": ["-m", "not slow"],
}


def run_lane(extra: list[str]) -> tuple[float, str]:
    """(wall seconds, pytest's last line)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    if done.returncode != 0:
        raise SystemExit(f"bench_suite: pytest {' '.join(extra)} failed ({last})")
    return wall, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lanes", default="serial,workers,fast", help="comma-separated: serial, workers, fast")
    parser.add_argument("--workers", type=int, default=None, help="override pyproject's -n for the workers lane")
    args = parser.parse_args()
    times: dict[str, float] = {}
    print("| lane | wall | against serial | pytest says |\n|---|---|---|---|")
    for lane in args.lanes.split(","):
        extra = list(LANES[lane])
        if lane == "workers" and args.workers is not None:
            extra = ["-n", str(args.workers)]
        times[lane], last = run_lane(extra)
        ratio = f"{times[lane] / times['serial']:.2f}x" if "serial" in times else "-"
        print(f"| {lane} {' '.join(extra)} | {times[lane]:.0f} s | {ratio} | {last} |", flush=True)


if __name__ == "__main__":
    main()
