"""The acceptance rule (`runners.schema.acceptance`, applied by `runners.schema.verdicts`): which FAILs an audited
`/parity accept` covers, and that `kv-parity verify` recomputes the conclusion with it from the report alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.cli.reports import main_verify
from runners.schema.acceptance import row_upper_bound
from runners.schema.report import Acceptance, CampaignReport, CheckConclusion, GateVerdict, PerfVerdict
from runners.schema.verdicts import with_acceptances
from runners.verify import verify_report
from tests.report_factory import make_report


def _head(report: CampaignReport) -> str:
    return next(r.sha for r in report.revisions if r.arm == "candidate")


def accept(report: CampaignReport, gate: str = "performance", max_: float = 1.2, **fields: object) -> Acceptance:
    values: dict[str, object] = {
        "gate": gate,
        "login": "lead",
        "permission": "maintain",
        "comment_id": 4242,
        "comment_url": "https://github.com/acme/widgets/pull/1#issuecomment-4242",
        "reason": "the new admission pass is intended work",
        "max": max_,
        "head_sha": _head(report),
        "written_unix": 1_800_000_000.0,
        "recorded_unix": 1_800_000_005.0,
    }
    values.update(fields)
    return Acceptance.model_validate(values)


def test_a_performance_fail_within_max_concludes_success_and_says_who_accepted_it() -> None:
    report = make_report("perf_fail")
    upper = row_upper_bound(report.rows[1])
    assert upper is not None and report.concluded.conclusion == CheckConclusion.FAILURE
    judged = with_acceptances(report, [accept(report, max_=1.13)])
    verdicts = judged.concluded
    assert verdicts.performance == PerfVerdict.FAIL, "the gate's own verdict stays what was measured"
    assert verdicts.accepted_performance == PerfVerdict.PASS and verdicts.accepted
    assert verdicts.conclusion == CheckConclusion.SUCCESS
    assert verdicts.summary.endswith(
        "· performance FAIL accepted by @lead (max 1.13): the new admission pass is intended work"
    )
    [outcome] = verdicts.acceptances
    assert outcome.covered == ["sglang-disagg"] and outcome.uncovered == []
    assert verify_report(judged) == []


def test_a_fail_above_max_stays_a_failure_and_says_by_how_much() -> None:
    report = make_report("perf_fail")
    judged = with_acceptances(report, [accept(report, max_=1.10)])
    verdicts = judged.concluded
    assert verdicts.conclusion == CheckConclusion.FAILURE and not verdicts.accepted
    [outcome] = verdicts.acceptances
    assert outcome.covered == []
    assert outcome.uncovered == [
        "row sglang-disagg: upper bound 1.1248 is above the accepted max 1.10 by 0.0248 (2.3%)"
    ]
    assert verify_report(judged) == []


def test_the_kernel_clocks_bound_counts_when_it_is_the_larger_one() -> None:
    """A FAIL found on a kernel clock is covered only up to that clock's (larger) upper bound."""
    report = make_report("kernel_contradiction")
    row = report.rows[1]
    assert row.performance is not None and row.performance.bounds is not None
    reported = row.performance.bounds.upper
    upper = row_upper_bound(row)
    assert upper is not None and upper > reported
    assert with_acceptances(report, [accept(report, max_=reported)]).concluded.conclusion == "failure"
    assert with_acceptances(report, [accept(report, max_=upper)]).concluded.conclusion == "success"


def test_rows_limit_what_is_covered() -> None:
    report = make_report("perf_fail")
    judged = with_acceptances(report, [accept(report, rows=["vllm-disagg"])])
    assert judged.concluded.conclusion == CheckConclusion.FAILURE
    assert judged.concluded.acceptances[0].covered == []
    assert judged.concluded.summary.endswith("(covers nothing here)")


def test_an_acceptance_of_another_head_covers_nothing() -> None:
    report = make_report("perf_fail")
    judged = with_acceptances(report, [accept(report, head_sha="f" * 40)])
    assert judged.concluded.conclusion == CheckConclusion.FAILURE
    [line] = judged.concluded.acceptances[0].uncovered
    assert line.startswith("it was written for head ffffffffffff, this campaign measured ")


def test_a_size_fail_within_max_is_accepted_and_the_growth_decides() -> None:
    report = make_report("size_fail")
    assert report.sizes is not None and report.concluded.sizes == GateVerdict.FAIL
    growth = max(report.sizes.binary_growth, report.sizes.text_growth)
    judged = with_acceptances(report, [accept(report, "sizes", max_=0.08)])
    assert judged.concluded.conclusion == CheckConclusion.SUCCESS and judged.concluded.accepted_sizes == "PASS"
    assert "size FAIL accepted by @lead (max 8%)" in judged.concluded.summary
    below = with_acceptances(report, [accept(report, "sizes", max_=0.05)])
    assert below.concluded.conclusion == CheckConclusion.FAILURE
    assert below.concluded.acceptances[0].uncovered == [
        f"size growth {growth * 100:.2f}% is above the accepted max 5% by {(growth - 0.05) * 100:.2f} percentage points"
    ]
    assert verify_report(judged) == verify_report(below) == []


def test_a_semantic_fail_is_never_accepted() -> None:
    report = make_report("parity_fail")
    judged = with_acceptances(report, [accept(report, max_=5.0), accept(report, "sizes", max_=1.0)])
    assert judged.concluded.conclusion == CheckConclusion.FAILURE
    assert all(outcome.covered == [] for outcome in judged.concluded.acceptances)
    assert [outcome.acceptance.gate for outcome in judged.concluded.acceptances] == ["performance", "sizes"]
    unaccepted = report.concluded
    assert (judged.concluded.accepted_performance, judged.concluded.accepted_sizes) == (
        unaccepted.performance, unaccepted.sizes), "no gate's verdict was changed by an acceptance"
    assert judged.concluded.summary.count("(covers nothing here)") == 2, judged.concluded.summary


def test_an_undecided_row_beside_an_accepted_fail_keeps_the_campaign_undecided() -> None:
    """Row 1 FAILs (accepted); row 0 is made INCONCLUSIVE: the conclusion is the undecided one, not success."""
    report = make_report("perf_fail")
    straddle = make_report("inconclusive_straddle").rows[1]
    rows = [straddle.model_copy(update={"row": report.rows[0].row}), report.rows[1]]
    report = report.model_copy(update={"rows": rows, "verdicts": None})
    judged = with_acceptances(report, [accept(report, max_=1.2)])
    assert judged.concluded.accepted_performance == PerfVerdict.INCONCLUSIVE
    assert judged.concluded.undecided == "inconclusive"
    assert judged.concluded.conclusion == CheckConclusion.ACTION_REQUIRED


def test_revoking_restores_the_measured_conclusion() -> None:
    report = make_report("perf_fail")
    accepted = with_acceptances(report, [accept(report)])
    revoked = with_acceptances(accepted, [])
    assert revoked.acceptances == [] and revoked.concluded == report.concluded
    assert with_acceptances(report, []) is report


def test_verify_catches_a_report_whose_acceptance_was_widened_after_the_fact(tmp_path: Path) -> None:
    """Raising `max` in report.json without recomputing (or claiming coverage) is a disagreement."""
    report = make_report("perf_fail")
    judged = with_acceptances(report, [accept(report, max_=1.10)])
    data = json.loads(judged.model_dump_json())
    data["verdicts"]["conclusion"] = "success"
    data["verdicts"]["accepted_performance"] = "PASS"
    data["verdicts"]["acceptances"][0]["covered"] = ["sglang-disagg"]
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    problems = verify_report(CampaignReport.model_validate(data))
    assert "campaign conclusion: stored success, recomputed failure" in problems
    assert "campaign accepted_performance: stored PASS, recomputed FAIL" in problems
    assert any(p.startswith("acceptances cover [(4242, ['sglang-disagg'])]") for p in problems)
    assert main_verify(path) == 1
    good = tmp_path / "good.json"
    good.write_text(judged.model_dump_json())
    assert main_verify(good) == 0


@pytest.mark.parametrize("gate", ["performance", "sizes"])
def test_a_profile_accepts_nothing(gate: str) -> None:
    report = make_report("profile")
    judged = with_acceptances(report, [accept(report, gate)])
    assert judged.concluded.acceptances[0].uncovered == ["a profile decides no gate, so there is nothing to accept"]


def test_an_instruction_count_fail_is_covered_only_up_to_its_counted_ratio() -> None:
    """A wall-time PASS failed by the counted instructions (x1.0793): its bound is the counted ratio, so an
    acceptance below it leaves the FAIL standing and one above it covers it."""
    report = make_report("instruction_contradiction")
    row = report.rows[1]
    assert row.perf_verdict == PerfVerdict.FAIL and row.instructions is not None
    assert row_upper_bound(row) == pytest.approx(row.instructions.lowest_ratio)
    below = with_acceptances(report, [accept(report, max_=1.06)]).concluded
    assert below.conclusion == CheckConclusion.FAILURE and not below.accepted
    above = with_acceptances(report, [accept(report, max_=1.09)]).concluded
    assert above.conclusion == CheckConclusion.SUCCESS and above.accepted_performance == PerfVerdict.PASS
