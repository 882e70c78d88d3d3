"""The campaign workflow's interface (`.github/workflows/kv-parity-campaign.yml`), shared by the Actions backend
and Actions-only mode: the inputs it is dispatched with, the `run-name` they render and how a run's title is read
back, the names of its row jobs and of its report artifact.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from bot.core.campaign import CampaignPurpose
from runners.schema.config import CampaignMode, format_rows, parse_rows

REPORT_ARTIFACT = "kv-parity-report"
"""Artifact the campaign workflow's publish job uploads (report.json and the rows' evidence)."""
ROW_JOB_PREFIX = "row "
"""Row jobs are named `row <row id>` in the campaign workflow."""
RUN_NAME = (
    "kv-parity ${{ inputs.campaign_id }} #${{ inputs.pr_number }} ${{ inputs.head_sha }} rows=${{ inputs.rows }}"
    " mode=${{ inputs.mode }} purpose=${{ inputs.purpose }}"
)
"""The campaign workflow's `run-name`: it makes a run's display title say which campaign, pull request, head
and rows it is for, which is how Actions-only mode (no database) finds a pull request's runs."""
RUN_TITLE = re.compile(
    r"^kv-parity (?P<campaign>\S+) #(?P<pr>\d*) (?P<head>[0-9a-f]{40}) rows=(?P<rows>[a-z0-9_.,-]*)"
    r"(?: mode=(?P<mode>campaign|profile|))?(?: purpose=(?P<purpose>pull_request|main|reference|))?$"
)
"""An empty `#` is a main-branch campaign (no pull request; its `purpose=` says which)."""
LIVE_STATUSES = ("requested", "pending", "waiting", "queued", "in_progress")
"""Run statuses before `completed`."""


def dispatch_inputs(
    campaign_id: str,
    base_sha: str,
    head_sha: str,
    rows: Collection[str] | None,
    pr_number: int,
    *,
    config_ref: str | None = None,
    mode: CampaignMode = "campaign",
    purpose: CampaignPurpose = "pull_request",
) -> dict[str, str]:
    """The campaign workflow's inputs: all strings (the API refuses anything else), at most seven of GitHub's 25.
    `config_ref` is the trusted commit the plan job reads the config at (the base branch's tip; default the
    base SHA), never the head. `mode=profile` is sent for `/parity profile` only: a campaign relies on the
    input's default, so a copy of the workflow from before `mode` existed keeps accepting campaigns (GitHub
    refuses unknown inputs) and refuses, loudly, only the profile it cannot run."""
    inputs = {
        "campaign_id": campaign_id,
        "base_sha": base_sha,
        "head_sha": head_sha,
        "rows": format_rows(rows),
        "config_ref": config_ref or base_sha,
        "pr_number": str(pr_number),
    }
    if mode != "campaign":
        inputs["mode"] = mode
    if purpose in ("main", "reference"):
        # No pull request: an empty number gives the run a concurrency group of its own (a later push must not
        # cancel it) and tells the publish job to report on `kv-parity / main` instead of a pull request.
        inputs["pr_number"] = ""
        inputs["purpose"] = purpose
    return inputs


@dataclass(frozen=True)
class RunTitle:
    campaign_id: str
    pr_number: int
    head_sha: str
    rows: list[str] | None
    mode: CampaignMode = "campaign"
    """A title without `mode=` (a workflow copy from before the input) or with it empty is a campaign."""
    purpose: CampaignPurpose = "pull_request"
    """`main` or `reference` for main-branch tracking (pr_number 0); absent or empty: a pull request's."""


def parse_run_title(title: str) -> RunTitle | None:
    """What a campaign run's display title (rendered from RUN_NAME) says; None for any other run."""
    match = RUN_TITLE.match(title)
    if match is None:
        return None
    mode: CampaignMode = "profile" if match["mode"] == "profile" else "campaign"
    purpose: CampaignPurpose = (
        "main" if match["purpose"] == "main" else "reference" if match["purpose"] == "reference" else "pull_request")
    return RunTitle(match["campaign"], int(match["pr"] or 0), match["head"], parse_rows(match["rows"]), mode,
                    purpose)
