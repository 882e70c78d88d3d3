"""Refuse a report that does not belong to the campaign that was dispatched.

A report comes back from jobs that ran pull-request code, so its identity fields are claims, not facts: a
build script can rewrite the manifest to name another pull request's head and collect a success check run
there. Before anything is published, the report's campaign id, head SHA, baseline SHA, rows and mode are
compared with what the bot itself dispatched; the first difference is refused, naming the field and both values
(a profile report must not stand in for a campaign's performance verdict, nor the other way round).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from runners.schema.config import CampaignMode
from runners.schema.report import CampaignReport


class DispatchedCampaign(BaseModel):
    """What the bot dispatched: the only trusted description of the campaign a report must belong to."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    campaign_id: str = Field(min_length=1)
    head_sha: str = Field(min_length=1)
    base_sha: str = Field(min_length=1)
    """The baseline revision the campaign was told to build (the merge base)."""
    rows: list[str] | None = None
    """The rows asked for; None (or empty) means every row of the config."""
    pr_number: int = Field(ge=0)
    """0: a main-branch campaign (no pull request; `kv-parity publish --purpose main|reference`)."""
    mode: CampaignMode = "campaign"
    """`profile` for `/parity profile`: correctness and attribution, no performance gate."""


class ReportMismatch(ValueError):
    """The report names a different campaign than the one dispatched; nothing may be published from it."""

    def __init__(self, field: str, report_value: object, expected_value: object) -> None:
        self.field = field
        self.report_value = report_value
        self.expected_value = expected_value
        super().__init__(
            f"report.json does not belong to the dispatched campaign: {field} is {report_value!r} in the "
            f"report but {expected_value!r} was dispatched"
        )


def _revision(report: CampaignReport, arm: str) -> str | None:
    shas = [revision.sha for revision in report.revisions if revision.arm == arm]
    return shas[0] if len(shas) == 1 else None


def check_report_matches(report: CampaignReport, expected: DispatchedCampaign) -> None:
    """Raise ReportMismatch on the first identity field that differs from what was dispatched.

    Rows: every row the report carries must be one that was asked for (in config order), and a report
    that did not stop must carry exactly those rows; a stopped report may carry fewer, since it ends early.
    """
    if report.campaign_id != expected.campaign_id:
        raise ReportMismatch("campaign id", report.campaign_id, expected.campaign_id)
    head = _revision(report, "candidate")
    if head != expected.head_sha:
        raise ReportMismatch("head SHA", head, expected.head_sha)
    base = _revision(report, "baseline")
    if base != expected.base_sha:
        raise ReportMismatch("base SHA", base, expected.base_sha)
    if report.mode != expected.mode:
        raise ReportMismatch("mode", report.mode, expected.mode)
    wanted = set(expected.rows) if expected.rows else None
    configured = [row.id for row in report.config.rows]
    asked = [row_id for row_id in configured if wanted is None or row_id in wanted]
    unknown = sorted(wanted - set(configured)) if wanted is not None else []
    if unknown:
        raise ReportMismatch("rows", configured, sorted(wanted or ()))
    carried = [row.row.id for row in report.rows]
    extra = [row_id for row_id in carried if row_id not in asked]
    if extra or len(set(carried)) != len(carried) or (report.stopped is None and carried != asked):
        raise ReportMismatch("rows", carried, asked)
