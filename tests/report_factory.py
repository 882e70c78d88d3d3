"""Deterministic CampaignReport objects for every outcome, built through the real pydantic models.

Golden files are only as good as the reports behind them, so every value here is fixed (no clocks, no RNG
whose stream could change between Python versions) and every verdict is computed by the real rules in
`runners.report`, never typed in by hand.
"""

from __future__ import annotations

from collections.abc import Callable

from runners.config import CampaignConfig, ExpectedEvidence, PerfConfig, RowConfig
from runners.report import (
    Artifact,
    Bootstrap,
    Bounds,
    CampaignReport,
    CoverageCheck,
    CoverageCounts,
    CoverageResult,
    DeterminismResult,
    DiagnosticCheck,
    ExceptionOutcome,
    ExceptionRecord,
    GateVerdict,
    HostFacts,
    Invalidation,
    PairPlan,
    ParityResult,
    PerfResult,
    PerfVerdict,
    Placement,
    PointerDiff,
    ProcessRecord,
    RegressionRun,
    Revision,
    RowReport,
    Sample,
    SizeGate,
    StopRecord,
    Toolchain,
    TraceEvidence,
    campaign_verdicts,
    row_semantic_verdict,
)

CAMPAIGN_ID = "c-20251129-0001"
BASE_SHA = "e8828036e3d32d8361e2abb819e0ee60e569f518"
HEAD_SHA = "4a95f4ea3f8208a96289698769890232dd55a328"
CREATED_UNIX = 1764410400.0
"""2025-11-29 10:00:00 UTC."""
TRACE_SHA = "b434f1816a707f4bac697235588184ebc374c9907cb981bb65fb0643471fe711"
SLICE_SHA = "5b017086065f0923f7db054e2aa685276f5bad2a1df6da0bc3685732591b2410"
PATCH_SHA = "d156d09055ce272e3e490bb8490ed3379e579435947a4fedd76beaed16818abe"
PAIRS = 60
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

OUTCOMES: tuple[str, ...] = (
    "pass",
    "pass_with_exceptions",
    "parity_fail",
    "perf_fail",
    "inconclusive_diagnostics",
    "inconclusive_straddle",
    "blocked_timing_field",
    "blocked_missing_flag",
    "size_fail",
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
            "harness": {"common_args": COMMON_ARGS},
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


def _ratios(center: float, spread: float, wobble: int = 37) -> list[float]:
    """Sixty ratios evenly spread around `center`, in a fixed scrambled order."""
    return [round(center + spread * (((i * wobble) % PAIRS) / (PAIRS - 1) - 0.5), 4) for i in range(PAIRS)]


def _bounds(ratios: list[float]) -> Bounds:
    ordered = sorted(ratios)
    return Bounds(
        n=len(ordered),
        confidence=0.95,
        lower_index=24,
        upper_index=37,
        lower=ordered[23],
        upper=ordered[36],
        median=round((ordered[29] + ordered[30]) / 2, 4),
        coverage_lower=0.9597,
        coverage_upper=0.9597,
    )


def _diagnostics(autocorr: float = 0.08) -> list[DiagnosticCheck]:
    return [
        DiagnosticCheck(
            name="lag-1 autocorrelation",
            statistic=autocorr,
            p_value=None,
            threshold="|r| <= 0.3",
            breached=abs(autocorr) > 0.3,
            detail=f"r1 = {autocorr:.2f}",
        ),
        DiagnosticCheck(
            name="trend vs elapsed time",
            statistic=-0.11,
            p_value=0.41,
            threshold="p >= 0.01",
            breached=False,
            detail="Spearman rho -0.11",
        ),
        DiagnosticCheck(
            name="pair-order effect",
            statistic=0.6,
            p_value=0.55,
            threshold="p >= 0.01",
            breached=False,
            detail="baseline-first vs candidate-first medians",
        ),
        DiagnosticCheck(
            name="trend vs CPU temperature",
            statistic=0.04,
            p_value=0.77,
            threshold="p >= 0.01",
            breached=False,
            detail="Spearman rho 0.04",
        ),
    ]


def _sample(
    kind: str,
    arm: str,
    pair: int | None,
    attempt: int,
    position: int,
    start: float,
    metric: float | None,
    status: str = "ok",
    failure: str | None = None,
) -> Sample:
    argv = [
        "offline_replay_bench",
        "--iterations",
        "1",
        "--timings-jsonl",
        f"/tmp/kvp/t-{kind}-{arm}-{pair}.jsonl",
    ]
    return Sample.model_validate(
        {
            "kind": kind,
            "arm": arm,
            "pair": pair,
            "attempt": attempt,
            "position": position,
            "argv": argv,
            "started_unix": start,
            "ended_unix": round(start + 2.0, 3),
            "elapsed_s": 2.0,
            "exit_code": 0,
            "timing_record": {"wall_time_ms": 1843.3, "replay_bench": True}
            if metric is None
            else {"replay_execution_ms": metric, "replay_bench": True},
            "metric_ms": metric,
            "setup_ms": None if metric is None else 41.3,
            "status": status,
            "failure": failure,
            "cpu_set": [4],
            "affinity_observed": [4],
            "affinity_ok": True,
            "interference_ms": 0.4,
        }
    )


def _perf(
    row_index: int,
    row_id: str,
    ratios: list[float],
    verdict: PerfVerdict,
    reason: str,
    *,
    autocorr: float = 0.08,
    invalidate_pair: int | None = None,
) -> PerfResult:
    """A complete perf series: warmups, a balanced schedule and every attempted sample kept.

    A BLOCKED series stops at its first warmup, whose timing record lacks the metric.
    """
    start = CREATED_UNIX + 600.0 + row_index * 10_000.0
    schedule = [
        PairPlan(pair=i, order="baseline_first" if (i * 7) % 4 < 2 else "candidate_first")
        for i in range(PAIRS)
    ]
    measured = verdict not in (PerfVerdict.BLOCKED, PerfVerdict.NOT_RUN)
    if measured:
        warmups = [
            _sample(
                "warmup", "baseline" if i % 2 == 0 else "candidate", None, 0, i, start + i * 2.0, 1800.0 + i
            )
            for i in range(10)
        ]
    else:
        warmups = [
            _sample(
                "warmup",
                "baseline",
                None,
                0,
                0,
                start,
                None,
                status="product_failure",
                failure="timing record lacks replay_execution_ms",
            )
        ]
    samples: list[Sample] = []
    invalidations: list[Invalidation] = []
    clock = start + 30.0
    for plan, ratio in zip(schedule, ratios, strict=True):
        base_ms = 1840.0 + (plan.pair % 5)
        arms = ("baseline", "candidate") if plan.order == "baseline_first" else ("candidate", "baseline")
        attempts = [0, 1] if plan.pair == invalidate_pair else [0]
        for attempt in attempts:
            bad = plan.pair == invalidate_pair and attempt == 0
            for position, arm in enumerate(arms):
                metric = base_ms if arm == "baseline" else round(base_ms * ratio, 3)
                samples.append(
                    _sample(
                        "measured",
                        arm,
                        plan.pair,
                        attempt,
                        position,
                        round(clock, 3),
                        metric,
                        status="invalidated" if bad else "ok",
                    )
                )
                clock += 2.1
            if bad:
                invalidations.append(
                    Invalidation(
                        pair=plan.pair,
                        attempt=0,
                        reason="affinity violation",
                        evidence="observed affinity [4, 36] differs from pinned [4]",
                    )
                )
    return PerfResult(
        timing_field="replay_execution_ms",
        timing_scope="prepared.run(...) only: after trace normalisation and engine preparation, "
        "before collector finalisation",
        placement=Placement(
            cpu_set=[4],
            physical_core="core 4 (socket 0)",
            numa_node=0,
            siblings_excluded=[36],
            host=_host(row_index),
        ),
        schedule_seed=20261129,
        schedule=schedule,
        schedule_path=f"schedule-{row_id}.json",
        warmups=warmups,
        samples=samples if measured else [],
        invalidations=invalidations,
        ratios=ratios if measured else [],
        bounds=_bounds(ratios) if measured else None,
        diagnostics=_diagnostics(autocorr) if measured else [],
        bootstrap=Bootstrap(
            resamples=2000,
            seed=20261129,
            median_ratio=round(sorted(ratios)[29], 4),
            ci_low=round(sorted(ratios)[22], 4),
            ci_high=round(sorted(ratios)[37], 4),
        )
        if measured
        else None,
        verdict=verdict,
        reason=reason,
        perf_config=PerfConfig(),
        interference_resolution_ms=20.0,
        sampling_assumption=(
            "pair ratios are exchangeable: one node, one pinned core, one invocation at a time, "
            "randomised balanced arm order"
        ),
    )


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


def _row(
    index: int,
    row: RowConfig,
    *,
    perf: PerfResult | None,
    diffs: list[PointerDiff] | None = None,
    pointers: list[str] | None = None,
    exceptions: list[ExceptionOutcome] | None = None,
    pressure: int = 14,
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
        perf_verdict=perf.verdict if perf else PerfVerdict.NOT_RUN,
        perf_reason=perf.reason if perf else "performance gate not run",
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


def _sizes(artifacts: list[Artifact], max_growth: float = 0.05) -> SizeGate:
    base, cand = artifacts
    binary = cand.binary_size / base.binary_size - 1
    text = cand.text_size / base.text_size - 1
    fail = binary > max_growth or text > max_growth
    grew = " and ".join(
        f"{name} grew {value * 100:.1f}%"
        for name, value in (("binary", binary), (".text", text))
        if value > max_growth
    )
    return SizeGate(
        max_growth=max_growth,
        binary_growth=round(binary, 5),
        text_growth=round(text, 5),
        verdict=GateVerdict.FAIL if fail else GateVerdict.PASS,
        reason=f"{grew} (limit {max_growth * 100:.0f}%); explain and narrow the added footprint"
        if fail
        else f"binary {binary * 100:+.1f}%, .text {text * 100:+.1f}% (limit {max_growth * 100:.0f}%)",
    )


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
        tool_version="0.1.0",
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
        sizes=_sizes(artifacts) if built else None,
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
    ratios = _ratios(0.992 + (index % 3) * 0.003, 0.08)
    bounds = _bounds(ratios)
    return _perf(
        index,
        row.id,
        ratios,
        PerfVerdict.PASS,
        f"upper bound {bounds.upper:.4f} <= 1.05",
        invalidate_pair=17 if index == 0 else None,
    )


def _pass() -> CampaignReport:
    config = make_config()
    return _base_report(config, [_row(i, r, perf=_pass_perf(i, r)) for i, r in enumerate(config.rows)])


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
        _row(1, config.rows[1], perf=_pass_perf(1, config.rows[1]), diffs=diffs, pointers=pointers),
    ]
    return _base_report(config, rows)


def _perf_fail() -> CampaignReport:
    config = make_config()
    ratios = _ratios(1.118, 0.1)
    bounds = _bounds(ratios)
    rows = [
        _row(0, config.rows[0], perf=_pass_perf(0, config.rows[0])),
        _row(
            1,
            config.rows[1],
            perf=_perf(
                1, config.rows[1].id, ratios, PerfVerdict.FAIL, f"lower bound {bounds.lower:.4f} > 1.05"
            ),
        ),
    ]
    return _base_report(config, rows)


def _inconclusive_diagnostics() -> CampaignReport:
    config = make_config()
    ratios = _ratios(0.996, 0.08, wobble=1)
    rows = [
        _row(
            0,
            config.rows[0],
            perf=_perf(
                0,
                config.rows[0].id,
                ratios,
                PerfVerdict.INCONCLUSIVE,
                "lag-1 autocorrelation 0.42 breaches |r| <= 0.3; order-statistic gate not applied",
                autocorr=0.42,
            ),
        ),
        _row(1, config.rows[1], perf=_pass_perf(1, config.rows[1])),
    ]
    return _base_report(config, rows)


def _inconclusive_straddle() -> CampaignReport:
    config = make_config()
    ratios = _ratios(1.049, 0.16)
    bounds = _bounds(ratios)
    rows = [
        _row(0, config.rows[0], perf=_pass_perf(0, config.rows[0])),
        _row(
            1,
            config.rows[1],
            perf=_perf(
                1,
                config.rows[1].id,
                ratios,
                PerfVerdict.INCONCLUSIVE,
                f"bounds [{bounds.lower:.4f}, {bounds.upper:.4f}] straddle the 1.05 threshold",
            ),
        ),
    ]
    return _base_report(config, rows)


def _blocked_timing_field() -> CampaignReport:
    config = make_config()
    reason = (
        "timing record has no replay_execution_ms (fields: wall_time_ms, replay_call_ms, replay_cpu_ms); "
        "extend the harness to time exactly prepared.run(...)"
    )
    rows = [
        _row(i, r, perf=_perf(i, r.id, _ratios(1.0, 0.02), PerfVerdict.BLOCKED, reason))
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
    return _base_report(
        config, [_row(i, r, perf=_pass_perf(i, r)) for i, r in enumerate(config.rows)], growth=0.061
    )


BUILDERS: dict[str, Callable[[], CampaignReport]] = {
    "pass": _pass,
    "pass_with_exceptions": _pass_with_exceptions,
    "parity_fail": _parity_fail,
    "perf_fail": _perf_fail,
    "inconclusive_diagnostics": _inconclusive_diagnostics,
    "inconclusive_straddle": _inconclusive_straddle,
    "blocked_timing_field": _blocked_timing_field,
    "blocked_missing_flag": _blocked_missing_flag,
    "size_fail": _size_fail,
}


def make_report(outcome: str) -> CampaignReport:
    """The report for one named outcome (see OUTCOMES)."""
    return BUILDERS[outcome]()


def make_wide_report(rows: int = 40) -> CampaignReport:
    """A passing report with many rows, to prove rendering stays inside GitHub's size limits."""
    config = make_config([f"row-{n:02d}-vllm-disagg" for n in range(rows)])
    return _base_report(config, [_row(i, r, perf=_pass_perf(i, r)) for i, r in enumerate(config.rows)])
