"""The report-vs-dispatch check: a report is published only for the campaign the bot dispatched."""

from __future__ import annotations

import pytest
from runners.schema.report import Revision, StopRecord

from bot.publish.report_guard import DispatchedCampaign, ReportMismatch, check_report_matches
from tests.report_factory import BASE_SHA, CAMPAIGN_ID, HEAD_SHA, make_report

OTHER_SHA = "0" * 39 + "1"


def _expected(**changes: object) -> DispatchedCampaign:
    values: dict[str, object] = {
        "campaign_id": CAMPAIGN_ID,
        "head_sha": HEAD_SHA,
        "base_sha": BASE_SHA,
        "rows": None,
        "pr_number": 512,
    }
    values.update(changes)
    return DispatchedCampaign.model_validate(values)


def test_the_dispatched_report_passes() -> None:
    report = make_report("pass")
    check_report_matches(report, _expected())
    check_report_matches(report, _expected(rows=[row.row.id for row in report.rows]))


@pytest.mark.parametrize(
    ("changes", "field", "report_value", "expected_value"),
    [
        ({"campaign_id": "c-other"}, "campaign id", CAMPAIGN_ID, "c-other"),
        ({"head_sha": OTHER_SHA}, "head SHA", HEAD_SHA, OTHER_SHA),
        ({"base_sha": OTHER_SHA}, "base SHA", BASE_SHA, OTHER_SHA),
    ],
)
def test_each_identity_field_is_named_with_both_values(
    changes: dict[str, object], field: str, report_value: str, expected_value: str
) -> None:
    with pytest.raises(ReportMismatch) as caught:
        check_report_matches(make_report("pass"), _expected(**changes))
    assert caught.value.field == field
    assert report_value in str(caught.value) and expected_value in str(caught.value)


def test_a_report_renamed_to_another_prs_head_is_refused() -> None:
    forged = make_report("pass")
    forged.revisions = [
        Revision(arm="baseline", sha=BASE_SHA, requested="main"),
        Revision(arm="candidate", sha=OTHER_SHA, requested="refs/pull/7/head"),
    ]
    with pytest.raises(ReportMismatch, match="head SHA"):
        check_report_matches(forged, _expected())


def test_rows_must_be_exactly_those_dispatched() -> None:
    report = make_report("pass")
    first = report.rows[0].row.id
    with pytest.raises(ReportMismatch) as caught:
        check_report_matches(report, _expected(rows=[first]))
    assert caught.value.field == "rows"
    with pytest.raises(ReportMismatch, match="rows"):
        check_report_matches(report, _expected(rows=[first, "not-a-row"]))
    dropped = report.model_copy(update={"rows": report.rows[1:]})
    with pytest.raises(ReportMismatch, match="rows"):
        check_report_matches(dropped, _expected())
    doubled = report.model_copy(update={"rows": [report.rows[0], *report.rows]})
    with pytest.raises(ReportMismatch, match="rows"):
        check_report_matches(doubled, _expected())


def test_a_stopped_report_may_carry_fewer_rows_but_never_others() -> None:
    report = make_report("pass")
    stopped = report.model_copy(
        update={
            "rows": report.rows[:1],
            "stopped": StopRecord(stage="rows", reason="runner lost", blocking=False),
        }
    )
    check_report_matches(stopped, _expected())
    second = report.rows[1].row.id
    with pytest.raises(ReportMismatch, match="rows"):
        check_report_matches(stopped, _expected(rows=[second]))
