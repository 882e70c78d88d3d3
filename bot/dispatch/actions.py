"""Actions backend: a campaign is one `workflow_dispatch` run of the campaign workflow on self-hosted runners.

start -> dispatch the workflow with string inputs (campaign id, base/head SHA, rows, config ref = base SHA,
pull request number) on a trusted ref; the API returns no run id, so the run is found afterwards by time
(`find_dispatched_run`), skipping a run whose title (the workflow's `run-name`, RUN_NAME) names another
campaign, and its id kept in `actions.json` beside the attempt's `out/` directory (the same place the local
backend keeps its handle file, so a restarted service finds it again).

Progress is polled, not pushed: each poll reads the run and its jobs, at most once per
`actions_poll_seconds`. Polling needs no extra webhook subscription and survives missed deliveries and
restarts; the lifecycle already ticks, and a campaign lasts hours, so a 30 s delay costs nothing.

When the run completes:
- a row job whose runner was lost is retried once: the run's (partial) report is kept, the workflow is
  dispatched again for just those rows, and the two reports are combined, but only when both runs share
  every piece of build and trace evidence (same binaries by SHA-256); the retry is returned as the poll's
  `note`, which the lifecycle records in the transition's reason.
- a cancelled run or any other failed job ends the campaign with an error naming the job(s) and the run;
- otherwise the `kv-parity-report` artifact is downloaded, unpacked safely (no path escapes, no links,
  bounded size and file count), and report.json must parse, belong to this campaign's revisions, and
  agree with `runners.verify.verify_report`, or the campaign errors naming the disagreement.

A lost runner is recognised from GitHub's own job record, never from annotation text (a row job runs
pull-request code, which can print `::error::The self-hosted runner ... lost communication` and pick its
own re-roll): the job failed while no step failed and a step it had started never completed (the runner
stopped reporting), or it failed on an assigned runner before any step was recorded. A step that ended in
failure is the job's own verdict, so an ordinary failure is never retried.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ValidationError

from bot.core.campaign import Campaign
from bot.dispatch.artifact_zip import MAX_ARTIFACT_BYTES, ArtifactError, extract_artifact
from bot.dispatch.base import PollResult, RunHandle, StartError
from bot.dispatch.campaign_workflow import REPORT_ARTIFACT, ROW_JOB_PREFIX, dispatch_inputs, parse_run_title
from bot.github.errors import ArtifactTooLargeError, GitHubError
from bot.github.models import WorkflowJobInfo, WorkflowRunInfo
from runners.pipeline.distributed.common import FIXTURES_ROW
from runners.progress import ProgressEvent
from runners.schema.config import ConfigError
from runners.schema.report import CampaignReport
from runners.verify import UnverifiedReport, accept_merged_report, verify_report

log = logging.getLogger(__name__)

OK_CONCLUSIONS = frozenset({"success", "skipped", "neutral"})
STATE_FILE = "actions.json"
FIND_RUN_SECONDS = 600.0
"""A dispatched run GitHub has not created after this long will not come (wrong ref or workflow)."""
_PER_RUN_FIELDS = frozenset({"rows", "stopped", "verdicts", "created_unix", "skipped", "fixtures"})
"""`fixtures`: a retry asks for rows only (a `rows=` subset runs no Stage 6 fixtures), so the combined report keeps
the first run's fixtures, made from the same binaries."""
_EVIDENCE_FIELDS = tuple(name for name in CampaignReport.model_fields if name not in _PER_RUN_FIELDS)
"""Report fields two runs must share for their rows to form one campaign (build, trace, config, revisions)."""


class ActionsApi(Protocol):
    """The slice of `bot.github.gateway.GitHubGateway` this backend uses."""

    def dispatch_workflow(self, workflow_file: str, ref: str, inputs: Mapping[str, str]) -> None: ...

    def find_dispatched_run(
        self, workflow_file: str, created_after: datetime, exclude: Collection[int] = ()
    ) -> int | None: ...

    def workflow_run(self, run_id: int) -> WorkflowRunInfo: ...

    def workflow_jobs(self, run_id: int) -> list[WorkflowJobInfo]: ...

    def cancel_workflow_run(self, run_id: int) -> bool: ...

    def download_artifact(self, run_id: int, name: str, max_bytes: int | None = None) -> bytes | None: ...


def lost_runner(job: WorkflowJobInfo) -> str | None:
    """Why GitHub's record of a failed job says its runner went away, or None when the job failed by itself.

    Only fields the runner service and GitHub write are read (conclusion, runner, step status): a step's
    own output, which pull-request code controls, never counts.
    """
    if job.status != "completed" or job.conclusion != "failure":
        return None
    if any(step.conclusion == "failure" for step in job.steps):
        return None
    runner = job.runner_name or (f"runner {job.runner_id}" if job.runner_id is not None else None)
    unfinished = [step for step in job.steps if step.status != "completed"]
    if unfinished:
        return f"{runner or 'its runner'} stopped reporting during step {unfinished[0].name!r}, which never completed"
    if not job.steps and runner is not None:
        return f"{runner} stopped reporting before any step was recorded"
    return None


def read_report(directory: Path, campaign: Campaign, source: str) -> CampaignReport:
    """report.json of an unpacked artifact, only if it is this campaign's and verifies against itself."""
    try:
        text = (directory / "report.json").read_bytes()
    except FileNotFoundError:
        raise ArtifactError(f"{source} has no report.json") from None
    try:
        report = CampaignReport.model_validate_json(text)
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
        raise ArtifactError(f"{source}: report.json is not a valid report ({fields})") from None
    if report.campaign_id != campaign.id:
        raise ArtifactError(f"{source}: report.json is for campaign {report.campaign_id!r}, not {campaign.id!r}")
    revisions = {revision.arm: revision.sha for revision in report.revisions}
    wanted = {"baseline": campaign.base_sha, "candidate": campaign.head_sha}
    if revisions != wanted:
        raise ArtifactError(f"{source}: report.json compares {revisions}, not this campaign's {wanted}")
    if report.mode != campaign.mode:
        raise ArtifactError(f"{source}: report.json is a {report.mode} report, this campaign asked for {campaign.mode}")
    problems = verify_report(report)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise ArtifactError(
            f"{source}: report.json disagrees with its own recomputation ({len(problems)} problems): {shown}"
        )
    return report


def combine_retry(
    first: CampaignReport, retry: CampaignReport, retried: list[str], wanted: list[str] | None
) -> CampaignReport:
    """The campaign report from a first run and a retry of some of its rows, built from the same binaries.

    Refused when the runs differ in any build, trace or config evidence: a row is compared only against
    the binaries its report names, and one report names one build.
    """
    differing = [name for name in _EVIDENCE_FIELDS if getattr(first, name) != getattr(retry, name)]
    if differing:
        raise ArtifactError(
            f"the retry of rows {', '.join(retried)} does not share the first run's evidence "
            f"({', '.join(differing)} differ); rows of different builds are never combined"
        )
    if first.stopped is not None and first.stopped.stage != "rows":
        raise ArtifactError(f"the first run stopped at {first.stopped.stage}: {first.stopped.reason}")
    try:
        expected = [row.id for row in first.config.select_rows(wanted)]
    except ConfigError as exc:
        raise ArtifactError(str(exc)) from exc
    by_id = {row.row.id: row for row in first.rows if row.row.id not in retried}
    by_id.update({row.row.id: row for row in retry.rows})
    missing = [row_id for row_id in expected if row_id not in by_id]
    if missing:
        raise ArtifactError(f"no result for rows {', '.join(missing)} even after the retry")
    try:
        return accept_merged_report(first.model_copy(update={"rows": [by_id[row_id] for row_id in expected],
                                                              "stopped": None}))
    except UnverifiedReport as exc:
        raise ArtifactError(f"the retry of rows {', '.join(retried)}: {exc}") from exc


# --- the backend -------------------------------------------------------------------------------------------


class _Dispatch(BaseModel):
    dispatched_at: datetime
    run_id: int | None = None
    html_url: str | None = None
    """The run's page on GitHub, once the run was found."""
    lost: list[str] = []
    """Rows whose runner was lost in this run (and were retried)."""


class _State(BaseModel):
    campaign_id: str
    dispatches: list[_Dispatch]
    """The campaign's run, then at most one retry of its lost rows."""
    foreign: list[int] = []
    """Runs created in the same window whose title names another campaign (someone else's dispatch)."""


def _load(work: Path) -> _State | None:
    try:
        return _State.model_validate_json((work / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValidationError):
        return None


def _save(work: Path, state: _State) -> None:
    staging = work / f"{STATE_FILE}.tmp"
    staging.write_text(state.model_dump_json(indent=1), encoding="utf-8")
    staging.replace(work / STATE_FILE)


def _job_line(job: WorkflowJobInfo, why: str) -> str:
    where = f" ({job.html_url})" if job.html_url else ""
    return f"job {job.name!r} {why}{where}"


class ActionsBackend:
    name = "actions"

    def __init__(
        self,
        gateway_for: Callable[[str], ActionsApi],
        *,
        workflow: str,
        ref: str,
        poll_seconds: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.gateway_for = gateway_for
        self.workflow = workflow
        self.ref = ref
        self.poll_seconds = poll_seconds
        self.clock = clock
        self._checked: dict[str, float] = {}
        self._shown: dict[str, tuple[str, int | None, int | None]] = {}

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def _dispatch(self, api: ActionsApi, campaign: Campaign, rows: list[str] | None) -> _Dispatch:
        dispatched_at = self._now()
        inputs = dispatch_inputs(
            campaign.id, campaign.base_sha, campaign.head_sha, rows, campaign.pr_number, config_ref=campaign.config_sha,
            mode=campaign.mode, purpose=campaign.purpose,
        )
        api.dispatch_workflow(self.workflow, self.ref, inputs)
        log.info("campaign %s: dispatched %s@%s with %s", campaign.id, self.workflow, self.ref, inputs)
        return _Dispatch(dispatched_at=dispatched_at)

    def start(self, campaign: Campaign, config_text: str) -> RunHandle:
        """Dispatch the campaign workflow; the run's own checkout reads the config at the base SHA."""
        if campaign.artifact_dir is None:
            raise StartError(f"campaign {campaign.id} has no artifact directory")
        work = campaign.artifact_dir.parent
        work.mkdir(parents=True, exist_ok=True)
        try:
            dispatch = self._dispatch(self.gateway_for(campaign.repo), campaign, campaign.rows)
        except GitHubError as exc:
            raise StartError(f"dispatching {self.workflow}@{self.ref} failed: {exc}") from exc
        _save(work, _State(campaign_id=campaign.id, dispatches=[dispatch]))
        return self._handle(campaign, dispatch)

    def _handle(self, campaign: Campaign, dispatch: _Dispatch) -> RunHandle:
        assert campaign.artifact_dir is not None
        return RunHandle(
            backend=self.name,
            ref=campaign.id,
            token=dispatch.dispatched_at.isoformat(),
            out_dir=str(campaign.artifact_dir),
        )

    def adopt(self, campaign: Campaign) -> RunHandle | None:
        """The dispatch of this attempt whose handle the store never got (the service died in between)."""
        if campaign.artifact_dir is None:
            return None
        state = _load(campaign.artifact_dir.parent)
        if state is None or state.campaign_id != campaign.id:
            return None
        return self._handle(campaign, state.dispatches[0])

    def run_url(self, campaign: Campaign) -> str | None:
        """The page of the campaign's workflow run (its first run, where the report is made), once GitHub
        created it: the check run's details_url when the service serves no details pages."""
        if campaign.artifact_dir is None:
            return None
        state = _load(campaign.artifact_dir.parent)
        if state is None or state.campaign_id != campaign.id:
            return None
        return next((d.html_url for d in state.dispatches if d.html_url), None)

    # ------------------------------------------------------------------ poll

    def poll(self, campaign: Campaign, handle: RunHandle) -> PollResult:
        now = self.clock()
        if now - self._checked.get(campaign.id, float("-inf")) < self.poll_seconds:
            return PollResult(running=True)
        self._checked[campaign.id] = now
        work = Path(handle.out_dir).parent
        state = _load(work)
        if state is None:
            return PollResult(running=False, error=f"no dispatch record ({work / STATE_FILE}) for this campaign")
        api = self.gateway_for(campaign.repo)
        run = self._attribute(api, campaign, work, state)
        if run is None:
            if now - state.dispatches[-1].dispatched_at.timestamp() > FIND_RUN_SECONDS:
                return PollResult(
                    running=False,
                    error=f"GitHub created no run of {self.workflow}@{self.ref} within {FIND_RUN_SECONDS:g} s "
                    "of the dispatch; is the workflow on that ref, with workflow_dispatch?",
                )
            return PollResult(running=True)
        jobs = api.workflow_jobs(run.id)
        if run.status != "completed":
            return PollResult(running=True, progress=self._progress(campaign.id, jobs))
        self._checked.pop(campaign.id, None)
        self._shown.pop(campaign.id, None)
        try:
            return self._completed(api, campaign, Path(handle.out_dir), state, run, jobs)
        except ArtifactError as exc:
            return PollResult(running=False, error=str(exc))

    def _attribute(
        self, api: ActionsApi, campaign: Campaign, work: Path, state: _State
    ) -> WorkflowRunInfo | None:
        """The latest dispatch's run: found by time once, and kept only if its title does not name another
        campaign (a dispatch by someone else in the same second); None while GitHub has not created it."""
        current = state.dispatches[-1]
        if current.run_id is not None:
            return api.workflow_run(current.run_id)
        known = [d.run_id for d in state.dispatches if d.run_id is not None]
        found = api.find_dispatched_run(self.workflow, current.dispatched_at, exclude=[*known, *state.foreign])
        if found is None:
            return None
        run = api.workflow_run(found)
        title = parse_run_title(run.display_title)
        if title is not None and title.campaign_id != campaign.id:
            state.foreign.append(run.id)
            _save(work, state)
            return None
        current.run_id = run.id
        current.html_url = run.html_url
        _save(work, state)
        return run

    def _progress(self, campaign_id: str, jobs: list[WorkflowJobInfo]) -> list[ProgressEvent]:
        """Where the run is, from its jobs; only a change is reported."""
        rows = [job for job in jobs if job.name.startswith(ROW_JOB_PREFIX)]
        done = sum(job.status == "completed" for job in rows)
        if rows and done < len(rows):
            key: tuple[str, int | None, int | None] = ("rows", done, len(rows))
            detail = f"{len(rows) - done} row job(s) running or waiting for their runners"
        elif rows:
            key, detail = ("merge", None, None), "merging the row results"
        elif jobs:
            key, detail = ("build", None, None), "building both revisions once on the builder"
        else:
            key, detail = ("queued", None, None), "waiting for a runner"
        if self._shown.get(campaign_id) == key:
            return []
        self._shown[campaign_id] = key
        return [ProgressEvent(stage=key[0], detail=detail, done=key[1], total=key[2], unix=self.clock())]

    def _completed(
        self,
        api: ActionsApi,
        campaign: Campaign,
        out: Path,
        state: _State,
        run: WorkflowRunInfo,
        jobs: list[WorkflowJobInfo],
    ) -> PollResult:
        failed = [job for job in jobs if job.status == "completed" and job.conclusion not in OK_CONCLUSIONS]
        lost: dict[str, str] = {}
        for job in failed:
            # A lost fixtures job is not retried: a retry is a `rows=` subset, which runs no fixtures.
            retryable = job.name.startswith(ROW_JOB_PREFIX) and job.name != ROW_JOB_PREFIX + FIXTURES_ROW
            message = lost_runner(job) if retryable else None
            if message is not None:
                lost[job.name] = message
        retried = len(state.dispatches) > 1
        if run.conclusion == "cancelled":
            named = "; ".join(_job_line(job, job.conclusion or "cancelled") for job in failed) or "no job had started"
            return PollResult(running=False, error=f"workflow run {run.id} was cancelled ({run.html_url}): {named}")
        if lost and len(lost) == len(failed) and not retried:
            return self._retry(api, campaign, out.parent, state, run, lost)
        if failed or run.conclusion not in OK_CONCLUSIONS:
            lines = [
                _job_line(job, f"failed: its runner was lost ({lost[job.name]})")
                if job.name in lost
                else _job_line(job, f"concluded {job.conclusion}")
                for job in failed
            ]
            after = f" after retrying rows {', '.join(state.dispatches[0].lost)} once" if retried else ""
            return PollResult(
                running=False,
                error=f"workflow run {run.id} concluded {run.conclusion}{after} ({run.html_url}): "
                + ("; ".join(lines) or "no failed job reported"),
            )
        report = self._fetch(api, campaign, run, out)
        if not retried:
            return PollResult(running=False, report=report)
        first = state.dispatches[0]
        first_dir = out.parent / f"run-{first.run_id}"
        combined = combine_retry(
            read_report(first_dir, campaign, f"run {first.run_id}"), report, first.lost, campaign.rows
        )
        staging = out / "report.json.tmp"
        staging.write_text(combined.model_dump_json(indent=2) + "\n", encoding="utf-8")
        staging.replace(out / "report.json")
        for entry in first_dir.iterdir():
            if not (out / entry.name).exists():
                (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, out / entry.name)
        note = (
            f"rows {', '.join(first.lost)} retried once after their runner was lost in run {first.run_id}; "
            f"retry run {run.id}"
        )
        return PollResult(running=False, report=combined, note=note)

    def _fetch(self, api: ActionsApi, campaign: Campaign, run: WorkflowRunInfo, dest: Path) -> CampaignReport:
        try:
            data = api.download_artifact(run.id, REPORT_ARTIFACT, max_bytes=MAX_ARTIFACT_BYTES)
        except ArtifactTooLargeError as exc:
            raise ArtifactError(str(exc)) from exc
        if data is None:
            raise ArtifactError(f"workflow run {run.id} ({run.html_url}) has no {REPORT_ARTIFACT!r} artifact")
        extract_artifact(data, dest)
        return read_report(dest, campaign, f"artifact {REPORT_ARTIFACT!r} of run {run.id}")

    def _retry(
        self,
        api: ActionsApi,
        campaign: Campaign,
        work: Path,
        state: _State,
        run: WorkflowRunInfo,
        lost: dict[str, str],
    ) -> PollResult:
        """Keep the run's report for the rows that finished, then dispatch the lost rows once more."""
        self._fetch(api, campaign, run, work / f"run-{run.id}")
        rows = [name.removeprefix(ROW_JOB_PREFIX) for name in lost]
        state.dispatches[-1].lost = rows
        state.dispatches.append(self._dispatch(api, campaign, rows))
        _save(work, state)
        detail = f"runner lost for rows {', '.join(rows)} in run {run.id}; retrying them once"
        log.warning("campaign %s: %s", campaign.id, detail)
        return PollResult(running=True, progress=[ProgressEvent(stage="retry", detail=detail, unix=self.clock())])

    # ------------------------------------------------------------------ cancel

    def cancel(self, campaign: Campaign, handle: RunHandle) -> None:
        """Ask GitHub to cancel the campaign's runs; returns once the request is accepted (GitHub stops the
        jobs shortly after, and the campaign workflow's concurrency group keeps a newer run from overlapping)."""
        self._checked.pop(campaign.id, None)
        self._shown.pop(campaign.id, None)
        work = Path(handle.out_dir).parent
        state = _load(work)
        if state is None:
            return
        api = self.gateway_for(campaign.repo)
        self._attribute(api, campaign, work, state)
        for dispatch in state.dispatches:
            if dispatch.run_id is not None and api.cancel_workflow_run(dispatch.run_id):
                log.info("campaign %s: cancelled run %d", campaign.id, dispatch.run_id)
