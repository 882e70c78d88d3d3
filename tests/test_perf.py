"""Stage 7 on real fixture-harness builds: verdicts, product failures, and real injected invalidations.

Thresholds for these campaigns are declared here, before sampling, and stored in every result.

False alarms. Under exchangeable ratios the diagnostics' family-wise false-alarm rate is bounded by a union
bound: each Kendall/Mann-Whitney check fires with probability at most its p threshold (0.001 each; the two
trend checks, the order check, and no telemetry on this VM), and the autocorrelation check's tail at
|r| > 0.45 over lags 1-3 with 60 pairs is simulated below (~0.07%). Total < 0.5% per campaign, asserted by
`test_declared_diagnostics_bound_the_false_alarm_rate`. The campaign config's defaults (|r| > 0.3, p < 0.01)
give about 7%, too many for a test that must not flake.

Noise. This 2-vCPU VM is shared with other engineers' builds and test runs, so competing load on the measured
CPU is the norm here, not the exception. The verdict campaigns therefore gate on `replay_cpu_ms` (thread CPU
time of the same replay call, immune to time slicing; an explicit, recorded timing-field choice) and declare a
competing-load limit that does not fire; the competing-load rule is exercised on its own with a real injected
competitor and the protocol's wall-clock field.

Identical revisions. What the gate guarantees for them is that it never FAILs (a false alarm); that it PASSes
as well needs a machine quiet enough for the 95% interval of the median ratio to fit under 1.05. Beside the
other workers' compiles (two threads each on these two vCPUs) the interval sometimes reaches just past it (upper
X(37) of 1.0502 and 1.069 seen, about one suite in five), and INCONCLUSIVE is then the gate's honest answer, so
the A/A tests assert the guarantee and the straddle, not the quiet machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from xml.etree import ElementTree

import numpy as np
import pytest

from bot.publish.html_report import row_charts
from runners.exec.containment import SECCOMP_ONLY
from runners.exec.placement import perf_placement, pinned_argv
from runners.exec.sandbox import Sandbox
from runners.perf.gate import classify
from runners.perf.sampler import SampleHooks, disclosing_name, read_timing_file, run_performance
from runners.perf.schedule import arm_order, make_schedule, persist_schedule, schedule_seed
from runners.progress import ProgressEvent
from runners.schema.config import DiagnosticsThresholds, InvalidationRules, PerfConfig
from runners.schema.report import KERNEL_CLOCK_LABELS, PerfResult, PerfVerdict, Placement
from runners.verify import verify_performance

if TYPE_CHECKING:
    from tests.conftest import HarnessBuilder

DIAGNOSTICS = DiagnosticsThresholds(
    max_abs_autocorr=0.45,
    autocorr_lags=[1, 2, 3],
    min_trend_p=0.001,
    min_order_effect_p=0.001,
    min_telemetry_p=0.001,
)
QUIET_ENOUGH = InvalidationRules(max_interference_ms=1e6, max_reruns_per_pair=3)
"""Competing load never invalidates in the verdict campaigns (see the module docstring)."""
VERDICT_PERF = PerfConfig(pairs=60, warmups_per_arm=5, diagnostics=DIAGNOSTICS, invalidation=QUIET_ENOUGH)
CPU_FIELD = "replay_cpu_ms"
PROTOCOL_FIELD = "replay_execution_ms"
SHORT_PERF = PerfConfig(
    pairs=10,
    warmups_per_arm=0,
    diagnostics=DIAGNOSTICS,
    invalidation=InvalidationRules(max_interference_ms=25.0, max_reruns_per_pair=10),
)
"""For the invalidation and failure campaigns, which need only their first pair."""


# --- pure parts ---------------------------------------------------------------------------------------------


def test_declared_diagnostics_bound_the_false_alarm_rate() -> None:
    n, draws = VERDICT_PERF.pairs, 200_000
    x = np.random.default_rng(20261129).standard_normal((draws, n))
    x -= x.mean(axis=1, keepdims=True)
    denominator = (x * x).sum(axis=1)
    fired = np.zeros(draws, dtype=bool)
    for lag in DIAGNOSTICS.autocorr_lags:
        fired |= np.abs((x[:, :-lag] * x[:, lag:]).sum(axis=1) / denominator) > DIAGNOSTICS.max_abs_autocorr
    autocorr_rate = float(fired.mean())
    rank_checks = 2 * DIAGNOSTICS.min_trend_p + DIAGNOSTICS.min_order_effect_p + DIAGNOSTICS.min_telemetry_p
    assert autocorr_rate + rank_checks < 0.005


def test_the_statistics_start_no_blas_threads() -> None:
    """numpy as kv-parity imports it adds no thread: OpenBLAS would start one per core beside the
    pinned harness. Only the default is the package's: an operator's own OPENBLAS_NUM_THREADS still applies."""
    environ = {name: value for name, value in os.environ.items() if name != "OPENBLAS_NUM_THREADS"}
    count = subprocess.run(
        [sys.executable, "-c", "import runners.perf.sampler, os; print(len(os.listdir('/proc/self/task')))"],
        capture_output=True, text=True, check=True, env=environ,
    ).stdout
    assert int(count) == 1


def test_schedule_is_balanced_and_reproducible_from_its_seed(tmp_path: Path) -> None:
    seed = schedule_seed(20261129, "vllm-agg")
    assert seed == schedule_seed(20261129, "vllm-agg")
    assert seed != schedule_seed(20261129, "sglang-agg") and seed != schedule_seed(1, "vllm-agg")
    plan = make_schedule(seed, 60)
    assert [p.pair for p in plan] == list(range(60))
    assert sum(p.order == "baseline_first" for p in plan) == 30
    assert plan == make_schedule(seed, 60)
    assert plan != make_schedule(schedule_seed(20261129, "sglang-agg"), 60)
    orders = "".join("B" if p.order == "baseline_first" else "C" for p in plan)
    assert "B" * 30 not in orders and orders != "BC" * 30, "randomized, not blocked or alternating"
    path = persist_schedule(tmp_path, "vllm-agg", 20261129, seed, plan)
    assert path.name == "schedule-vllm-agg.json"
    assert path.read_text(encoding="utf-8").count('"pair"') == 60


@pytest.mark.parametrize(
    ("exit_code", "record", "status", "blocking", "words"),
    [
        (101, {PROTOCOL_FIELD: 5.0, "replay_bench": True}, "product_failure", False, "status 101"),
        (-6, None, "product_failure", False, "SIGABRT"),
        (0, None, "product_failure", False, "was not written"),
        (
            0,
            {"wall_time_ms": 5.0, "replay_bench": True},
            "product_failure",
            True,
            "lacks the timing field `replay_execution_ms`; fields present: replay_bench, wall_time_ms",
        ),
        (0, {PROTOCOL_FIELD: 5.0, "replay_bench": False}, "product_failure", True, "replay_bench=false"),
        (0, {PROTOCOL_FIELD: 5.0}, "product_failure", True, "replay_bench=null"),
        (
            0,
            {PROTOCOL_FIELD: "fast", "replay_bench": True},
            "product_failure",
            False,
            "not a positive number",
        ),
        (0, {PROTOCOL_FIELD: 5.0, "replay_bench": True, "setup_ms": 1.5}, "ok", False, ""),
    ],
)
def test_classification(
    exit_code: int, record: dict[str, object] | None, status: str, blocking: bool, words: str
) -> None:
    meaning = classify(exit_code, record, "no timing record: t.jsonl was not written", PROTOCOL_FIELD)
    assert (meaning.status, meaning.blocking) == (status, blocking)
    assert words in (meaning.failure or "")
    if status == "ok":
        assert (meaning.metric_ms, meaning.setup_ms) == (5.0, 1.5)


def test_a_replay_longer_than_its_own_process_is_a_malformed_record() -> None:
    record = {PROTOCOL_FIELD: 80.0, "replay_bench": True}
    meaning = classify(0, record, None, PROTOCOL_FIELD, process_wall_ms=50.0)
    assert (meaning.status, meaning.blocking, meaning.metric_ms) == ("product_failure", False, None)
    assert "reports 80 ms, more than the 50.000 ms the whole harness process took" in (meaning.failure or "")
    assert classify(0, record, None, PROTOCOL_FIELD, process_wall_ms=80.5).status == "ok"


def test_a_planted_timing_file_link_is_refused_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "root-only.json"
    secret.write_text('{"replay_execution_ms": 1.0, "replay_bench": true}\n', encoding="utf-8")
    own = tmp_path / "timings" / "sample"
    own.mkdir(parents=True)
    (own / "timing.jsonl").symlink_to(secret)
    record, problem = read_timing_file(own / "timing.jsonl", tmp_path / "timings")
    assert record is None and "is a symbolic link; refusing to follow it" in (problem or "")
    (own / "timing.jsonl").unlink()
    os.mkfifo(own / "timing.jsonl")
    record, problem = read_timing_file(own / "timing.jsonl", tmp_path / "timings")
    assert record is None and "is not a regular file" in (problem or ""), "a FIFO never blocks the reader"


def test_output_flags_in_harness_args_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--canonical-reports-jsonl"):
        run_performance(
            row_id="r",
            harness_args=["t.jsonl", "--canonical-reports-jsonl", "x"],
            binaries={"baseline": Path(sys.executable), "candidate": Path(sys.executable)},
            perf=SHORT_PERF,
            timing_field=PROTOCOL_FIELD,
            placement=perf_placement(),
            workdir=tmp_path,
        )


def test_a_limit_below_the_measurement_resolution_blocks_before_sampling(tmp_path: Path) -> None:
    result = run_performance(
        row_id="r",
        harness_args=["t.jsonl"],
        binaries={"baseline": Path(sys.executable), "candidate": Path(sys.executable)},
        perf=PerfConfig(invalidation=InvalidationRules(max_interference_ms=5.0)),
        timing_field=PROTOCOL_FIELD,
        placement=perf_placement(),
        workdir=tmp_path,
    )
    assert result.verdict == PerfVerdict.BLOCKED
    assert "below the /proc/stat measurement resolution" in result.reason
    assert result.samples == [] and result.warmups == []
    assert Path(result.schedule_path).is_file()


# --- real campaigns -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def placement() -> Placement:
    return perf_placement()


@pytest.fixture(scope="module")
def baseline(harness: HarnessBuilder) -> Path:
    return harness.binary()


def _campaign(
    tmp: Path,
    baseline: Path,
    candidate: Path,
    args: list[str],
    placement: Placement,
    *,
    perf: PerfConfig = VERDICT_PERF,
    field: str = CPU_FIELD,
    hooks: SampleHooks | None = None,
    events: list[ProgressEvent] | None = None,
    sandbox: Sandbox | None = None,
) -> PerfResult:
    staged = tmp / "bin"
    staged.mkdir(parents=True, exist_ok=True)
    binaries = {"baseline": staged / "baseline", "candidate": staged / "candidate"}
    shutil.copy2(baseline, binaries["baseline"])
    shutil.copy2(candidate, binaries["candidate"])
    return run_performance(
        row_id="demo-agg",
        harness_args=args,
        binaries=binaries,
        perf=perf,
        timing_field=field,
        placement=placement,
        workdir=tmp / "work",
        progress=events.append if events is not None else None,
        hooks=hooks,
        sandbox=sandbox,
    )


@pytest.fixture(scope="module")
def identical(
    tmp_path_factory: pytest.TempPathFactory, baseline: Path, demo_row_args: list[str], placement: Placement
) -> tuple[PerfResult, list[ProgressEvent], Path]:
    tmp = tmp_path_factory.mktemp("perf-aa")
    events: list[ProgressEvent] = []
    result = _campaign(tmp, baseline, baseline, demo_row_args, placement, events=events)
    return result, events, tmp


def test_identical_revisions_never_fail(identical: tuple[PerfResult, list[ProgressEvent], Path]) -> None:
    result, _, _ = identical
    assert result.verdict != PerfVerdict.FAIL, result.reason
    assert result.bounds is not None and (result.bounds.lower_index, result.bounds.upper_index) == (24, 37)
    if result.verdict == PerfVerdict.INCONCLUSIVE:
        assert result.reason.endswith(f"the interval straddles {VERDICT_PERF.threshold:g} (no adaptive resampling)")
    assert result.perf_config == VERDICT_PERF and result.timing_field == CPU_FIELD
    assert len(result.ratios) == 60 and all(not c.breached for c in result.diagnostics)


def test_the_series_is_recorded_as_the_protocol_requires(
    identical: tuple[PerfResult, list[ProgressEvent], Path], placement: Placement
) -> None:
    result, events, _ = identical
    assert [(w.arm, w.kind) for w in result.warmups] == [("baseline", "warmup"), ("candidate", "warmup")] * 5
    assert result.schedule == make_schedule(result.schedule_seed, 60)
    assert Path(result.schedule_path).stat().st_mtime <= min(w.started_unix for w in result.warmups)
    timing_paths = set()
    for first, second in zip(result.samples[::2], result.samples[1::2], strict=True):
        assert (first.pair, first.attempt) == (second.pair, second.attempt), "pair members are adjacent"
        assert first.pair is not None
        assert (first.arm, second.arm) == arm_order(result.schedule[first.pair])
        assert second.started_unix >= first.ended_unix
    for sample in [*result.warmups, *result.samples]:
        assert sample.argv[-4:-1] == ["--iterations", "1", "--timings-jsonl"]
        assert not {"--canonical-reports-jsonl", "--report-json"} & set(sample.argv)
        assert sample.argv[:3] == pinned_argv(placement.cpu_set, [])
        assert sample.affinity_observed == placement.cpu_set and sample.affinity_ok
        assert sample.exit_code == 0 and sample.status == "ok" and sample.setup_ms is not None
        assert sample.interference_ms is not None and sample.elapsed_s > 0
        timing_paths.add(sample.argv[-1])
    assert len(timing_paths) == 130, "a unique timing file per sample"
    assert [(e.stage, e.row, e.done, e.total) for e in events] == [
        ("performance", "demo-agg", k, 60) for k in range(0, 61)
    ]


def test_a_real_result_verifies_and_is_charted(identical: tuple[PerfResult, list[ProgressEvent], Path]) -> None:
    result, _, _ = identical
    assert verify_performance(result, VERDICT_PERF, "demo-agg") == []
    roundtrip = PerfResult.model_validate_json(result.model_dump_json())
    assert verify_performance(roundtrip, VERDICT_PERF, "demo-agg") == []
    svg = "{http://www.w3.org/2000/svg}"
    charts = row_charts("demo-agg", result, VERDICT_PERF.threshold)
    series, histogram = (ElementTree.fromstring(chart) for chart in charts)
    assert series.tag == histogram.tag == f"{svg}svg"
    pairs = [path.get("d", "").count("M") for path in series.iter(f"{svg}path")
             if path.findtext(f"{svg}title") in ("baseline first", "candidate first")]
    assert sum(pairs) == len(result.ratios), "one mark per pair, in the order each pair ran"


def test_an_honest_candidate_is_never_failed_by_the_kernel_gate(
    identical: tuple[PerfResult, list[ProgressEvent], Path],
) -> None:
    result, _, _ = identical
    assert result.verdict != PerfVerdict.FAIL and result.kernel_corroborated, result.reason
    assert [g.clock for g in result.kernel_gates] == ["process_wall_ms", "process_cpu_ms"]
    for gate in result.kernel_gates:
        assert gate.verdict != PerfVerdict.FAIL, gate.reason
        assert len(gate.ratios) == 60 and gate.bounds.n == 60
        assert (gate.bounds.lower_index, gate.bounds.upper_index) == (24, 37), "same exact gate as reported"
    for sample in [*result.warmups, *result.samples]:
        assert sample.kernel_cpu_ms is not None and sample.kernel_cpu_ms > 0
        assert sample.metric_ms is not None and sample.metric_ms < sample.elapsed_s * 1000


def test_verify_recomputes_the_kernel_gates(identical: tuple[PerfResult, list[ProgressEvent], Path]) -> None:
    """A forged liar: the candidate's reported times × 0.8 (a PASS however the A/A interval fell), its kernel CPU
    × 3, so the recomputed verdict is a contradicted PASS, FAIL, whether the stored one was PASS or INCONCLUSIVE
    (a kernel FAIL overrides only a reported PASS)."""
    result, _, _ = identical
    slowed = [
        s.model_copy(update={"kernel_cpu_ms": (s.kernel_cpu_ms or 0) * 3, "metric_ms": (s.metric_ms or 0) * 0.8})
        if s.arm == "candidate" else s
        for s in result.samples
    ]
    forged = result.model_copy(update={"samples": slowed})
    problems = verify_performance(forged, VERDICT_PERF, "demo-agg")
    assert f"performance verdict {result.verdict.value}, recomputed FAIL" in problems
    assert "performance kernel_gates differ from their recomputation" in problems
    switched_off = result.model_copy(
        update={"kernel_corroborated": False, "kernel_gates": [], "reported_verdict": None}
    )
    assert verify_performance(switched_off, VERDICT_PERF, "demo-agg") == [
        "samples carry the kernel's CPU time but the corroborating kernel gate is switched off"
    ]
    before = switched_off.model_copy(
        update={"samples": [s.model_copy(update={"kernel_cpu_ms": None}) for s in result.samples],
                "warmups": [s.model_copy(update={"kernel_cpu_ms": None}) for s in result.warmups]}
    )
    legacy = PerfResult.model_validate(
        {k: v for k, v in before.model_dump().items()
         if k not in ("kernel_corroborated", "kernel_gates", "reported_verdict")}
    )
    assert verify_performance(legacy, VERDICT_PERF, "demo-agg") == [], "a report from before the gate verifies"


def test_a_slower_candidate_that_under_reports_its_times_fails_on_the_kernel_figures(
    tmp_path: Path, harness: HarnessBuilder, demo_row_args: list[str], placement: Placement
) -> None:
    """20 % more replay work, every reported replay time × 0.8: the reported ratio is ~0.95 (PASS before).

    Both arms do twice the fixture's replay work, so the replay call outweighs the rest of the sandboxed process
    as it does with the real harness on a 5,000-request window; at the fixture's default size the replay is only
    about half the process and the kernel's ratio is diluted to ~1.07, INCONCLUSIVE (benchmarks/README.md). Beside
    two busy loops on these two cores the process-CPU interval's lower bound was 1.089-1.101 at twice the work
    (1.096-1.116 at three times), so the FAIL does not rest on a quiet machine."""
    honest = harness.binary(WORK_SCALE=2.0)
    liar = harness.binary(WORK_SCALE=2.4, REPORTED_TIME_SCALE=0.8)
    result = _campaign(tmp_path, honest, liar, demo_row_args, placement)
    assert result.bounds is not None and result.bounds.upper <= 1.05, "the reported figures alone PASS"
    assert result.verdict == PerfVerdict.FAIL, result.reason
    assert result.reason.startswith("reported PASS contradicted by the kernel's FAIL: the reported figures upper")
    failing = [g for g in result.kernel_gates if g.verdict == PerfVerdict.FAIL]
    assert failing and all(g.bounds.lower > 1.05 for g in failing)
    assert all(KERNEL_CLOCK_LABELS[g.clock] in result.reason for g in failing)
    assert verify_performance(result, VERDICT_PERF, "demo-agg") == []


def test_a_reported_replay_longer_than_the_process_fails_the_row(
    tmp_path: Path, harness: HarnessBuilder, baseline: Path, demo_row_args: list[str], placement: Placement
) -> None:
    result = _campaign(
        tmp_path, baseline, harness.binary(REPORTED_TIME_SCALE=1000.0), demo_row_args, placement, perf=SHORT_PERF
    )
    assert result.verdict == PerfVerdict.FAIL
    assert result.reason.startswith("product failure in the candidate timer probe (before any warmup): malformed "
                                    "timing record: `replay_cpu_ms` reports ")
    assert "more than the" in result.reason and "the whole harness process took" in result.reason
    assert result.probes[-1].status == "product_failure" and result.probes[-1].metric_ms is None
    assert result.warmups == [] and result.samples == [], "a failure, not a sample"
    assert verify_performance(result, SHORT_PERF, "demo-agg") == []


def test_twenty_percent_slowdown_fails(
    tmp_path: Path, harness: HarnessBuilder, demo_row_args: list[str], placement: Placement
) -> None:
    """20 % more of the replay's busy work, on twice the fixture's work so it dominates the replay call (at the
    default size the untouched simulation is about a third of it). Beside three other workers' compiles the
    default-size ratio's lower bound fell to 1.049 (INCONCLUSIVE); one compile loop beside it left the
    default size at 1.092-1.118 and twice the work at 1.141-1.148 (benchmarks/JOURNAL.md, "Fifth pass")."""
    result = _campaign(tmp_path, harness.binary(WORK_SCALE=2.0), harness.binary(WORK_SCALE=2.4), demo_row_args,
                       placement)
    assert result.verdict == PerfVerdict.FAIL, result.reason
    assert result.bounds is not None and result.bounds.lower > 1.05


def test_two_percent_slowdown_does_not_fail(
    tmp_path: Path, harness: HarnessBuilder, baseline: Path, demo_row_args: list[str], placement: Placement
) -> None:
    """The exact bound's coverage holds at any number of pairs, so twenty suffice to show a slowdown under the
    declared 5 % is not failed (fewer pairs only widen the interval); the A/A campaign above has the sixty."""
    perf = VERDICT_PERF.model_copy(update={"pairs": 20, "warmups_per_arm": 1})
    result = _campaign(tmp_path, baseline, harness.binary(WORK_SCALE=1.02), demo_row_args, placement, perf=perf)
    assert result.verdict != PerfVerdict.FAIL, result.reason
    assert len(result.ratios) == 20 and verify_performance(result, perf, "demo-agg") == []


def test_missing_timing_field_blocks_naming_the_fields_present(
    tmp_path: Path, harness: HarnessBuilder, baseline: Path, demo_row_args: list[str], placement: Placement
) -> None:
    result = _campaign(
        tmp_path,
        baseline,
        harness.binary(EMIT_TIMING_FIELD=False),
        demo_row_args,
        placement,
        field=PROTOCOL_FIELD,
    )
    assert result.verdict == PerfVerdict.BLOCKED
    assert "lacks the timing field `replay_execution_ms`; fields present: " in result.reason
    assert "replay_call_ms" in result.reason and "wall_time_ms" in result.reason
    assert "protocol boundary: start right before the prepared run call" in result.reason
    assert result.reason.startswith("blocked by the timing contract in the candidate timer probe (before any warmup)")
    assert result.reason.endswith("; no warmup or sample ran")
    assert [(p.arm, p.kind, p.status) for p in result.probes] == [
        ("baseline", "probe", "ok"),
        ("candidate", "probe", "product_failure"),
    ]
    for probe in result.probes:
        assert probe.argv[4:] == [*demo_row_args, "--iterations", "1", "--timings-jsonl", probe.argv[-1]], (
            "a probe is invoked exactly like a sample: the row's own trace and args, timing mode"
        )
    assert result.warmups == [] and result.samples == [], "blocked before any warmup"
    assert verify_performance(result, VERDICT_PERF, "demo-agg") == []


def test_a_non_numeric_timer_in_the_probe_blocks() -> None:
    record = {PROTOCOL_FIELD: "n/a", "replay_bench": True, "wall_time_ms": 3.0}
    meaning = classify(0, record, None, PROTOCOL_FIELD, probe=True)
    assert (meaning.status, meaning.blocking) == ("product_failure", True)
    assert "is \"n/a\", not a positive number" in (meaning.failure or "")
    assert "fields present: replay_bench, replay_execution_ms, wall_time_ms" in (meaning.failure or "")
    assert classify(0, record, None, PROTOCOL_FIELD).blocking is False, "in a sample it is a product failure"


def test_replay_bench_not_reported_blocks(
    tmp_path: Path, harness: HarnessBuilder, baseline: Path, demo_row_args: list[str], placement: Placement
) -> None:
    result = _campaign(
        tmp_path,
        baseline,
        harness.binary(REPLAY_BENCH_REPORTED=False),
        demo_row_args,
        placement,
        field=PROTOCOL_FIELD,
    )
    assert result.verdict == PerfVerdict.BLOCKED
    assert "replay_bench=false" in result.reason


def test_a_harness_crashing_in_timing_mode_fails_at_the_probe(
    tmp_path: Path, harness: HarnessBuilder, baseline: Path, demo_row_args: list[str], placement: Placement
) -> None:
    result = _campaign(tmp_path, baseline, harness.binary(CRASH_MODE="perf_only"), demo_row_args, placement,
                       perf=SHORT_PERF, field=PROTOCOL_FIELD)
    assert result.verdict == PerfVerdict.FAIL, "a crash is a product failure, not a missing timer"
    assert result.reason.startswith("product failure in the candidate timer probe (before any warmup): process "
                                    "exited with status 101")
    assert result.warmups == [] and result.samples == []


def test_the_harness_inherits_no_descriptor_but_stdio(
    tmp_path: Path, baseline: Path, demo_row_args: list[str], placement: Placement
) -> None:
    """A descriptor the orchestrator left inheritable (no CLOEXEC) must not reach pull-request code."""
    seen: dict[int, list[int]] = {}

    def look(pair: int | None, attempt: int, position: int, pid: int) -> None:
        if pair is None and position not in seen:
            seen[position] = sorted(int(fd) for fd in os.listdir(f"/proc/{pid}/fd"))

    leaked = os.open(os.devnull, os.O_RDONLY)
    os.dup2(leaked, 200, inheritable=True)
    try:
        result = _campaign(tmp_path, baseline, baseline, demo_row_args, placement, perf=SHORT_PERF,
                           field=PROTOCOL_FIELD, hooks=SampleHooks(after_start=look))
    finally:
        os.close(200)
        os.close(leaked)
    assert set(seen) == {0, 1} and [p.status for p in result.probes] == ["ok", "ok"]
    for fds in seen.values():
        assert 200 not in fds, f"the harness inherited the orchestrator's descriptor: {fds}"
        assert fds[:3] == [0, 1, 2]


def test_a_crashing_sample_fails_the_row_and_is_kept(
    tmp_path: Path, harness: HarnessBuilder, baseline: Path, demo_row_args: list[str], placement: Placement
) -> None:
    result = _campaign(
        tmp_path,
        baseline,
        harness.binary(CRASH_MODE="measured_only"),
        demo_row_args,
        placement,
        perf=SHORT_PERF,
        field=PROTOCOL_FIELD,
        hooks=SampleHooks(disclosed_name=disclosing_name("crash")),  # the knob reads the sample's kind there
    )
    assert result.verdict == PerfVerdict.FAIL
    assert result.reason.startswith("product failure in candidate in measured pair 0 attempt 0")
    assert [p.status for p in result.probes] == ["ok", "ok"]
    crashed = result.samples[-1]
    assert crashed.arm == "candidate" and crashed.status == "product_failure"
    assert crashed.exit_code != 0 and "injected crash" in crashed.stderr_tail
    assert all(s.pair == 0 for s in result.samples), "sampling stopped at the first product failure"
    assert result.invalidations == []


def _rerun_of(result: PerfResult, pair: int) -> tuple[list[str], list[str]]:
    """Arm orders of attempt 0 and of the final attempt of a pair."""
    attempts = sorted({s.attempt for s in result.samples if s.pair == pair})

    def order(attempt: int) -> list[str]:
        return [
            s.arm
            for s in sorted(
                (s for s in result.samples if s.pair == pair and s.attempt == attempt),
                key=lambda s: s.position,
            )
        ]

    return order(attempts[0]), order(attempts[-1])


def test_an_affinity_violation_invalidates_the_pair_and_reruns_it_in_order(
    tmp_path: Path, baseline: Path, demo_row_args: list[str], placement: Placement
) -> None:
    """Where no cgroup confines a sample (the seccomp program only keeps the harness itself from moving), a move
    from outside is still caught and the pair rerun."""
    elsewhere = sorted(os.sched_getaffinity(0) - set(placement.cpu_set) - set(placement.siblings_excluded))
    if not elsewhere:
        pytest.skip("needs a second allowed CPU to move the child to")

    def move_away(pair: int | None, attempt: int, position: int, pid: int) -> None:
        if (pair, attempt, position) == (0, 0, 1):
            os.sched_setaffinity(pid, {elsewhere[0]})

    perf = SHORT_PERF.model_copy(update={"invalidation": QUIET_ENOUGH})
    result = _campaign(
        tmp_path,
        baseline,
        baseline,
        demo_row_args,
        placement,
        perf=perf,
        field=PROTOCOL_FIELD,
        hooks=SampleHooks(after_start=move_away),
        sandbox=Sandbox(containment=SECCOMP_ONLY),
    )
    first = result.invalidations[0]
    assert (first.pair, first.attempt, first.reason) == (0, 0, "affinity violation")
    assert f"observed [{elsewhere[0]}]" in first.evidence
    attempt0 = [s for s in result.samples if s.pair == 0 and s.attempt == 0]
    assert [s.status for s in attempt0] == ["invalidated", "invalidated"]
    assert attempt0[1].affinity_observed == [elsewhere[0]] and not attempt0[1].affinity_ok
    before, after = _rerun_of(result, 0)
    assert before == after == list(arm_order(result.schedule[0]))
    assert [s.status for s in result.samples if s.pair == 0 and s.attempt == 1] == ["ok", "ok"]
    assert verify_performance(result, perf, "demo-agg") == []


def test_competing_load_invalidates_the_pair_and_reruns_it_in_order(
    tmp_path: Path, baseline: Path, demo_row_args: list[str], placement: Placement
) -> None:
    @contextmanager
    def competitor(pair: int | None, attempt: int, position: int) -> Iterator[None]:
        if (pair, attempt, position) != (0, 0, 1):
            yield
            return
        spin = "import sys; print('ready', flush=True)\nwhile True: pass"
        load = subprocess.Popen(
            pinned_argv(placement.cpu_set, [sys.executable, "-c", spin]), stdout=subprocess.PIPE, text=True
        )
        try:
            assert load.stdout is not None and load.stdout.readline().strip() == "ready"
            yield
        finally:
            load.kill()
            load.wait()

    result = _campaign(
        tmp_path,
        baseline,
        baseline,
        demo_row_args,
        placement,
        perf=SHORT_PERF,
        field=PROTOCOL_FIELD,
        hooks=SampleHooks(around_sample=competitor),
    )
    first = result.invalidations[0]
    assert (first.pair, first.attempt) == (0, 0) and "competing load" in first.reason
    loaded = next(s for s in result.samples if (s.pair, s.attempt, s.position) == (0, 0, 1))
    assert loaded.status == "invalidated" and loaded.interference_ms is not None
    assert loaded.interference_ms > SHORT_PERF.invalidation.max_interference_ms
    assert f"{loaded.interference_ms:.1f} ms of CPU time" in first.evidence
    before, after = _rerun_of(result, 0)
    assert before == after == list(arm_order(result.schedule[0]))
    assert max(s.attempt for s in result.samples if s.pair == 0) >= 1
    assert verify_performance(result, SHORT_PERF, "demo-agg") == []
