"""The `slurm` backend against a real single-node Slurm (script/slurm-cluster): real sbatch, scontrol, scancel,
real cargo builds of the fixture harness in the sandbox, the real split pipeline. Every wait polls Slurm's or
the backend's state up to a bounded deadline.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import pytest

from bot.cli.main import main as cli_main
from bot.cli.reports import main_verify
from bot.core.campaign import Campaign, CampaignState
from bot.dispatch.base import PollResult, RunHandle, StartError
from bot.dispatch.slurm import SlurmBackend
from bot.modes.wiring import default_publisher
from bot.publish.comment_markers import is_status_comment
from bot.service.app import create_app
from bot.settings import Settings
from bot.store.campaigns import Store
from runners.demo import Knob, commit_change, init_fixture_repo
from runners.exec.build_cache import configured_dir
from runners.pipeline.slurm import STATE_FILE, SlurmOptions, SlurmRun
from runners.pipeline.slurm_client import SlurmClient, job_script
from runners.schema.bisect_rule import BisectReport
from runners.schema.config import DEFAULT_CONFIG_PATH, CampaignConfig, SlurmRowConfig
from runners.schema.report import CampaignReport
from tests.configs import config_text, one_row_config
from tests.fakes.github_api import FakeGitHub
from tests.service_fixtures import BOT, TOKEN, service
from tests.webhooks import REPO, SECRET, comment_event, post, pull_request_event, serve_app

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_SCRIPT = ROOT / "script" / "slurm-cluster"
ROW = "vllm-agg"
T = TypeVar("T")

pytestmark = pytest.mark.skipif(
    shutil.which("slurmctld") is None or shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs root, slurmctld/slurmd/slurm-client/munge (Debian packages) and bubblewrap",
)


@pytest.fixture(scope="session")
def slurm_conf() -> Iterator[Path]:
    """The single-node cluster: started through script/slurm-cluster unless it already runs, and stopped at
    the end only if this session started it."""
    status = subprocess.run([str(CLUSTER_SCRIPT), "status"], capture_output=True, text=True, check=False)
    started = status.returncode != 0
    if started:
        status = subprocess.run([str(CLUSTER_SCRIPT), "start"], capture_output=True, text=True, check=False)
        assert status.returncode == 0, status.stderr
    conf = Path(status.stdout.strip().removeprefix("SLURM_CONF="))
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    yield conf
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous
    if started:
        subprocess.run([str(CLUSTER_SCRIPT), "stop"], check=True)


@pytest.fixture(autouse=True)
def no_job_outlives_its_test(slurm_conf: Path) -> Iterator[None]:
    """A failed test leaves no campaign job behind to hold the node for the next one."""
    yield
    client = SlurmClient(slurm_conf)
    done = subprocess.run(["squeue", "-h", "--me", "-o", "%i %j"], capture_output=True, text=True, check=True,
                          env=client.environ)
    leftover = [line.split()[0] for line in done.stdout.splitlines() if line.split()[1].startswith("kvp-")]
    client.scancel(leftover)


def wait_for(condition: Callable[[], T | None], what: str, timeout: float) -> T:
    """Poll `condition` until it returns something truthy, or fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)  # polling real state, bounded by the deadline
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def squeue(conf: Path) -> list[str]:
    done = subprocess.run(["squeue", "-h", "-o", "%i %T %j"], capture_output=True, text=True, check=True,
                          env={**os.environ, "SLURM_CONF": str(conf)})
    return done.stdout.splitlines()


@dataclass(frozen=True)
class Revisions:
    repo: Path
    base: str
    head: str


def _revisions(root: Path, trace: Path, pairs: int | None = None, row_slurm: SlurmRowConfig | None = None,
               knobs: dict[str, Knob] | None = None) -> Revisions:
    """The fixture harness with the demo's first row and fixtures committed as the base's config (a short gate
    this shared machine cannot block; `pairs` makes a row that runs for minutes), `knobs` a harness variant both
    revisions carry, and a comment-only head: without options, the trees tests/configs.py shares."""
    config = one_row_config(trace, pairs=pairs, row_slurm=row_slurm)
    repo = root / "repo"
    init_fixture_repo(repo)
    base = commit_change(repo, "campaign config", knobs=knobs, files={DEFAULT_CONFIG_PATH: config_text(config)})
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "head"], check=True)
    head = commit_change(repo, "the candidate", touch_comment=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "main"], check=True)
    return Revisions(repo, base, head)


@pytest.fixture(scope="module")
def quick_revisions(tmp_path_factory: pytest.TempPathFactory, demo_trace: Path) -> Revisions:
    return _revisions(tmp_path_factory.mktemp("slurm-quick"), demo_trace)


@pytest.fixture(scope="module")
def slow_revisions(tmp_path_factory: pytest.TempPathFactory, demo_trace: Path) -> Revisions:
    """A row of 20,000 pairs of a harness that waits half a second per timed invocation: it is still running when
    it is cancelled or reaches a one-minute limit, and the suite's other tests have the cores meanwhile."""
    return _revisions(tmp_path_factory.mktemp("slurm-slow"), demo_trace, pairs=20_000, knobs={"IDLE_MS": 500.0})


def view(revisions: Revisions, root: Path, campaign_id: str, rows: list[str] | None = None) -> Campaign:
    return Campaign(
        id=campaign_id, repo="acme/widgets", pr_number=1, head_sha=revisions.head, base_sha=revisions.base,
        relationship="ancestor", rows=rows, state=CampaignState.DISPATCHED,
        requested_by="maintainer", trigger="label", created_at=datetime.now(UTC),
        deadline=None, artifact_dir=root / campaign_id / "out", queue_position=0, attempt=1, reason="",
        conclusion=None, config_source=DEFAULT_CONFIG_PATH, config_sha=revisions.base,
    )


def backend(revisions: Revisions, conf: Path, **options: object) -> SlurmBackend:
    """A fresh backend, as a (re)started service makes one from its settings, with the session's build cache."""
    return SlurmBackend(revisions.repo, options=SlurmOptions(slurm_conf=conf, poll_seconds=0, build_cpus=1,
                                                             **options),  # type: ignore[arg-type]
                        build_cache=configured_dir())


def run_state(campaign: Campaign) -> SlurmRun:
    assert campaign.artifact_dir is not None
    return SlurmRun.model_validate_json((campaign.artifact_dir.parent / STATE_FILE).read_text(encoding="utf-8"))


def finish(poll: Callable[[], PollResult], timeout: float) -> PollResult:
    events: list[str] = []

    def ended() -> PollResult | None:
        result = poll()
        events.extend(event.detail for event in result.progress)
        return None if result.running else result

    return wait_for(ended, "the campaign to end", timeout)


# --- the tests ------------------------------------------------------------------------------------------------


def test_job_scripts_quote_every_word_and_record_the_exit_status(tmp_path: Path) -> None:
    script = job_script("c1", "row", ["kv-parity", "row", "--row", "a b; rm -rf /"], tmp_path / "x.exit")
    assert "'a b; rm -rf /'" in script and script.startswith("#!/bin/bash\n")
    path = tmp_path / "job.sh"
    path.write_text(job_script("c1", "row", ["false"], tmp_path / "x.exit"))
    path.chmod(0o755)
    assert subprocess.run([str(path)], check=False).returncode == 1
    assert (tmp_path / "x.exit").read_text() == "1\n"


def test_a_campaign_through_slurm_has_the_local_backends_verdicts(
        slurm_conf: Path, quick_revisions: Revisions, tmp_path: Path) -> None:
    """`kv-parity campaign --backend slurm` (build, manifest, row and stage6-fixtures jobs, merge here) against
    `kv-parity campaign` on this machine: the same verdicts, and each row names its Slurm job and node."""
    common = ["campaign", "--repo", str(quick_revisions.repo), "--base", quick_revisions.base, "--head",
              quick_revisions.head, "--quiet"]
    local_code = cli_main([*common, "--out", str(tmp_path / "local")])
    slurm_code = cli_main([*common, "--out", str(tmp_path / "slurm"), "--backend", "slurm", "--row-time-limit",
                           "20"])
    local, slurm = (CampaignReport.model_validate_json((tmp_path / name / "report.json").read_text())
                    for name in ("local", "slurm"))
    assert local.verdicts is not None and slurm.verdicts is not None
    assert slurm_code == local_code == 0
    assert slurm.verdicts == local.verdicts
    assert [(r.row.id, r.semantic, r.perf_verdict) for r in slurm.rows] == \
        [(r.row.id, r.semantic, r.perf_verdict) for r in local.rows]
    assert [f.status for f in slurm.fixtures] == [f.status for f in local.fixtures] and slurm.fixtures
    [row] = slurm.rows
    assert row.scheduled is not None and row.scheduled.node_name == socket.gethostname().split(".")[0]
    assert row.scheduled.job_id.isdigit() and row.scheduled.cpu_model
    assert local.rows[0].scheduled is None
    assert squeue(slurm_conf) == []


def test_a_bisect_through_slurm_runs_every_probe_as_slurm_jobs(
        slurm_conf: Path, campaign_config: CampaignConfig, demo_trace: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`kv-parity bisect --backend slurm`: good, a comment, then the semantic change; the bad end and the one probe
    between are each the split pipeline's jobs on the cluster (each report names its row's job and node), the
    culprit is the semantic change, good is built once, and bisect.json verifies."""
    from tests.test_bisect import bisect_config

    repo = tmp_path / "repo"
    init_fixture_repo(repo)
    good = commit_change(repo, "add the campaign config",
                         files={DEFAULT_CONFIG_PATH: config_text(bisect_config(campaign_config, demo_trace))})
    commit_change(repo, "docs: reword", touch_comment=True)
    culprit = commit_change(repo, "fix: transfer only destination-missing KV tokens", knobs={"SEMANTIC_CHANGE": True})
    out = tmp_path / "out"
    code = cli_main(["bisect", "--repo", str(repo), "--good", good, "--bad", culprit, "--out", str(out),
                     "--backend", "slurm", "--row-time-limit", "20", "--quiet"])
    printed = capsys.readouterr().out.splitlines()
    assert code == 0 and printed[-1] == f"culprit: {culprit}", printed
    bisect = BisectReport.model_validate_json((out / "bisect.json").read_text())
    assert [probe.state for probe in bisect.probes] == ["bad", "good"]
    for probe in bisect.probes:
        [attempt] = probe.attempts
        [row] = attempt.report.rows
        assert row.scheduled is not None and row.scheduled.job_id.isdigit(), "the row ran as a Slurm job"
        assert (out.parent / "out.slurm" / attempt.report.campaign_id / STATE_FILE).is_file()
    second = bisect.probes[1].attempts[0].report.artifact("baseline").build_cache
    assert second is not None and second.reused_from, "good is built once"
    assert main_verify(out / "bisect.json") == 0
    assert squeue(slurm_conf) == []


def staged(node_scratch: Path) -> Path | None:
    """The row job's scratch directory once it holds what the row staged (binaries, trace, outputs)."""
    return next((work for work in node_scratch.glob("kv-parity-row-*") if any(work.iterdir())), None)


def test_a_row_past_its_time_limit_is_reported_timeout_and_removes_its_scratch(
        slurm_conf: Path, slow_revisions: Revisions, tmp_path: Path) -> None:
    campaign = view(slow_revisions, tmp_path, "timeout", rows=[ROW])
    node_scratch = tmp_path / "node-scratch"
    service = backend(slow_revisions, slurm_conf, row_time_limit="1", node_scratch=str(node_scratch))
    handle = service.start(campaign, "")
    result = finish(lambda: service.poll(campaign, handle), 600)
    assert result.report is not None, result.error
    stopped = result.report.stopped
    assert stopped is not None and stopped.stage == "rows"
    [row_job] = [job for job in run_state(campaign).jobs if job.role == "row"]
    assert row_job.state == "TIMEOUT" and row_job.lost is None
    assert f"row {ROW}: Slurm job {row_job.job_id} TIMEOUT" in stopped.reason
    assert result.report.verdicts is not None and result.report.verdicts.conclusion.value != "success"
    assert squeue(slurm_conf) == []
    assert sorted(node_scratch.iterdir()) == [], "Slurm's SIGTERM at the limit still let the row clean up"


def test_pending_jobs_say_why_and_where_they_are_in_the_queue(slurm_conf: Path, tmp_path: Path) -> None:
    """A job held behind another exclusive job: the client reports Slurm's reason and the queue order."""
    client = SlurmClient(slurm_conf)
    script = tmp_path / "hold.sh"
    script.write_text("#!/bin/bash\nsleep 60\n")
    holder = client.sbatch(["--exclusive", "--nodes=1", f"--output={tmp_path / '%j.out'}"], script, tmp_path)
    waiter = client.sbatch(["--exclusive", "--nodes=1", f"--output={tmp_path / '%j.out'}"], script, tmp_path)
    try:
        info = wait_for(lambda: (i := client.show([holder, waiter]).get(waiter)) and i.state == "PENDING"
                        and i.reason not in ("", "None") and i, "the second job to pend with a reason", 30)
        assert info.reason in ("Resources", "Priority")
        assert waiter in client.pending_order()
    finally:
        client.scancel([holder, waiter])
    wait_for(lambda: not client.live([holder, waiter]), "both jobs to leave the queue", 30)


def test_a_rows_own_slurm_table_reaches_sbatch_and_a_refused_submission_leaves_no_job(
        slurm_conf: Path, tmp_path: Path, demo_trace: Path) -> None:
    """`[rows.slurm] partition` overrides the settings for that row's job: a partition this cluster lacks makes
    sbatch refuse the row, the start fails naming it, and the already submitted builds are cancelled."""
    revisions = _revisions(tmp_path, demo_trace,
                           row_slurm=SlurmRowConfig(partition="no-such-partition", time_limit="5"))
    campaign = view(revisions, tmp_path, "partition", rows=[ROW])
    with pytest.raises(StartError, match="sbatch kvp-partition-row-0-a1.sh failed: .*[Ii]nvalid partition"):
        backend(revisions, slurm_conf).start(campaign, "")
    jobs = run_state(campaign).jobs
    assert [job.slot for job in jobs] == ["build-baseline", "build-candidate", "manifest"]
    assert all(job.cancelled_by_bot for job in jobs)
    wait_for(lambda: squeue(slurm_conf) == [] or None, "the cancelled builds to leave the queue", 60)



@contextmanager
def slurm_service_settings(slurm_conf: Path, revisions: Revisions, tmp_path: Path, **slurm: str
                           ) -> Iterator[tuple[FakeGitHub, Settings]]:
    """The GitHub stand-in serving `revisions` as pull request #1, and settings of a service using it with
    `backend = "slurm"` (and the `[slurm]` options given)."""
    with FakeGitHub() as fake:
        fake.add_token(TOKEN, BOT)
        fake.add_repo(REPO, revisions.repo)
        fake.add_pull(REPO, 1, revisions.head, "head", "main")
        fake.set_permission(REPO, "maintainer", "write")
        yield fake, Settings.model_validate({
            "webhook_secret": SECRET, "token": TOKEN, "api_base_url": fake.url, "api_seconds_between_requests": 0,
            "api_seconds_between_writes": 0, "repo": REPO, "db_path": tmp_path / "bot.sqlite3",
            "work_dir": tmp_path / "work", "local_repo_path": revisions.repo, "backend": "slurm",
            "poll_interval_seconds": 0.2, "build_cache_dir": configured_dir(),
            "slurm": {"slurm_conf": str(slurm_conf), "poll_seconds": 0, "build_cpus": 1, **slurm},
        })


def label_event(revisions: Revisions) -> dict[str, object]:
    return pull_request_event("labeled", number=1, head_sha=revisions.head, base_sha=revisions.base,
                              label="kv-parity", labels=("kv-parity",))


def test_a_restarted_service_re_attaches_to_its_slurm_jobs_and_resubmits_a_killed_row_once(
        slurm_conf: Path, quick_revisions: Revisions, tmp_path: Path) -> None:
    """The real webhook service (SQLite, lifecycle) with `backend = "slurm"`: a label starts the campaign, the
    service stops while its jobs run, and a new service on the same database re-attaches by job id. Its row job
    is then killed with `scancel --signal=KILL` (a lost node): the service resubmits it once, merges the
    resubmission's result, says so in the completed transition and publishes the report once."""
    with slurm_service_settings(slurm_conf, quick_revisions, tmp_path) as (_, settings):
        with service(settings) as first:
            post(first.url, "pull_request", label_event(quick_revisions), delivery="label-slurm")
            [running] = first.wait_state(CampaignState.RUNNING, timeout=120)
            assert running.artifact_dir is not None
            wait_for(lambda: (running.artifact_dir.parent / STATE_FILE).is_file() or None, "the jobs submitted", 60)
        assert squeue(slurm_conf), "the campaign's jobs outlive the stopped service"
        with service(settings) as second:
            row_job = wait_for(lambda: next((job.job_id for job in run_state(running).jobs if job.role == "row"
                                             and job.attempt == 1 and job.state == "RUNNING"), None),
                               "the re-attached service to see the row job run", 300)
            subprocess.run(["scancel", "--signal=KILL", row_job], check=True)
            [done] = second.wait_state(CampaignState.COMPLETED, timeout=600)
            finished = wait_for(lambda: second.publisher.of("finished", campaign=done.id) or None,
                                "the report published", 60)
        assert [call["conclusion"] for call in finished] == ["success"], [call["summary"] for call in finished]
        assert done.id == running.id and done.attempt == 1
        assert squeue(slurm_conf) == []
        rows = [job for job in run_state(done).jobs if job.role == "row"]
        assert [job.attempt for job in rows] == [1, 2]
        assert rows[0].state == "CANCELLED" and rows[0].lost is not None and rows[1].state == "COMPLETED"
        store = Store(settings.db_path)
        transitions = store.transitions(done.id)
        store.close()
        assert [t.to_state.value for t in transitions] == ["requested", "dispatched", "running", "completed"]
        completed = transitions[-1].reason
        assert f"resubmitted once as Slurm job {rows[1].job_id}" in completed and "lost node" in completed, completed
        assert done.artifact_dir is not None
        report = CampaignReport.model_validate_json((done.artifact_dir / "report.json").read_text(encoding="utf-8"))
        [row] = report.rows
        assert row.scheduled is not None and row.scheduled.job_id == rows[1].job_id
        assert report.stopped is None


def test_parity_cancel_mid_row_scancels_every_job_and_the_row_removes_its_scratch(
        slurm_conf: Path, slow_revisions: Revisions, tmp_path: Path) -> None:
    """`/parity cancel` while the row job runs: the campaign ends cancelled and squeue lists nothing. scancel's
    SIGTERM reaches `kv-parity row` mid-sample, and it removes its scratch directory on the node before it ends
    (the default action used to leave the worktree and staged binaries of every cancelled row)."""
    node_scratch = tmp_path / "node-scratch"
    with slurm_service_settings(slurm_conf, slow_revisions, tmp_path, node_scratch=str(node_scratch)) as (
            _, settings), service(settings) as bot:
        post(bot.url, "pull_request", label_event(slow_revisions), delivery="label-cancel")
        [running] = bot.wait_state(CampaignState.RUNNING, timeout=120)
        assert running.artifact_dir is not None
        wait_for(lambda: (running.artifact_dir.parent / STATE_FILE).is_file() and any(
            job.role == "row" and job.state == "RUNNING" for job in run_state(running).jobs) or None,
            "the row job to run", 300)
        wait_for(lambda: staged(node_scratch), "the row to stage its inputs", 120)
        handle = RunHandle.model_validate_json(bot.store.handle(running.id) or "")
        post(bot.url, "issue_comment", comment_event("/parity cancel"), delivery="cancel-slurm")
        bot.wait_state(CampaignState.CANCELLED, timeout=120)  # recorded before the backend is asked to cancel
        wait_for(lambda: squeue(slurm_conf) == [] or None, "squeue to list none of the campaign's jobs", 120)
        jobs = wait_for(lambda: (found := {job.slot: job for job in run_state(running).jobs}) and all(
            job.final for job in found.values()) and found or None, "the backend to record the jobs' ends", 60)
        assert jobs["row-0"].state == jobs["fixtures"].state == "CANCELLED"
        assert jobs["row-0"].cancelled_by_bot and jobs["row-0"].lost is None and len(jobs) == 5
        assert all(job.cancelled_by_bot for job in jobs.values() if job.state == "CANCELLED")
        assert sorted(node_scratch.iterdir()) == [], "every build and row job removed its scratch directory"
    result = backend(slow_revisions, slurm_conf).poll(running, handle)
    assert not result.running and result.report is None and "cancelled" in (result.error or "")


def test_a_handle_without_its_slurm_state_ends_the_campaign_naming_the_file(
        slurm_conf: Path, quick_revisions: Revisions, tmp_path: Path) -> None:
    campaign = view(quick_revisions, tmp_path, "stateless")
    handle = RunHandle(backend="slurm", ref="1", token="0", out_dir=str(tmp_path / "stateless" / "out"))
    result = backend(quick_revisions, slurm_conf).poll(campaign, handle)
    assert not result.running and result.report is None
    assert result.error == f"no readable Slurm state ({tmp_path / 'stateless' / STATE_FILE}) for this campaign"


def test_parity_status_and_the_status_comment_name_slurms_reason_and_queue_place_while_jobs_pend(
        slurm_conf: Path, quick_revisions: Revisions, tmp_path: Path) -> None:
    """The real service and publisher against the GitHub stand-in. A job occupies the node, so the campaign's
    builds pend: the status comment says so with Slurm's reason and place. Its row job is held (`scontrol
    hold`): once the builds run, `/parity status` names the held row job, Slurm's reason and its place."""
    client = SlurmClient(slurm_conf)
    script = tmp_path / "occupy.sh"
    script.write_text("#!/bin/bash\nsleep 600\n")
    occupier = client.sbatch(["--exclusive", "--nodes=1", "--job-name=occupier", f"--output={tmp_path / '%j.out'}"],
                             script, tmp_path)
    builds_pend = re.compile(r"⏸ Waiting in the scheduler's queue: build-baseline: Slurm job \d+ PENDING "
                             r"\((Resources|Priority), \d+ of \d+ pending\)")
    try:
        with slurm_service_settings(slurm_conf, quick_revisions, tmp_path) as (fake, settings):
            app = create_app(settings, publisher_factory=default_publisher)
            with serve_app(app) as url:
                store: Store = app.state.store
                post(url, "pull_request", label_event(quick_revisions), delivery="label-pending")

                def status_comment() -> str:
                    return next((c["body"] for c in fake.comments(REPO, 1) if is_status_comment(c["body"])), "")

                wait_for(lambda: builds_pend.search(status_comment()), "the status comment to say the builds pend",
                         120)
                [campaign] = store.for_pr(REPO, 1)
                [row] = [job for job in run_state(campaign).jobs if job.role == "row"]
                subprocess.run(["scontrol", "hold", row.job_id], check=True, env=client.environ)
                client.scancel([occupier])
                held = re.compile(rf"row {ROW}: Slurm job {row.job_id} PENDING \(JobHeld(Admin|User), "
                                  r"\d+ of \d+ pending\)")
                wait_for(lambda: held.search(store.require(campaign.id).scheduler_wait or ""),
                         "the stored line to name the held row job", 300)
                post(url, "issue_comment", comment_event("/parity status"), delivery="status-pending")
                reply = wait_for(lambda: next((c["body"] for c in fake.comments(REPO, 1)
                                               if c["body"].startswith("Parity campaigns")), None),
                                 "the /parity status reply", 60)
                [line] = [ln for ln in reply.splitlines() if campaign.id in ln]
                assert "running · ⏸ Waiting in the scheduler's queue: " in line and held.search(line), reply
                assert held.search(status_comment()), status_comment()
                post(url, "issue_comment", comment_event("/parity cancel"), delivery="cancel-pending")
                wait_for(lambda: store.require(campaign.id).state == CampaignState.CANCELLED or None,
                         "the campaign cancelled", 120)
                wait_for(lambda: not client.live([job.job_id for job in run_state(campaign).jobs]) or None,
                         "the campaign's jobs to leave the queue", 120)
                ended = wait_for(lambda: (body := status_comment()) and "Cancelled" in body and body,
                                 "the status comment to say cancelled", 60)
                assert "Waiting in the scheduler's queue" not in ended
                assert store.require(campaign.id).scheduler_wait is None
    finally:
        client.scancel([occupier])
