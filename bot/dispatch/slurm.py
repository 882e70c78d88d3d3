"""Slurm backend: the campaign as the split pipeline's jobs on a Slurm cluster (`runners.pipeline.slurm` does the work).

The service's side: make sure both revisions are in its clone (`bot.dispatch.clone`, as the local backend does),
hand the campaign to `SlurmCampaign`, and translate its state into the lifecycle's `RunHandle` / `PollResult`.
Everything a restarted service needs is in the attempt's `slurm.json` (job ids, attempts, last states) plus the
handle in SQLite, so `poll` works on a campaign this process never started. Slurm being unreachable for a while is
not the campaign's failure: the poll says so and the campaign's deadline bounds the wait.
"""

from __future__ import annotations

import time
from pathlib import Path

from bot.core.campaign import Campaign
from bot.dispatch.base import PollResult, RunHandle, StartError
from bot.dispatch.clone import ServiceClone, require_sandbox
from runners.exec.sandbox import SandboxKind
from runners.pipeline.slurm import STATE_FILE, CampaignSpec, SlurmCampaign, SlurmOptions, SlurmRun, load_run
from runners.pipeline.slurm_client import SlurmError
from runners.progress import ProgressEvent
from runners.schema.config import ConfigError
from runners.stages.revisions import RevisionError


class SlurmBackend:
    """Campaigns from the service's clone, as the local backend's are (commits fetched by SHA, the sandbox checked
    at start), run as Slurm jobs."""

    name = "slurm"

    def __init__(self, repo: Path, *, options: SlurmOptions, fetch_remote: str = "origin",
                 sandbox: SandboxKind = "bwrap", cancel_grace_seconds: float = 10.0,
                 build_cache: Path | None = None) -> None:
        require_sandbox(sandbox)
        self.clone = ServiceClone(repo, fetch_remote)
        self.sandbox: SandboxKind = sandbox
        self.cancel_grace_seconds = cancel_grace_seconds
        self.build_cache = build_cache
        self.options = options
        self._campaigns: dict[str, SlurmCampaign] = {}
        self._checked: dict[str, float] = {}

    def _campaign(self, work: Path) -> SlurmCampaign:
        key = str(work)
        if key not in self._campaigns:
            self._campaigns[key] = SlurmCampaign(work, self.options, self.sandbox, build_cache=self.build_cache)
        return self._campaigns[key]

    def _handle(self, campaign: Campaign, run: SlurmRun) -> RunHandle:
        assert campaign.artifact_dir is not None
        return RunHandle(backend=self.name, ref=run.jobs[0].job_id if run.jobs else campaign.id,
                         token=str(run.submitted_unix), out_dir=str(campaign.artifact_dir))

    def start(self, campaign: Campaign, config_text: str) -> RunHandle:
        """Plan at the base branch's tip (as the Actions plan job does) and submit the whole pipeline."""
        artifact_dir = self.clone.pinned(campaign)
        spec = CampaignSpec(campaign_id=campaign.id, repo=self.clone.repo.resolve(), base_sha=campaign.base_sha,
                            head_sha=campaign.head_sha, config_ref=campaign.config_sha or campaign.base_sha,
                            rows=campaign.rows, mode=campaign.mode)
        try:
            run = self._campaign(artifact_dir.parent).submit(spec, artifact_dir)
        except (SlurmError, ConfigError, RevisionError) as exc:
            raise StartError(f"cannot submit campaign {campaign.id} to Slurm: {exc}") from exc
        return self._handle(campaign, run)

    def adopt(self, campaign: Campaign) -> RunHandle | None:
        """The submission of this attempt whose handle the store never got (the service died in between)."""
        if campaign.artifact_dir is None:
            return None
        run = load_run(campaign.artifact_dir.parent)
        if run is None or run.campaign_id != campaign.id:
            return None
        return self._handle(campaign, run)

    def poll(self, campaign: Campaign, handle: RunHandle) -> PollResult:
        now = time.monotonic()
        if now - self._checked.get(campaign.id, float("-inf")) < self.options.poll_seconds:
            return PollResult(running=True)
        self._checked[campaign.id] = now
        work = Path(handle.out_dir).parent
        if load_run(work) is None:
            return PollResult(running=False, error=f"no readable Slurm state ({work / STATE_FILE}) for this campaign")
        try:
            outcome = self._campaign(work).poll()
        except SlurmError as exc:
            event = ProgressEvent(stage="slurm", detail=f"Slurm did not answer: {exc}", unix=time.time())
            return PollResult(running=True, progress=[event])
        if not outcome.running:
            self._checked.pop(campaign.id, None)
        return PollResult(running=outcome.running, progress=outcome.progress, report=outcome.report,
                          error=outcome.error, note=outcome.note, waiting=outcome.waiting)

    def cancel(self, campaign: Campaign, handle: RunHandle) -> None:
        """scancel every job of the campaign; returns once squeue lists none of them."""
        self._checked.pop(campaign.id, None)
        self._campaign(Path(handle.out_dir).parent).cancel(wait_seconds=self.cancel_grace_seconds + 60)
