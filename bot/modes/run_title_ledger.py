"""Actions-only mode's ledger: the live campaign workflow runs, read from their titles (there is no database
between events, so the ledger is what lasts in GitHub itself).

- A pull request's campaigns are its live campaign workflow runs, recognised by their display title (the
  campaign workflow's `run-name`, `bot.dispatch.campaign_workflow.RUN_NAME`). They answer `status`, are cancelled by
  `cancel`, the label's removal or closing, are superseded by a newer head, and make a second request for the
  same head, rows and mode a duplicate; a new request of the same head and mode with other rows replaces the
  live one (a campaign and a profile of the same head run side by side: their own checks and concurrency groups).
- Fork approval is the authorised label (the head its delivery names) or `rerun sha=<full SHA>`: the campaign
  is dispatched with exactly that SHA, and a push to a fork pull request never dispatches. A plain `rerun` on a
  fork approves nothing: without a record of the heads nothing tells whether the head of the moment is the one
  the maintainer reviewed (the author may have pushed between the review and the event), so it is answered with
  the `sha=` command that names the current head.
- Refusals are answered every time (there is no record of having answered before).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from bot.core.accept_comments import read_back
from bot.core.campaign import Campaign, CampaignRequest, CampaignState
from bot.core.heads import HeadSeen
from bot.core.ledger import FinishedCampaign, HeadConclusion
from bot.core.ports import Publisher, RepoApi
from bot.core.repo_values import BotIdentity, CommentInfo
from bot.dispatch.artifact_zip import MAX_ARTIFACT_BYTES, ArtifactError, extract_artifact
from bot.dispatch.campaign_workflow import LIVE_STATUSES, REPORT_ARTIFACT, RunTitle, dispatch_inputs, parse_run_title
from bot.github.errors import ArtifactTooLargeError
from bot.github.models import ACTIONS_BOT, WorkflowRunInfo
from bot.publish.report_guard import DispatchedCampaign, ReportMismatch, check_report_matches
from bot.settings import Settings
from runners.schema.report import Acceptance, CampaignReport
from runners.schema.verdicts import with_acceptances, with_verdicts
from runners.verify import verify_report

ACTIONS_APP_SLUG = "github-actions"
"""The App behind every check run written with GITHUB_TOKEN: the only author of a kv-parity check run this mode
carries forward to a merge group."""


class EventApi(RepoApi, Protocol):
    """The reads of the service plus the Actions calls this mode makes (`bot.github.gateway.GitHubGateway`)."""

    def dispatch_workflow(self, workflow_file: str, ref: str, inputs: Mapping[str, str]) -> None: ...

    def workflow_runs(self, workflow_file: str, status: str) -> list[WorkflowRunInfo]: ...

    def cancel_workflow_run(self, run_id: int) -> bool: ...

    def identity(self) -> BotIdentity: ...

    def list_comments(self, number: int) -> list[CommentInfo]: ...

    def download_artifact(self, run_id: int, name: str, max_bytes: int | None = None) -> bytes | None: ...


class RunTitleLedger:
    """Actions-only mode's ledger: the live campaign workflow runs, read from their titles once per event.

    It keeps no approvals, heads or refusals (the methods that would record them record nothing), and only
    live runs exist for it: a completed campaign answers nothing, so asking again runs again.
    """

    records_heads = False
    runs_bisect = False
    """A bisect is many campaigns on one measuring machine; the campaign workflow runs one."""

    def __init__(
        self,
        api: EventApi,
        publisher: Publisher,
        settings: Settings,
        repo: str,
        *,
        clock: Callable[[], float],
        bot_id: int = ACTIONS_BOT.id,
    ) -> None:
        self.api, self.publisher, self.settings, self.repo, self.clock = api, publisher, settings, repo, clock
        self.bot_id = bot_id
        """Whose comments carry the acceptance markers (the bot's own, by numeric id)."""
        self._live: dict[str, tuple[WorkflowRunInfo, RunTitle]] | None = None

    def _runs(self) -> dict[str, tuple[WorkflowRunInfo, RunTitle]]:
        """Campaign id -> its live run, oldest first; read once per event, then kept as this event changes it."""
        if self._live is None:
            found: dict[int, tuple[WorkflowRunInfo, RunTitle]] = {}
            for status in LIVE_STATUSES:
                for run in self.api.workflow_runs(self.settings.actions_workflow, status):
                    title = parse_run_title(run.display_title)
                    if title is not None:
                        found[run.id] = (run, title)
            ordered = sorted(found.values(), key=lambda item: (item[0].created_at, item[0].id))
            self._live = {title.campaign_id: (run, title) for run, title in ordered}
        return self._live

    def _run_view(self, run: WorkflowRunInfo, title: RunTitle) -> Campaign:
        """The campaign a live run's title names; the title does not carry the base, which no reply shows."""
        running = run.status == "in_progress"
        return Campaign(
            id=title.campaign_id, repo=self.repo, pr_number=title.pr_number, head_sha=title.head_sha, base_sha="",
            relationship="unknown", rows=title.rows, requested_by=f"run {run.id}", trigger="workflow_dispatch",
            config_source="", mode=title.mode, purpose=title.purpose,
            state=CampaignState.RUNNING if running else CampaignState.REQUESTED, created_at=run.created_at,
            queue_position=0 if running else None,
        )

    def failed_campaign(self, pr: int, head_sha: str) -> Campaign | None:
        return None

    def config_text(self, campaign: Campaign) -> str:
        raise LookupError("Actions-only mode keeps no config of a past campaign")

    def campaign(self, campaign_id: str) -> Campaign | None:
        found = self._runs().get(campaign_id)
        return self._run_view(*found) if found else None

    def campaigns(self, pr: int) -> list[Campaign]:
        return self.live(pr)

    def live(self, pr: int) -> list[Campaign]:
        return [self._run_view(run, title) for run, title in self._runs().values() if title.pr_number == pr]

    def end(
        self, campaign: Campaign, state: CampaignState, reason: str, *, published_state: str | None = None
    ) -> None:
        """Cancel its run (a campaign ended before dispatch has none), then say so in the status comment and
        the check run."""
        found = self._runs().pop(campaign.id, None)
        if found is not None:
            self.api.cancel_workflow_run(found[0].id)
        self.publisher.ended(campaign, published_state or state, reason)

    def _same_head_and_mode(self, request: CampaignRequest) -> list[tuple[Campaign, RunTitle]]:
        return [
            (self._run_view(run, title), title)
            for run, title in self._runs().values()
            if (title.pr_number, title.head_sha, title.mode) == (request.pr_number, request.head_sha, request.mode)
        ]

    def covering(self, request: CampaignRequest) -> Campaign | None:
        """A live run of the same head, rows and mode, whichever way it was asked for."""
        wanted = sorted(request.rows or [])
        for view, title in self._same_head_and_mode(request):
            if sorted(title.rows or []) == wanted:
                return view
        return None

    def replaced(self, request: CampaignRequest) -> list[Campaign]:
        """A live run of the same head and mode with other rows: one run per mode shows on the pull request."""
        return [view for view, _ in self._same_head_and_mode(request)]

    def create(self, request: CampaignRequest) -> Campaign:
        return Campaign.recorded(
            request, id=f"kvp-{uuid.uuid4().hex[:12]}", repo=self.repo, state=CampaignState.RUNNING,
            created_at=datetime.fromtimestamp(self.clock(), UTC), queue_position=0,
            reason=f"requested by @{request.requested_by} ({request.trigger})",
        )

    def launch(self, campaign: Campaign) -> str:
        """Dispatch exactly this head with `config_ref` = the base branch's tip (the workflow's plan job reads
        the config there, never at the head); `mode=profile` attributes instead of gating performance."""
        inputs = dispatch_inputs(
            campaign.id,
            campaign.base_sha,
            campaign.head_sha,
            campaign.rows,
            campaign.pr_number,
            config_ref=campaign.config_sha,
            mode=campaign.mode,
            purpose=campaign.purpose,
        )
        self.api.dispatch_workflow(self.settings.actions_workflow, self.settings.actions_ref, inputs)
        self.publisher.queued(campaign, 0)
        against = "merge base" if campaign.purpose == "pull_request" else (
            "first parent" if campaign.purpose == "main" else "reference")
        return (
            f"dispatched campaign {campaign.id}: head {campaign.head_sha} against {against} {campaign.base_sha}, "
            f"config at {campaign.config_sha}"
        )

    def queued_main(self) -> list[Campaign]:
        """Main-branch runs not yet started (`[main] queue = "newest"` cancels them)."""
        return [self._run_view(run, title) for run, title in self._runs().values()
                if title.purpose == "main" and run.status != "in_progress"]

    def pushes_since_reference(self) -> int | None:
        """None: no record of past pushes here; `kv-parity track` on a schedule runs the reference campaign."""
        return None

    def approve(self, pr: int, head_sha: str, login: str) -> None:
        """Nothing to record: the authorised request that approves a head also dispatches it."""

    def is_approved(self, pr: int, head_sha: str) -> bool:
        return False

    def see_head(self, pr: int, head_sha: str, at: float, source: str) -> None:
        """Nothing to record (`records_heads` is False)."""

    def heads_since(self, pr: int, at: float) -> list[HeadSeen]:
        return []

    def answered_refusal(self, pr: int, login: str, since: float) -> str | None:
        return None

    def record_refusal(self, pr: int, login: str, permission: str, reason: str, *, answered: bool) -> None:
        """Nothing to record: every refusal is answered."""

    # ------------------------------------------------------------------ acceptances and the merge queue

    def _finished_runs(self, pr: int, head_sha: str) -> list[tuple[WorkflowRunInfo, RunTitle]]:
        """The completed campaign runs (not profiles) of this head, newest first."""
        found = []
        for run in self.api.workflow_runs(self.settings.actions_workflow, "completed"):
            title = parse_run_title(run.display_title)
            if title is not None and (title.pr_number, title.head_sha, title.mode) == (pr, head_sha, "campaign"):
                found.append((run, title))
        return sorted(found, key=lambda item: (item[0].created_at, item[0].id), reverse=True)

    def _report_of(self, run: WorkflowRunInfo, title: RunTitle) -> CampaignReport | None:
        """The run's report artifact, only if it is the run's own campaign and verifies against itself."""
        try:
            data = self.api.download_artifact(run.id, REPORT_ARTIFACT, max_bytes=MAX_ARTIFACT_BYTES)
        except ArtifactTooLargeError:  # a run's oversized upload is that run's, never the reason to stop reading
            return None
        if data is None:
            return None
        scratch = Path(tempfile.mkdtemp(prefix="kv-parity-report-"))
        try:
            extract_artifact(data, scratch / "report")
            report = CampaignReport.model_validate_json((scratch / "report" / "report.json").read_bytes())
        except (ArtifactError, OSError, ValueError):
            return None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        base = next((r.sha for r in report.revisions if r.arm == "baseline"), "")
        expected = DispatchedCampaign(
            campaign_id=title.campaign_id, head_sha=title.head_sha, base_sha=base or "?", rows=title.rows,
            pr_number=title.pr_number, mode=title.mode,
        )
        try:
            check_report_matches(report, expected)
        except ReportMismatch:
            return None
        return with_verdicts(report) if not verify_report(report) else None

    def latest_finished(self, pr: int, head_sha: str) -> FinishedCampaign | None:
        """The newest completed campaign run of the head with a report artifact that is its own."""
        for run, title in self._finished_runs(pr, head_sha):
            report = self._report_of(run, title)
            if report is None:
                continue
            view = Campaign(
                id=title.campaign_id, repo=self.repo, pr_number=pr, head_sha=head_sha,
                base_sha=next(r.sha for r in report.revisions if r.arm == "baseline"),
                relationship=report.relationship, rows=title.rows, requested_by=f"run {run.id}",
                trigger="workflow_dispatch", config_source=report.config_source, state=CampaignState.COMPLETED,
                created_at=run.created_at,
            )
            return FinishedCampaign(view, report, details_url=run.html_url)
        return None

    def acceptances(self, pr: int, head_sha: str) -> list[Acceptance]:
        """Read back from the accept comments the bot's own replies point at (edited or deleted ones refused)."""
        ours = [c for c in self.api.list_comments(pr) if c.author_id == self.bot_id]
        found = read_back(ours, head_sha, self.api.comment, self.settings.command_word)
        for refused in found.refused:
            print(f"kv-parity event: {refused}", file=sys.stderr)
        return found.acceptances

    def record_acceptance(self, pr: int, acceptance: Acceptance) -> None:
        """Nothing to record here: the bot's reply, with its marker, is the record."""

    def revoke_acceptances(self, pr: int, head_sha: str, login: str, comment_id: int) -> int:
        """How many acceptances stand; the bot's reply with its revoke marker withdraws them."""
        return len(self.acceptances(pr, head_sha))

    def republish(self, finished: FinishedCampaign) -> str:
        """Complete the campaign's check run and edit its result comment again, judged with the head's acceptances
        (the workflow run's own artifact keeps the report as it was published then)."""
        campaign = finished.campaign
        report = with_acceptances(finished.report, self.acceptances(campaign.pr_number, campaign.head_sha))
        scratch = Path(tempfile.mkdtemp(prefix="kv-parity-republish-"))
        try:
            self.publisher.finished(campaign, report, scratch, prior_attempts=[], details_url=finished.details_url)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return f"republished campaign {campaign.id}: {report.concluded.conclusion.value}"

    def head_conclusion(self, pr: int, head_sha: str) -> HeadConclusion:
        """The newest kv-parity check run GITHUB_TOKEN wrote on the head (a completed one carries its conclusion)."""
        runs = [c for c in self.api.check_runs_of(head_sha, self.settings.check_name) if c.app_slug == ACTIONS_APP_SLUG]
        if not runs:
            return HeadConclusion(None, None, f"no kv-parity check run on its head {head_sha[:12]}")
        newest = max(runs, key=lambda run: run.id)
        if newest.status != "completed":
            return HeadConclusion(None, newest.external_id,
                                  f"the kv-parity check of its head {head_sha[:12]} is still {newest.status}")
        return HeadConclusion(
            newest.conclusion, newest.external_id,
            f"campaign {newest.external_id or '?'} of its head {head_sha[:12]} concluded {newest.conclusion}",
        )

    def live_of_head(self, head_sha: str) -> list[Campaign]:
        return [self._run_view(run, title) for run, title in self._runs().values() if title.head_sha == head_sha]
