"""Campaign lifecycle: turn intents into campaigns and drive each one to exactly one ending.

requested -> dispatched -> running -> completed | cancelled | superseded | timed_out | errored. The store
refuses illegal transitions; this module decides which one to make and always persists it before the side
effect (start, kill, publish). Campaigns run one at a time per backend, oldest first. Publications of a
finished or ended campaign are queued in the same commit as the transition and drained until done, so a
result is published once even across restarts (the publisher is asked to be idempotent per campaign id
for the crash window between its call and our "done").
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from bot.authz import cached_lookup
from bot.dispatch.base import Backend, RunHandle, StartError
from bot.events import PayloadError, parse_event
from bot.github import PullInfo
from bot.resolve import RevisionSource, resolve
from bot.settings import Settings
from bot.store import (
    ACTIVE_STATES,
    LIVE_STATES,
    CampaignState,
    CampaignView,
    Delivery,
    DuplicateCampaign,
    NewCampaign,
    Publication,
    Store,
)
from bot.triggers import (
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
from runners.config import ConfigError
from runners.progress import ProgressEvent
from runners.report import CampaignReport

log = logging.getLogger(__name__)

S = CampaignState
PUBLICATION_MAX_ATTEMPTS = 10
CONFIG_ERROR = "config_error"
"""The `state` given to `Publisher.ended` when the base revision's config is missing or invalid."""


class Publisher(Protocol):
    """What the lifecycle needs from `bot.publish.Publisher(gateway, settings)`."""

    def open_check_run(self, campaign: CampaignView) -> int:
        """Create the campaign's check run (external_id = campaign.id) and return its id."""
        ...

    def queued(self, campaign: CampaignView, position: int) -> int | None:
        """Show the queue position (0 = started); may return the sticky status comment id to persist."""
        ...

    def progress(self, campaign: CampaignView, event: ProgressEvent) -> None: ...

    def finished(self, campaign: CampaignView, report: CampaignReport, artifact_dir: Path) -> None: ...

    def ended(self, campaign: CampaignView, state: str, reason: str) -> None:
        """cancelled | superseded | timed_out | errored | config_error, with the recorded reason."""
        ...

    def reply(self, number: int, kind: str, **context: object) -> None:
        """Kinds and their context: refused(reason, fix), help(), status(campaigns), duplicate(campaign),
        unknown_command(line, reason)."""
        ...


class RepoApi(RevisionSource, Protocol):
    """The reads the lifecycle makes through `bot.github.GitHubGateway`."""

    def pull(self, number: int) -> PullInfo: ...

    def permission(self, login: str) -> str: ...


@dataclass(frozen=True)
class RepoServices:
    """Everything bound to one repository: its gateway, its publisher and the bot's login there."""

    api: RepoApi
    publisher: Publisher
    bot_login: str


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


class Lifecycle:
    """All campaign decisions and effects; driven by one worker thread (never concurrently)."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        backend: Backend,
        services: Callable[[str], RepoServices],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.settings = settings
        self.backend = backend
        self.services = services
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
        services = self.services(repo)
        context = TriggerContext(
            label=self.settings.label,
            command_word=self.settings.command_word,
            bot_login=services.bot_login,
            min_permission=self.settings.min_permission,
            permission_of=cached_lookup(services.api),
            is_approved=lambda pr, sha: self.store.is_approved(repo, pr, sha),
        )
        return self._act(decide(event, context), repo, services, delivery.id)

    def _campaign_pr(self, pr: int | None, campaign_id: str | None) -> tuple[int | None, CampaignView | None]:
        """A check run names its campaign; fork pull requests are missing from check_run.pull_requests."""
        campaign = self.store.get(campaign_id) if campaign_id else None
        return (pr if pr is not None else campaign.pr_number if campaign else None), campaign

    def _act(self, intent: Intent, repo: str, services: RepoServices, delivery_id: str) -> str:
        publisher = services.publisher
        if isinstance(intent, Ignore):
            return f"ignored: {intent.reason}"
        if isinstance(intent, Refuse):
            pr, _ = self._campaign_pr(intent.pr, intent.campaign_id)
            if pr is None:
                return f"refused, nowhere to answer: {intent.reason}"
            if self.store.refused_before(repo, pr, intent.requested_by):
                return f"refused again, not answered: {intent.reason}"
            fix = (
                f"ask a collaborator with at least {self.settings.min_permission!r} permission to add the "
                f"{self.settings.label!r} label or comment `{self.settings.command_word} rerun`"
            )
            publisher.reply(pr, "refused", reason=intent.reason, fix=fix, login=intent.requested_by)
            self.store.first_refusal(repo, pr, intent.requested_by, intent.reason)  # after the answer went out
            return f"refused: {intent.reason}"
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
                f"and comments `{self.settings.command_word} rerun sha={intent.head_sha[:12]}`"
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
                services,
                repo,
                intent.pr,
                intent.head_sha,
                intent.base_ref,
                None,
                intent.trigger,
                intent.requested_by,
                delivery_id,
            )
        return self._rerun(intent, repo, services, delivery_id)

    def _cancel(self, intent: Cancel, repo: str, services: RepoServices) -> str:
        pr, campaign = self._campaign_pr(intent.pr, intent.campaign_id)
        targets: list[CampaignView] = []
        if intent.campaign_id:
            targets = [campaign] if campaign and campaign.state in LIVE_STATES else []
        elif pr is not None:
            targets = self.store.for_pr(repo, pr, live_only=True)
        for target in targets:
            self._end(target, S.CANCELLED, intent.reason)
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
        pull = services.api.pull(pr)
        reply = services.publisher.reply
        if pull.state != "open":
            reply(pr, "refused", reason=f"pull request #{pr} is {pull.state}", fix="reopen it first")
            return f"invalid: pull request is {pull.state}"
        if intent.sha and not pull.head_sha.startswith(intent.sha):
            reason = f"the head moved from {intent.sha[:12]} to {pull.head_sha[:12]} since it was requested"
            rerun = f"{self.settings.command_word} rerun sha={pull.head_sha[:12]}"
            reply(pr, "refused", reason=reason, fix=f"review the new head, then comment `{rerun}`")
            return f"invalid: {reason}"
        if pull.is_fork:
            self.store.approve_head(repo, pr, pull.head_sha, intent.requested_by)
        self._supersede(repo, pr, pull.head_sha, f"superseded by head {pull.head_sha[:12]}")
        return self._launch(
            services,
            repo,
            pr,
            pull.head_sha,
            pull.base_ref,
            rows,
            intent.trigger,
            intent.requested_by,
            delivery_id,
        )

    def _supersede(self, repo: str, pr: int, head_sha: str, reason: str) -> None:
        for campaign in self.store.for_pr(repo, pr, live_only=True):
            if campaign.head_sha != head_sha:
                self._end(campaign, S.SUPERSEDED, reason)

    def _launch(
        self,
        services: RepoServices,
        repo: str,
        pr: int,
        head_sha: str,
        base_ref: str,
        rows: tuple[str, ...] | None,
        trigger: str,
        requested_by: str,
        delivery_id: str,
    ) -> str:
        """Pin base = merge base, read the config at the base (never the head), then record the campaign."""
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
                    requested_by=requested_by,
                    trigger=trigger,
                    delivery_id=delivery_id,
                    backend=self.backend.name,
                    config_text=resolution.config_text,
                    config_source=source,
                )
            )
        except DuplicateCampaign as duplicate:
            services.publisher.reply(pr, "duplicate", campaign=duplicate.existing)
            return f"duplicate of {duplicate.existing.id}"
        campaign = self._ensure_check_run(campaign, services.publisher)
        if resolution.error is not None:
            self._end(campaign, S.ERRORED, resolution.error, published_state=CONFIG_ERROR)
            return f"config error: campaign {campaign.id}"
        self._announce(campaign)
        return f"campaign {campaign.id} requested"

    # ------------------------------------------------------------------ endings

    def _end(
        self, campaign: CampaignView, state: CampaignState, reason: str, *, published_state: str | None = None
    ) -> CampaignView:
        """Persist the ending (and its publication), then stop the process if there was one."""
        ended = self.store.transition(campaign.id, state, reason, publish="ended", published_state=published_state)
        self._stop_process(ended)
        return ended

    def _stop_process(self, campaign: CampaignView) -> None:
        raw = self.store.handle(campaign.id)
        if raw is None:
            return
        self.backend.cancel(campaign, RunHandle.model_validate_json(raw))
        self.store.clear_handle(campaign.id)

    def _restart(self, campaign: CampaignView, reason: str) -> None:
        """Back to the queue to start from scratch, unless it already used every attempt."""
        if campaign.attempt >= self.settings.max_attempts:
            self._end(campaign, S.ERRORED, f"{reason}; gave up after {campaign.attempt} attempts")
            return
        self.store.transition(campaign.id, S.REQUESTED, f"{reason}; restarting from scratch", handle=None)

    def _record_exit(
        self, campaign: CampaignView, report: CampaignReport | None, error: str | None, note: str | None = None
    ) -> None:
        if report is not None:
            verdicts = report.verdicts
            summary = verdicts.summary if verdicts else "report without verdicts"
            self.store.transition(
                campaign.id,
                S.COMPLETED,
                f"report written: {summary}" + (f"; {note}" if note else ""),
                publish="finished",
                conclusion=verdicts.conclusion.value if verdicts else None,
            )
        else:
            self._end(campaign, S.ERRORED, error or "runner ended without a report")
        self.store.clear_handle(campaign.id)

    # ------------------------------------------------------------------ the worker's tick

    def recover(self) -> None:
        """After a restart: adopt live processes, restart lost ones, finish kills that were recorded."""
        for campaign in self.store.in_states(ACTIVE_STATES, self.backend.name):
            raw = self.store.handle(campaign.id)
            handle = RunHandle.model_validate_json(raw) if raw else self.backend.adopt(campaign)
            if handle is None:
                self._restart(campaign, "the service restarted before the process was started")
                continue
            if raw is None:
                self.store.transition(
                    campaign.id,
                    S.RUNNING,
                    f"adopted process {handle.ref} after a restart",
                    handle=handle.model_dump_json(),
                )
            result = self.backend.poll(campaign, handle)
            if result.running:
                log.info("campaign %s: adopted running process %s", campaign.id, handle.ref)
            elif result.report is not None:
                self._record_exit(self.store.require(campaign.id), result.report, None, result.note)
            else:
                self._restart(
                    self.store.require(campaign.id),
                    f"process {handle.ref} gone after a service restart ({_first_line(result.error or '')})",
                )
        for campaign, raw in self.store.with_handles():
            if campaign.state not in ACTIVE_STATES:
                self.backend.cancel(campaign, RunHandle.model_validate_json(raw))
                self.store.clear_handle(campaign.id)

    def tick(self) -> None:
        """One pass: poll the running campaign, start the next, refresh queue positions, publish.

        Each step is isolated: a failing one (GitHub down, a broken handle) is logged and retried on the
        next tick without holding up the others.
        """
        for campaign in self.store.in_states(ACTIVE_STATES, self.backend.name):
            self._guarded(f"poll {campaign.id}", functools.partial(self._poll, campaign))
        if not self.store.in_states(ACTIVE_STATES, self.backend.name):
            self._guarded("dispatch", self._dispatch_next)
        self._guarded("queue positions", self._refresh_positions)
        self._guarded("publications", self._publish_due)

    @staticmethod
    def _guarded(what: str, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception:
            log.exception("lifecycle step %r failed; retrying on the next tick", what)

    def _poll(self, campaign: CampaignView) -> None:
        raw = self.store.handle(campaign.id)
        if raw is None:
            self._restart(campaign, "no process was recorded for it")
            return
        if campaign.deadline is not None and self.clock() >= campaign.deadline.timestamp():
            hours = self.settings.deadline_seconds / 3600
            self._end(campaign, S.TIMED_OUT, f"deadline passed ({hours:g} h after dispatch)")
            return
        result = self.backend.poll(campaign, RunHandle.model_validate_json(raw))
        if result.progress:
            publisher = self.services(campaign.repo).publisher
            for event in result.progress:
                try:
                    publisher.progress(campaign, event)
                except Exception:
                    log.exception("campaign %s: publishing progress failed", campaign.id)
        if not result.running:
            self._record_exit(campaign, result.report, result.error, result.note)

    def _dispatch_next(self) -> None:
        queue = self.store.in_states(frozenset({S.REQUESTED}), self.backend.name)
        if not queue:
            return
        campaign = queue[0]
        attempt = campaign.attempt + 1
        out = (self.settings.work_dir / campaign.id / f"attempt-{attempt}" / "out").resolve()
        deadline = campaign.deadline.timestamp() if campaign.deadline else self.clock() + self.settings.deadline_seconds
        campaign = self.store.transition(
            campaign.id,
            S.DISPATCHED,
            f"dispatched to the {self.backend.name} backend (attempt {attempt})",
            attempt=attempt,
            artifact_dir=str(out),
            deadline=deadline,
        )
        try:
            handle = self.backend.start(campaign, self.store.config_text(campaign.id))
        except StartError as exc:
            self._end(campaign, S.ERRORED, f"could not start: {exc}")
            return
        self.store.transition(
            campaign.id,
            S.RUNNING,
            f"started ({self.backend.name} run {handle.ref})",
            handle=handle.model_dump_json(),
        )

    def _ensure_check_run(self, campaign: CampaignView, publisher: Publisher) -> CampaignView:
        """Every campaign gets its check run (opening is retried on later ticks if GitHub was down)."""
        if campaign.check_run_id is not None:
            return campaign
        try:
            self.store.set_check_run(campaign.id, publisher.open_check_run(campaign))
        except Exception:
            log.exception("campaign %s: opening the check run failed; retrying later", campaign.id)
        return self.store.require(campaign.id)

    def _refresh_positions(self) -> None:
        """Tell the publisher about every live campaign whose queue position changed (0 = started)."""
        for campaign in self.store.in_states(LIVE_STATES, self.backend.name):
            self._announce(campaign)

    def _announce(self, campaign: CampaignView) -> None:
        publisher = self.services(campaign.repo).publisher
        campaign = self._ensure_check_run(campaign, publisher)
        position = campaign.queue_position
        if position is None or campaign.check_run_id is None:
            return
        if self.store.published_position(campaign.id) == position:
            return
        try:
            comment_id = publisher.queued(campaign, position)
        except Exception:
            log.exception("campaign %s: publishing the queue position failed", campaign.id)
            return
        self.store.set_published_position(campaign.id, position)
        if comment_id is not None:
            self.store.set_status_comment(campaign.id, comment_id)

    def _publish_due(self) -> None:
        for publication in self.store.due_publications(self.clock()):
            try:
                self._publish(publication)
            except Exception as exc:
                attempts = publication.attempts + 1
                log.exception("campaign %s: publishing %s failed", publication.campaign_id, publication.kind)
                self.store.publication_failed(
                    publication.campaign_id,
                    publication.kind,
                    f"{type(exc).__name__}: {exc}",
                    self.clock() + min(5.0 * 2**attempts, 600.0),
                    give_up=attempts >= PUBLICATION_MAX_ATTEMPTS,
                )
            else:
                self.store.publication_done(publication.campaign_id, publication.kind)

    def _publish(self, publication: Publication) -> None:
        campaign = self.store.require(publication.campaign_id)
        publisher = self.services(campaign.repo).publisher
        campaign = self._ensure_check_run(campaign, publisher)
        if publication.kind == "finished":
            if campaign.artifact_dir is None:
                raise RuntimeError(f"completed campaign {campaign.id} has no artifact directory")
            try:
                report = CampaignReport.model_validate_json((campaign.artifact_dir / "report.json").read_text())
            except (OSError, ValidationError) as exc:
                raise RuntimeError(f"report of completed campaign {campaign.id} unreadable: {exc}") from exc
            publisher.finished(campaign, report, campaign.artifact_dir)
        else:
            publisher.ended(campaign, publication.state, publication.reason)
