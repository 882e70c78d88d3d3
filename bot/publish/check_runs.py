"""The campaign's check run: created once on the head SHA, then updated as the campaign moves.

`CheckRunWriter` is its one owner. A check run is named by its `external_id`, the campaign id: before creating
one the writer looks for it there (a restarted service, a retried publication, Actions-only mode's publish job
after its event), so no path and no retry ever makes a second; nothing else keeps or decides its id. When one
is opened is decided here too (`for_queue`, `for_ending`): the service's publishers open it as soon as the
campaign is queued; Actions-only mode's do not (`open_when_queued=False`), since nothing would end a check run
left queued by a workflow run that failed before its publish job. Either opens one to publish a result or a
failure, never just to say a campaign was cancelled or superseded.

Progress is the busiest writer, so it is written sparingly and promptly: a batch of progress events costs
at most one write (the newest event is what matters), a stage or row change is written at once, and within
one stage at most one update per `interval` seconds (pair counts and ETA).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.core.campaign import Campaign
from bot.github.models import CheckAction, CheckConclusion, CheckOutput
from bot.github.redact import RedactingGateway
from bot.publish.views import CheckRunContent, ProgressView
from runners.progress import ProgressEvent

RERUN = CheckAction(label="Rerun", description="Run the parity campaign again", identifier="rerun")
CANCEL = CheckAction(label="Cancel", description="Stop this parity campaign", identifier="cancel")
RUN = CheckAction(label="Run kv-parity", description="Measure this head (maintainers)", identifier="rerun")
"""The button of a head that needs a campaign under `[checks] watched_paths` (a rerun of exactly that head)."""


FAILED_ENDINGS = frozenset({"timed_out", "errored", "config_error"})
"""Endings that open a check run where there is none: a failure must be seen on the head, where a required check
waits; a cancelled or superseded campaign without one needs none."""
NAMED_KINDS = ("profile", "bisect", "main", "reference")
"""Campaign kinds with a check run of their own name (`Campaign.check_kind`)."""


def check_name_of(campaign_check: str, kind: str) -> str:
    """The check run's name for a campaign of this kind (its mode, or the purpose of a side run). A profile has
    its own name (`kv-parity / profile`): a repository may require the campaign's check, and GitHub matches
    required checks by name, so a profile (which never gates performance) must never complete, replace or stand
    in for it; nor may a bisect (`/ bisect`) or main-branch tracking (`/ main`, `/ reference`)."""
    return f"{campaign_check} / {kind}" if kind in NAMED_KINDS else campaign_check


@dataclass
class _Progress:
    """Rate-limit and ETA state of one campaign's progress updates."""

    key: tuple[str, str | None]
    stage_started: float
    done_at_start: int
    last_sent: float | None


def _output(content: CheckRunContent) -> CheckOutput:
    return CheckOutput(title=content.title, summary=content.summary, text=content.text or None)


class CheckRunWriter:
    """Finds, creates and updates check runs; the one keeper of each campaign's check-run id and its progress
    pace."""

    def __init__(
        self,
        gateway: RedactingGateway,
        check_name: str,
        clock: Callable[[], float],
        interval: float,
        *,
        open_when_queued: bool = True,
    ) -> None:
        self.gateway = gateway
        self.check_name = check_name
        self.clock = clock
        self.interval = interval
        self.open_when_queued = open_when_queued
        self._ids: dict[str, int] = {}
        self._progress: dict[str, _Progress] = {}

    def known(self, campaign: Campaign) -> int | None:
        """The id this writer found or made for the campaign, without asking GitHub."""
        return self._ids.get(campaign.id)

    def find(self, campaign: Campaign) -> int | None:
        """The campaign's check run: known here, else looked up on its head by its external_id."""
        if campaign.id not in self._ids:
            name = check_name_of(self.check_name, campaign.check_kind)
            found = self.gateway.check_run_of(campaign.head_sha, name, campaign.id)
            if found is None:
                return None
            self._ids[campaign.id] = found
        return self._ids[campaign.id]

    def ensure(
        self, campaign: Campaign, opening: Callable[[], CheckRunContent], details_url: str | None
    ) -> int:
        """The campaign's check run, created queued (with Rerun and Cancel, showing `opening`) only when `find`
        finds none."""
        found = self.find(campaign)
        if found is not None:
            return found
        run_id = self.gateway.create_check_run(
            campaign.head_sha,
            check_name_of(self.check_name, campaign.check_kind),
            campaign.id,
            status="queued",
            output=_output(opening()),
            actions=[RERUN, CANCEL],
            details_url=details_url,
        )
        self._ids[campaign.id] = run_id
        return run_id

    def for_queue(
        self, campaign: Campaign, opening: Callable[[], CheckRunContent], details_url: str | None
    ) -> int | None:
        """The check run a queued or started campaign shows on: opened now (the service), or only one this writer
        already knows (Actions-only mode)."""
        if self.open_when_queued:
            return self.ensure(campaign, opening, details_url)
        return self.known(campaign)

    def for_ending(
        self, campaign: Campaign, state: str, opening: Callable[[], CheckRunContent], details_url: str | None
    ) -> int | None:
        """The check run an ending without a report completes: one is opened for a failure (`FAILED_ENDINGS`); a
        cancelled or superseded campaign completes the one it has and gets none otherwise (its status comment
        says it ended). Actions-only mode completes only a run it made itself: its publish job may already have
        completed the campaign's run with a verdict, which an ending must not overwrite."""
        self.forget_progress(campaign)
        if state in FAILED_ENDINGS:
            return self.ensure(campaign, opening, details_url)
        return self.find(campaign) if self.open_when_queued else self.known(campaign)

    def running(self, run_id: int, content: CheckRunContent, started: bool, details_url: str | None) -> None:
        self.gateway.update_check_run(
            run_id,
            status="in_progress" if started else "queued",
            output=_output(content),
            actions=[RERUN, CANCEL],
            details_url=details_url,
        )

    def due(self, campaign: Campaign, events: Sequence[ProgressEvent]) -> ProgressView | None:
        """The view to write for this batch of events, or None when the rate limit holds it back.

        Every event updates the stage clock (so the ETA stays right), but only the newest is shown.
        """
        if not events:
            return None
        now = self.clock()
        state = self._progress.get(campaign.id)
        changed = False
        for event in events:
            key = (event.stage, event.row)
            if state is None or state.key != key:
                state = _Progress(key=key, stage_started=now, done_at_start=event.done or 0, last_sent=None)
                self._progress[campaign.id] = state
                changed = True
        assert state is not None
        if not changed and state.last_sent is not None and now - state.last_sent < self.interval:
            return None
        state.last_sent = now
        newest = events[-1]
        return ProgressView.of(newest, self._eta(state, newest, now))

    @staticmethod
    def _eta(state: _Progress, event: ProgressEvent, now: float) -> float | None:
        """Remaining time of this stage from its own pace so far; None until there is a pace."""
        if event.done is None or not event.total:
            return None
        progressed = event.done - state.done_at_start
        if progressed <= 0:
            return None
        return (now - state.stage_started) / progressed * (event.total - event.done)

    def complete(
        self,
        campaign: Campaign,
        run_id: int,
        conclusion: CheckConclusion,
        content: CheckRunContent,
        details_url: str | None,
    ) -> None:
        """Complete the check run (idempotent: completing twice rewrites the same output)."""
        self._progress.pop(campaign.id, None)
        self.gateway.update_check_run(
            run_id,
            status="completed",
            conclusion=conclusion,
            output=_output(content),
            actions=[RERUN],
            details_url=details_url,
        )

    def forget_progress(self, campaign: Campaign) -> None:
        """The campaign ended without completing here (or its check run is completed elsewhere)."""
        self._progress.pop(campaign.id, None)
