"""Deliveries -> campaigns: who asked for what, and whether they may.

One stored delivery is parsed, decided (`bot.core.triggers.decide`) and acted on: a campaign requested, replaced
or cancelled, or a reply. The rules that make requests honest live here:

- Rerun means rerun: `/parity rerun`, the check run's Rerun button and GitHub's "Re-run" start a new campaign
  for the current head, replacing a queued or running one of the same rows. Adding the label again to a head
  whose campaign completed is not a request to run again and is answered with that campaign (today's
  behaviour); a duplicate *delivery* (same X-GitHub-Delivery) is never acted on twice.
- Fork approval names a head exactly: `sha=` takes all 40 hex digits (a shorter one is refused with the full
  SHA to use); a plain `/parity rerun` approves the current head only if the bot had seen it by the time the
  comment was written (heads are recorded from every pull_request delivery and every pull request fetch).
- Refusals are answered once per person per pull request per `refusal_window_seconds`; within the window a
  repeat is only recorded, and the recorded permission stands in for another API lookup.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from bot.core.authz import cached_lookup
from bot.core.commands import FULL_SHA, approval_command
from bot.core.events import CheckRunEvent, IssueCommentEvent, PayloadError, PullRequestEvent, WebhookEvent, parse_event
from bot.core.resolve import resolve
from bot.core.triggers import (
    Cancel,
    Help,
    Ignore,
    Intent,
    NeedsApproval,
    Refuse,
    Rerun,
    Start,
    Status,
    TriggerContext,
    decide,
)
from bot.github.gateway import PullInfo
from bot.settings import Settings
from bot.store.campaigns import CampaignState, CampaignView, Delivery, DuplicateCampaign, NewCampaign, Store
from runners.config import ConfigError

if TYPE_CHECKING:
    from bot.lifecycle import Publisher, RepoApi, RepoServices

log = logging.getLogger(__name__)

S = CampaignState
CONFIG_ERROR = "config_error"
"""The `state` given to `Publisher.ended` when the base branch's config is missing or invalid."""


class CampaignDriver(Protocol):
    """What intake needs from `bot.lifecycle.Lifecycle`, which runs the campaigns it records."""

    def end(
        self, campaign: CampaignView, state: CampaignState, reason: str, *, published_state: str | None = None
    ) -> CampaignView: ...

    def ensure_check_run(self, campaign: CampaignView, publisher: Publisher) -> CampaignView: ...

    def announce(self, campaign: CampaignView) -> None: ...


def _utc(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class _RememberedPermissions:
    """Permission lookups that reuse a refusal answered within the window instead of asking the API again."""

    def __init__(self, store: Store, repo: str, pr: int | None, api: RepoApi, since: float) -> None:
        self._store, self._repo, self._pr, self._api, self._since = store, repo, pr, api, since

    def permission(self, login: str) -> str:
        if self._pr is not None:
            recent = self._store.answered_refusal(self._repo, self._pr, login, self._since)
            if recent is not None:
                return recent.permission
        return self._api.permission(login)


class Intake:
    """Turns deliveries into campaign requests and replies; runs on the lifecycle's single worker thread."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        backend_name: str,
        services: Callable[[str], RepoServices],
        driver: CampaignDriver,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.settings = settings
        self.backend_name = backend_name
        self.services = services
        self.driver = driver
        self.clock = clock

    # ------------------------------------------------------------------ deliveries

    def handle(self, delivery: Delivery) -> str:
        """Act on one stored delivery; returns the outcome recorded with it."""
        try:
            event = parse_event(delivery.event, delivery.payload)
        except PayloadError as exc:
            return f"rejected: {exc}"
        repo = event.repository.full_name
        if self.settings.repo and repo.lower() != self.settings.repo.lower():
            return f"ignored: repository {repo} is not served (settings.repo = {self.settings.repo})"
        already = self.store.by_delivery(delivery.id)
        if already:
            return f"already handled: campaign {already[0].id}"
        if isinstance(event, PullRequestEvent):
            pull = event.pull_request
            self.store.see_head(repo, pull.number, pull.head.sha, delivery.received_at, f"pull_request {event.action}")
        services = self.services(repo)
        since = self.clock() - self.settings.refusal_window_seconds
        permissions = _RememberedPermissions(self.store, repo, self._event_pr(event), services.api, since)
        context = TriggerContext(
            label=self.settings.label,
            command_word=self.settings.command_word,
            bot_id=services.bot.id,
            min_permission=self.settings.min_permission,
            permission_of=cached_lookup(permissions),
            is_approved=lambda pr, sha: self.store.is_approved(repo, pr, sha),
        )
        return self._act(decide(event, context), repo, services, delivery.id)

    def _event_pr(self, event: WebhookEvent) -> int | None:
        if isinstance(event, PullRequestEvent):
            return event.pull_request.number
        if isinstance(event, IssueCommentEvent):
            return event.issue.number
        assert isinstance(event, CheckRunEvent)
        return self._campaign_pr(
            event.check_run.pull_requests[0].number if event.check_run.pull_requests else None,
            event.check_run.external_id,
        )[0]

    def _campaign_pr(self, pr: int | None, campaign_id: str | None) -> tuple[int | None, CampaignView | None]:
        """A check run names its campaign; fork pull requests are missing from check_run.pull_requests."""
        campaign = self.store.get(campaign_id) if campaign_id else None
        return (pr if pr is not None else campaign.pr_number if campaign else None), campaign

    def _pull(self, api: RepoApi, repo: str, pr: int) -> PullInfo:
        """Fetch the pull request, remembering its head as seen now."""
        pull = api.pull(pr)
        self.store.see_head(repo, pr, pull.head_sha, self.clock(), "pull request fetched")
        return pull

    def _act(self, intent: Intent, repo: str, services: RepoServices, delivery_id: str) -> str:
        publisher = services.publisher
        if isinstance(intent, Ignore):
            return f"ignored: {intent.reason}"
        if isinstance(intent, Refuse):
            return self._refuse(intent, repo, publisher)
        if isinstance(intent, Help):
            if intent.line is None:
                publisher.reply(intent.pr, "help")
                return "help"
            publisher.reply(intent.pr, "unknown_command", line=intent.line, reason=intent.reason)
            return f"unknown command: {intent.reason}"
        if isinstance(intent, Status):
            publisher.reply(intent.pr, "status", campaigns=self.store.for_pr(repo, intent.pr))
            return "status"
        if isinstance(intent, NeedsApproval):
            self._supersede(repo, intent.pr, intent.head_sha, f"new head {intent.head_sha[:12]} awaits approval")
            fix = (
                f"a collaborator with at least {self.settings.min_permission!r} permission reviews this head "
                f"and comments `{approval_command(self.settings.command_word, intent.head_sha)}`"
            )
            publisher.reply(intent.pr, "refused", reason=intent.reason, fix=fix)
            return f"needs approval: {intent.head_sha}"
        if isinstance(intent, Cancel):
            return self._cancel(intent, repo, services)
        if isinstance(intent, Start):
            if intent.approve_head:
                self.store.approve_head(repo, intent.pr, intent.head_sha, intent.requested_by)
            self._supersede(repo, intent.pr, intent.head_sha, f"superseded by head {intent.head_sha[:12]}")
            return self._launch(
                services, repo, intent.pr, intent.head_sha, intent.base_ref, None, intent, delivery_id
            )
        return self._rerun(intent, repo, services, delivery_id)

    def _refuse(self, intent: Refuse, repo: str, publisher: Publisher) -> str:
        """Answer a refusal once per person, pull request and window; record every one."""
        pr, _ = self._campaign_pr(intent.pr, intent.campaign_id)
        if pr is None:
            return f"refused, nowhere to answer: {intent.reason}"
        login, window = intent.requested_by, self.settings.refusal_window_seconds
        if self.store.answered_refusal(repo, pr, login, self.clock() - window) is not None:
            self.store.record_refusal(repo, pr, login, intent.permission, intent.reason, answered=False)
            return f"refused again, not answered (one answer per {window:g} s): {intent.reason}"
        fix = (
            f"ask a collaborator with at least {self.settings.min_permission!r} permission to add the "
            f"{self.settings.label!r} label or comment `{self.settings.command_word} rerun`"
        )
        publisher.reply(pr, "refused", reason=intent.reason, fix=fix, login=login)
        self.store.record_refusal(repo, pr, login, intent.permission, intent.reason, answered=True)
        return f"refused: {intent.reason}"

    def _cancel(self, intent: Cancel, repo: str, services: RepoServices) -> str:
        pr, campaign = self._campaign_pr(intent.pr, intent.campaign_id)
        targets: list[CampaignView] = []
        if intent.campaign_id:
            targets = [campaign] if campaign and campaign.state in (S.REQUESTED, S.DISPATCHED, S.RUNNING) else []
        elif pr is not None:
            targets = self.store.for_pr(repo, pr, live_only=True)
        for target in targets:
            self.driver.end(target, S.CANCELLED, intent.reason)
        if not targets and pr is not None and intent.trigger in ("comment", "check_run"):
            services.publisher.reply(
                pr,
                "refused",
                reason="there is no queued or running campaign to cancel",
                fix=f"`{self.settings.command_word} status` lists this pull request's campaigns",
            )
        return f"cancelled {[target.id for target in targets]}: {intent.reason}"

    def _rerun(self, intent: Rerun, repo: str, services: RepoServices, delivery_id: str) -> str:
        pr, original = self._campaign_pr(intent.pr, intent.campaign_id)
        if pr is None:
            return f"ignored: check run of unknown campaign {intent.campaign_id}"
        rows = (
            intent.rows if intent.rows is not None else (tuple(original.rows) if original and original.rows else None)
        )
        if original is not None and original.mode == "profile" and intent.campaign_id is not None:
            intent = dataclasses.replace(intent, profile=True)  # a profile check run's Rerun reruns the profile
        pull = self._pull(services.api, repo, pr)
        refusal = self._head_refusal(intent, repo, pull)
        if refusal is not None:
            reason, fix = refusal
            services.publisher.reply(pr, "refused", reason=reason, fix=fix)
            return f"invalid: {reason}"
        if pull.is_fork:
            self.store.approve_head(repo, pr, pull.head_sha, intent.requested_by)
        self._supersede(repo, pr, pull.head_sha, f"superseded by head {pull.head_sha[:12]}")
        return self._launch(services, repo, pr, pull.head_sha, pull.base_ref, rows, intent, delivery_id)

    def _head_refusal(self, intent: Rerun, repo: str, pull: PullInfo) -> tuple[str, str] | None:
        """(reason, fix) when the request cannot apply to the current head; the fix names its full SHA."""
        head, word = pull.head_sha, self.settings.command_word
        if pull.state != "open":
            return f"pull request #{pull.number} is {pull.state}", "reopen it first"
        approve = f"check that {head} is the commit you reviewed, then comment `{approval_command(word, head)}`"
        if intent.sha is not None:
            if not FULL_SHA.match(intent.sha):
                return f"`sha={intent.sha}` is not a full commit SHA (a head is named by all 40 hex digits)", approve
            if intent.sha != head:
                return f"the head moved from {intent.sha[:12]} to {head[:12]} since it was requested", approve
            return None
        if not pull.is_fork or intent.written_at is None:
            return None
        first_seen = self.store.head_first_seen(repo, pull.number, head)
        written = intent.written_at.timestamp()
        if first_seen is None or first_seen > written:
            seen = "never" if first_seen is None else _utc(first_seen)
            reason = (
                f"the head of this fork pull request is {head[:12]}, which the bot first saw at {seen}, after "
                f"the comment was written ({_utc(written)}): it may not be the commit that was reviewed"
            )
            return reason, approve
        return None

    def _supersede(self, repo: str, pr: int, head_sha: str, reason: str) -> None:
        for campaign in self.store.for_pr(repo, pr, live_only=True):
            if campaign.head_sha != head_sha:
                self.driver.end(campaign, S.SUPERSEDED, reason)

    def _launch(
        self,
        services: RepoServices,
        repo: str,
        pr: int,
        head_sha: str,
        base_ref: str,
        rows: tuple[str, ...] | None,
        request: Start | Rerun,
        delivery_id: str,
    ) -> str:
        """Pin base = merge base, read the config at the base branch's tip (never the head), record the campaign.

        A rerun replaces a live campaign of the same key; a label or push is answered with the campaign that
        already covers its key (live or completed).
        """
        resolution = resolve(services.api, head_sha, base_ref, self.settings.config_path)
        base_sha, source = resolution.base_sha, resolution.config_source
        rows_key = "!config-error"
        if resolution.config is not None:
            try:
                selected = resolution.config.select_rows(list(rows) if rows else None)
            except ConfigError as exc:
                fix = f"name rows defined in {source}, or omit `rows=` to run every row"
                services.publisher.reply(pr, "refused", reason=str(exc), fix=fix)
                return f"invalid: {exc}"
            rows_key = ",".join(sorted(row.id for row in selected))
            if isinstance(request, Rerun) and request.profile:
                rows_key = f"profile:{rows_key}"  # a profile never replaces nor answers for a campaign
            if isinstance(request, Rerun):
                live = self.store.live_for_key(repo, pr, head_sha, base_sha, rows_key)
                if live is not None:
                    by = f"@{request.requested_by} ({request.trigger})"
                    self.driver.end(live, S.SUPERSEDED, f"replaced by a rerun requested by {by}")
            else:
                existing = self.store.covering(repo, pr, head_sha, base_sha, rows_key)
                if existing is not None:
                    services.publisher.reply(pr, "duplicate", campaign=existing)
                    return f"duplicate of {existing.id}"
        try:
            campaign = self.store.create_campaign(
                NewCampaign(
                    repo=repo,
                    pr_number=pr,
                    head_sha=head_sha,
                    base_sha=base_sha,
                    relationship=resolution.relationship,
                    rows=list(rows) if rows else None,
                    rows_key=rows_key,
                    requested_by=request.requested_by,
                    trigger=request.trigger,
                    delivery_id=delivery_id,
                    backend=self.backend_name,
                    config_text=resolution.config_text,
                    config_source=source,
                    config_sha=resolution.config_sha,
                    mode="profile" if isinstance(request, Rerun) and request.profile else "campaign",
                )
            )
        except DuplicateCampaign as duplicate:
            services.publisher.reply(pr, "duplicate", campaign=duplicate.existing)
            return f"duplicate of {duplicate.existing.id}"
        campaign = self.driver.ensure_check_run(campaign, services.publisher)
        if resolution.error is not None:
            self.driver.end(campaign, S.ERRORED, resolution.error, published_state=CONFIG_ERROR)
            return f"config error: campaign {campaign.id}"
        self.driver.announce(campaign)
        return f"campaign {campaign.id} requested"
