"""What containing every pinned harness start costs (issue 34): per sample and per campaign, as ratios against the
sampler before it.

Why: each sample (and timer probe and warmup) now gets a cgroup of its own (made, joined while bwrap blocks on its
block pipe, drained and removed) and its CPU time is read from the cgroup instead of wait4's rusage; without a
cgroup the seccomp program grows by four comparisons. The named alternative is the same sampler with containment
off (`Containment(kind="none")` under the same bwrap sandbox: the spawn, pinning, rusage and interference reading
before issue 34). Campaigns alternate between the mechanisms so the host's drift hits all of them; each is a real
Stage 7 on the demo row (probes, warmups, pairs) of the fixture harness, identical arms.

Also the pinned `Sandbox.run` start a determinism or parity process makes (`/bin/true`, so only the start's cost
shows), with and without its cgroup.

    .venv/bin/python benchmarks/bench_containment.py [--campaigns 3] [--pairs 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from runners.exec.containment import SECCOMP_ONLY, Containment, host_containment
from runners.exec.harness import row_args
from runners.exec.placement import perf_placement
from runners.exec.sandbox import Run, Sandbox
from runners.perf.sampler import run_performance
from runners.schema.config import InvalidationRules, PerfConfig
from runners.stages.build import build_artifact

from runners.demo import commit_change, demo_config, init_fixture_repo
from runners.demo_trace import generate_demo_trace

OFF = Containment(kind="none", detail="containment off: the sampler before issue 34")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--campaigns", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--starts", type=int, default=40)
    options = parser.parse_args()
    mechanisms = {"before (off)": OFF, host_containment().kind: host_containment(), "seccomp": SECCOMP_ONLY}
    perf = PerfConfig(pairs=options.pairs, warmups_per_arm=2,
                      invalidation=InvalidationRules(max_interference_ms=1e6, max_reruns_per_pair=0))
    config = demo_config()
    placement = perf_placement()
    with tempfile.TemporaryDirectory(prefix="bench-containment-") as scratch:
        work = Path(scratch)
        repo = work / "repo"
        init_fixture_repo(repo)
        sha = commit_change(repo, "bench", touch_comment=True)
        binary = work / "bin" / build_artifact(repo, "baseline", sha, config.build, work / "bin").binary_name
        trace = work / "trace.jsonl"
        generate_demo_trace(trace)
        args = row_args(config, config.rows[0], trace)
        walls: dict[str, list[float]] = {name: [] for name in mechanisms}
        per_sample: dict[str, list[float]] = {name: [] for name in mechanisms}
        interference: dict[str, list[float]] = {name: [] for name in mechanisms}
        for index in range(options.campaigns):
            for name, containment in mechanisms.items():
                started = time.perf_counter()
                result = run_performance(
                    row_id=f"bench-{index}", harness_args=args, binaries={"baseline": binary, "candidate": binary},
                    perf=perf, timing_field=config.harness.timing_field, placement=placement,
                    workdir=work / f"{index}-{name.split()[0]}", sandbox=Sandbox(containment=containment))
                walls[name].append(time.perf_counter() - started)
                runs = [*result.probes, *result.warmups, *result.samples]
                per_sample[name].extend(sample.elapsed_s for sample in runs)
                interference[name].extend(sample.interference_ms or 0.0 for sample in runs)
        starts: dict[str, list[float]] = {name: [] for name in mechanisms}
        for _ in range(options.starts):
            for name, containment in mechanisms.items():
                sandbox = Sandbox(containment=containment)
                started = time.perf_counter()
                sandbox.run(Run(argv=["/bin/true"], cpu_set=tuple(placement.cpu_set)), timeout=60)
                starts[name].append(time.perf_counter() - started)
    med = statistics.median
    before = "before (off)"
    print(f"host containment: {host_containment().detail}")
    for name in mechanisms:
        print(f"{name:>13}: campaign {med(walls[name]):.2f} s (x{med(walls[name]) / med(walls[before]):.3f}), "
              f"sample {med(per_sample[name]) * 1000:.1f} ms (x{med(per_sample[name]) / med(per_sample[before]):.3f})"
              f", interference median {med(interference[name]):.2f} ms, pinned Sandbox.run start "
              f"{med(starts[name]) * 1000:.1f} ms (x{med(starts[name]) / med(starts[before]):.3f})")


if __name__ == "__main__":
    main()
