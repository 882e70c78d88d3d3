"""The hidden markers that open the bot's own comments, so a restarted or retried publisher finds them again
(and nobody else's comment can stand in for them)."""

from __future__ import annotations

import re

from runners.schema.report import CampaignReport

STATUS_MARKER = "<!-- kv-parity:status -->"


RESULT_MARKER_PREFIX = "<!-- kv-parity:result"


def context_sha(report: CampaignReport) -> str:
    """The candidate SHA for the result marker; a SHA is hex, anything else is not carried into a marker."""
    sha = next((r.sha for r in report.revisions if r.arm == "candidate"), "")
    return sha if re.fullmatch(r"[0-9a-f]{7,64}", sha) else "unknown"


def _marker_safe(campaign_id: str) -> str:
    return campaign_id if re.fullmatch(r"[A-Za-z0-9._-]{1,100}", campaign_id) else "invalid"


def result_marker(campaign_id: str, head_sha: str) -> str:
    return f"{RESULT_MARKER_PREFIX} campaign={_marker_safe(campaign_id)} sha={head_sha} -->"


def result_marker_campaign(body: str) -> str | None:
    """The campaign id of a result comment we posted (the marker opens the body), else None.

    Requiring the marker at the very start ignores people quoting our comments (quotes start with `>`).
    """
    match = re.match(re.escape(RESULT_MARKER_PREFIX) + r" campaign=(\S+) sha=\S+ -->", body)
    return match.group(1) if match else None


def is_status_comment(body: str) -> bool:
    return body.startswith(STATUS_MARKER)
