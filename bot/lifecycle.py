"""Campaign lifecycle: drive each campaign `bot.modes.intake` recorded to exactly one ending (it is the service's
`bot.core.ports.CampaignDriver`; the server hands it to the intake).

requested -> dispatched -> running -> completed | cancelled | superseded | timed_out | errored. The store
refuses illegal transitions; this module decides which one to make and always persists it before the side
effect (start, kill, publish). Campaigns run one at a time per backend, oldest first. Publications of a
finished or ended campaign are queued in the same commit as the transition and drained until done, so a
result is published once even across restarts (the publisher is asked to be idempotent per campaign id
for the crash window between its call and our "done").
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Literal, Protocol, runtime_checkable

from pydantic import ValidationError

from bot.core.campaign import ACTIVE_STATES, LIVE_STATES, SIDE_RUN_CHECKS, Campaign, CampaignState
from bot.core.ports import Publisher, RepoApi, RepoServices
from bot.dispatch.base import Backend, RunHandle, StartError
from bot.github.errors import GitHubRetryLaterError, Interrupted
from bot.logs import log_context, log_failure
from bot.pages.details import Pages
from bot.settings import Settings
from bot.store.campaigns import Store
from bot.store.publications import Publication
from bot.store.tracking import main_points
from runners.progress import ProgressEvent
from runners.schema.bisect_rule import BisectReport
from runners.schema.report import CampaignReport
from runners.schema.verdicts import with_acceptances

log = logging.getLogger(__name__)

S = CampaignState
PUBLICATION_MAX_ATTEMPTS = 10


@runtime_checkable
class RunPages(Protocol):
    """A backend whose runs have a page of their own (the Actions backend: the workflow run)."""

    def run_url(self, campaign: Campaign) -> str | None: ...


class CampaignMetrics(Protocol):
    """What the service's metrics (`bot.metrics`) learn from the campaigns it drives."""

    def progress(self, campaign: Campaign, events: list[ProgressEvent]) -> None: ...

    def ended(self, campaign: Campaign, report: CampaignReport | None) -> None:
        """The campaign reached its ending, with its report when it completed."""
        ...


def about(campaign: Campaign) -> contextlib.AbstractContextManager[None]:
    """Every line logged inside names the campaign, its repository and pull request (`bot.logs`)."""
    return log_context(campaign_id=campaign.id, repo=campaign.repo, pr=campaign.pr_number)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


class Lifecycle:
    """A recorded campaign's decisions and effects until its ending; driven by one worker thread (never
    concurrently)."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        backend: Backend,
        services: Callable[[str], RepoServices[RepoApi]],
        *,
        clock: Callable[[], float] = time.time,
        metrics: CampaignMetrics | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.backend = backend
        self.services = services
        self.clock = clock
        self.metrics = metrics
        self.pages = Pages(store, settings)

    def details_url(self, campaign: Campaign) -> str | None:
        """Where a person follows the campaign, handed to every publisher step: its details page when pages are
        served (and it may have one), else its Actions run's page, else None (the publisher falls back to the
        artifact)."""
        url = self.pages.details_url(campaign)
        if url is None and isinstance(self.backend, RunPages):
            url = self.backend.run_url(campaign)
        return url

    def _record_check_run(self, campaign: Campaign, run_id: int | None) -> None:
        """Keep the id of the check run the publisher wrote, for the details pages' link (the publisher finds its
        check run by its external_id and never reads this back)."""
        if run_id is not None:
            self.store.set_check_run(campaign.id, run_id)

    # ------------------------------------------------------------------ endings

    def end(
        self, campaign: Campaign, state: CampaignState, reason: str, *, published_state: str | None = None
    ) -> Campaign:
        """Persist the ending (and its publication), then stop the process if there was one."""
        ended = self.store.transition(campaign.id, state, reason, publish="ended", published_state=published_state)
        if self.metrics is not None:
            self.metrics.ended(ended, None)
        self._stop_process(ended)
        return ended

    def _stop_process(self, campaign: Campaign) -> None:
        raw = self.store.handle(campaign.id)
        if raw is None:
            return
        self.backend.cancel(campaign, RunHandle.model_validate_json(raw))
        self.store.clear_handle(campaign.id)

    def _restart(self, campaign: Campaign, reason: str) -> None:
        """Back to the queue to start from scratch, unless it already used every attempt."""
        if campaign.attempt >= self.settings.max_attempts:
            self.end(campaign, S.ERRORED, f"{reason}; gave up after {campaign.attempt} attempts")
            return
        self.store.transition(campaign.id, S.REQUESTED, f"{reason}; restarting from scratch", handle=None)

    def _record_exit(
        self, campaign: Campaign, report: CampaignReport | None, error: str | None, note: str | None = None,
        bisect: BisectReport | None = None,
    ) -> None:
        if bisect is not None:
            self.store.transition(
                campaign.id,
                S.COMPLETED,
                f"bisect written: {bisect.result.last_line}",
                publish="finished",
                conclusion="success" if bisect.result.outcome == "culprit" else "neutral",
            )
        elif report is not None:
            verdicts = report.verdicts
            summary = verdicts.summary if verdicts else "report without verdicts"
            completed = self.store.transition(
                campaign.id,
                S.COMPLETED,
                f"report written: {summary}" + (f"; {note}" if note else ""),
                publish="finished",
                conclusion=verdicts.conclusion.value if verdicts else None,
                semantic=verdicts.semantic.value if verdicts else None,
                performance=verdicts.performance.value if verdicts else None,
            )
            if self.metrics is not None:
                self.metrics.ended(completed, report)
        else:
            self.end(campaign, S.ERRORED, error or "runner ended without a report")
        self.store.clear_handle(campaign.id)

    # ------------------------------------------------------------------ the worker's tick

    def recover(self) -> None:
        """After a restart: adopt live processes, restart lost ones, finish kills that were recorded."""
        for campaign in self.store.in_states(ACTIVE_STATES, self.backend.name):
            with about(campaign):
                self._recover(campaign)
        for campaign, raw in self.store.with_handles():
            if campaign.state not in ACTIVE_STATES:
                with about(campaign):
                    self.backend.cancel(campaign, RunHandle.model_validate_json(raw))
                    self.store.clear_handle(campaign.id)

    def _recover(self, campaign: Campaign) -> None:
        """Adopt the campaign's process, record how it ended, or restart it."""
        raw = self.store.handle(campaign.id)
        handle = RunHandle.model_validate_json(raw) if raw else self.backend.adopt(campaign)
        if handle is None:
            self._restart(campaign, "the service restarted before the process was started")
            return
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
        elif result.report is not None or result.bisect is not None:
            self._record_exit(self.store.require(campaign.id), result.report, None, result.note, result.bisect)
        else:
            self._restart(
                self.store.require(campaign.id),
                f"process {handle.ref} gone after a service restart ({_first_line(result.error or '')})",
            )

    def tick(self) -> None:
        """One pass: poll the running campaign, start the next, refresh queue positions, publish.

        Each step is isolated: a failing one (GitHub down, a broken handle) is logged and retried on the
        next tick without holding up the others.
        """
        for campaign in self.store.in_states(ACTIVE_STATES, self.backend.name):
            with about(campaign):
                self._guarded(f"poll {campaign.id}", functools.partial(self._poll, campaign))
        if not self.store.in_states(ACTIVE_STATES, self.backend.name):
            self._guarded("dispatch", self._dispatch_next)
        self._guarded("queue positions", self._refresh_positions)
        self._guarded("publications", self._publish_due)

    @staticmethod
    def _guarded(what: str, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as exc:
            log_failure(log, exc, "lifecycle step %r failed; retrying on the next tick", what)

    def _poll(self, campaign: Campaign) -> None:
        raw = self.store.handle(campaign.id)
        if raw is None:
            self._restart(campaign, "no process was recorded for it")
            return
        if campaign.deadline is not None and self.clock() >= campaign.deadline.timestamp():
            hours = self.settings.deadline_seconds / 3600
            self.end(campaign, S.TIMED_OUT, f"deadline passed ({hours:g} h after dispatch)")
            return
        result = self.backend.poll(campaign, RunHandle.model_validate_json(raw))
        if result.progress and self.metrics is not None:
            self.metrics.progress(campaign, result.progress)
        if result.progress:
            publisher = self.publisher_of(campaign)
            details_url = self.details_url(campaign)
            for event in result.progress:
                try:
                    publisher.progress(campaign, event, details_url=details_url)
                except Exception as exc:
                    log_failure(log, exc, "campaign %s: publishing progress failed", campaign.id)
        if result.running and result.waiting is not None and result.waiting != (campaign.scheduler_wait or ""):
            waiting = campaign.model_copy(update={"scheduler_wait": result.waiting or None})
            try:
                self.publisher_of(campaign).waiting(waiting, details_url=self.details_url(campaign))
            except Exception as exc:  # kept unstored, so the next poll that says the same publishes it again
                log_failure(log, exc, "campaign %s: publishing where it waits failed", campaign.id)
            else:
                self.store.set_scheduler_wait(campaign.id, result.waiting)
        if not result.running:
            self._record_exit(campaign, result.report, result.error, result.note, result.bisect)

    def _dispatch_next(self) -> None:
        queue = self.store.in_states(frozenset({S.REQUESTED}), self.backend.name)
        if not queue:
            return
        with about(queue[0]):
            self._dispatch(queue[0])

    def _dispatch(self, campaign: Campaign) -> None:
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
            self.end(campaign, S.ERRORED, f"could not start: {exc}")
            return
        self.store.transition(
            campaign.id,
            S.RUNNING,
            f"started ({self.backend.name} run {handle.ref})",
            handle=handle.model_dump_json(),
        )

    def _refresh_positions(self) -> None:
        """Tell the publisher about every live campaign whose queue position changed (0 = started)."""
        for campaign in self.store.in_states(LIVE_STATES, self.backend.name):
            self.announce(campaign)

    def announce(self, campaign: Campaign) -> None:
        with about(campaign):
            self._announce(campaign)

    def _announce(self, campaign: Campaign) -> None:
        """Publish a changed queue position (the publisher opens the check run with the first; a failure is
        retried on the next tick, since the position is recorded only once published)."""
        position = campaign.queue_position
        if position is None or self.store.published_position(campaign.id) == position:
            return
        try:
            run_id = self.publisher_of(campaign).queued(campaign, position, details_url=self.details_url(campaign))
        except Exception as exc:
            log_failure(log, exc, "campaign %s: publishing the queue position failed", campaign.id)
            return
        self.store.set_published_position(campaign.id, position)
        self._record_check_run(campaign, run_id)

    def _publish_due(self) -> None:
        for publication in self.store.due_publications(self.clock()):
            with about(self.store.require(publication.campaign_id)):
                try:
                    self._publish(publication)
                except Interrupted:
                    return  # the service is stopping: still due, published after the restart
                except Exception as exc:
                    attempts = publication.attempts + 1
                    log_failure(log, exc, "campaign %s: publishing %s failed", publication.campaign_id,
                                publication.kind)
                    # GitHub asked for a long wait (GitHubRetryLaterError): due then, and not held against it.
                    later = exc.not_before if isinstance(exc, GitHubRetryLaterError) else None
                    self.store.publication_failed(
                        publication.campaign_id,
                        publication.kind,
                        f"{type(exc).__name__}: {exc}",
                        max(self.clock() + min(5.0 * 2**attempts, 600.0), later or 0.0),
                        give_up=attempts >= PUBLICATION_MAX_ATTEMPTS and later is None,
                    )
                else:
                    self.store.publication_done(publication.campaign_id, publication.kind)

    def publisher_of(self, campaign: Campaign) -> Publisher:
        """Who reports the campaign: a side run (bisect, main-branch tracking) has check runs of its own and no
        place in a pull request's status comment (bot.publish.side_runs)."""
        services = self.services(campaign.repo)
        if campaign.purpose in SIDE_RUN_CHECKS:
            if services.side_runs is None:
                raise RuntimeError(f"campaign {campaign.id} is a {campaign.purpose} run and no side-run publisher "
                                   "is configured")
            return services.side_runs
        return services.publisher

    def _publish(self, publication: Publication) -> None:
        campaign = self.store.require(publication.campaign_id)
        publisher = self.publisher_of(campaign)
        details_url = self.details_url(campaign)
        if publication.kind == "finished" and campaign.purpose == "bisect":
            self._publish_bisect(campaign, details_url)
        elif publication.kind == "finished":
            if campaign.artifact_dir is None:
                raise RuntimeError(f"completed campaign {campaign.id} has no artifact directory")
            try:
                report = CampaignReport.model_validate_json((campaign.artifact_dir / "report.json").read_text())
            except (OSError, ValidationError) as exc:
                raise RuntimeError(f"report of completed campaign {campaign.id} unreadable: {exc}") from exc
            report = with_acceptances(
                report, self.store.acceptances(campaign.repo, campaign.pr_number, campaign.head_sha)
            )
            self.pages.finished(campaign, report)
            if campaign.purpose in ("main", "reference"):
                purpose: Literal["main", "reference"] = "reference" if campaign.purpose == "reference" else "main"
                self.store.record_main_points(main_points(campaign.repo, campaign.id, purpose, campaign.head_sha,
                                                          campaign.base_sha, report))
            if report.verdicts is not None and report.verdicts.conclusion.value != campaign.conclusion:
                self.store.set_conclusion(campaign.id, report.verdicts.conclusion.value)
            run_id = publisher.finished(
                campaign,
                report,
                campaign.artifact_dir,
                prior_attempts=self.store.prior_attempts(campaign.id),
                details_url=details_url,
            )
            self._record_check_run(campaign, run_id)
        else:
            run_id = publisher.ended(campaign, publication.state, publication.reason, details_url=details_url)
            self._record_check_run(campaign, run_id)

    def _publish_bisect(self, campaign: Campaign, details_url: str | None) -> None:
        services = self.services(campaign.repo)
        if campaign.artifact_dir is None or services.side_runs is None:
            raise RuntimeError(f"completed bisect {campaign.id} has no artifact directory or publisher")
        try:
            bisect = BisectReport.model_validate_json((campaign.artifact_dir / "bisect.json").read_bytes())
        except (OSError, ValidationError) as exc:
            raise RuntimeError(f"bisect.json of completed bisect {campaign.id} unreadable: {exc}") from exc
        run_id = services.side_runs.bisect_finished(campaign, bisect, campaign.artifact_dir, details_url=details_url)
        self._record_check_run(campaign, run_id)
