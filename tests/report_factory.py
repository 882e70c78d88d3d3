"""Deterministic CampaignReport objects for every outcome, built through the real pydantic models.

Golden files are only as good as the reports behind them, so every value here is fixed (no clocks) and every
verdict is computed by the real rules, never typed in by hand: semantic verdicts by `runners.schema.report`, the
schedule, sample classification, invalidations and performance verdicts by `runners.perf.sampler` and
`runners.perf.stats`, the size gate by `runners.stages.sizes`. Every report therefore passes `kv-parity verify`
(`runners.verify.verify_report`). Synthetic measurements come from SHA-256 hashes, not an RNG whose stream
could change between versions; the only RNG streams are the ones the real rules use (numpy's default
generator for the schedule and the bootstrap).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from statistics import NormalDist
from typing import Any

from runners.perf.gate import SETUP_FIELD, breaches, classify, finalize
from runners.perf.schedule import arm_order, make_schedule, schedule_seed
from runners.perf.stats import SAMPLING_ASSUMPTION
from runners.schema.config import CampaignConfig, ExpectedEvidence, PerfConfig, RowConfig
from runners.schema.report import (
    ARMS,
    Arm,
    Artifact,
    BuildCacheRecord,
    CampaignReport,
    CountedRun,
    CoverageCheck,
    CoverageCounts,
    CoverageResult,
    DeterminismResult,
    DoctorCheck,
    DoctorReport,
    DoctorStatus,
    ExceptionOutcome,
    ExceptionRecord,
    FixtureAssertion,
    FixtureReport,
    FixtureStatus,
    HostFacts,
    InstructionCounts,
    Invalidation,
    ParityResult,
    PerfResult,
    PerfVerdict,
    Placement,
    PointerDiff,
    ProcessRecord,
    RegressionAttribution,
    RegressionRun,
    Revision,
    RowReport,
    Sample,
    SampleKind,
    SizeAttribution,
    StopRecord,
    SymbolDelta,
    SymbolGroup,
    Toolchain,
    TraceEvidence,
)
from runners.schema.verdicts import campaign_verdicts, fixture_status, row_performance, row_semantic_verdict, size_gate
from runners.stages.attribution import compare_work, cost_table, findings, readable_costs
from runners.stages.doctor import worst

CAMPAIGN_ID = "c-20251129-0001"
BASE_SHA = "e8828036e3d32d8361e2abb819e0ee60e569f518"
HEAD_SHA = "4a95f4ea3f8208a96289698769890232dd55a328"
CREATED_UNIX = 1764410400.0
"""2025-11-29 10:00:00 UTC."""
TRACE_SHA = "b434f1816a707f4bac697235588184ebc374c9907cb981bb65fb0643471fe711"
SLICE_SHA = "5b017086065f0923f7db054e2aa685276f5bad2a1df6da0bc3685732591b2410"
PATCH_SHA = "d156d09055ce272e3e490bb8490ed3379e579435947a4fedd76beaed16818abe"
BUILD_COMMAND = [
    "cargo",
    "build",
    "--release",
    "-p",
    "dynamo-bench",
    "--no-default-features",
    "--features",
    "replay-bench",
    "--bench",
    "offline_replay_bench",
]
COMMON_ARGS = ["--router-mode", "kv-router", "--arrival-speedup-ratio", "4", "--trace-block-size", "512"]
TIMED_FUNCTION = "dynamo_mocker::replay::entrypoints::simulate_loaded_trace_*with_router_mode_and_capture_options"

OUTCOMES: tuple[str, ...] = (
    "pass",
    "pass_with_exceptions",
    "parity_fail",
    "perf_fail",
    "kernel_contradiction",
    "instruction_contradiction",
    "inconclusive_diagnostics",
    "perf_fail_after_breach",
    "inconclusive_straddle",
    "blocked_timing_field",
    "blocked_missing_flag",
    "size_fail",
    "stage6",
    "profile",
)
"""Every report-bearing outcome; cancelled, superseded, timed-out and bad-config campaigns end without one."""


def _hex(seed: int, length: int = 64) -> str:
    """A fixed-looking hex digest derived from a small integer, so goldens stay readable and stable."""
    text = f"{seed:08x}" * (length // 8 + 1)
    return "".join("0123456789abcdef"[(int(c, 16) * 7 + i) % 16] for i, c in enumerate(text))[:length]


def _row_config(row_id: str, engine: str, pressure: tuple[int, int]) -> RowConfig:
    return RowConfig(
        id=row_id,
        args=[
            "--serving-mode",
            "disagg",
            "--num-prefill-workers",
            "2",
            "--num-decode-workers",
            "2",
            "--engine-type",
            engine,
            "--block-size",
            "64",
            "--num-gpu-blocks",
            "5500",
        ],
        runner_labels=["bare-metal", "kv-parity"],
        expect=ExpectedEvidence(pressure=pressure, handoff=True, queued=0),
    )


def make_config(row_ids: list[str] | None = None) -> CampaignConfig:
    """The Dynamo-shaped config: two disaggregated rows unless other row ids are asked for."""
    if row_ids is None:
        rows = [
            _row_config("vllm-disagg", "vllm", (10, 20)),
            _row_config("sglang-disagg", "sglang", (10, 20)),
        ]
    else:
        rows = [_row_config(row_id, "vllm", (10, 20)) for row_id in row_ids]
    return CampaignConfig.model_validate(
        {
            "build": {"command": BUILD_COMMAND, "features": ["replay-bench"]},
            "trace": {
                "path": "/srv/traces/mooncake_trace.jsonl",
                "sha256": TRACE_SHA,
                "offset": 0,
                "count": 5000,
            },
            "harness": {"common_args": COMMON_ARGS, "timed_function": TIMED_FUNCTION},
            "rows": [row.model_dump() for row in rows],
            "determinism": {"patch": ".github/kv-parity/determinism.patch"},
        }
    )


def _host(index: int) -> HostFacts:
    return HostFacts(
        hostname=f"bm-kv-{index + 1:02d}",
        kernel="6.8.0-49-generic",
        cpu_model="Intel(R) Xeon(R) Gold 6430",
        logical_cpus=64,
        smt="off",
        numa_nodes=2,
        governor="performance",
        boost="off",
        load_average=[0.08, 0.05, 0.01],
        temperature_c=41.0,
        frequency_mhz=2100.0,
    )


def _doctor(index: int, *, noisy: bool = False) -> DoctorReport:
    """`kv-parity doctor` on row `index`'s node, worded as the checks word it: a tuned bare-metal node, or
    (noisy) one that exposes no cpufreq, isolates nothing and has other work on the pinned CPU."""
    cpu = 4  # the performance CPU of _placement

    def passed(name: str, detail: str) -> DoctorCheck:
        return DoctorCheck(name=name, status=DoctorStatus.PASS, detail=detail)

    checks = [
        passed("sandbox", "bubblewrap started a sandboxed `id -u` as uid 65534: bubblewrap with new "
                          "pid/net/ipc/uts/cgroup namespaces; setpriv to uid 65534 with no capabilities"),
        passed("profilers", "valgrind /usr/bin/valgrind, perf /usr/bin/perf, c++filt /usr/bin/c++filt"),
        passed("frequency governor", f"cpu{cpu} performance"),
        passed("turbo/boost", "off (intel_pstate/no_turbo=1)"),
        passed("cpuset and affinity", "allowed cpus 0-63; cpuset /: cpus 0-63"),
        passed("SMT siblings", f"SMT on; siblings of cpu {cpu}: 36; node 0 package 0 core 4 (logical cpus 4,36)"),
        passed("isolated CPUs", "isolated 4,5,6,7,36,37,38,39 (isolcpus/nohz_full/cpuset partitions, from "
                                "/proc/cmdline, /sys/devices/system/cpu/isolated)"),
        passed("NUMA layout", "node0 cpus 0-31; node1 cpus 32-63; pinned CPUs on node 0"),
        passed("ASLR", "full randomization (randomize_va_space=2)"),
        passed("perf_event_paranoid", "perf_event_paranoid=2"),
        passed("load on the pinned CPUs", f"cpu{cpu} 0% busy over 0.50 s; load average 0.08 0.05 0.01"),
    ]
    if noisy:
        checks[2] = DoctorCheck(
            name="frequency governor", status=DoctorStatus.UNKNOWN,
            detail=f"cannot be read here: no cpufreq/scaling_governor for cpu {cpu} (a VM or a kernel without "
                   "cpufreq: the host decides the frequency)",
            fix="on bare metal, enable the cpufreq driver and set the performance governor")
        checks[6] = DoctorCheck(
            name="isolated CPUs", status=DoctorStatus.WARN,
            detail="isolated none (isolcpus/nohz_full/cpuset partitions, from /proc/cmdline, "
                   "/sys/devices/system/cpu/isolated)",
            fix=f"keep general work off cpu {cpu}: boot with isolcpus={cpu} nohz_full={cpu}, or an isolated "
                "cgroup cpuset partition")
        checks[10] = DoctorCheck(
            name="load on the pinned CPUs", status=DoctorStatus.WARN,
            detail=f"cpu{cpu} 12% busy over 0.50 s; load average 3.10 2.80 1.90",
            fix=f"find and stop what runs on cpu {cpu} (top -1, ps -eo pid,psr,comm), or pin the row elsewhere")
    return DoctorReport(hostname=_host(index).hostname, cpus=[cpu], checks=checks, status=worst(checks),
                        seconds=0.52)


PERF = PerfConfig()
"""The campaign's declared performance rules (make_config leaves `perf` at its defaults)."""
TIMING_FIELD = "replay_execution_ms"
TIMING_SCOPE = (
    "prepared.run(...) only: after trace normalisation and engine preparation, before collector finalisation"
)
BASE_MS = 1840.0
"""Typical baseline `replay_execution_ms` of the synthetic harness."""


def _unit(*key: object) -> float:
    """A number in (0, 1) hashed from `key`: the same on every platform and Python version, unlike an RNG."""
    digest = hashlib.sha256(repr(key).encode()).digest()
    return (int.from_bytes(digest[:8], "big") + 0.5) / 2**64


def _normal(*key: object) -> float:
    """A standard-normal quantile hashed from `key`."""
    return NormalDist().inv_cdf(_unit(*key))


def _target_ratios(
    row_id: str, pairs: int, centre: float, spread: float, drift: float, drift_period: int
) -> list[float]:
    """Per-pair candidate/baseline ratios in run order: stratified log-normal quantiles around `centre`.

    Each block of ten consecutive pairs holds one ratio from every decile, in a hashed order, so the series
    has no trend by construction; the quantiles make the bounds predictable (for 60 pairs the 95% bounds
    sit about 0.28 * spread either side of log(centre)). `drift` adds a sinusoidal swing in run order, a
    serial dependence the autocorrelation diagnostic is there to catch.
    """
    if pairs % 10:
        raise ValueError(f"the synthetic series stratifies by blocks of ten pairs, not {pairs}")
    blocks = pairs // 10
    slot = {  # decile -> block -> its rank among the decile's `blocks` quantiles
        decile: {
            block: i
            for i, block in enumerate(sorted(range(blocks), key=lambda b: _unit("slot", row_id, decile, b)))
        }
        for decile in range(10)
    }
    ratios: list[float] = []
    for block in range(blocks):
        for decile in sorted(range(10), key=lambda d: _unit("decile", row_id, block, d)):
            z = NormalDist().inv_cdf((decile * blocks + slot[decile][block] + 0.5) / pairs)
            pair = len(ratios)
            ratios.append(centre * math.exp(spread * z + drift * math.sin(2 * math.pi * pair / drift_period)))
    return ratios


def _invocation(
    row_id: str,
    placement: Placement,
    kind: SampleKind,
    arm: Arm,
    pair: int | None,
    attempt: int,
    position: int,
    start: float,
    record: dict[str, object] | None,
    *,
    exit_code: int = 0,
    stderr_tail: str = "",
    observed: list[int] | None = None,
    replay_ms: float | None = None,
) -> Sample:
    """One pinned harness process as `_Sampler.run` records it; status, failure and metric come from `classify`.

    `replay_ms` is the replay's real duration when the record under-reports it; the process's wall time (the
    replay plus ~410 ms of process setup and trace loading) and CPU time (~380 ms of it) follow the real one.
    """
    tag = f"{kind}-{arm}-p{pair}-a{attempt}-{position}"
    reported = classify(exit_code, record, None, TIMING_FIELD).metric_ms
    real_ms = replay_ms if replay_ms is not None else (reported if reported is not None else BASE_MS)
    elapsed = round((real_ms + 410.0) / 1000.0, 3)
    meaning = classify(exit_code, record, None, TIMING_FIELD, elapsed * 1000.0, probe=kind == "probe")
    metric = meaning.metric_ms
    cpus = placement.cpu_set
    seen = observed if observed is not None else cpus
    return Sample(
        kind=kind,
        arm=arm,
        pair=pair,
        attempt=attempt,
        position=position,
        argv=[
            "/usr/bin/taskset",
            "-c",
            ",".join(map(str, cpus)),
            f"/srv/kvp/{CAMPAIGN_ID}/{arm}/offline_replay_bench",
            "--iterations",
            "1",
            "--timings-jsonl",
            f"/srv/kvp/{CAMPAIGN_ID}/{row_id}/timings/{tag}.jsonl",
        ],
        started_unix=start,
        ended_unix=round(start + elapsed, 3),
        elapsed_s=elapsed,
        exit_code=exit_code,
        timing_record=record,
        metric_ms=metric,
        setup_ms=meaning.setup_ms,
        status=meaning.status,
        failure=meaning.failure,
        stderr_tail=stderr_tail,
        cpu_set=cpus,
        affinity_observed=seen,
        affinity_at_exit=seen,
        affinity_ok=seen == cpus,
        interference_ms=round(0.2 + 1.6 * _unit("interference", row_id, tag), 1),
        telemetry={"temperature_c": round(40.0 + 3.0 * _unit("temperature", row_id, tag), 1)},
        kernel_cpu_ms=round(real_ms + 380.0 + 4.0 * _unit("cpu", row_id, tag), 3),
    )


def synthetic_perf(
    row_id: str,
    placement: Placement,
    *,
    perf: PerfConfig = PERF,
    centre: float = 1.0,
    spread: float = 0.012,
    drift: float = 0.0,
    drift_period: int = 12,
    invalidate_pair: int | None = None,
    crash_at_pair: int | None = None,
    broken_record: dict[str, object] | None = None,
    start_unix: float = CREATED_UNIX + 600.0,
    reported_scale: float = 1.0,
) -> PerfResult:
    """A performance series recorded the way `run_performance` records one, then judged by `finalize`.

    The schedule is the one `schedule_seed`/`make_schedule` derive for the row; warmups, pairs, reruns and the
    stop at a product failure follow the runner's loop, and only the verdict rules decide the outcome, so
    `kv-parity verify` recomputes every number. The harness is synthetic and deterministic: baseline
    metrics scatter about BASE_MS, candidates are baseline x `_target_ratios`.

    - `invalidate_pair`: attempt 0 of that pair sees its second process moved onto the SMT sibling, so
      both members are invalidated and the pair is rerun;
    - `crash_at_pair`: the candidate exits 101 there (a product failure that stops sampling);
    - `broken_record`: every process writes this timing record instead (the timing contract is broken,
      so the first warmup blocks the row);
    - `reported_scale`: every candidate record reports the replay's real time times this (a harness that lies
      about itself; the kernel's wall and CPU times follow the real one).
    """
    seed = schedule_seed(perf.seed, row_id)
    plan = make_schedule(seed, perf.pairs)
    targets = _target_ratios(row_id, perf.pairs, centre, spread, drift, drift_period)
    clock = start_unix

    def run(
        kind: SampleKind, arm: Arm, pair: int | None, attempt: int, position: int
    ) -> Sample:
        nonlocal clock
        base = round(
            BASE_MS * math.exp(0.004 * _normal("baseline", row_id, kind, pair, attempt, position)), 3
        )
        metric = base if arm == "baseline" or pair is None else round(base * targets[pair], 3)
        record: dict[str, object] | None = (
            broken_record
            if broken_record is not None
            else {
                TIMING_FIELD: round(metric * (reported_scale if arm == "candidate" else 1.0), 3),
                SETUP_FIELD: round(41.0 + _unit("setup", row_id, kind, pair, attempt, position), 2),
                "replay_bench": True,
            }
        )
        crash = pair is not None and pair == crash_at_pair and arm == "candidate"
        moved = pair is not None and pair == invalidate_pair and attempt == 0 and position == 1
        sample = _invocation(
            row_id,
            placement,
            kind,
            arm,
            pair,
            attempt,
            position,
            round(clock, 3),
            None if crash else record,
            exit_code=101 if crash else 0,
            stderr_tail="thread 'main' panicked at lib/kv-router/src/scheduler.rs:412:9:\n"
            "attempt to subtract with overflow\n"
            if crash
            else "",
            observed=[*placement.cpu_set, *placement.siblings_excluded] if moved else None,
            replay_ms=metric,
        )
        clock = sample.ended_unix + 0.05
        return sample

    probes = [run("probe", arm, None, 0, index) for index, arm in enumerate(ARMS)]
    warmups: list[Sample] = []
    samples: list[Sample] = []
    invalidations: list[Invalidation] = []
    timer_ok = all(p.status == "ok" for p in probes)
    for index in range(2 * perf.warmups_per_arm if timer_ok else 0):
        warmups.append(run("warmup", ("baseline", "candidate")[index % 2], None, 0, index))
        if warmups[-1].status == "product_failure":
            break
    if timer_ok and all(w.status != "product_failure" for w in warmups):
        for pair in plan:
            complete = False
            for attempt in range(perf.invalidation.max_reruns_per_pair + 1):
                members: list[Sample] = []
                for position, arm in enumerate(arm_order(pair)):
                    members.append(run("measured", arm, pair.pair, attempt, position))
                    if members[-1].status == "product_failure":
                        break
                if members[-1].status == "product_failure":
                    samples.extend(members)
                    break
                found = [hit for member in members for hit in breaches(member, perf.invalidation)]
                if not found:
                    samples.extend(members)
                    complete = True
                    break
                samples.extend(m.model_copy(update={"status": "invalidated"}) for m in members)
                invalidations.append(
                    Invalidation(
                        pair=pair.pair,
                        attempt=attempt,
                        reason="; ".join(sorted({reason for reason, _ in found})),
                        evidence="; ".join(evidence for _, evidence in found),
                    )
                )
            if not complete:
                break
    evidence = PerfResult(
        timing_field=TIMING_FIELD,
        timing_scope=TIMING_SCOPE,
        placement=placement,
        schedule_seed=seed,
        schedule=plan,
        schedule_path=f"schedule-{row_id}.json",
        probes=probes,
        warmups=warmups,
        samples=samples,
        invalidations=invalidations,
        ratios=[],
        bounds=None,
        diagnostics=[],
        bootstrap=None,
        verdict=PerfVerdict.NOT_RUN,
        reason="",
        perf_config=perf,
        interference_resolution_ms=20.0,
        sampling_assumption=SAMPLING_ASSUMPTION,
        kernel_corroborated=True,
    )
    return finalize(evidence, perf)


def _placement(index: int) -> Placement:
    return Placement(
        cpu_set=[4],
        physical_core="core 4 (socket 0)",
        numa_node=0,
        siblings_excluded=[36],
        host=_host(index),
    )


def _perf(index: int, row: RowConfig, intended: PerfVerdict, **series: Any) -> PerfResult:
    """The row's recorded series; raises unless the real rules reach the outcome the fixture is named for."""
    perf = synthetic_perf(
        row.id, _placement(index), start_unix=CREATED_UNIX + 600.0 + index * 10_000.0, **series
    )
    if perf.verdict != intended:
        raise AssertionError(
            f"{row.id}: synthetic series judged {perf.verdict} ({perf.reason}), not {intended}"
        )
    return perf


def _process(arm: str, rep: int, digest: str, cpu: int) -> ProcessRecord:
    return ProcessRecord.model_validate(
        {
            "arm": arm,
            "purpose": f"determinism {rep + 1}/2",
            "cpu_set": [cpu],
            "exit_code": 0,
            "seconds": 7.9 + rep * 0.1,
            "canonical_digest": digest,
            "argv": [
                "offline_replay_bench",
                "--iterations",
                "1",
                "--canonical-reports-jsonl",
                f"/tmp/kvp/{arm}-{rep}.jsonl",
            ],
        }
    )


def _counts(pressure: int) -> CoverageCounts:
    return CoverageCounts(
        requests=5000,
        completed=5000,
        rejected=0,
        canceled=0,
        failed=0,
        other_terminal=0,
        overlap_routed=3127,
        reused_requests=2904,
        immediate_by_pool={"prefill": 5000, "decode": 5000},
        queued_by_pool={"prefill": 0, "decode": 0},
        pressure_events=pressure,
        readmitted_pressure_events=pressure,
        handoffs=5000,
        kv_removed_events=10000,
        router_queue_threshold=None,
    )


def _coverage(row: RowConfig, pressure: int) -> CoverageResult:
    low, high = row.expect.pressure
    in_band = low <= pressure <= high
    return CoverageResult(
        counts={"baseline": _counts(pressure), "candidate": _counts(pressure)},
        checks=[
            CoverageCheck(name="kv-overlap routing", ok=True, detail="3127 route decisions with overlap > 0"),
            CoverageCheck(
                name="immediate placement", ok=True, detail="10000 immediate, 0 queued (threshold unset)"
            ),
            CoverageCheck(
                name="pressure band",
                ok=in_band,
                detail=f"{pressure} readmitted pressure events, expected [{low}, {high}]",
            ),
            CoverageCheck(name="prefill/decode handoff", ok=True, detail="5000 handoffs"),
            CoverageCheck(name="terminal cleanup", ok=True, detail="5000/5000 completed, 10000 kv removals"),
        ],
    )


EXCEPTION = ExceptionRecord(
    id="EX-1-decode-finish-order",
    pointers=["/requests/*/decode_finish_ms"],
    rows=["vllm-disagg"],
    baseline_behavior="decode finish stamped before the last token's KV transfer completed",
    candidate_behavior="decode finish stamped after the KV transfer, as vLLM's scheduler does",
    source_of_truth="vllm/v1/core/sched/scheduler.py: update_from_output frees blocks after transfer",
    why_intended="only decode_finish_ms moves; every other pointer and both determinism digests are stable",
    compatibility_impact="report consumers see later decode_finish_ms; no schema change",
    disposition="accepted by the replay owners on review",
    regression_test=["{binary}", "--self-test", "decode-finish-after-transfer", "--trace", "{trace}"],
)


def synthetic_counts(index: int, ratio: float, *, jitter: int = 0) -> InstructionCounts:
    """Both arms counted twice in the timed region, the candidate `ratio` times the baseline; `jitter` more
    instructions in the baseline's second run (nondeterministic work). The whole process adds setup."""
    base = 41_872_306_118 + index * 1_000_003
    figures = {"baseline": [base, base + jitter], "candidate": [round(base * ratio)] * 2}
    return InstructionCounts(
        tool="valgrind-3.22.0 callgrind",
        timed_function=TIMED_FUNCTION,
        runs=[
            CountedRun(arm=arm, run=run, argv=["valgrind", "--tool=callgrind", "/opt/kv-parity/binary"],
                       seconds=412.4 + run, process_ir=value + 9_214_377_402 + run * 812, region_ir=value,
                       region_calls=1)
            for run in range(2) for arm in ARMS for value in [figures[arm][run]]
        ],
    )


def _row(
    index: int,
    row: RowConfig,
    *,
    perf: PerfResult | None,
    diffs: list[PointerDiff] | None = None,
    pointers: list[str] | None = None,
    exceptions: list[ExceptionOutcome] | None = None,
    pressure: int = 14,
    instructions: InstructionCounts | None = None,
) -> RowReport:
    """One row whose semantic verdict comes from the real rule."""
    base_digest = _hex(100 + index)
    cand_digest = base_digest if not diffs else _hex(200 + index)
    sections = ["summary", "requests", "events"]
    determinism = DeterminismResult(
        runs=[
            _process(
                arm,
                rep,
                base_digest if arm == "baseline" else cand_digest,
                4 + rep * 2 + (arm == "candidate"),
            )
            for arm in ("baseline", "candidate")
            for rep in range(2)
        ],
        digests={"baseline": [base_digest, base_digest], "candidate": [cand_digest, cand_digest]},
        concurrent=True,
        unstable_arms=[],
    )
    pointers = pointers if pointers is not None else [d.pointer for d in diffs or []]
    parity = ParityResult(
        baseline_digest=base_digest,
        candidate_digest=cand_digest,
        section_digests={
            "baseline": {s: _hex(300 + index * 10 + k, 16) for k, s in enumerate(sections)},
            "candidate": {
                s: _hex((400 if diffs and s == "requests" else 300) + index * 10 + k, 16)
                for k, s in enumerate(sections)
            },
        },
        identical=not diffs,
        differing_sections=["requests"] if diffs else [],
        differences=diffs or [],
        differences_total=len(pointers),
        differing_pointers=pointers,
        kept_reports={
            "baseline": f"kept/{row.id}-baseline.json",
            "candidate": f"kept/{row.id}-candidate.json",
        }
        if diffs
        else {},
    )
    coverage = _coverage(row, pressure)
    outcomes = exceptions or []
    semantic, reasons = row_semantic_verdict(row.id, determinism, parity, coverage, outcomes)
    perf_verdict, perf_reason = (row_performance(perf, instructions, PERF) if perf
                                 else (PerfVerdict.NOT_RUN, f"correctness not established ({semantic.value})"))
    return RowReport(
        row=row,
        harness_args=[*COMMON_ARGS, *row.args],
        placement_cpus=[4, 5, 6, 7],
        host=_host(index).hostname,
        determinism=determinism,
        parity=parity,
        coverage=coverage,
        exceptions=outcomes,
        semantic=semantic,
        semantic_reasons=reasons,
        performance=perf,
        perf_verdict=perf_verdict,
        perf_reason=perf_reason,
        instructions=instructions,
    )


def _artifacts(growth: float = 0.004) -> list[Artifact]:
    def artifact(arm: str, sha: str, size: int, text: int) -> Artifact:
        return Artifact.model_validate(
            {
                "arm": arm,
                "sha": sha,
                "features": ["replay-bench"],
                "feature_closure": ["replay-bench", "seeded-router"],
                "no_default_features": True,
                "build_command": BUILD_COMMAND,
                "binary_name": "offline_replay_bench",
                "binary_sha256": _hex(7 if arm == "baseline" else 8),
                "binary_size": size,
                "text_size": text,
                "build_seconds": 412.5,
            }
        )

    return [
        artifact("baseline", BASE_SHA, 48_211_968, 21_004_288),
        artifact(
            "candidate", HEAD_SHA, round(48_211_968 * (1 + growth)), round(21_004_288 * (1 + growth * 1.3))
        ),
    ]


def _base_report(
    config: CampaignConfig,
    rows: list[RowReport],
    *,
    growth: float = 0.004,
    stopped: StopRecord | None = None,
    skipped: list[str] | None = None,
    exceptions: list[ExceptionRecord] | None = None,
    built: bool = True,
) -> CampaignReport:
    artifacts = _artifacts(growth) if built else []
    report = CampaignReport(
        campaign_id=CAMPAIGN_ID,
        created_unix=CREATED_UNIX,
        tool_version="0.1.0 (commit 5f3c2a9e8d7b6a5f4e3d2c1b0a9f8e7d6c5b4a39)",
        config=config,
        config_source=f".github/kv-parity.toml @ {BASE_SHA}",
        revisions=[
            Revision(arm="baseline", sha=BASE_SHA, requested="main"),
            Revision(arm="candidate", sha=HEAD_SHA, requested="refs/pull/512/head"),
        ],
        relationship="ancestor",
        merge_base=BASE_SHA,
        determinism_patch_sha256=PATCH_SHA,
        toolchain=Toolchain(
            rustc="rustc 1.83.0 (90b35a623 2024-11-26)",
            cargo="cargo 1.83.0",
            rustflags="-C target-cpu=x86-64-v3",
            host="x86_64-unknown-linux-gnu",
        ),
        artifacts=artifacts,
        trace=TraceEvidence(
            source_path=config.trace.path,
            sha256=TRACE_SHA,
            rows_total=23608,
            offset=0,
            count=5000,
            slice_sha256=SLICE_SHA,
        ),
        exclusions=list(config.harness.exclusions),
        exception_records=exceptions or [],
        rows=rows,
        sizes=size_gate(artifacts[0], artifacts[1], config.sizes.max_growth) if built else None,
        skipped=skipped
        if skipped is not None
        else [
            "round-robin routing: excluded by the protocol; validate with focused tests",
            "aggregated rows (vllm-agg, sglang-agg): not in this config",
            "forced rare-lifecycle fixtures (queueing, scale-to-zero): no queue threshold configured",
        ],
        stopped=stopped,
    )
    report.verdicts = campaign_verdicts(report)
    return report


def _pass_perf(index: int, row: RowConfig) -> PerfResult:
    """A clearly passing series; the first row also has one pair invalidated (and rerun) by an affinity move."""
    return _perf(
        index,
        row,
        PerfVerdict.PASS,
        centre=0.992 + (index % 3) * 0.003,
        invalidate_pair=17 if index == 0 else None,
    )


def _pass() -> CampaignReport:
    """Also the surfaces of a baseline reused from the build cache (the service's usual case); the second row's
    baseline counted a few instructions more in its second run (nondeterministic work, shown, not failing)."""
    config = make_config()
    rows = [_row(i, r, perf=_pass_perf(i, r), instructions=synthetic_counts(i, 1.0 + 0.0004 * i, jitter=37 * i))
            for i, r in enumerate(config.rows)]
    for index, row in enumerate(rows):
        row.doctor = _doctor(index)
    report = _base_report(config, rows)
    report.artifacts[0].build_cache = BuildCacheRecord(key_sha256=_hex(11), reused_from="kvp-20241130-0007")
    return report


def _pass_with_exceptions() -> CampaignReport:
    config = make_config()
    diffs = [
        PointerDiff(
            pointer=f"/requests/{n}/decode_finish_ms",
            baseline=f"{8123.5 + n:.1f}",
            candidate=f"{8124.0 + n:.1f}",
        )
        for n in (12, 57, 301)
    ]
    outcome = ExceptionOutcome(
        record=EXCEPTION,
        runs=[
            RegressionRun(
                arm="baseline",
                argv=["offline_replay_bench", "--self-test", "decode-finish"],
                exit_code=1,
                stdout_tail="",
                stderr_tail="finish stamped before transfer",
            ),
            RegressionRun(
                arm="candidate",
                argv=["offline_replay_bench", "--self-test", "decode-finish"],
                exit_code=0,
                stdout_tail="ok",
                stderr_tail="",
            ),
        ],
        verified=True,
        reason="fails on baseline (exit 1), passes on candidate (exit 0)",
    )
    pointers = [f"/requests/{n}/decode_finish_ms" for n in range(12, 5000, 41)]
    rows = [
        _row(
            0,
            config.rows[0],
            perf=_pass_perf(0, config.rows[0]),
            diffs=diffs,
            pointers=pointers,
            exceptions=[outcome],
        ),
        _row(1, config.rows[1], perf=_pass_perf(1, config.rows[1])),
    ]
    return _base_report(config, rows, exceptions=[EXCEPTION])


def _parity_fail() -> CampaignReport:
    config = make_config()
    diffs = [
        PointerDiff(pointer="/requests/4711/worker_id", baseline="3", candidate="1"),
        PointerDiff(pointer="/requests/4711/prefix_hit_blocks", baseline="12", candidate="9"),
        PointerDiff(pointer="/summary/mean_ttft_ms", baseline="412.2071", candidate="412.3318"),
        PointerDiff(pointer="/events/88123/kind", baseline='"preempt"', candidate='"readmit"'),
        PointerDiff(pointer="/requests/4712/label|name", baseline='"a|b"', candidate='"a`b"'),
    ]
    pointers = [d.pointer for d in diffs] + [f"/requests/{n}/worker_id" for n in range(4800, 4837)]
    rows = [
        _row(0, config.rows[0], perf=_pass_perf(0, config.rows[0])),
        _row(1, config.rows[1], perf=None, diffs=diffs, pointers=pointers),
    ]
    return _base_report(config, rows)


def _attribution() -> RegressionAttribution:
    """What the investigation of a hot spot records, built through the real table and findings rules (the
    costs are callgrind-shaped: mangled names, self instructions)."""
    work = {"summary": {"num_requests": 5000, "total_input_tokens": 51_200_000, "engine_steps": 80_412},
            "coverage": {"kv_ingest": {"events": 21_874}},
            "per_request": [{"routing_history": [{"pool": pool, "outcome": "immediate"}
                                                 for pool in ("prefill", "decode")]}] * 5000}
    baseline = {
        "_ZN12dynamo_bench3sim8Prepared3run17he2df2eb5c8846d1bE": 412_000_000,
        "_ZN12dynamo_bench3sim9busy_work17h9a3f1c2b7d4e5f60E": 980_000_000,
        "_ZN9hashbrown3map20HashMap$LT$K$C$V$GT$6insert17h4c8e2a9f1b3d7e06E": 61_000_000,
        "_ZN9hashbrown3map20HashMap$LT$K$C$V$GT$6insert17h7f0e3d2c1b5a4968E": 12_000_000,
    }
    candidate = {
        **baseline,
        "_ZN12dynamo_bench3sim9busy_work17h9a3f1c2b7d4e5f60E": 981_500_000,
        "_ZN12dynamo_bench7capture12clone_events17h1d2c3b4a59687f0eE": 143_000_000,
        "_ZN9hashbrown3map20HashMap$LT$K$C$V$GT$6insert17h4c8e2a9f1b3d7e06E": 79_000_000,
    }
    instructions = cost_table("instructions", readable_costs(baseline), readable_costs(candidate))
    return RegressionAttribution(
        trigger="performance FAIL",
        work=compare_work(work, work),
        instructions=instructions,
        samples=None,
        findings=findings(instructions),
        files=["baseline.callgrind.out", "baseline.flame.svg", "candidate.callgrind.out", "candidate.flame.svg",
               "differential.flame.svg"],
        skipped=["sampled profile: perf (linux-perf) is not installed"],
    )


def _perf_fail() -> CampaignReport:
    config = make_config()
    failing = _row(1, config.rows[1], perf=_perf(1, config.rows[1], PerfVerdict.FAIL, centre=1.118, spread=0.02),
                   instructions=synthetic_counts(1, 1.1106))
    failing.attribution = _attribution()
    failing.doctor = _doctor(1, noisy=True)
    rows = [_row(0, config.rows[0], perf=_pass_perf(0, config.rows[0]), instructions=synthetic_counts(0, 1.0)),
            failing]
    return _base_report(config, rows)


def _kernel_contradiction() -> CampaignReport:
    """A candidate 25 % slower that reports its replay times x 0.8: PASS on its word, FAIL on the kernel's."""
    config = make_config()
    lying = _perf(1, config.rows[1], PerfVerdict.FAIL, centre=1.25, spread=0.02, reported_scale=0.8)
    assert lying.reported_verdict == PerfVerdict.PASS, lying.reason
    rows = [_row(0, config.rows[0], perf=_pass_perf(0, config.rows[0])),
            _row(1, config.rows[1], perf=lying, instructions=synthetic_counts(1, 1.19))]
    return _base_report(config, rows)


def _instruction_contradiction() -> CampaignReport:
    """A candidate doing 12 % more replay work that reports its replay times x 0.9: the reported figures PASS,
    the kernel's clocks, diluted by the process's setup, cannot decide, and the counted work of the timed region
    grew by x1.079: FAIL by the instruction count, naming both figures."""
    config = make_config()
    lying = _perf(1, config.rows[1], PerfVerdict.PASS, centre=1.06, spread=0.02, reported_scale=0.9)
    assert lying.verdict == PerfVerdict.PASS and lying.reported_verdict == PerfVerdict.PASS, lying.reason
    rows = [_row(0, config.rows[0], perf=_pass_perf(0, config.rows[0]), instructions=synthetic_counts(0, 1.0)),
            _row(1, config.rows[1], perf=lying, instructions=synthetic_counts(1, 1.0793))]
    assert rows[1].perf_verdict == PerfVerdict.FAIL, rows[1].perf_reason
    return _base_report(config, rows)


def _inconclusive_diagnostics() -> CampaignReport:
    """A periodic swing in run order (period 12 pairs) breaches the declared lag-1 autocorrelation limit, and
    the predeclared batch IUT cannot decide either: every batch's bounds straddle the threshold."""
    config = make_config()
    perf = _perf(0, config.rows[0], PerfVerdict.INCONCLUSIVE, centre=1.04, spread=0.01, drift=0.02)
    if not any(check.breached for check in perf.diagnostics) or perf.dependence is None:
        raise AssertionError(f"the drifting series did not reach the dependence-aware method: {perf.reason}")
    rows = [
        _row(0, config.rows[0], perf=perf),
        _row(1, config.rows[1], perf=_pass_perf(1, config.rows[1])),
    ]
    return _base_report(config, rows)


def _perf_fail_after_breach() -> CampaignReport:
    """A 10% slowdown with the same periodic swing: the diagnostics breach, so the whole-series gate is not
    applied, and the batch IUT decides FAIL because every batch's lower bound clears the threshold."""
    config = make_config()
    perf = _perf(1, config.rows[1], PerfVerdict.FAIL, centre=1.10, spread=0.01, drift=0.02)
    if not any(check.breached for check in perf.diagnostics) or perf.dependence is None:
        raise AssertionError(f"the drifting slowdown did not reach the dependence-aware method: {perf.reason}")
    rows = [
        _row(0, config.rows[0], perf=_pass_perf(0, config.rows[0])),
        _row(1, config.rows[1], perf=perf),
    ]
    return _base_report(config, rows)


def _inconclusive_straddle() -> CampaignReport:
    """Clean diagnostics, but the bounds sit either side of the threshold."""
    config = make_config()
    perf = _perf(1, config.rows[1], PerfVerdict.INCONCLUSIVE, centre=1.049, spread=0.03)
    assert perf.bounds is not None
    if (
        any(c.breached for c in perf.diagnostics)
        or not perf.bounds.lower <= PERF.threshold < perf.bounds.upper
    ):
        raise AssertionError(f"the series does not straddle {PERF.threshold}: {perf.reason}")
    rows = [
        _row(0, config.rows[0], perf=_pass_perf(0, config.rows[0])),
        _row(1, config.rows[1], perf=perf),
    ]
    return _base_report(config, rows)


def _blocked_timing_field() -> CampaignReport:
    """The harness times the wrong thing: its record has no `replay_execution_ms`, so the first warmup blocks."""
    config = make_config()
    record: dict[str, object] = {
        "wall_time_ms": 2254.1,
        "replay_call_ms": 1851.7,
        "replay_cpu_ms": 1838.2,
        "replay_bench": True,
    }
    rows = [
        _row(i, r, perf=_perf(i, r, PerfVerdict.BLOCKED, broken_record=record))
        for i, r in enumerate(config.rows)
    ]
    return _base_report(config, rows)


def _blocked_missing_flag() -> CampaignReport:
    config = make_config()
    stop = StopRecord(
        stage="preflight",
        reason="baseline binary offline_replay_bench does not accept --canonical-reports-jsonl "
        "(not in its --help); build it with --features replay-bench or update the protocol",
        blocking=True,
    )
    return _base_report(
        config,
        [],
        stopped=stop,
        skipped=[
            "every row: the campaign stopped at preflight before any replay ran",
        ],
    )


def _size_fail() -> CampaignReport:
    config = make_config()
    report = _base_report(
        config, [_row(i, r, perf=_pass_perf(i, r)) for i, r in enumerate(config.rows)], growth=0.061
    )
    assert report.sizes is not None
    report.sizes.attribution = SizeAttribution(
        symbols_read=True,
        note="sized function and data symbols: 2,410,112 -> 2,558,976 bytes (+148,864); names demangled, hashes "
             "removed, generics grouped",
        baseline_symbol_bytes=2_410_112,
        candidate_symbol_bytes=2_558_976,
        growing=[
            SymbolDelta(name="dynamo_bench::capture::record::<Event>", baseline_bytes=0, candidate_bytes=96_256,
                        baseline_instances=0, candidate_instances=24),
            SymbolDelta(name="dynamo_bench::sim::Prepared::run", baseline_bytes=19_212, candidate_bytes=51_020,
                        baseline_instances=1, candidate_instances=1),
            SymbolDelta(name="<alloc::vec::Vec<T> as core::clone::Clone>::clone", baseline_bytes=2_140,
                        candidate_bytes=22_988, baseline_instances=3, candidate_instances=11),
        ],
        shrinking=[
            SymbolDelta(name="dynamo_bench::report::canonical", baseline_bytes=13_756, candidate_bytes=13_500,
                        baseline_instances=1, candidate_instances=1),
        ],
        new_groups=[SymbolGroup(name="dynamo_bench::capture::record", instances=24, bytes=96_256)],
        removed_groups=[],
    )
    return report


def _profile() -> CampaignReport:
    """`/parity profile`: both rows pass correctness, no sampling, the attribution of each row is the result."""
    config = make_config()
    rows = []
    for index, row_config in enumerate(config.rows):
        row = _row(index, row_config, perf=None)
        row.perf_reason = "performance not measured: a profile was requested"
        row.attribution = _attribution().model_copy(update={"trigger": "requested"})
        rows.append(row)
    report = _base_report(config, rows)
    report.mode = "profile"
    report.verdicts = campaign_verdicts(report)
    return report


def _stage6() -> CampaignReport:
    """Every row passes; the lifecycle fixtures show each status: one passes, one fails its assertion (the
    candidate stopped releasing queued requests), one is unsupported by the harness."""
    config = make_config()
    rows = [_row(i, r, perf=_pass_perf(i, r)) for i, r in enumerate(config.rows)]
    report = _base_report(config, rows, skipped=["Stage 6 fixture scale-to-zero: UNSUPPORTED, the harness has no "
                                                 "scale-to-zero control (--planner-scale-to-zero)"])
    digest = _hex(61)

    def determinism() -> DeterminismResult:
        return DeterminismResult(
            runs=[_process(arm, rep, digest, cpu) for cpu, (arm, rep) in
                  enumerate((a, r) for r in range(2) for a in ("baseline", "candidate"))],
            digests={"baseline": [digest, digest], "candidate": [digest, digest]},
            concurrent=True,
            unstable_arms=[],
        )

    parity = ParityResult(baseline_digest=digest, candidate_digest=digest, section_digests={}, identical=True,
                          differing_sections=[], differences=[], differences_total=0, differing_pointers=[])
    held = [
        FixtureAssertion(name="bounded pressure: 1-3 events", passed=True, evidence="2 pressure events (2 records)"),
        FixtureAssertion(name="every preempted request re-admitted", passed=True, evidence="all re-admitted"),
        FixtureAssertion(name="every request completed", passed=True, evidence="60 requests, all completed"),
    ]
    released = FixtureAssertion(
        name="every queued request released", passed=False,
        evidence="38 queued requests never released (first: ['00000000-0000-0000-0000-000000000002'])",
    )
    queued = FixtureAssertion(name="queued placements > 0", passed=True,
                              evidence="38 queued placements; 38 requests routed through the queue")
    fixtures = [
        FixtureReport(id="preemption-edge", kind="preemption_edge", args=["--num-gpu-blocks", "900"],
                      trace="demo generator, 60 rows", trace_sha256=_hex(62), status=FixtureStatus.PASS,
                      reason="identical on both revisions; 3 lifecycle assertions hold", determinism=determinism(),
                      parity=parity, assertions={"baseline": held, "candidate": held}),
        FixtureReport(id="router-queueing", kind="router_queueing", args=["--router-queue-threshold", "0.5"],
                      trace="demo generator, 60 rows", trace_sha256=_hex(62), status=FixtureStatus.FAIL,
                      reason="lifecycle assertion failed: candidate: every queued request released",
                      determinism=determinism(), parity=parity,
                      assertions={"baseline": [queued, released.model_copy(update={
                          "passed": True, "evidence": "all 38 queued requests left the queue and were admitted "
                                                      "after their wait"})],
                                  "candidate": [queued, released]}),
        FixtureReport(id="scale-to-zero", kind="scale_to_zero", args=[], trace="demo generator, 40 rows",
                      trace_sha256=_hex(63), status=FixtureStatus.UNSUPPORTED,
                      reason="the harness has no scale-to-zero control (--planner-scale-to-zero); not emulated "
                             "with ignored flags"),
    ]
    for fixture in fixtures:
        assert fixture_status(fixture) == fixture.status, fixture.id
    report.fixtures = fixtures
    report.verdicts = campaign_verdicts(report)
    return report


BUILDERS: dict[str, Callable[[], CampaignReport]] = {
    "pass": _pass,
    "pass_with_exceptions": _pass_with_exceptions,
    "parity_fail": _parity_fail,
    "perf_fail": _perf_fail,
    "kernel_contradiction": _kernel_contradiction,
    "instruction_contradiction": _instruction_contradiction,
    "inconclusive_diagnostics": _inconclusive_diagnostics,
    "perf_fail_after_breach": _perf_fail_after_breach,
    "inconclusive_straddle": _inconclusive_straddle,
    "blocked_timing_field": _blocked_timing_field,
    "blocked_missing_flag": _blocked_missing_flag,
    "size_fail": _size_fail,
    "stage6": _stage6,
    "profile": _profile,
}


def make_report(outcome: str) -> CampaignReport:
    """The report for one named outcome (see OUTCOMES)."""
    return BUILDERS[outcome]()


def make_wide_report(rows: int = 40) -> CampaignReport:
    """A passing report with many rows, to prove rendering stays inside GitHub's size limits."""
    config = make_config([f"row-{n:02d}-vllm-disagg" for n in range(rows)])
    return _base_report(config, [_row(i, r, perf=_pass_perf(i, r)) for i, r in enumerate(config.rows)])


def with_undecided_conclusion(report: CampaignReport, conclusion: str) -> CampaignReport:
    """The report of a repository whose campaign config sets `[checks] undecided_conclusion` (verdicts
    recomputed, as the runner computes them from that config)."""
    checks = report.config.checks.model_validate({"undecided_conclusion": conclusion})
    configured = report.model_copy(update={"config": report.config.model_copy(update={"checks": checks})})
    return configured.model_copy(update={"verdicts": campaign_verdicts(configured)})
