"""A campaign on a Slurm cluster: the Actions path's split pipeline, each job an `sbatch` submission.

trusted plan (here, before anything is submitted) -> `build-baseline` and `build-candidate` (each arm in its own
clone, the candidate's code only ever in the sandbox) -> trusted `manifest` (afterok both builds: re-hashes
both binaries) -> one job per row plus `stage6-fixtures` (afterok the manifest; a row job gets a whole node:
`--exclusive --nodes=1 --hint=nomultithread`, and runs `kv-parity row` on node-local scratch, which stages and
re-hashes the binaries and trace there) -> trusted merge (here, `kv-parity merge`, after the last row) -> the
caller publishes.

Every job script is written here from fixed argv (never from the pull request); job names and comments carry
the campaign id and the job's role only. The whole run is one state file, `slurm.json`, beside the campaign's
`out/` directory: job ids, attempts, the last state Slurm gave, so a restarted service carries on from it.

Following the jobs (what ReFrame learned): `scontrol show job` (one call a poll for all of them) while the
controller still knows a job, then `sacct` where accounting exists, else the exit file the job script writes
last. NODE_FAIL, PREEMPTED, BOOT_FAIL, a job cancelled by anyone but the bot (an operator's `scancel`, a node's
death as seen by slurmctld) and a job that vanished without its exit file mean a lost node: that row is
resubmitted once with `--exclude=<node>`. OUT_OF_MEMORY, TIMEOUT and FAILED are the row's own failure and are
named in the report. A row is one job on one node: its pairs are never split across jobs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runners.exec.sandbox import SandboxKind
from runners.exec.untrusted import UntrustedFileError, read_text
from runners.pipeline.distributed.artifacts import load_manifest
from runners.pipeline.distributed.common import FIXTURES_ROW, MANIFEST_NAME, REPORT_NAME, DistributedError, write_json
from runners.pipeline.distributed.plan import PLAN_NAME, make_plan
from runners.pipeline.slurm_client import JobInfo, SlurmClient, SlurmError, job_script
from runners.progress import ProgressEvent, ProgressSink
from runners.schema.config import CampaignMode, SlurmRowConfig
from runners.schema.report import CampaignReport, ScheduledOn
from runners.stages.revisions import shared_clone
from runners.verify import UnverifiedReport, accept_merged_report

STATE_FILE = "slurm.json"
EXIT_SUFFIX = ".exit"
LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
                         "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD"})
LOST_STATES = frozenset({"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"})
VANISHED = "VANISHED"
"""Our name for a job Slurm no longer knows that left no exit file (the controller lost it, or its node died)."""
RETRIED_ROLES = ("row", "fixtures")
"""Jobs resubmitted once after a lost node; a lost build or manifest ends the campaign with an error."""
SCHEDULING_ERRORS = ("Requested node configuration is not available",)
"""What sbatch says when `--exclude` leaves the partition no node that fits (a one-node cluster)."""


class SlurmOptions(BaseModel):
    """Where and how the campaign's jobs are submitted (from the service's settings or the command line)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    """Node features every row job requires (`--constraint`), e.g. the CPU model the rows are sized for."""
    row_time_limit: str = "360"
    """`--time` of each row and fixtures job (Slurm's formats: minutes, `H:MM:SS`, `D-HH`)."""
    build_time_limit: str = "120"
    build_cpus: int = Field(2, ge=1)
    """`--cpus-per-task` of the build and manifest jobs (rows always get a whole node)."""
    node_scratch: str = "/tmp"
    """Node-local directory the jobs stage binaries, trace and worktrees in (`--work` of build and row)."""
    kv_parity: str | None = None
    """The `kv-parity` executable on the nodes (shared install); default: the one beside this interpreter."""
    slurm_conf: Path | None = None
    """SLURM_CONF for every Slurm command (default: the environment's, or Slurm's own /etc/slurm)."""
    poll_seconds: float = Field(2.0, ge=0)
    """Least time between two looks at one campaign's jobs."""


class CampaignSpec(BaseModel):
    """What to compare: the revisions, where the trusted config is read, and which rows."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    campaign_id: str
    repo: Path
    """A clone holding both revisions; each arm is built in a clone of its own made from it."""
    base_sha: str
    head_sha: str
    config_ref: str
    """Trusted revision the config is read at (the base branch's tip), never the head."""
    profile: str | None = None
    """A shipped profile instead of the committed config (the demo)."""
    rows: list[str] | None = None
    mode: CampaignMode = "campaign"
    trace: Path | None = None
    """A trace overriding the config's path (its checksum is still verified by the manifest and every row)."""


class SlurmJob(BaseModel):
    """One submission: what it runs, and the last word Slurm (or its exit file) had about it."""

    role: str
    """build-baseline, build-candidate, manifest, row or fixtures."""
    row: str | None = None
    slot: str
    """The role, and for a row job its index in the plan (`row-0`): a resubmission keeps its slot."""
    job_id: str
    attempt: int = 1
    name: str
    exit_file: str
    options: list[str] = Field(default_factory=list)
    """Its sbatch resource options (partition, QoS, time limit...), reused as they are by a resubmission."""
    excluded: list[str] = Field(default_factory=list)
    state: str = "SUBMITTED"
    reason: str = ""
    node: str = ""
    exit_code: str = ""
    time_limit: str = ""
    final: bool = False
    cancelled_by_bot: bool = False
    lost: str | None = None
    """Why this attempt counts as a lost node (set once it has been resubmitted)."""

    def label(self) -> str:
        return f"row {self.row}" if self.role == "row" else self.role

    def outcome(self) -> str:
        where = f" on {self.node}" if self.node else ""
        limit = f", time limit {self.time_limit}" if self.state == "TIMEOUT" and self.time_limit else ""
        code = f", exit {self.exit_code}" if self.exit_code and self.state not in ("COMPLETED",) else ""
        return f"{self.label()}: Slurm job {self.job_id} {self.state}{where}{limit}{code}"


class SlurmRun(BaseModel):
    """The campaign's state file (`slurm.json`)."""

    campaign_id: str
    submitted_unix: float
    out_dir: str
    trace: str | None = None
    """The trace override every job was given (None: the config's path)."""
    jobs: list[SlurmJob]
    notes: list[str] = Field(default_factory=list)
    """What the bot did on its own (a lost node's row resubmitted), for the report's caller."""
    cancelled: bool = False


@dataclass(frozen=True)
class SlurmOutcome:
    """A poll: still running (with new progress), or ended with a validated report or an error."""

    running: bool
    progress: list[ProgressEvent] = field(default_factory=list)
    report: CampaignReport | None = None
    error: str | None = None
    note: str | None = None
    waiting: str | None = None
    """While running: the first job waiting in Slurm's queue for something other than its own campaign's
    earlier jobs, with Slurm's reason and its place among the pending jobs ('' when none waits)."""


def default_kv_parity() -> str:
    sibling = Path(sys.executable).with_name("kv-parity")
    found = str(sibling) if sibling.is_file() else shutil.which("kv-parity")
    if found is None:
        raise SlurmError("`kv-parity` not found next to the interpreter nor on PATH; set slurm_kv_parity")
    return found


# --- the pipeline ---------------------------------------------------------------------------------------------


def load_run(work: Path) -> SlurmRun | None:
    try:
        return SlurmRun.model_validate_json((work / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValidationError):
        return None


class SlurmCampaign:
    """One campaign's jobs under `work` (shared with the nodes): submit, follow, cancel, merge."""

    def __init__(self, work: Path, options: SlurmOptions, sandbox: SandboxKind = "bwrap",
                 client: SlurmClient | None = None, build_cache: Path | None = None) -> None:
        self.work = work
        self.options = options
        self.sandbox = sandbox
        self.build_cache = build_cache
        """Builds reused and stored by the two build jobs, each as its own arm, and the candidate by the manifest
        job once its size gate passed; on a file system every node shares (declare it so, `kv-parity cache
        --shared`, for every key to hold the build node's CPU; a build asking for `native` holds it anyway)."""
        self.client = client or SlurmClient(options.slurm_conf)
        self.kv_parity = options.kv_parity or default_kv_parity()
        self._shown: str | None = None

    # ------------------------------------------------------------------ paths

    @property
    def plan_dir(self) -> Path:
        return self.work / "plan"

    @property
    def dist_dir(self) -> Path:
        return self.work / "dist"

    def _arm_dir(self, arm: str) -> Path:
        return self.work / "arms" / arm

    def _row_dir(self, row: str, attempt: int) -> Path:
        """Each attempt writes its own directory: a lost node's late writes never mix with the resubmission's."""
        return self.work / "rows" / row / f"a{attempt}"

    def _save(self, run: SlurmRun) -> None:
        write_json(self.work / STATE_FILE, run.model_dump_json(indent=1))

    def load(self) -> SlurmRun:
        run = load_run(self.work)
        if run is None:
            raise SlurmError(f"no Slurm state ({self.work / STATE_FILE}) for this campaign")
        return run

    # ------------------------------------------------------------------ submit

    def _job_options(self, role: str, row: SlurmRowConfig | None = None) -> list[str]:
        """Resources of one job: the settings, overridden by the row's own `[rows.slurm]` where it has one."""
        options, row = self.options, row or SlurmRowConfig()
        partition, qos = row.partition or options.partition, row.qos or options.qos
        flags = [f"--partition={partition}"] if partition else []
        flags += [f"--account={options.account}"] if options.account else []
        flags += [f"--qos={qos}"] if qos else []
        if role in RETRIED_ROLES:
            constraint = row.constraint or options.constraint
            flags += ["--exclusive", "--nodes=1", "--hint=nomultithread",
                      f"--time={row.time_limit or options.row_time_limit}"]
            return flags + ([f"--constraint={constraint}"] if constraint else [])
        return flags + ["--nodes=1", "--ntasks=1", f"--cpus-per-task={options.build_cpus}",
                        f"--time={options.build_time_limit}"]

    def _argv(self, role: str, row: str | None, trace: Path | None, attempt: int) -> list[str]:
        kvp, sandbox, scratch = self.kv_parity, self.sandbox, self.options.node_scratch
        trace_args = ["--trace", str(trace)] if trace is not None else []
        cache = ["--build-cache", str(self.build_cache)] if self.build_cache else []
        if role.startswith("build-"):
            arm = role.removeprefix("build-")
            return [kvp, "build", "--plan", str(self.plan_dir), "--repo", str(self.work / f"repo-{arm}"),
                    "--arm", arm, "--out", str(self._arm_dir(arm)), "--work", scratch, "--sandbox", sandbox, *cache]
        if role == "manifest":
            return [kvp, "manifest", "--plan", str(self.plan_dir), "--baseline", str(self._arm_dir("baseline")),
                    "--candidate", str(self._arm_dir("candidate")), *trace_args, "--out", str(self.dist_dir),
                    *cache]
        assert row is not None
        return [kvp, "row", "--manifest", str(self.dist_dir / MANIFEST_NAME), "--row", row, "--out",
                str(self._row_dir(row, attempt)), *trace_args, "--work", scratch, "--sandbox", sandbox]

    def _submit(self, run: SlurmRun, role: str, row: str | None, *, slot: str, after: list[str],
                resources: list[str], attempt: int = 1, exclude: list[str] | None = None) -> SlurmJob:
        """One sbatch: the script, then the job, then the state file (so a restart knows the job id)."""
        trace = Path(run.trace) if run.trace is not None else None
        name = f"kvp-{run.campaign_id}-{slot}-a{attempt}"
        jobs_dir = self.work / "jobs"
        jobs_dir.mkdir(parents=True, exist_ok=True)
        script, exit_file = jobs_dir / f"{name}.sh", jobs_dir / f"{name}{EXIT_SUFFIX}"
        exit_file.unlink(missing_ok=True)
        script.write_text(job_script(run.campaign_id, role, self._argv(role, row, trace, attempt), exit_file),
                          encoding="utf-8")
        script.chmod(0o755)
        flags = [f"--job-name={name}", f"--comment=kv-parity:{run.campaign_id}:{slot}",
                 f"--output={jobs_dir / '%j.out'}", *resources]
        flags += [f"--dependency=afterok:{':'.join(after)}"] if after else []
        excluded = list(exclude or [])
        try:
            job_id = self.client.sbatch(flags + ([f"--exclude={','.join(excluded)}"] if excluded else []),
                                        script, self.work)
        except SlurmError as exc:
            if not excluded or not any(text in str(exc) for text in SCHEDULING_ERRORS):
                raise
            run.notes.append(f"no other node of the partition fits {name} without {', '.join(excluded)}; "
                             "resubmitted without excluding it")
            excluded = []
            job_id = self.client.sbatch(flags, script, self.work)
        job = SlurmJob(role=role, row=row, slot=slot, job_id=job_id, attempt=attempt, name=name,
                       exit_file=str(exit_file), options=resources, excluded=excluded)
        run.jobs.append(job)
        self._save(run)
        return job

    def submit(self, spec: CampaignSpec, out_dir: Path) -> SlurmRun:
        """Plan here (trusted: reads the config at the trusted ref, runs no pull-request code), clone each arm,
        then submit the whole pipeline at once, each stage `afterok` the one it needs."""
        self.work.mkdir(parents=True, exist_ok=True)
        plan = make_plan(spec.repo, spec.config_ref, spec.base_sha, spec.head_sha, spec.rows, spec.campaign_id,
                         spec.profile, spec.mode, self.plan_dir)
        write_json(self.plan_dir / PLAN_NAME, plan.model_dump_json(indent=2))
        for arm in ("baseline", "candidate"):
            shared_clone(spec.repo, self.work / f"repo-{arm}")
        run = SlurmRun(campaign_id=spec.campaign_id, submitted_unix=round(time.time(), 3), out_dir=str(out_dir),
                       trace=str(spec.trace.resolve()) if spec.trace is not None else None, jobs=[])
        self._save(run)
        rows = {row.id: row for row in plan.config.rows}
        build = self._job_options("build")
        try:
            builds = [self._submit(run, f"build-{arm}", None, slot=f"build-{arm}", after=[], resources=build).job_id
                      for arm in ("baseline", "candidate")]
            manifest = self._submit(run, "manifest", None, slot="manifest", after=builds, resources=build).job_id
            for index, row_id in enumerate(plan.rows):
                self._submit(run, "row", row_id, slot=f"row-{index}", after=[manifest],
                             resources=self._job_options("row", rows[row_id].slurm))
            if plan.fixtures:
                self._submit(run, "fixtures", FIXTURES_ROW, slot="fixtures", after=[manifest],
                             resources=self._job_options("fixtures", rows[plan.rows[0]].slurm))
        except SlurmError:
            self.cancel()  # no half-submitted pipeline is left behind
            raise
        return run

    # ------------------------------------------------------------------ follow

    def _refresh_live(self, run: SlurmRun) -> None:
        """Record every unfinished job's state, asking the controller once for all of them, and save the run."""
        following = [job for job in run.jobs if not job.final]
        known = self.client.show([job.job_id for job in following])
        for job in following:
            self._refresh(job, known.get(job.job_id))
        self._save(run)

    def _refresh(self, job: SlurmJob, info: JobInfo | None) -> None:
        """Record the job's state: the controller's `info`, else sacct's, else what its exit file says."""
        if info is None and self.client.accounting():
            info = self.client.sacct(job.job_id)
        if info is None:
            try:
                code = read_text(Path(job.exit_file), max_bytes=64).strip()
            except (OSError, UnicodeDecodeError, UntrustedFileError):
                code = ""
            info = JobInfo(state=(VANISHED if not code else "COMPLETED" if code == "0" else "FAILED"),
                           node=job.node, exit_code=code)
        job.state, job.reason, job.exit_code = info.state, info.reason, info.exit_code
        job.node = info.node or job.node
        job.time_limit = info.time_limit or job.time_limit
        job.final = info.state not in LIVE_STATES

    @staticmethod
    def lost_node(job: SlurmJob) -> str | None:
        """Why a finished job's node counts as lost, or None when the job ended by itself (or by our cancel)."""
        where = f" on {job.node}" if job.node else ""
        if job.state in LOST_STATES:
            return f"Slurm job {job.job_id} ended {job.state}{where}"
        if job.state == "CANCELLED" and not job.cancelled_by_bot:
            return f"Slurm job {job.job_id} was cancelled{where} by someone other than the bot"
        if job.state == VANISHED:
            return f"Slurm job {job.job_id} vanished{where} without writing its exit file"
        return None

    def _current(self, run: SlurmRun) -> list[SlurmJob]:
        """The latest attempt of every job."""
        latest: dict[str, SlurmJob] = {}
        for job in run.jobs:
            latest[job.slot] = job
        return list(latest.values())

    def poll(self) -> SlurmOutcome:
        run = self.load()
        if run.cancelled:
            return SlurmOutcome(running=False, error="the campaign's Slurm jobs were cancelled")
        self._refresh_live(run)
        current = self._current(run)
        for job in current:
            if not job.final or job.lost is not None:
                continue
            why = self.lost_node(job)
            if why is None:
                continue
            job.lost = why
            if job.role in RETRIED_ROLES and job.attempt == 1:
                retry = self._submit(run, job.role, job.row, slot=job.slot, after=[], resources=job.options,
                                     attempt=2, exclude=[job.node] if job.node else [])
                note = f"{job.label()}: {why}: lost node, resubmitted once as Slurm job {retry.job_id}" + (
                    f" excluding {job.node}" if retry.excluded else "")
                run.notes.append(note)
                self._save(run)
                return SlurmOutcome(True, [self._event("retry", note)])
            self._save(run)
            return self._fail(run, f"{job.label()}: {why}" + (" (after one resubmission)" if job.attempt > 1
                                                              else ""))
        for job in current:
            if job.role not in RETRIED_ROLES and job.final and job.state != "COMPLETED":
                return self._fail(run, f"{job.outcome()}; see {self.work / 'jobs' / (job.job_id + '.out')}")
        manifest_job = next(job for job in current if job.role == "manifest")
        stopped = False
        if manifest_job.final:
            try:
                stopped = load_manifest(self.dist_dir / MANIFEST_NAME).report.stopped is not None
            except DistributedError as exc:
                return self._fail(run, f"manifest: {exc}")
        rows = [job for job in current if job.role in RETRIED_ROLES]
        if stopped:
            self._cancel_jobs(run, [job for job in rows if not job.final])
        elif not all(job.final for job in rows):
            order = self.client.pending_order() if any(job.state == "PENDING" for job in current) else []
            return SlurmOutcome(True, self._progress(current, order), waiting=self._waiting(current, order))
        return self._merge(run, rows)

    def _event(self, stage: str, detail: str, done: int | None = None, total: int | None = None) -> ProgressEvent:
        return ProgressEvent(stage=stage, detail=detail, done=done, total=total, unix=time.time())

    @staticmethod
    def _job_line(job: SlurmJob, order: list[str]) -> str:
        """One job as the progress and the status surfaces show it: a pending job with the reason Slurm gives
        and its place among the pending jobs (`order`), a running one with its node."""
        part = f"{job.label()}: Slurm job {job.job_id} {job.state}"
        if job.state == "PENDING":
            place = f", {order.index(job.job_id) + 1} of {len(order)} pending" if job.job_id in order else ""
            reason = job.reason if job.reason not in ("", "None") else "waiting to be scheduled"
            return f"{part} ({reason}{place})"
        return f"{part} on {job.node}" if job.node else part

    def _waiting(self, current: list[SlurmJob], order: list[str]) -> str:
        """The first job pending for a reason other than its campaign's own earlier jobs (`Dependency`)."""
        job = next((job for job in current if job.state == "PENDING" and job.reason != "Dependency"), None)
        return "" if job is None else self._job_line(job, order)

    def _progress(self, current: list[SlurmJob], order: list[str]) -> list[ProgressEvent]:
        """Where the pipeline is: the job it is on, and the first row job still pending with the reason Slurm
        gives and its place among the pending jobs; only a change is reported."""
        rows = [job for job in current if job.role in RETRIED_ROLES]
        builds = [job for job in current if job.role not in RETRIED_ROLES]
        active = next((job for job in builds if not job.final), None)
        stage = "build" if active is not None else "rows"
        pending = next((job for job in rows if job.state == "PENDING"), None)
        if active is None:
            active = next((job for job in rows if job.state == "RUNNING"), None) or pending
        shown = [job for job in (active, pending) if job is not None]
        if len(shown) == 2 and shown[0] is shown[1]:
            shown = shown[:1]
        parts = [self._job_line(job, order) for job in shown]
        detail = "; ".join(parts) or "waiting for Slurm"
        done = sum(job.final for job in rows)
        if self._shown == detail:
            return []
        self._shown = detail
        return [self._event(stage, detail, done if stage == "rows" else None, len(rows) if stage == "rows" else None)]

    def _fail(self, run: SlurmRun, why: str) -> SlurmOutcome:
        self._cancel_jobs(run, [job for job in run.jobs if not job.final])
        return SlurmOutcome(False, error=why, note="; ".join(run.notes) or None)

    # ------------------------------------------------------------------ merge

    def _merge(self, run: SlurmRun, rows: list[SlurmJob]) -> SlurmOutcome:
        """`kv-parity merge` here (trusted), then the Slurm facts per row and the failed jobs named."""
        out = Path(run.out_dir)
        results = [str(self._row_dir(job.row, job.attempt)) for job in rows
                   if job.row and self._row_dir(job.row, job.attempt).is_dir()]
        argv = [self.kv_parity, "merge", "--manifest", str(self.dist_dir / MANIFEST_NAME), "--out", str(out),
                *results]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            return SlurmOutcome(False, error=f"kv-parity merge exited {done.returncode}: "
                                             f"{done.stderr.strip()[-1500:]}", note="; ".join(run.notes) or None)
        try:
            report = CampaignReport.model_validate_json((out / REPORT_NAME).read_text(encoding="utf-8"))
        except (OSError, ValidationError) as exc:
            return SlurmOutcome(False, error=f"{out / REPORT_NAME} is unusable: {exc}")
        if report.campaign_id != run.campaign_id:
            return SlurmOutcome(False, error=f"{out / REPORT_NAME} is for campaign {report.campaign_id!r}, "
                                             f"not {run.campaign_id!r}")
        by_row = {job.row: job for job in rows if job.role == "row"}
        placed = []
        for row in report.rows:
            job = by_row.get(row.row.id)
            scheduled = None if job is None else ScheduledOn(
                job_id=job.job_id, node_name=job.node, cpu_model=row.node.cpu_model if row.node else "")
            placed.append(row.model_copy(update={"scheduled": scheduled}))
        report = report.model_copy(update={"rows": placed})
        failed = [job.outcome() for job in rows if job.state != "COMPLETED" and not job.cancelled_by_bot]
        if failed and report.stopped is not None:
            stop = report.stopped.model_copy(update={"reason": f"{report.stopped.reason} ({'; '.join(failed)})"})
            report = report.model_copy(update={"stopped": stop})
        try:
            report = accept_merged_report(report)
        except UnverifiedReport as exc:
            return SlurmOutcome(False, error=str(exc))
        write_json(out / REPORT_NAME, report.model_dump_json(indent=2))
        notes = [*run.notes, *failed]
        return SlurmOutcome(False, report=report, note="; ".join(notes) or None)

    # ------------------------------------------------------------------ cancel

    def _cancel_jobs(self, run: SlurmRun, jobs: list[SlurmJob]) -> None:
        for job in jobs:
            job.cancelled_by_bot = True
        self._save(run)
        self.client.scancel([job.job_id for job in jobs])

    def cancel(self, wait_seconds: float = 120.0) -> None:
        """scancel every job of the campaign; returns once squeue lists none of them (bounded wait)."""
        run = load_run(self.work)
        if run is None:
            return
        run.cancelled = True
        self._cancel_jobs(run, [job for job in run.jobs if not job.final])
        ids = [job.job_id for job in run.jobs]
        deadline = time.monotonic() + wait_seconds
        while self.client.live(ids):
            if time.monotonic() > deadline:
                raise SlurmError(f"jobs {sorted(self.client.live(ids))} still listed {wait_seconds:g} s after "
                                 "scancel")
            time.sleep(0.2)  # polling squeue, bounded by the deadline above
        self._refresh_live(run)


# --- a person at a login node -------------------------------------------------------------------------------


def run_on_slurm(spec: CampaignSpec, work: Path, out: Path, options: SlurmOptions, sandbox: SandboxKind = "bwrap",
                 progress: ProgressSink | None = None, deadline_seconds: float = 6 * 3600,
                 build_cache: Path | None = None) -> CampaignReport:
    """Submit, follow until the merged report (or raise SlurmError naming why there is none), scancel
    everything on Ctrl-C or past the deadline."""
    campaign = SlurmCampaign(work, options, sandbox, build_cache=build_cache)
    campaign.submit(spec, out)
    deadline = time.monotonic() + deadline_seconds
    try:
        while True:
            outcome = campaign.poll()
            for event in outcome.progress:
                if progress is not None:
                    progress(event)
            if not outcome.running:
                if outcome.note:
                    print(f"slurm: {outcome.note}", file=sys.stderr)
                if outcome.report is None:
                    raise SlurmError(outcome.error or "no report")
                return outcome.report
            if time.monotonic() > deadline:
                raise SlurmError(f"the campaign passed its {deadline_seconds:g} s deadline; its jobs were cancelled")
            time.sleep(options.poll_seconds)  # the poll interval between looks at Slurm, not a synchronisation
    except BaseException:
        campaign.cancel()
        raise
