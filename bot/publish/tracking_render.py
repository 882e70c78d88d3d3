"""Main-branch tracking's Markdown (`templates/tracking.md.j2`, pinned by golden files): the tracking issue's
body, each later comment on it, and the comment on the pull request a failing push came from."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bot.github.models import PullRef
from bot.publish.limits import COMMENT_LIMIT, trim_markdown
from bot.publish.markdown import code, icon, ratio, short
from bot.publish.public import PublicReport
from bot.publish.templating import MARKDOWN
from bot.publish.views import Links, row_views
from bot.publish.wording import verdict_line
from runners.schema.report import CampaignReport, PerfVerdict, SemanticVerdict

TRACKING_MARKER_PREFIX = "<!-- kv-parity:tracking"
ISSUE_TITLE = "kv-parity: a regression reached the default branch"


@dataclass(frozen=True)
class TrackedRow:
    id: str
    semantic: str
    semantic_failed: bool
    performance: str
    failed: bool


def tracking_marker(campaign_id: str, where: Literal["issue", "pull_request"]) -> str:
    """The hidden first line that makes each post once per campaign and place (`issue` or `pull_request`)."""
    safe = campaign_id if re.fullmatch(r"[A-Za-z0-9._-]{1,100}", campaign_id) else "invalid"
    return f"{TRACKING_MARKER_PREFIX} {where} {safe} -->"


def _rows(report: CampaignReport) -> list[TrackedRow]:
    threshold = report.perf_threshold
    rows = []
    for row in report.rows:
        bounds = row.performance.bounds if row.performance is not None else None
        if bounds is None:
            performance = f"{icon(row.perf_verdict)} {row.perf_verdict.value}"
        else:
            relation = {PerfVerdict.PASS: "≤", PerfVerdict.FAIL: ">"}.get(row.perf_verdict, "straddles")
            numbers = f"{ratio(bounds.median)} [{ratio(bounds.lower)}, {ratio(bounds.upper)}]"
            performance = f"{icon(row.perf_verdict)} {numbers} {relation} {threshold:g}"
        semantic_failed = row.semantic == SemanticVerdict.FAIL
        rows.append(TrackedRow(id=row.row.id, semantic=f"{icon(row.semantic)} {row.semantic.value}",
                               semantic_failed=semantic_failed, performance=performance,
                               failed=semantic_failed or row.perf_verdict == PerfVerdict.FAIL))
    return rows


def _context(report: CampaignReport, links: Links, *, reference: str | None, label: str) -> dict[str, Any]:
    report = PublicReport.of(report).report
    revisions = {r.arm: r for r in report.revisions}
    verdicts = report.concluded
    rows = _rows(report)
    against = (f"the reference {code(reference)}" if reference
               else f"its first parent {code(short(revisions['baseline'].sha))}")
    return {
        "report": report, "verdicts": verdicts, "conclusion": verdicts.conclusion.value, "links": links,
        "candidate": revisions["candidate"], "baseline": revisions["baseline"], "against": against,
        "reference": reference, "verdict_line": verdict_line(report), "rows": rows,
        "failing": [row for row in rows if row.failed], "row_views": row_views(report),
        "threshold": f"{report.perf_threshold:g}", "label": label,
        "what": "the default branch's tip" if reference else "the push of",
        "title": ("Creep past the threshold since the reference" if reference
                  else "A push to the default branch FAILs against its first parent"),
    }


def _render(**context: Any) -> str:
    text = MARKDOWN.get_template("tracking.md.j2").render(**context)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n") + "\n"


def regression_body(report: CampaignReport, campaign_id: str, links: Links, pulls: Sequence[PullRef], *,
                    reference: str | None, label: str) -> str:
    """The tracking issue's body for its first FAIL, or a comment on it for a later one (the same text)."""
    text = _render(**_context(report, links, reference=reference, label=label), kind="issue", pulls=list(pulls),
                   marker=tracking_marker(campaign_id, "issue"))
    return trim_markdown(text, COMMENT_LIMIT, "see the campaign's report")


def pull_request_comment(report: CampaignReport, campaign_id: str, links: Links, issue_number: int) -> str:
    """The short comment on a merged pull request whose merge FAILs against its first parent."""
    context = _context(report, links, reference=None, label="")
    text = _render(**context, kind="pull_request", pulls=[], marker=tracking_marker(campaign_id, "pull_request"),
                   issue_link=f"#{issue_number}")
    return trim_markdown(text, COMMENT_LIMIT, "see the tracking issue")
