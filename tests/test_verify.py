"""`kv-parity verify` recomputes every verdict from the report alone and catches a tampered report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from runners.config import DiagnosticsThresholds, InvalidationRules, PerfConfig
from runners.perf import finalize, make_schedule, schedule_seed
from runners.report import (
    CampaignReport,
    CheckConclusion,
    PerfResult,
    PerfVerdict,
    Placement,
    RowReport,
    Sample,
    SemanticVerdict,
    campaign_verdicts,
)
from runners.sizes import size_gate
from runners.verify import main_verify, verify_report
from tests.report_factory import make_report

PERF = PerfConfig(
    pairs=20,
    diagnostics=DiagnosticsThresholds(
        max_abs_autocorr=0.7, min_trend_p=0.001, min_order_effect_p=0.001, min_telemetry_p=0.001
    ),
    invalidation=InvalidationRules(max_interference_ms=25.0, max_reruns_per_pair=3),
)
FIELD = "replay_execution_ms"


def _sample(
    kind: str,
    arm: str,
    pair: int | None,
    attempt: int,
    position: int,
    start: float,
    metric: float,
    interference: float = 1.0,
    crash: bool = False,
) -> Sample:
    record = None if crash else {FIELD: metric, "replay_bench": True, "setup_ms": 1.5}
    return Sample.model_validate(
        {
            "kind": kind,
            "arm": arm,
            "pair": pair,
            "attempt": attempt,
            "position": position,
            "argv": ["taskset", "-c", "3", f"/bin/{arm}", "trace.jsonl", "--iterations", "1"],
            "started_unix": start,
            "ended_unix": start + 0.1,
            "elapsed_s": 0.1,
            "exit_code": 101 if crash else 0,
            "timing_record": record,
            "metric_ms": None if crash else metric,
            "setup_ms": None if crash else 1.5,
            "status": "product_failure" if crash else "ok",
            "failure": "process exited with status 101" if crash else None,
            "cpu_set": [3],
            "affinity_observed": [3],
            "affinity_at_exit": [3],
            "affinity_ok": True,
            "interference_ms": interference,
        }
    )


def synthetic_perf(
    row_id: str,
    placement: Placement,
    *,
    centre: float = 1.0,
    invalidate_pair: int = 4,
    crash_at_pair: int | None = None,
) -> PerfResult:
    """A recorded series built the way run_performance records one, then evaluated by the real rules."""
    seed = schedule_seed(PERF.seed, row_id)
    plan = make_schedule(seed, PERF.pairs)
    rng = np.random.default_rng(5)
    clock = 1_000.0
    warmups = []
    for index in range(2 * PERF.warmups_per_arm):
        warmups.append(_sample("warmup", ("baseline", "candidate")[index % 2], None, 0, index, clock, 60.0))
        clock += 0.2
    samples: list[Sample] = []
    invalidations = []
    for pair in plan:
        arms = ("baseline", "candidate") if pair.order == "baseline_first" else ("candidate", "baseline")
        attempts = 2 if pair.pair == invalidate_pair else 1
        for attempt in range(attempts):
            members = []
            for position, arm in enumerate(arms):
                base = 60.0 * float(np.exp(rng.normal(0, 0.01)))
                metric = round(base * (centre if arm == "candidate" else 1.0), 3)
                bad = attempt == 0 and attempts == 2 and position == 1
                crash = crash_at_pair == pair.pair and arm == "candidate"
                members.append(
                    _sample(
                        "measured",
                        arm,
                        pair.pair,
                        attempt,
                        position,
                        clock,
                        metric,
                        interference=80.0 if bad else 1.0,
                        crash=crash,
                    )
                )
                clock += 0.2
                if crash:
                    break
            if members[-1].status == "product_failure":
                samples.extend(members)
                break
            if attempts == 2 and attempt == 0:
                members = [m.model_copy(update={"status": "invalidated"}) for m in members]
                invalidations.append(
                    {
                        "pair": pair.pair,
                        "attempt": 0,
                        "reason": "competing load",
                        "evidence": f"{arms[1]}: 80.0 ms of CPU time on cpus [3]",
                    }
                )
            samples.extend(members)
        if samples and samples[-1].status == "product_failure":
            break
    evidence = PerfResult.model_validate(
        {
            "timing_field": FIELD,
            "timing_scope": "replay call",
            "placement": placement.model_dump(),
            "schedule_seed": seed,
            "schedule": [p.model_dump() for p in plan],
            "schedule_path": "schedule.json",
            "warmups": [w.model_dump() for w in warmups],
            "samples": [s.model_dump() for s in samples],
            "invalidations": invalidations,
            "ratios": [],
            "bounds": None,
            "diagnostics": [],
            "bootstrap": None,
            "verdict": "NOT_RUN",
            "reason": "",
            "perf_config": PERF.model_dump(),
            "interference_resolution_ms": 20.0,
        }
    )
    return finalize(evidence, PERF)


def consistent_report(**perf_options: object) -> CampaignReport:
    """The factory's passing campaign, with performance and size evidence that really recomputes."""
    report = make_report("pass")
    report = report.model_copy(update={"config": report.config.model_copy(update={"perf": PERF})})
    rows: list[RowReport] = []
    for row in report.rows:
        assert row.performance is not None
        perf = synthetic_perf(row.row.id, row.performance.placement, **perf_options)  # type: ignore[arg-type]
        rows.append(
            row.model_copy(
                update={"performance": perf, "perf_verdict": perf.verdict, "perf_reason": perf.reason}
            )
        )
    sizes = size_gate(
        report.artifact("baseline"), report.artifact("candidate"), report.config.sizes.max_growth
    )
    report = report.model_copy(update={"rows": rows, "sizes": sizes})
    return report.model_copy(update={"verdicts": campaign_verdicts(report)})


@pytest.fixture()
def report() -> CampaignReport:
    return consistent_report()


def _with_perf(report: CampaignReport, index: int, perf: PerfResult, **row: object) -> CampaignReport:
    rows = list(report.rows)
    rows[index] = rows[index].model_copy(update={"performance": perf, **row})
    return report.model_copy(update={"rows": rows})


def test_a_consistent_report_verifies(report: CampaignReport) -> None:
    assert report.rows[0].perf_verdict == PerfVerdict.PASS
    assert len(report.rows[0].performance.invalidations) == 1  # type: ignore[union-attr]
    assert verify_report(report) == []


def test_a_changed_metric_is_caught(report: CampaignReport) -> None:
    perf = report.rows[0].performance
    assert perf is not None
    samples = list(perf.samples)
    index = next(i for i, s in enumerate(samples) if s.status == "ok" and s.arm == "candidate")
    samples[index] = samples[index].model_copy(update={"metric_ms": samples[index].metric_ms * 0.5})  # type: ignore[operator]
    problems = verify_report(_with_perf(report, 0, perf.model_copy(update={"samples": samples})))
    assert any("metric_ms" in p and "differs from the timing record" in p for p in problems)
    assert any("ratios differ" in p for p in problems)


def test_a_changed_verdict_is_caught(report: CampaignReport) -> None:
    perf = report.rows[0].performance
    assert perf is not None
    forged = perf.model_copy(update={"verdict": PerfVerdict.FAIL})
    problems = verify_report(_with_perf(report, 0, forged, perf_verdict=PerfVerdict.FAIL))
    assert any("performance verdict FAIL, recomputed PASS" in p for p in problems)
    assert any(p.startswith("campaign performance") for p in problems)


def test_a_changed_campaign_verdict_is_caught(report: CampaignReport) -> None:
    assert report.verdicts is not None
    forged = report.model_copy(
        update={"verdicts": report.verdicts.model_copy(update={"semantic": SemanticVerdict.FAIL})}
    )
    assert verify_report(forged) == ["campaign semantic: stored FAIL, recomputed PASS"]


def test_a_changed_semantic_verdict_is_caught(report: CampaignReport) -> None:
    rows = list(report.rows)
    rows[0] = rows[0].model_copy(update={"semantic": SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS})
    problems = verify_report(report.model_copy(update={"rows": rows}))
    assert any("semantic verdict PASS_WITH_SEMANTIC_EXCEPTIONS, recomputed PASS" in p for p in problems)


def test_a_changed_artifact_size_is_caught(report: CampaignReport) -> None:
    artifacts = [
        a.model_copy(update={"text_size": a.text_size * 2}) if a.arm == "candidate" else a
        for a in report.artifacts
    ]
    problems = verify_report(report.model_copy(update={"artifacts": artifacts}))
    assert any(p.startswith("size gate PASS") and "recomputed FAIL" in p for p in problems)


def test_an_invalidation_without_evidence_is_caught(report: CampaignReport) -> None:
    perf = report.rows[0].performance
    assert perf is not None
    samples = [s.model_copy(update={"interference_ms": 1.0}) for s in perf.samples]
    problems = verify_report(_with_perf(report, 0, perf.model_copy(update={"samples": samples})))
    assert any("invalidated without a predeclared condition" in p for p in problems)


def test_a_reordered_schedule_is_caught(report: CampaignReport) -> None:
    perf = report.rows[0].performance
    assert perf is not None
    schedule = list(reversed(perf.schedule))
    problems = verify_report(_with_perf(report, 0, perf.model_copy(update={"schedule": schedule})))
    assert "stored schedule is not the one its seed generates" in " ".join(problems)


def test_a_crash_recomputes_as_a_product_failure() -> None:
    report = consistent_report(crash_at_pair=3)
    perf = report.rows[0].performance
    assert perf is not None and perf.verdict == PerfVerdict.FAIL
    assert perf.reason.startswith("product failure in candidate in measured pair 3")
    assert verify_report(report) == []
    hidden = [
        s.model_copy(update={"status": "ok"}) if s.status == "product_failure" else s for s in perf.samples
    ]
    problems = verify_report(_with_perf(report, 0, perf.model_copy(update={"samples": hidden})))
    assert any("status 'ok', but its evidence says 'product_failure'" in p for p in problems)


def test_main_verify_exit_codes(tmp_path: Path, report: CampaignReport) -> None:
    good, bad, junk = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "junk.json"
    good.write_text(report.model_dump_json(), encoding="utf-8")
    forged = report.model_copy(
        update={
            "verdicts": report.verdicts.model_copy(  # type: ignore[union-attr]
                update={"conclusion": CheckConclusion.FAILURE}
            )
        }
    )
    bad.write_text(forged.model_dump_json(), encoding="utf-8")
    junk.write_text("{}", encoding="utf-8")
    assert main_verify(good) == 0
    assert main_verify(bad) == 1
    assert main_verify(junk) == 2
    assert main_verify(tmp_path / "missing.json") == 2
