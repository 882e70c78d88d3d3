"""The fixture's noise knobs (noise.rs): the work a sample does is a pure function of its campaign position.

The power study relies on this: drift, a half-way step, a periodic term and a slowdown confined to part of
the work must be reproducible run after run, so the test reads the busy-work units each real process
reports (never its timing) for sample names shaped exactly as the performance runner names them.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

from runners.exec.placement import perf_placement
from runners.perf.sampler import SampleHooks, disclosing_name, run_performance
from runners.schema.config import InvalidationRules, PerfConfig

from tests.conftest import HarnessBuilder

KNOBS: dict[str, float | str] = {
    "WORK_SCALE": 1.2,
    "SLOWED_FRACTION": 0.5,
    "NOISE_SCOPE": "shared",
    "NOISE_DRIFT": 0.4,
    "NOISE_STEP": 0.1,
    "NOISE_PERIODIC": 0.05,
    "NOISE_PERIOD": 9.0,
    "NOISE_SEED": 7.0,
}


def _splitmix64(x: int) -> int:
    mask = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def _expected(total: int, index: int) -> float:
    """noise.rs: units = total * (f * WORK_SCALE + (1 - f) * m(index)) with the noise on the shared part only."""
    t = min(index / 120.0, 1.0)
    m = 1.0 + 0.4 * t + (0.1 if t >= 0.5 else 0.0)
    phase = (_splitmix64(7) >> 11) / float(1 << 53)
    m += 0.05 * math.sin(2 * math.pi * (index / 9.0 + phase))
    return total * (0.5 * 1.2 + 0.5 * m)


def _units(binary: Path, args: list[str], timings: Path) -> int:
    subprocess.run(
        [str(binary), *args, "--iterations", "1", "--timings-jsonl", str(timings)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    record = json.loads(timings.read_text(encoding="utf-8"))
    units = record["busy_units"]
    assert isinstance(units, int)
    return units


def test_busy_work_follows_the_campaign_position(
    harness: HarnessBuilder, demo_row_args: list[str], tmp_path: Path
) -> None:
    total = _units(harness.binary(), demo_row_args, tmp_path / "plain-measured-baseline-p59-a0-1.jsonl")
    noisy = harness.binary(**KNOBS)
    cases = {
        "row-x-warmup-candidate-pNone-a0-3.jsonl": 0,  # warmups sit at the campaign's start
        "row-x-measured-baseline-p0-a0-0.jsonl": 0,
        "row-x-measured-candidate-p29-a0-1.jsonl": 59,  # last invocation before the step
        "row-x-measured-baseline-p30-a2-0.jsonl": 60,  # a rerun keeps its pair's position
        "row-x-measured-candidate-p59-a0-1.jsonl": 119,
    }
    seen = {name: _units(noisy, demo_row_args, tmp_path / name) for name in cases}
    for name, index in cases.items():
        assert abs(seen[name] - _expected(total, index)) <= 1, name
    assert seen["row-x-measured-baseline-p30-a2-0.jsonl"] > seen["row-x-measured-candidate-p29-a0-1.jsonl"]
    again = _units(noisy, demo_row_args, tmp_path / "again-row-x-measured-candidate-p29-a0-1.jsonl")
    assert again == seen["row-x-measured-candidate-p29-a0-1.jsonl"], "the same position always does the same work"


def test_the_performance_runner_names_samples_the_way_the_noise_reads_them(
    harness: HarnessBuilder, demo_row_args: list[str], tmp_path: Path
) -> None:
    """Through the real sampler, naming samples as the noise study does (production names are opaque): every
    measured sample's work matches its pair and position in the schedule."""
    total = _units(harness.binary(), demo_row_args, tmp_path / "plain-measured-baseline-p0-a0-0.jsonl")
    noisy = harness.binary(**KNOBS)
    result = run_performance(
        row_id="noise",
        harness_args=demo_row_args,
        binaries={"baseline": noisy, "candidate": noisy},
        perf=PerfConfig(
            pairs=10,
            warmups_per_arm=1,
            dependence_batches=2,
            invalidation=InvalidationRules(max_interference_ms=1e6),  # this test reads work, not time
        ),
        timing_field="replay_execution_ms",
        placement=perf_placement(),
        workdir=tmp_path / "perf",
        hooks=SampleHooks(disclosed_name=disclosing_name("noise")),
    )
    measured = [s for s in result.samples if s.kind == "measured"]
    assert len(measured) == 20
    for sample in measured:
        assert sample.pair is not None and sample.timing_record is not None
        index = 2 * sample.pair + sample.position
        assert abs(int(str(sample.timing_record["busy_units"])) - _expected(total, index)) <= 1, index
