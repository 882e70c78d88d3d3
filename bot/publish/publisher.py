"""Effects of reporting: the check run, the sticky status comment, the result comment and the artifact.

`Publisher` is what the lifecycle engine calls at each step of a campaign; it composes the check-run
writer (`bot.publish.check_runs`), the comment writer (`bot.publish.comments`) and the artifact writer
(`bot.publish.artifact`), all behind one `RedactingGateway`, so every string that leaves for GitHub passes the
redactor. `kv-parity publish` (`bot.cli.publish`) (re)posts a finished report.json through the same
`Publisher.finished`, after checking that the report belongs to the campaign that was dispatched. All text
comes from `bot.publish.render`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from bot.core.attempts import PriorAttempt
from bot.core.campaign import Campaign
from bot.core.commands import COMMANDS
from bot.core.merge_queue import MERGE_GROUP_TRIGGER, CarriedResult
from bot.core.watched_paths import WatchedChange, needs_campaign_id
from bot.github.models import CheckConclusion, CheckOutput
from bot.github.redact import Gateway, RedactingGateway, Redactor, secret_values
from bot.publish import render
from bot.publish.artifact import write_artifact as write_artifact
from bot.publish.check_runs import RUN, CheckRunWriter
from bot.publish.comments import CommentWriter
from bot.publish.views import CheckRunContent, Links, ProgressView
from runners.progress import ProgressEvent
from runners.schema.report import CampaignReport
from runners.schema.verdicts import with_verdicts

PROGRESS_INTERVAL_SECONDS = 10.0
"""At most one progress update per campaign in this window, except when the stage or row changes."""

STATE_CONCLUSIONS: dict[str, CheckConclusion] = {
    "cancelled": "cancelled",
    "superseded": "neutral",
    "timed_out": "timed_out",
    "errored": "failure",
    "config_error": "action_required",
}
"""Check-run conclusion of a campaign that ended without a report.

Superseded is neutral rather than `stale` because only GitHub may set `stale`; neutral does not block a merge
and the newer campaign's check run carries the verdict.
"""


def _comments_on_pull(campaign: Campaign) -> bool:
    """A merge group's campaign reports on the group's check run only, never in the pull request's comments."""
    return campaign.trigger != MERGE_GROUP_TRIGGER


def _details_url(links: Links) -> str | None:
    """Where a completed check run's Details lead: the details page, else the workflow run (both in
    `details_url`), else the artifact, else the check run's own page. GitHub requires one for
    `action_required`, the conclusion of every campaign that reached no decision by default."""
    return links.details_url or links.artifact_url or links.check_run_url


class PublishSettings(Protocol):
    """The settings the publisher reads; `bot.settings.Settings` satisfies it."""

    @property
    def check_name(self) -> str: ...

    @property
    def command_word(self) -> str: ...

    @property
    def label(self) -> str: ...

    @property
    def api_base_url(self) -> str: ...


def web_url(api_base_url: str) -> str:
    """The web root that belongs to an API root (github.com, GHES `/api/v3`, or a local stand-in)."""
    parts = urlsplit(api_base_url.rstrip("/"))
    host = parts.netloc
    if host == "api.github.com":
        host = "github.com"
    path = parts.path.removesuffix("/api/v3")
    return f"{parts.scheme}://{host}{path}"


class Publisher:
    """Turns campaign lifecycle steps into GitHub check runs and comments, quietly and idempotently.

    Quiet: one status comment per pull request, edited when a campaign is queued, starts and ends (edits
    notify nobody); one new result comment per finished campaign (that one should notify); live progress
    only on the check run, one write per stage change and at most one per PROGRESS_INTERVAL_SECONDS within
    a stage. Idempotent: the check run is found again by its external_id (`CheckRunWriter`), the status comment
    and result comments by their hidden markers, on the bot's own comments only, so a publisher created after a
    restart continues where the old one stopped and nobody else's comment can stand in for them.

    Every step takes the campaign and `details_url`, where a person follows it (its details page or its Actions
    run; None: the artifact, else the check run's own page); each step that writes the check run returns its id.
    `open_when_queued` (the service) opens the check run as soon as a campaign is queued; Actions-only mode's
    publisher waits for the publish job or a failure (`bot.publish.check_runs`).
    """

    def __init__(
        self,
        gateway: Gateway,
        settings_like: PublishSettings,
        clock: Callable[[], float] = time.monotonic,
        *,
        artifact_base_url: str | None = None,
        progress_interval: float = PROGRESS_INTERVAL_SECONDS,
        redactor: Redactor | None = None,
        open_when_queued: bool = True,
    ) -> None:
        self.redactor = redactor or Redactor(secret_values(settings_like, os.environ))
        self.gateway = RedactingGateway(gateway, self.redactor)
        self.settings = settings_like
        self.artifact_base_url = artifact_base_url.rstrip("/") if artifact_base_url else None
        self._web = web_url(settings_like.api_base_url)
        self._lock = threading.RLock()
        self.check_runs = CheckRunWriter(
            self.gateway, settings_like.check_name, clock, progress_interval, open_when_queued=open_when_queued
        )
        self.comments = CommentWriter(self.gateway)

    def _links(
        self,
        campaign: Campaign,
        run_id: int | None,
        details_url: str | None,
        artifact_url: str | None = None,
        result_url: str | None = None,
    ) -> Links:
        if artifact_url is None and self.artifact_base_url:
            artifact_url = f"{self.artifact_base_url}/{campaign.id}/"
        return Links(
            artifact_url=artifact_url,
            check_run_url=f"{self._web}/{campaign.repo}/runs/{run_id}" if run_id else None,
            result_url=result_url,
            details_url=details_url,
        )

    def _opening(self, campaign: Campaign, details_url: str | None) -> Callable[[], CheckRunContent]:
        """What a check run shows when it is created: the campaign queued at its position."""
        return lambda: render.progress_content(
            campaign, None, self._links(campaign, None, details_url), self.settings.command_word,
            position=campaign.queue_position,
        )

    # --- lifecycle steps

    def queued(self, campaign: Campaign, position: int, *, details_url: str | None = None) -> int | None:
        """Show the queue position (0 = started) on the check run and in the status comment; returns the check
        run's id (None: this publisher opens none for a queued campaign)."""
        with self._lock:
            run_id = self.check_runs.for_queue(campaign, self._opening(campaign, details_url), details_url)
            links = self._links(campaign, run_id, details_url)
            started = position == 0
            if run_id is not None:
                progress = (
                    ProgressView(stage="starting", row=None, detail="", done=None, total=None, eta_seconds=None)
                    if started
                    else None
                )
                content = render.progress_content(
                    campaign, progress, links, self.settings.command_word, position=position
                )
                self.check_runs.running(run_id, content, started, details_url)
            if _comments_on_pull(campaign):
                body = render.status_comment(
                    campaign, "running" if started else "queued", links, self.settings.command_word,
                    position=position,
                )
                self.comments.upsert_status(campaign, body)
            return run_id

    def progress(self, campaign: Campaign, event: ProgressEvent, *, details_url: str | None = None) -> None:
        """Live progress of one event (see `progress_batch`)."""
        self.progress_batch(campaign, [event], details_url=details_url)

    def progress_batch(
        self, campaign: Campaign, events: Sequence[ProgressEvent], *, details_url: str | None = None
    ) -> None:
        """Live progress on the check run: at most one write for a batch, at once on a stage or row change,
        else at most one per interval. The status comment is not touched (it links to the check run)."""
        with self._lock:
            view = self.check_runs.due(campaign, events)
            if view is None:
                return
            run_id = self.check_runs.ensure(campaign, self._opening(campaign, details_url), details_url)
            content = render.progress_content(
                campaign, view, self._links(campaign, run_id, details_url), self.settings.command_word
            )
            self.check_runs.running(run_id, content, started=True, details_url=details_url)

    def waiting(self, campaign: Campaign, *, details_url: str | None = None) -> None:
        """The running status comment again, now saying where the campaign waits in its scheduler's queue (or
        no longer): a person sees why nothing runs without opening the check run. One edit per change."""
        if not _comments_on_pull(campaign):
            return
        with self._lock:
            links = self._links(campaign, self.check_runs.find(campaign), details_url)
            body = render.status_comment(campaign, "running", links, self.settings.command_word)
            self.comments.upsert_status(campaign, body)

    def finished(
        self,
        campaign: Campaign,
        report: CampaignReport,
        artifact_dir: Path,
        artifact_url: str | None = None,
        *,
        prior_attempts: Sequence[PriorAttempt] = (),
        details_url: str | None = None,
    ) -> int:
        """Write the artifact, complete the check run, post ONE result comment and fold older ones; returns the
        check run's id.

        `prior_attempts` (earlier campaigns of the same head, oldest first) are listed on every surface.
        Calling it again for the same campaign re-completes the check run and re-edits the status comment
        (both idempotent) but posts nothing new: the result comment is recognised by its marker.
        """
        with self._lock:
            report = with_verdicts(report)
            write_artifact(report, artifact_dir, prior_attempts, self.redactor)
            run_id = self.check_runs.ensure(campaign, self._opening(campaign, details_url), details_url)
            links = self._links(campaign, run_id, details_url, artifact_url)
            command_word = self.settings.command_word
            content = render.check_run_content(report, links, command_word, prior_attempts)
            self.check_runs.complete(
                campaign, run_id, report.concluded.conclusion.value, content, _details_url(links)
            )
            if not _comments_on_pull(campaign):
                return run_id
            result = self.comments.post_result(
                campaign, render.result_comment(report, links, command_word, prior_attempts)
            )
            self.comments.upsert_status(
                campaign,
                render.status_comment(
                    campaign,
                    "finished",
                    Links(links.artifact_url, links.check_run_url, result.html_url, links.details_url),
                    command_word,
                    report=report,
                ),
            )
            return run_id

    def ended(self, campaign: Campaign, state: str, reason: str, *, details_url: str | None = None) -> int | None:
        """A campaign that stopped without a report: complete its check run and say why in the status; returns
        the check run's id (None: it has none, `CheckRunWriter.for_ending`)."""
        if state not in STATE_CONCLUSIONS:
            raise ValueError(f"unknown end state {state!r}; expected one of {sorted(STATE_CONCLUSIONS)}")
        with self._lock:
            run_id = self.check_runs.for_ending(campaign, state, self._opening(campaign, details_url), details_url)
            links = self._links(campaign, run_id, details_url)
            if run_id is not None:
                content = render.ended_content(campaign, state, reason, links, self.settings.command_word)
                self.check_runs.complete(campaign, run_id, STATE_CONCLUSIONS[state], content, _details_url(links))
            if _comments_on_pull(campaign):
                self.comments.upsert_status(
                    campaign,
                    render.status_comment(
                        campaign, "ended", links, self.settings.command_word, state=state, reason=reason
                    ),
                )
            return run_id

    def watched_paths_concluded(self, change: WatchedChange, *, details_url: str) -> int:
        """The campaign check at an unlabelled head under `[checks] watched_paths`, created concluded: `skipped`, or
        `action_required` with the pull request as its details (GitHub wants details for it) and a Run button (a
        maintainer's click is a `rerun` of that exact head, authorised as every button is)."""
        content = render.watched_paths_content(change, self.settings.label, self.settings.command_word)
        with self._lock:
            return self.gateway.create_check_run(
                change.head_sha, self.check_runs.check_name, needs_campaign_id(change.pr, change.head_sha),
                status="completed", output=CheckOutput(title=content.title, summary=content.summary),
                conclusion=change.conclusion, details_url=details_url, actions=[RUN] if change.needs_campaign else [],
            )

    def merge_group_carried(self, head_sha: str, result: CarriedResult) -> int:
        """The campaign check's run on a merge group's commit, created and concluded at once from the standing of
        the group's pull requests (carry mode); no buttons, since there is nothing to rerun there."""
        content = render.merge_group_content(result, self.settings.command_word)
        with self._lock:
            return self.gateway.create_check_run(
                head_sha, self.check_runs.check_name, f"merge-group-{head_sha[:12]}", status="completed",
                output=CheckOutput(title=content.title, summary=content.summary), conclusion=result.conclusion,
            )

    def reply(self, number: int, kind: str, **context: Any) -> None:
        """Answer a command with a new short comment.

        Context per kind: refused(reason, fix[, action]), help(), status(campaigns), duplicate(campaign),
        unknown_command(line, reason), accepted(marker, acceptance, outcome, verdicts, campaign),
        revoked(marker, count, head_sha, campaign).
        """
        body = render.reply(kind, self.settings.command_word, COMMANDS, self.settings.label, context)
        with self._lock:
            self.comments.reply(number, body)
