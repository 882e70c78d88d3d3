"""What the performance stage costs outside the measured processes, against a bare subprocess loop.

Why: a row's 130 pinned processes run one at a time, so everything the orchestrator does per sample (spawn
through taskset, the wait for exec, /proc reads, parsing the timing record, telemetry) adds to campaign wall
time and, if it landed on the measured core, to the measurement. This runs one real A/A campaign of the
fixture harness and reports:

- per-sample overhead = our per-sample wall (start of one sample to the start of the next) minus the child's
  elapsed (spawn to reap), i.e. the orchestrator's own time between processes;
- campaign wall time against its floor, the sum of the sample wall times;
- the same numbers for the named alternative, a bare `subprocess.run(taskset -c N binary ...)` loop over
  the same number of processes with none of the bookkeeping, run before and after the campaign so that a
  change in the node's load between the two shows up instead of passing for overhead.

    .venv/bin/python benchmarks/bench_perf_overhead.py [--pairs 60] [--field replay_execution_ms] [--sandbox bwrap|none]

With `--sandbox bwrap` (the default, as campaigns run) the binaries are pinned, so the per-sample re-hash is in
the orchestrator's time, and the sandbox's setup (bwrap namespaces, setpriv) is in the child's elapsed time
outside the harness's own wall_time_ms: compare both lines against a `--sandbox none` run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from runners.exec.harness import row_args
from runners.exec.placement import kept_off, perf_placement, pinned_argv
from runners.exec.sandbox import SANDBOX_KINDS, check, sha256_of
from runners.perf.sampler import run_performance
from runners.schema.config import InvalidationRules, PerfConfig
from runners.schema.report import Arm, Sample
from runners.stages.build import build_artifact

from runners.demo import commit_change, demo_config, init_fixture_repo
from runners.demo_trace import generate_demo_trace


def build_fixture(work: Path, **knobs: bool | float | str) -> Path:
    """A release build of the fixture harness with the given variant knobs (as the test suite builds it)."""
    repo = work / f"repo-{len(list(work.glob('repo-*')))}"
    init_fixture_repo(repo)
    sha = commit_change(repo, f"bench variant {knobs}", knobs=knobs)
    artifact = build_artifact(repo, "candidate", sha, demo_config().build, repo / "out")
    return repo / "out" / artifact.binary_name


def demo_args(work: Path) -> list[str]:
    config = demo_config()
    trace = work / "demo-trace.jsonl"
    generate_demo_trace(trace, rows=config.trace.offset + config.trace.count)
    return row_args(config, config.rows[0], trace)


def _summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"median {statistics.median(ordered):.2f} ms, p90 {p90:.2f} ms, max {ordered[-1]:.2f} ms"


def _harness_wall_ms(sample: Sample) -> float | None:
    value = (sample.timing_record or {}).get("wall_time_ms")
    return float(value) if isinstance(value, int | float) else None


def orchestrator_overheads(samples: list[Sample]) -> list[float]:
    """Per consecutive sample: (next start - this start) - this process's elapsed, in ms."""
    ordered = sorted(samples, key=lambda s: s.started_unix)
    return [(b.started_unix - a.started_unix - a.elapsed_s) * 1000 for a, b in zip(ordered, ordered[1:], strict=False)]


def bare_loop(binary: Path, args: list[str], cpu: list[int], count: int, work: Path) -> tuple[float, list[float]]:
    """The alternative: subprocess.run of the same pinned command and nothing else; (wall s, elapsed s)."""
    elapsed = []
    started = time.monotonic()
    for index in range(count):
        timing = work / f"bare-{index}.jsonl"
        begin = time.monotonic()
        subprocess.run(
            pinned_argv(cpu, [str(binary), *args, "--iterations", "1", "--timings-jsonl", str(timing)]),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        elapsed.append(time.monotonic() - begin)
    return time.monotonic() - started, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--field", default="replay_execution_ms")
    parser.add_argument(
        "--max-interference-ms",
        type=float,
        default=1e6,
        help="competing-load limit; the default never invalidates, so sharing nodes cannot block",
    )
    parser.add_argument("--sandbox", choices=SANDBOX_KINDS, default="bwrap")
    options = parser.parse_args()
    sandbox = check(options.sandbox)
    with tempfile.TemporaryDirectory(prefix="bench-perf-") as tmp:
        work = Path(tmp)
        built = build_fixture(work)
        binaries: dict[Arm, Path] = {"baseline": work / "baseline", "candidate": work / "candidate"}
        for arm, path in binaries.items():
            shutil.copy2(built, path)
            sandbox.pin(path, arm, sha256_of(path))
        args = demo_args(work)
        placement = perf_placement()
        perf = PerfConfig(
            pairs=options.pairs,
            invalidation=InvalidationRules(max_interference_ms=options.max_interference_ms),
        )
        load_before = os.getloadavg()
        with kept_off(placement.cpu_set):
            before_wall, before_elapsed = bare_loop(built, args, placement.cpu_set, 2 * perf.pairs + 10, work)
        started = time.monotonic()
        result = run_performance(
            row_id="bench",
            harness_args=args,
            binaries=binaries,
            perf=perf,
            timing_field=options.field,
            placement=placement,
            workdir=work / "perf",
            sandbox=sandbox,
        )
        wall = time.monotonic() - started
        samples = [*result.warmups, *result.samples]
        floor = sum(s.elapsed_s for s in samples)
        with kept_off(placement.cpu_set):
            after_wall, after_elapsed = bare_loop(built, args, placement.cpu_set, len(samples), work)
        startup = [s.elapsed_s * 1000 - inner for s in samples if (inner := _harness_wall_ms(s)) is not None]
        print(
            f"host: {placement.host.cpu_model}, {placement.host.logical_cpus} logical CPUs, measured cpu "
            f"{placement.cpu_set}; load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}"
        )
        print(f"sandbox: {options.sandbox}")
        print(
            f"campaign: {len(samples)} processes ({len(result.warmups)} warmups), "
            f"verdict {result.verdict.value} ({result.reason.split(';')[0]})"
        )
        print(f"  child elapsed (spawn to reap): {_summary([s.elapsed_s * 1000 for s in samples])}")
        print(f"  of which outside the harness's own wall_time_ms (exec, loading, exit): {_summary(startup)}")
        print(f"  orchestrator overhead per sample: {_summary(orchestrator_overheads(samples))}")
        print(
            f"  campaign wall {wall:.2f} s vs floor {floor:.2f} s: overhead {wall - floor:.2f} s "
            f"({(wall - floor) / floor:.1%} of the floor)"
        )
        for when, bare_wall, bare_elapsed in (
            ("before", before_wall, before_elapsed),
            ("after", after_wall, after_elapsed),
        ):
            bare_floor = sum(bare_elapsed)
            print(f"alternative, bare subprocess.run loop of {len(bare_elapsed)} processes {when} the campaign:")
            print(f"  child elapsed (spawn to reap): {_summary([e * 1000 for e in bare_elapsed])}")
            print(
                f"  overhead per process {(bare_wall - bare_floor) / len(bare_elapsed) * 1000:.2f} ms; wall "
                f"{bare_wall:.2f} s vs floor {bare_floor:.2f} s ({(bare_wall - bare_floor) / bare_floor:.1%})"
            )


if __name__ == "__main__":
    main()
