"""Publishing a finished report.json with nothing but the report and GitHub (`kv-parity publish`, the campaign
workflow's publish job): the campaign the report is of, whether its head is a live merge group, and the
acceptances GitHub itself records; the publishers then report it exactly as the service would."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from bot.core.accept_comments import ReadBack, read_back
from bot.core.campaign import Campaign, CampaignPurpose, CampaignState
from bot.core.merge_queue import queue_entry
from bot.core.repo_values import CommentInfo, PullInfo
from bot.github.redact import Gateway
from runners.schema.report import CampaignReport


class PublishGateway(Gateway, Protocol):
    """The gateway `kv-parity publish` needs: the publisher's calls plus the pull request's current head and the
    accept comments an acceptance is read back from."""

    def pull(self, number: int) -> PullInfo: ...

    def comment(self, comment_id: int) -> CommentInfo | None: ...

    def matching_refs(self, prefix: str) -> list[tuple[str, str]]: ...


def in_merge_queue(gateway: PublishGateway, pr: int, sha: str) -> bool:
    """Whether `sha` is the commit of a live merge group of pull request `pr` (a queue branch names both): the
    report of a `measure` campaign is then published on the group's check run, not refused as another head."""
    for ref, head in gateway.matching_refs("heads/gh-readonly-queue/"):
        entry = queue_entry(ref)
        if entry is not None and entry[1] == pr and head == sha:
            return True
    return False


def standing_acceptances(gateway: PublishGateway, pr: int, head_sha: str, command_word: str) -> ReadBack:
    """The head's acceptances as GitHub itself records them (Actions-only mode): the bot's own replies point at
    accept comments, each read back by id; an edited or deleted one is refused (`refused` says why)."""
    me = gateway.identity().id
    ours = [comment for comment in gateway.list_comments(pr) if comment.author_id == me]
    return read_back(ours, head_sha, gateway.comment, command_word)


def campaign_from_report(
    report: CampaignReport,
    repo: str,
    pr_number: int,
    *,
    rows: list[str] | None = None,
    purpose: CampaignPurpose = "pull_request",
    trigger: str = "publish",
) -> Campaign:
    """The campaign a stand-alone report is of (`kv-parity publish`), read from the report itself, so publishing
    it shares `Publisher.finished` (and `SideRunPublisher.finished`) with the service; `trigger` is `merge_group`
    for a measured merge group's (published on the group's check run only)."""
    revisions = {r.arm: r.sha for r in report.revisions}
    return Campaign(
        id=report.campaign_id,
        repo=repo,
        pr_number=pr_number,
        head_sha=revisions["candidate"],
        base_sha=revisions["baseline"],
        relationship=report.relationship,
        rows=rows,
        requested_by="kv-parity publish",
        trigger=trigger,
        config_source=report.config_source,
        mode=report.mode,
        purpose=purpose,
        state=CampaignState.COMPLETED,
        created_at=datetime.fromtimestamp(report.created_unix, UTC),
        reason="published from report.json",
        conclusion=report.concluded.conclusion.value,
    )
