"""What the kernel-corroborated gate and the timer probe add to one row's performance stage (issues 18.3, 20.3).

Why: both run on every row. The probe is two more harness processes before the warmups; the corroborating gate
is the same exact gate (with its diagnostics and bootstrap) computed twice more, once per kernel clock, when the
verdict is evaluated (by the campaign and again by `kv-parity verify`). This runs one real A/A campaign of the
fixture harness, sandboxed as campaigns run, and reports:

- probe cost: the probes' wall time (first probe's spawn to the first warmup's spawn) against the rest of the
  stage (first warmup's spawn to the last sample's reap), and the probes' share of the processes;
- gate cost: `evaluate` of the recorded evidence with the kernel gates against the named alternative, the same
  evidence evaluated without them (`kernel_corroborated=False`, as before this change), interleaved, and the
  difference against the stage's wall time.

    .venv/bin/python benchmarks/bench_kernel_gate.py [--pairs 60] [--repeats 7] [--sandbox bwrap|none]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench_perf_overhead import build_fixture, demo_args  # the script's directory is on sys.path
from runners.exec.placement import perf_placement
from runners.exec.sandbox import SANDBOX_KINDS, check, sha256_of
from runners.perf.gate import evaluate
from runners.perf.sampler import run_performance
from runners.schema.config import InvalidationRules, PerfConfig
from runners.schema.report import Arm, PerfResult


def evaluation_seconds(evidence: PerfResult, perf: PerfConfig, repeats: int) -> tuple[list[float], list[float]]:
    """Interleaved timings of `evaluate` with the kernel gates and without them (the alternative)."""
    without = evidence.model_copy(update={"kernel_corroborated": False})
    evaluate(evidence, perf)  # the first call imports SciPy's stats module (paid once per process either way)
    corroborated: list[float] = []
    reported_only: list[float] = []
    for _ in range(repeats):
        for subject, times in ((evidence, corroborated), (without, reported_only)):
            started = time.perf_counter()
            evaluate(subject, perf)
            times.append(time.perf_counter() - started)
    return corroborated, reported_only


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sandbox", choices=SANDBOX_KINDS, default="bwrap")
    options = parser.parse_args()
    sandbox = check(options.sandbox)
    with tempfile.TemporaryDirectory(prefix="bench-kernel-") as tmp:
        work = Path(tmp)
        built = build_fixture(work)
        binaries: dict[Arm, Path] = {"baseline": work / "baseline", "candidate": work / "candidate"}
        for arm, path in binaries.items():
            shutil.copy2(built, path)
            sandbox.pin(path, arm, sha256_of(path))
        placement = perf_placement()
        perf = PerfConfig(pairs=options.pairs, invalidation=InvalidationRules(max_interference_ms=1e6))
        result = run_performance(row_id="bench", harness_args=demo_args(work), binaries=binaries, perf=perf,
                                 timing_field="replay_cpu_ms", placement=placement, workdir=work / "perf",
                                 sandbox=sandbox)
        processes = [*result.probes, *result.warmups, *result.samples]
        first_warmup = min(s.started_unix for s in result.warmups)
        probe_wall = first_warmup - min(p.started_unix for p in result.probes)
        rest_wall = max(s.ended_unix for s in processes) - first_warmup
        corroborated, reported_only = evaluation_seconds(result, perf, options.repeats)
        with_gate, without_gate = statistics.median(corroborated), statistics.median(reported_only)
        print(f"host: {placement.host.cpu_model}, measured cpu {placement.cpu_set}; sandbox {options.sandbox}")
        print(f"campaign: {len(processes)} processes ({len(result.probes)} probes, {len(result.warmups)} warmups), "
              f"verdict {result.verdict.value}; kernel gates "
              + ", ".join(f"{g.clock} {g.verdict.value} median {g.bounds.median:.4f}" for g in result.kernel_gates))
        print(f"probe: {probe_wall:.3f} s against {rest_wall:.2f} s for warmups and pairs: "
              f"+{probe_wall / rest_wall:.2%} of the stage ({len(result.probes)}/{len(processes)} processes)")
        print(f"evaluate with the kernel gates: median {with_gate * 1000:.1f} ms; alternative without them: "
              f"median {without_gate * 1000:.1f} ms ({options.repeats} interleaved repeats): "
              f"{with_gate / without_gate:.2f}x, +{(with_gate - without_gate) * 1000:.1f} ms = "
              f"{(with_gate - without_gate) / rest_wall:.3%} of the stage's wall time")


if __name__ == "__main__":
    main()
