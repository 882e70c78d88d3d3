"""What the fixture harness's release profile costs the suite: its build CPU and its run time, as committed
(`lto = "off"`) against cargo's release default (`lto = false`, ThinLTO across the crate's codegen units).

    .venv/bin/python benchmarks/bench_fixture_build.py [--builds 3] [--runs 40]

Each round builds a fresh copy of the fixture workspace once per profile (alternating, `target/` removed
first), timing the build's CPU (user + system of cargo and everything it started) and wall; then runs each
binary `--runs` times on the demo's first row and trace, alternating. The suite builds this workspace about a
hundred times, so the build CPU is what matters there; the run time says the harness did not get slower.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from runners.demo import FIXTURE_DIR, demo_config
from runners.demo_trace import generate_demo_trace

PROFILES = {"committed (lto off)": {}, "cargo default (thin local LTO)": {"CARGO_PROFILE_RELEASE_LTO": "false"}}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def build(workspace: Path, env: dict[str, str]) -> tuple[float, float, Path]:
    """(CPU seconds, wall seconds, binary) of one clean release build with the demo's build command."""
    shutil.rmtree(workspace / "target", ignore_errors=True)
    command = [*demo_config().build.command, "--message-format=json-render-diagnostics"]
    cpu, started = children_cpu(), time.monotonic()
    done = subprocess.run(command, cwd=workspace, env={**os.environ, **env}, capture_output=True, text=True,
                          check=True)
    wall, cpu = time.monotonic() - started, children_cpu() - cpu
    executable = next(line.split('"executable":"', 1)[1].split('"', 1)[0] for line in done.stdout.splitlines()
                      if '"executable":"' in line and "offline_replay_bench" in line)
    return cpu, wall, Path(executable)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    config = demo_config()
    with tempfile.TemporaryDirectory(prefix="kvp-fixture-build-") as scratch:
        root = Path(scratch)
        trace = root / "trace.jsonl"
        generate_demo_trace(trace, rows=config.trace.offset + config.trace.count)
        argv_tail = [str(trace), *config.harness.common_args, *config.rows[0].args]
        workspace = root / "fixture"
        shutil.copytree(FIXTURE_DIR, workspace, ignore=shutil.ignore_patterns("target"))
        cpu: dict[str, list[float]] = {name: [] for name in PROFILES}
        wall: dict[str, list[float]] = {name: [] for name in PROFILES}
        binaries: dict[str, Path] = {}
        for _ in range(args.builds):
            for name, env in PROFILES.items():
                spent, took, executable = build(workspace, env)
                cpu[name].append(spent)
                wall[name].append(took)
                binaries[name] = root / name.split()[0]
                shutil.copy2(executable, binaries[name])
        runs: dict[str, list[float]] = {name: [] for name in PROFILES}
        for _ in range(args.runs):
            for name, binary in binaries.items():
                started = time.monotonic()
                subprocess.run([str(binary), *argv_tail], capture_output=True, check=True)
                runs[name].append(time.monotonic() - started)
    committed, default = PROFILES
    print(f"| profile | build CPU (median of {args.builds}) | build wall | harness run (median of {args.runs}) |")
    print("|---|---|---|---|")
    for name in PROFILES:
        print(f"| {name} | {statistics.median(cpu[name]):.2f} s | {statistics.median(wall[name]):.2f} s | "
              f"{statistics.median(runs[name]) * 1000:.1f} ms |")
    print(f"| committed / default | {statistics.median(cpu[committed]) / statistics.median(cpu[default]):.2f} | "
          f"{statistics.median(wall[committed]) / statistics.median(wall[default]):.2f} | "
          f"{statistics.median(runs[committed]) / statistics.median(runs[default]):.3f} |")


if __name__ == "__main__":
    main()
