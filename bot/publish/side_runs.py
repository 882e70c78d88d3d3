"""Reporting side runs: a `/parity bisect` and main-branch tracking, each on a check run of its own name
(`kv-parity / bisect`, `kv-parity / main`, `kv-parity / reference`), never in a pull request's sticky status
comment (which belongs to the pull request's campaigns).

- A bisect completes its check run on the pull request's head with the result and posts it once as a comment.
- A main or reference campaign completes its check run on the pushed commit; when it FAILs (performance, size or
  semantic) it opens the one open issue labelled `tracking_label` (or comments on it), naming the pull request(s)
  that brought the commit (`GET /repos/{owner}/{repo}/commits/{sha}/pulls`), the rows, bounds and report link,
  and comments on each merged pull request. Every post carries a hidden marker naming the campaign and is made
  only if the bot's own posts there do not carry it yet, so a retried publication posts nothing twice.

Every string that leaves passes the redactor, as with `bot.publish.publisher.Publisher`: the publisher holds only
a `RedactingSideRunGateway`, never the raw gateway, so the tracking issue's title and body are redacted in the one
place every other write is.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from bot.core.attempts import PriorAttempt
from bot.core.campaign import Campaign
from bot.core.commands import COMMANDS
from bot.github.models import CheckConclusion
from bot.github.redact import RedactingSideRunGateway, Redactor, SideRunGateway, secret_values
from bot.publish import render
from bot.publish.artifact import write_artifact
from bot.publish.bisect_render import bisect_check_run, bisect_comment, bisect_marker
from bot.publish.check_runs import CheckRunWriter
from bot.publish.comments import CommentWriter
from bot.publish.publisher import (
    PROGRESS_INTERVAL_SECONDS,
    STATE_CONCLUSIONS,
    PublishSettings,
    web_url,
)
from bot.publish.tracking_render import ISSUE_TITLE, pull_request_comment, regression_body, tracking_marker
from bot.publish.views import CheckRunContent, Links, ProgressView
from runners.progress import ProgressEvent
from runners.schema.bisect_rule import BisectReport
from runners.schema.report import CampaignReport
from runners.schema.verdicts import with_verdicts

LABEL_COLOR = "b60205"
LABEL_DESCRIPTION = "kv-parity: a regression reached the default branch"


class SideRunSettings(PublishSettings, Protocol):
    """The publisher's settings and the tracking issue's label; `bot.settings.Settings` satisfies it."""

    @property
    def tracking_label(self) -> str: ...


class SideRunPublisher:
    """The lifecycle's publisher for campaigns whose purpose is not a pull request's gate."""

    def __init__(
        self,
        gateway: SideRunGateway,
        settings_like: SideRunSettings,
        clock: Callable[[], float] = time.monotonic,
        *,
        artifact_base_url: str | None = None,
        progress_interval: float = PROGRESS_INTERVAL_SECONDS,
        redactor: Redactor | None = None,
        open_when_queued: bool = True,
    ) -> None:
        self.redactor = redactor or Redactor(secret_values(settings_like, os.environ))
        self.gateway = RedactingSideRunGateway(gateway, self.redactor)
        self.settings = settings_like
        self.artifact_base_url = artifact_base_url.rstrip("/") if artifact_base_url else None
        self._web = web_url(settings_like.api_base_url)
        self._lock = threading.RLock()
        self.check_runs = CheckRunWriter(
            self.gateway, settings_like.check_name, clock, progress_interval, open_when_queued=open_when_queued
        )
        self.comments = CommentWriter(self.gateway)

    def _links(self, campaign: Campaign, run_id: int | None, details_url: str | None,
               artifact_url: str | None = None) -> Links:
        if artifact_url is None and self.artifact_base_url:
            artifact_url = f"{self.artifact_base_url}/{campaign.id}/"
        return Links(
            artifact_url=artifact_url,
            check_run_url=f"{self._web}/{campaign.repo}/runs/{run_id}" if run_id else None,
            details_url=details_url,
        )

    def _opening(self, campaign: Campaign, details_url: str | None) -> Callable[[], CheckRunContent]:
        return lambda: render.progress_content(campaign, None, self._links(campaign, None, details_url),
                                               self.settings.command_word, position=campaign.queue_position)

    # --- the lifecycle's steps (bot.core.ports.Publisher)

    def queued(self, campaign: Campaign, position: int, *, details_url: str | None = None) -> int | None:
        """The queue position (0 = started) on the check run only (Actions-only mode's publish job opens and
        completes it at once); there is no status comment."""
        with self._lock:
            run_id = self.check_runs.for_queue(campaign, self._opening(campaign, details_url), details_url)
            if run_id is None:
                return None
            started = position == 0
            progress = (ProgressView(stage="starting", row=None, detail="", done=None, total=None, eta_seconds=None)
                        if started else None)
            content = render.progress_content(campaign, progress, self._links(campaign, run_id, details_url),
                                              self.settings.command_word, position=position)
            self.check_runs.running(run_id, content, started, details_url)
        return run_id

    def progress(self, campaign: Campaign, event: ProgressEvent, *, details_url: str | None = None) -> None:
        with self._lock:
            view = self.check_runs.due(campaign, [event])
            if view is None:
                return
            run_id = self.check_runs.ensure(campaign, self._opening(campaign, details_url), details_url)
            content = render.progress_content(campaign, view, self._links(campaign, run_id, details_url),
                                              self.settings.command_word)
            self.check_runs.running(run_id, content, started=True, details_url=details_url)

    def waiting(self, campaign: Campaign, *, details_url: str | None = None) -> None:
        """Nothing to edit: where a side run waits shows on its check run's next progress write."""

    def finished(self, campaign: Campaign, report: CampaignReport, artifact_dir: Path,
                 artifact_url: str | None = None, *,
                 prior_attempts: Sequence[PriorAttempt] = (), details_url: str | None = None) -> int:
        """A main or reference campaign: the artifact, its check run, and on a FAIL the tracking issue and the
        merged pull requests; `artifact_url` (where `kv-parity publish --artifact-url` uploaded the artifact) is
        their report link, as `Publisher.finished`'s."""
        with self._lock:
            report = with_verdicts(report)
            write_artifact(report, artifact_dir, prior_attempts, self.redactor)
            run_id = self.check_runs.ensure(campaign, self._opening(campaign, details_url), details_url)
            links = self._links(campaign, run_id, details_url, artifact_url)
            content = render.check_run_content(report, links, self.settings.command_word, prior_attempts)
            self.check_runs.complete(campaign, run_id, report.concluded.conclusion.value, content,
                                     links.details_url or links.artifact_url or links.check_run_url)
            if campaign.purpose in ("main", "reference") and report.concluded.failed:
                self._regression(campaign, report, links)
            return run_id

    def bisect_finished(self, campaign: Campaign, bisect: BisectReport, artifact_dir: Path, *,
                        details_url: str | None = None) -> int:
        """The `kv-parity / bisect` check run completed with the result, and the result posted on the pull
        request once (found again by its marker among the bot's own comments)."""
        with self._lock:
            run_id = self.check_runs.ensure(campaign, self._opening(campaign, details_url), details_url)
            links = self._links(campaign, run_id, details_url)
            conclusion: CheckConclusion = "success" if bisect.result.outcome == "culprit" else "neutral"
            self.check_runs.complete(campaign, run_id, conclusion, bisect_check_run(bisect, links),
                                     links.details_url or links.artifact_url or links.check_run_url)
            marker = bisect_marker(campaign.id)
            if not any(c.body.startswith(marker) for c in self.comments.ours(campaign.pr_number)):
                self.gateway.create_comment(campaign.pr_number, bisect_comment(bisect, campaign.id, links))
            return run_id

    def ended(self, campaign: Campaign, state: str, reason: str, *, details_url: str | None = None) -> int | None:
        if state not in STATE_CONCLUSIONS:
            raise ValueError(f"unknown end state {state!r}; expected one of {sorted(STATE_CONCLUSIONS)}")
        with self._lock:
            run_id = self.check_runs.for_ending(campaign, state, self._opening(campaign, details_url), details_url)
            if run_id is None:
                return None
            links = self._links(campaign, run_id, details_url)
            content = render.ended_content(campaign, state, reason, links, self.settings.command_word)
            self.check_runs.complete(campaign, run_id, STATE_CONCLUSIONS[state], content,
                                     links.details_url or links.artifact_url or links.check_run_url)
            return run_id

    def reply(self, number: int, kind: str, **context: Any) -> None:
        body = render.reply(kind, self.settings.command_word, COMMANDS, self.settings.label, context)
        with self._lock:
            self.comments.reply(number, body)

    # --- the tracking issue

    def _posted(self, number: int, marker: str, also: str = "") -> bool:
        return marker in also or any(c.body.startswith(marker) for c in self.comments.ours(number))

    def _regression(self, campaign: Campaign, report: CampaignReport, links: Links) -> None:
        label = self.settings.tracking_label
        baseline = next((r.sha for r in report.revisions if r.arm == "baseline"), "")
        reference = (report.config.main.reference or baseline) if campaign.purpose == "reference" else None
        pulls = [] if reference is not None else self.gateway.pulls_of_commit(campaign.head_sha)
        merged = [pull for pull in pulls if pull.merged]
        body = regression_body(report, campaign.id, links, merged or pulls, reference=reference, label=label)
        self.gateway.ensure_label(label, LABEL_COLOR, LABEL_DESCRIPTION)
        bot = self.comments.bot_id
        issue = next((i for i in self.gateway.open_issues(label) if i.author_id == bot), None)
        if issue is None:
            issue = self.gateway.create_issue(ISSUE_TITLE, body, [label])
        elif not self._posted(issue.number, tracking_marker(campaign.id, "issue"), issue.body):
            self.gateway.create_comment(issue.number, body)
        # The merged pull request's comment has one report link: the details page, else the artifact.
        on_pull = replace(links, details_url=links.details_url or links.artifact_url)
        for pull in merged:
            if not self._posted(pull.number, tracking_marker(campaign.id, "pull_request")):
                self.gateway.create_comment(pull.number,
                                            pull_request_comment(report, campaign.id, on_pull, issue.number))
