"""The campaign's check run: created once on the head SHA, then updated as the campaign moves.

Progress is the busiest writer, so it is written sparingly and promptly: a batch of progress events costs
at most one write (the newest event is what matters), a stage or row change is written at once, and within
one stage at most one update per `interval` seconds (pair counts and ETA).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.core.campaign import Campaign
from bot.github.gateway import CheckAction, CheckConclusion, CheckOutput
from bot.github.redact import RedactingGateway
from bot.publish.render import CheckRunContent, ProgressView
from runners.progress import ProgressEvent

RERUN = CheckAction(label="Rerun", description="Run the parity campaign again", identifier="rerun")
CANCEL = CheckAction(label="Cancel", description="Stop this parity campaign", identifier="cancel")


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
    """Creates and updates check runs; knows each campaign's check-run id and its progress pace."""

    def __init__(
        self, gateway: RedactingGateway, check_name: str, clock: Callable[[], float], interval: float
    ) -> None:
        self.gateway = gateway
        self.check_name = check_name
        self.clock = clock
        self.interval = interval
        self._ids: dict[str, int] = {}
        self._progress: dict[str, _Progress] = {}

    def id_of(self, campaign: Campaign) -> int | None:
        return campaign.check_run_id or self._ids.get(campaign.id)

    def open(self, campaign: Campaign, content: CheckRunContent) -> int:
        """Create the check run, queued, with Rerun and Cancel."""
        run_id = self.gateway.create_check_run(
            campaign.head_sha,
            check_name_of(self.check_name, campaign.check_kind),
            campaign.id,
            status="queued",
            output=_output(content),
            actions=[RERUN, CANCEL],
            details_url=campaign.details_url,
        )
        self._ids[campaign.id] = run_id
        return run_id

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
