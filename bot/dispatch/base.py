"""The one interface every dispatch backend implements: start a campaign, poll it, cancel it.

The lifecycle persists each transition before calling a backend, and persists the returned `RunHandle`
right after `start`, so a restarted service can poll or kill a campaign it did not start itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from bot.core.campaign import Campaign
from runners.progress import ProgressEvent
from runners.schema.bisect_rule import BisectReport
from runners.schema.report import CampaignReport


class RunHandle(BaseModel):
    """Where a started campaign runs, as JSON in the store: enough to find it again after a restart."""

    model_config = ConfigDict(frozen=True)

    backend: str
    ref: str
    """The backend's id of the run (a process id for `local`)."""
    token: str | None = None
    """Distinguishes this run from a later one that reuses `ref` (a process start time for `local`)."""
    out_dir: str
    progress_path: str | None = None


@dataclass(frozen=True)
class PollResult:
    """A snapshot: still running (with new progress), or ended with a validated report or an error."""

    running: bool
    progress: list[ProgressEvent] = field(default_factory=list)
    report: CampaignReport | None = None
    error: str | None = None
    """Why the run ended without a usable report (exit code, missing or invalid report.json)."""
    exit_code: int | None = None
    """None while running, or when the run was adopted after a restart and its status is unknowable."""
    note: str | None = None
    """What the backend did on its own along the way (e.g. retried a row), recorded in the reason of the
    completed transition (an error already says it in `error`)."""
    waiting: str | None = None
    """Where the run waits in its scheduler's queue (Slurm's reason and place), kept with the campaign for the
    status comment and `/parity status`; '' once nothing waits, None when this poll brings no news."""
    bisect: BisectReport | None = None
    """A `/parity bisect` run's validated bisect.json (its `report` is None: a bisect is many campaigns)."""


class StartError(RuntimeError):
    """The campaign could not be started (missing commits, runner not found); the message says why."""


class Backend(Protocol):
    name: str

    def start(self, campaign: Campaign, config_text: str) -> RunHandle:
        """Start the campaign with the base revision's config text; its report lands in
        `campaign.artifact_dir`, the backend's own files (config, log, progress) next to that directory."""
        ...

    def adopt(self, campaign: Campaign) -> RunHandle | None:
        """A run started for this attempt whose handle the store never got (the service died in between)."""
        ...

    def poll(self, campaign: Campaign, handle: RunHandle) -> PollResult:
        """Progress since the last poll; once ended, the validated report or why there is none."""
        ...

    def cancel(self, campaign: Campaign, handle: RunHandle) -> None:
        """Stop the run and everything it started; returns once it is gone."""
        ...
