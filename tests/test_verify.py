"""`kv-parity verify` recomputes every verdict from the report alone and catches a tampered report."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli.reports import main_verify
from runners.schema.report import (
    CampaignReport,
    CheckConclusion,
    FixtureStatus,
    GateVerdict,
    PerfOutcome,
    PerfResult,
    PerfVerdict,
    RowReport,
    SemanticVerdict,
)
from runners.schema.verdicts import campaign_verdicts
from runners.verify import UnverifiedReport, accept_merged_report, verify_performance, verify_report
from tests.report_factory import OUTCOMES, PERF, make_report, make_wide_report, synthetic_perf


def consistent_report(**series: object) -> CampaignReport:
    """The factory's passing campaign with every row's performance series re-recorded with `series` options."""
    report = make_report("pass")
    rows: list[RowReport] = []
    for row in report.rows:
        assert row.performance is not None
        perf = synthetic_perf(row.row.id, row.performance.placement, **series)  # type: ignore[arg-type]
        rows.append(
            row.model_copy(
                update={"performance": perf, "perf_verdict": perf.verdict, "perf_reason": perf.reason}
            )
        )
    report = report.model_copy(update={"rows": rows})
    return report.model_copy(update={"verdicts": campaign_verdicts(report)})


@pytest.mark.parametrize("outcome", [*OUTCOMES, "wide"])
def test_every_factory_report_verifies(outcome: str) -> None:
    """The reports behind the goldens obey the rule they illustrate: every verdict recomputes."""
    report = make_wide_report(40) if outcome == "wide" else make_report(outcome)
    assert verify_report(report) == []


def test_factory_outcomes_are_what_they_are_named() -> None:
    """Each performance outcome is reached by the real rules for the reason the fixture is named after."""

    def perf(outcome: str, index: int) -> PerfResult:
        result = make_report(outcome).rows[index].performance
        assert result is not None
        return result

    diagnostics = perf("inconclusive_diagnostics", 0)
    assert diagnostics.verdict == PerfVerdict.INCONCLUSIVE
    assert [c.name for c in diagnostics.diagnostics if c.breached] == ["autocorrelation lag 1"]
    straddle = perf("inconclusive_straddle", 1)
    assert straddle.verdict == PerfVerdict.INCONCLUSIVE and straddle.bounds is not None
    assert not any(c.breached for c in straddle.diagnostics)
    assert straddle.bounds.lower <= PERF.threshold < straddle.bounds.upper
    failed = perf("perf_fail", 1)
    assert failed.verdict == PerfVerdict.FAIL and failed.bounds is not None
    assert failed.bounds.lower > PERF.threshold
    blocked = perf("blocked_timing_field", 0)
    assert blocked.verdict == PerfVerdict.BLOCKED and blocked.samples == [] and blocked.warmups == []
    assert [probe.status for probe in blocked.probes] == ["product_failure", "product_failure"]
    assert "lacks the timing field `replay_execution_ms`" in blocked.reason
    passed = perf("pass", 0)
    assert passed.verdict == PerfVerdict.PASS
    assert [i.reason for i in passed.invalidations] == ["affinity violation"]
    sizes = make_report("size_fail").sizes
    assert sizes is not None and sizes.verdict == GateVerdict.FAIL and sizes.binary_growth > sizes.max_growth


REQUIRED_CHECK_PASSES = frozenset({"success", "neutral", "skipped"})
"""The conclusions GitHub counts as passing a required check."""


def _stopped_fixture(outcome: str) -> CampaignReport:
    """The stage6 report with its failing fixture now stopped (a flag a revision lacks): no decision."""
    report = make_report(outcome)
    fixtures = [f.model_copy(update={"status": FixtureStatus.STOPPED}) if f.status == FixtureStatus.FAIL else f
                for f in report.fixtures]
    stopped = report.model_copy(update={"fixtures": fixtures})
    return stopped.model_copy(update={"verdicts": campaign_verdicts(stopped)})


@pytest.mark.parametrize("outcome", [*OUTCOMES, "stage6 stopped"])
def test_only_a_real_pass_satisfies_a_required_check(outcome: str) -> None:
    """INCONCLUSIVE, NOT_RUN, BLOCKED and a stopped fixture block by default; a profile, under its own check
    name, is neutral."""
    report = _stopped_fixture("stage6") if outcome == "stage6 stopped" else make_report(outcome)
    verdicts = report.verdicts
    assert verdicts is not None
    real_pass = (
        verdicts.semantic in (SemanticVerdict.PASS, SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS)
        and verdicts.performance == PerfVerdict.PASS
        and verdicts.sizes == GateVerdict.PASS
    )
    if report.mode == "profile":
        assert verdicts.conclusion == CheckConclusion.NEUTRAL and verdicts.undecided == "inconclusive"
        return
    assert (verdicts.conclusion.value in REQUIRED_CHECK_PASSES) == real_pass
    assert verdicts.undecided is None or verdicts.conclusion == CheckConclusion.ACTION_REQUIRED
    if outcome == "stage6 stopped":
        assert verdicts.undecided == "blocked"


@pytest.fixture()
def report() -> CampaignReport:
    return make_report("pass")


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


def test_every_number_of_the_gates_outcome_is_recomputed(report: CampaignReport) -> None:
    """The outcome is one model (runners.schema.report.PerfOutcome) the gate produces and verify compares field by
    field: each stored field but the prose reason, swapped for another row's, is caught by its name."""
    perf = report.rows[1].performance
    donor = make_report("perf_fail_after_breach").rows[1].performance
    assert perf is not None and donor is not None and donor.dependence is not None and perf.dependence is None
    compared = [name for name in PerfOutcome.model_fields if name != "reason"]
    for name in compared:
        assert getattr(perf, name) != getattr(donor, name), name
        forged = perf.model_copy(update={name: getattr(donor, name)})
        problems = verify_performance(forged, PERF, report.rows[1].row.id)
        assert any(f"performance {name}" in problem for problem in problems), (name, problems)
    assert verify_performance(perf, PERF, report.rows[1].row.id) == []
    assert len(compared) == 8


def test_a_merged_report_gets_its_verdicts_recomputed_and_is_refused_when_a_row_disagrees(
        report: CampaignReport) -> None:
    """accept_merged_report, the one rule `kv-parity merge`, the Actions retry and the Slurm backend apply to a
    report put together from other jobs' rows: stale campaign verdicts are replaced, a forged row refused."""
    failed = make_report("perf_fail")
    assert failed.verdicts is not None and failed.verdicts.performance == PerfVerdict.FAIL
    merged = accept_merged_report(failed.model_copy(update={"verdicts": report.verdicts}))
    assert merged.verdicts == failed.verdicts
    perf = report.rows[0].performance
    assert perf is not None
    forged = _with_perf(report, 0, perf.model_copy(update={"verdict": PerfVerdict.FAIL}),
                        perf_verdict=PerfVerdict.FAIL)
    with pytest.raises(UnverifiedReport, match=r"does not verify \(\d+ problems\): .*performance verdict FAIL, "
                                               "recomputed PASS") as refused:
        accept_merged_report(forged)
    assert refused.value.problems == verify_report(forged.model_copy(update={"verdicts": campaign_verdicts(forged)}))


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
    quiet = {"interference_ms": 1.0, "affinity_ok": True}
    samples = [
        s.model_copy(update={**quiet, "affinity_observed": s.cpu_set, "affinity_at_exit": s.cpu_set})
        for s in perf.samples
    ]
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


def test_verify_recomputes_the_kernel_gate_that_overturned_a_reported_pass(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = make_report("kernel_contradiction")
    lying = report.rows[1].performance
    assert lying is not None and lying.reported_verdict == PerfVerdict.PASS and lying.verdict == PerfVerdict.FAIL
    assert [(g.clock, g.verdict) for g in lying.kernel_gates] == [("process_wall_ms", PerfVerdict.FAIL),
                                                                  ("process_cpu_ms", PerfVerdict.FAIL)]
    believed = lying.model_copy(update={"verdict": PerfVerdict.PASS, "kernel_gates": []})
    rows = [report.rows[0], report.rows[1].model_copy(update={"performance": believed,
                                                              "perf_verdict": PerfVerdict.PASS})]
    forged = report.model_copy(update={"rows": rows})
    forged = forged.model_copy(update={"verdicts": campaign_verdicts(forged)})
    path = tmp_path / "report.json"
    path.write_text(forged.model_dump_json(), encoding="utf-8")
    assert main_verify(path) == 1
    out = capsys.readouterr().out
    assert "performance verdict PASS, recomputed FAIL" in out
    assert "performance kernel_gates differ from their recomputation" in out
