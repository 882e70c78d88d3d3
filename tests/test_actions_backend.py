"""The App-mode `actions` backend end to end: the real webhook service, SQLite, the real publisher and the
GitHub stand-in over HTTP. The test plays GitHub Actions: it sees the dispatch arrive, seeds the run's jobs
(with the annotations GitHub writes), uploads a report artifact zip built from a report that verifies, and
completes the run. Every wait is a bounded `wait_until` on a real condition.
"""

from __future__ import annotations

import io
import json
import stat
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.core.campaign import Campaign, CampaignState
from bot.dispatch.actions import ActionsBackend, combine_retry, lost_runner, read_report
from bot.dispatch.artifact_zip import ArtifactError, extract_artifact
from bot.dispatch.campaign_workflow import REPORT_ARTIFACT
from bot.github.models import WorkflowJobInfo, WorkflowRunInfo, WorkflowStepInfo
from bot.publish import comment_markers
from bot.service.app import create_app
from bot.settings import Settings
from bot.store.campaigns import Store
from runners.pipeline.distributed.common import FIXTURES_ROW
from runners.schema.report import CampaignReport, CheckConclusion, Revision, StopRecord
from runners.schema.verdicts import campaign_verdicts
from tests.fakes.github_api import FakeGitHub
from tests.report_factory import make_report, with_undecided_conclusion
from tests.test_event_cli import INPUTS, MAX_INPUTS, TOKEN, WORKFLOW, History, make_history, serve_repo
from tests.webhooks import REPO, SECRET, check_run_event, comment_event, post, pull_request_event, serve_app, wait_until

S = CampaignState
LOST = (
    "The self-hosted runner: bm-kv-02 lost communication with the server. Verify the machine is running and "
    "has a healthy network connection."
)
BUILD, PUBLISH = "build both revisions", "merge and publish"
Job = tuple[str, str, list[str]]
"""(job name, conclusion, annotations attached to it); conclusion "lost" is a failure GitHub recorded for a
runner that stopped answering: a started step that never completed."""
STEPS: dict[str, list[tuple[str, str, str | None]]] = {
    "success": [("Set up job", "completed", "success"), ("kv-parity", "completed", "success")],
    "failure": [("Set up job", "completed", "success"), ("kv-parity", "completed", "failure")],
    "cancelled": [("Set up job", "completed", "success"), ("kv-parity", "completed", "cancelled")],
    "skipped": [],
    "lost": [("Set up job", "completed", "success"), ("kv-parity", "in_progress", None)],
}


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    return make_history(tmp_path_factory.mktemp("widgets"))


def report_for(campaign_id: str, base: str, head: str) -> CampaignReport:
    """The factory's passing report (every verdict recomputes), for this campaign's revisions."""
    return make_report("pass").model_copy(
        update={
            "campaign_id": campaign_id,
            "revisions": [
                Revision(arm="baseline", sha=base, requested=base),
                Revision(arm="candidate", sha=head, requested=head),
            ],
        }
    )


def only_rows(report: CampaignReport, keep: list[str], *, missing_stop: bool) -> CampaignReport:
    """The report `kv-parity merge` writes when only `keep` rows came back (a stop names the missing ones)."""
    rows = [row for row in report.rows if row.row.id in keep]
    missing = [row.row.id for row in report.rows if row.row.id not in keep]
    stopped = (
        StopRecord(stage="rows", blocking=True, reason=f"no row result for {', '.join(missing)}")
        if missing_stop
        else None
    )
    skipped = report.skipped if missing_stop else [*report.skipped, f"rows not selected: {', '.join(missing)}"]
    partial = report.model_copy(
        update={"rows": rows, "stopped": stopped, "skipped": skipped, "created_unix": report.created_unix + 60}
    )
    return partial.model_copy(update={"verdicts": campaign_verdicts(partial)})


def zipped(files: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def artifact(report: CampaignReport) -> bytes:
    return zipped(
        {
            "report.json": report.model_dump_json(indent=2).encode(),
            "vllm-disagg/schedule.json": b'{"pairs": []}\n',
        }
    )


@dataclass
class Service:
    fake: FakeGitHub
    history: History
    store: Store
    url: str

    def campaign(self, pr: int = 1) -> Campaign:
        [campaign] = self.store.for_pr(REPO, pr)
        return campaign

    def wait_state(self, state: CampaignState, timeout: float = 20) -> Campaign:
        return wait_until(  # type: ignore[no-any-return]
            lambda: (found := self.store.for_pr(REPO, 1)) and found[0].state == state and found[0],
            f"campaign {state}; have {[(c.state, c.reason) for c in self.store.for_pr(REPO, 1)]}",
            timeout,
        )

    def wait_published(self, campaign_id: str, kind: str) -> None:
        wait_until(lambda: (kind, "done") in self.store.publications(campaign_id), f"{kind} published")

    def wait_dispatches(self, count: int) -> list[dict[str, Any]]:
        return wait_until(  # type: ignore[no-any-return]
            lambda: len(found := self.fake.dispatches(REPO)) >= count and found, f"{count} dispatch(es)"
        )

    def label(self) -> None:
        payload = pull_request_event(
            "labeled",
            head_sha=self.history.head,
            base_sha=self.history.main2,
            label="kv-parity",
            labels=("kv-parity",),
        )
        assert post(self.url, "pull_request", payload).status_code == 202

    def finish_run(
        self,
        run_id: int,
        conclusion: str,
        jobs: list[Job],
        report: CampaignReport | None = None,
    ) -> None:
        """Play the campaign workflow's end: its jobs, its report artifact, then the run's completion."""
        for name, job_conclusion, messages in jobs:
            conclusion_seen = "failure" if job_conclusion == "lost" else job_conclusion
            self.fake.add_job(
                run_id, name, conclusion=conclusion_seen, annotations=messages, steps=STEPS[job_conclusion]
            )
        if report is not None:
            self.fake.add_artifact(run_id, REPORT_ARTIFACT, artifact(report))
        self.fake.set_run_status(run_id, "completed", conclusion)

    def check_run(self) -> dict[str, Any]:
        [check_run] = self.fake.check_runs(REPO)
        return check_run

    def result_comments(self, campaign_id: str) -> list[str]:
        return [
            c["body"]
            for c in self.fake.comments(REPO, 1)
            if comment_markers.result_marker_campaign(c["body"]) == campaign_id
        ]


@pytest.fixture()
def service(tmp_path: Path, history: History) -> Iterator[Service]:
    with FakeGitHub() as fake:
        serve_repo(fake, history)
        settings = Settings.model_validate(
            {
                "webhook_secret": SECRET,
                "token": TOKEN,
                "api_base_url": fake.url,
                "api_seconds_between_requests": 0,
                "api_seconds_between_writes": 0,
                "repo": REPO,
                "bot_login": "github-actions[bot]",
                "db_path": tmp_path / "bot.sqlite3",
                "work_dir": tmp_path / "work",
                "backend": "actions",
                "actions_workflow": WORKFLOW,
                "actions_ref": "main",
                "actions_poll_seconds": 0,
                "poll_interval_seconds": 0.05,
            }
        )
        with serve_app(create_app(settings)) as url:
            yield Service(fake, history, Store(settings.db_path), url)


def states(store: Store, campaign_id: str) -> list[str]:
    return [t.to_state.value for t in store.transitions(campaign_id)]


def ok_jobs(rows: list[str]) -> list[Job]:
    return [(BUILD, "success", []), *[(f"row {row}", "success", []) for row in rows], (PUBLISH, "success", [])]


# ----------------------------------------------------------------- through the service


def test_dispatch_then_a_verified_artifact_is_published(service: Service) -> None:
    service.label()
    [dispatch] = service.wait_dispatches(1)
    campaign = service.wait_state(S.RUNNING)
    inputs = dispatch["inputs"]
    assert dispatch["workflow"] == WORKFLOW and dispatch["ref"] == "main"
    assert len(inputs) <= MAX_INPUTS and all(isinstance(v, str) for v in inputs.values())
    assert inputs == {
        "campaign_id": campaign.id,
        "base_sha": service.history.base,
        "head_sha": service.history.head,
        "rows": "",
        "config_ref": service.history.main2,  # the config is read at the base branch tip
        "pr_number": "1",
    }
    assert set(inputs) == set(INPUTS)
    run_id = dispatch["run_id"]
    service.fake.set_run_status(run_id, "in_progress")
    service.fake.add_job(run_id, BUILD, status="in_progress", conclusion=None)
    wait_until(
        lambda: "build" in (service.check_run()["output"] or {}).get("title", ""), "build progress on the check run"
    )
    report = report_for(campaign.id, service.history.base, service.history.head)
    service.finish_run(run_id, "success", ok_jobs(["vllm-disagg", "sglang-disagg"]), report)
    done = service.wait_state(S.COMPLETED)
    service.wait_published(done.id, "finished")
    assert states(service.store, done.id) == ["requested", "dispatched", "running", "completed"]
    assert done.conclusion == "success" and done.reason == f"report written: {report.verdicts.summary}"  # type: ignore[union-attr]
    check_run = service.check_run()
    assert (check_run["status"], check_run["conclusion"], check_run["external_id"]) == (
        "completed",
        "success",
        done.id,
    )
    assert len(service.result_comments(done.id)) == 1
    assert done.artifact_dir is not None
    assert (done.artifact_dir / "vllm-disagg" / "schedule.json").is_file(), "the rows' evidence is kept"
    assert (done.artifact_dir / "report.md").is_file(), "the publisher wrote the full artifact"


def test_a_profile_request_dispatches_mode_profile_and_publishes_the_profile(service: Service) -> None:
    """`/parity profile` is no longer refused on the actions backend: the workflow runs it (its `mode` input)."""
    assert post(service.url, "issue_comment", comment_event("/parity profile")).status_code == 202
    [dispatch] = service.wait_dispatches(1)
    campaign = service.wait_state(S.RUNNING)
    assert campaign.mode == "profile"
    assert dispatch["inputs"] == {
        "campaign_id": campaign.id,
        "base_sha": service.history.base,
        "head_sha": service.history.head,
        "rows": "",
        "config_ref": service.history.main2,
        "pr_number": "1",
        "mode": "profile",
    }
    profile = make_report("profile").model_copy(
        update={"campaign_id": campaign.id, "revisions": report_for(campaign.id, service.history.base,
                                                                    service.history.head).revisions})
    service.finish_run(dispatch["run_id"], "success", ok_jobs(["vllm-disagg", "sglang-disagg"]), profile)
    done = service.wait_state(S.COMPLETED)
    service.wait_published(done.id, "finished")
    assert not any("runs on the local backend" in c["body"] for c in service.fake.comments(REPO, 1))
    assert len(service.result_comments(done.id)) == 1
    [check_run] = service.fake.check_runs(REPO)
    assert check_run["name"] == "kv-parity / profile", "a profile never concludes the campaign's check"
    rerun = check_run_event("requested_action", external_id=done.id, head_sha=service.history.head, identifier="rerun")
    assert post(service.url, "check_run", rerun).status_code == 202
    assert service.wait_dispatches(2)[1]["inputs"]["mode"] == "profile", "its Rerun button reruns the profile"


def test_a_campaign_report_for_a_profile_request_is_errored_naming_the_mode(service: Service) -> None:
    assert post(service.url, "issue_comment", comment_event("/parity profile")).status_code == 202
    [dispatch] = service.wait_dispatches(1)
    campaign = service.wait_state(S.RUNNING)
    report = report_for(campaign.id, service.history.base, service.history.head)
    service.finish_run(dispatch["run_id"], "success", ok_jobs(["vllm-disagg", "sglang-disagg"]), report)
    errored = service.wait_state(S.ERRORED)
    assert "is a campaign report, this campaign asked for profile" in errored.reason


def test_without_pages_the_check_run_links_the_workflow_run(service: Service) -> None:
    """Pages off (the default): the check run's details_url is the campaign's workflow run (issue 14)."""
    service.label()
    [dispatch] = service.wait_dispatches(1)
    campaign = service.wait_state(S.RUNNING)
    report = report_for(campaign.id, service.history.base, service.history.head)
    service.finish_run(dispatch["run_id"], "success", ok_jobs(["vllm-disagg", "sglang-disagg"]), report)
    service.wait_published(service.wait_state(S.COMPLETED).id, "finished")
    [check_run] = service.fake.check_runs(REPO)
    assert check_run["details_url"] == f"https://github.com/{REPO}/actions/runs/{dispatch['run_id']}"


@pytest.mark.parametrize(("outcome", "configured", "expected"), [
    ("inconclusive_straddle", None, "action_required"),
    ("blocked_timing_field", "neutral", "neutral"),
])
def test_an_undecided_campaign_blocks_a_required_check_unless_the_repository_chose_otherwise(
    service: Service, outcome: str, configured: str | None, expected: str
) -> None:
    """GitHub counts neutral as passing a required check: only a repository's own config may choose it."""
    service.label()
    [dispatch] = service.wait_dispatches(1)
    campaign = service.wait_state(S.RUNNING)
    report = make_report(outcome).model_copy(
        update={"campaign_id": campaign.id,
                "revisions": report_for(campaign.id, service.history.base, service.history.head).revisions})
    if configured is not None:
        report = with_undecided_conclusion(report, configured)
    service.finish_run(dispatch["run_id"], "success", ok_jobs(["vllm-disagg", "sglang-disagg"]), report)
    service.wait_published(service.wait_state(S.COMPLETED).id, "finished")
    check_run = service.check_run()
    assert check_run["conclusion"] == expected
    assert check_run["details_url"] == f"https://github.com/{REPO}/actions/runs/{dispatch['run_id']}"
    assert f"No decision was reached, so this check concludes `{expected}`" in check_run["output"]["summary"]


def test_a_tampered_report_is_refused_and_reported_as_errored(service: Service) -> None:
    service.label()
    [dispatch] = service.wait_dispatches(1)
    campaign = service.wait_state(S.RUNNING)
    honest = report_for(campaign.id, service.history.base, service.history.head)
    assert honest.verdicts is not None
    forged = honest.model_copy(
        update={"verdicts": honest.verdicts.model_copy(update={"conclusion": CheckConclusion.FAILURE})}
    )
    service.finish_run(dispatch["run_id"], "success", ok_jobs(["vllm-disagg", "sglang-disagg"]), forged)
    ended = service.wait_state(S.ERRORED)
    service.wait_published(ended.id, "ended")
    assert "disagrees with its own recomputation" in ended.reason
    assert "campaign conclusion: stored failure, recomputed success" in ended.reason
    check_run = service.check_run()
    assert (check_run["status"], check_run["conclusion"]) == ("completed", "failure")
    assert "disagrees with its own recomputation" in check_run["output"]["title"]
    assert [action["identifier"] for action in check_run["actions"]] == ["rerun"]
    assert service.result_comments(ended.id) == []


def test_a_cancelled_run_is_reported_naming_the_job_with_rerun_offered(service: Service) -> None:
    service.label()
    [dispatch] = service.wait_dispatches(1)
    service.wait_state(S.RUNNING)
    jobs: list[Job] = [(BUILD, "success", []), ("row vllm-disagg", "cancelled", []), (PUBLISH, "skipped", [])]
    service.finish_run(dispatch["run_id"], "cancelled", jobs)
    ended = service.wait_state(S.ERRORED)
    service.wait_published(ended.id, "ended")
    assert f"workflow run {dispatch['run_id']} was cancelled" in ended.reason
    assert "job 'row vllm-disagg' cancelled" in ended.reason
    check_run = service.check_run()
    assert check_run["conclusion"] == "failure"
    assert [action["identifier"] for action in check_run["actions"]] == ["rerun"]
    assert "row vllm-disagg" in check_run["output"]["summary"]


def test_a_failed_job_is_reported_naming_it(service: Service) -> None:
    service.label()
    [dispatch] = service.wait_dispatches(1)
    service.wait_state(S.RUNNING)
    service.finish_run(dispatch["run_id"], "failure", [(BUILD, "failure", ["Process completed with exit code 2."])])
    ended = service.wait_state(S.ERRORED)
    assert "job 'build both revisions' concluded failure" in ended.reason
    assert len(service.fake.dispatches(REPO)) == 1, "an ordinary failure is never retried"


def test_a_lost_runner_row_is_retried_once_and_the_retry_recorded(service: Service) -> None:
    service.label()
    [first] = service.wait_dispatches(1)
    campaign = service.wait_state(S.RUNNING)
    full = report_for(campaign.id, service.history.base, service.history.head)
    jobs: list[Job] = [
        (BUILD, "success", []),
        ("row vllm-disagg", "success", []),
        ("row sglang-disagg", "lost", [LOST]),
        (PUBLISH, "success", []),
    ]
    service.finish_run(first["run_id"], "failure", jobs, only_rows(full, ["vllm-disagg"], missing_stop=True))
    _, retry = service.wait_dispatches(2)
    assert retry["inputs"] == {**first["inputs"], "rows": "sglang-disagg"}, "same campaign, only the lost row"
    assert service.campaign().state == S.RUNNING
    service.finish_run(
        retry["run_id"], "success", ok_jobs(["sglang-disagg"]), only_rows(full, ["sglang-disagg"], missing_stop=False)
    )
    done = service.wait_state(S.COMPLETED)
    service.wait_published(done.id, "finished")
    [completed] = [t for t in service.store.transitions(done.id) if t.to_state == S.COMPLETED]
    assert "rows sglang-disagg retried once after their runner was lost" in completed.reason
    assert f"in run {first['run_id']}; retry run {retry['run_id']}" in completed.reason
    assert done.artifact_dir is not None
    combined = CampaignReport.model_validate_json((done.artifact_dir / "report.json").read_text())
    assert [row.row.id for row in combined.rows] == ["vllm-disagg", "sglang-disagg"] and combined.stopped is None
    assert service.check_run()["conclusion"] == "success"
    assert len(service.fake.dispatches(REPO)) == 2


def test_a_row_lost_again_after_its_retry_is_reported(service: Service) -> None:
    service.label()
    [first] = service.wait_dispatches(1)
    campaign = service.wait_state(S.RUNNING)
    full = report_for(campaign.id, service.history.base, service.history.head)
    lost: list[Job] = [(BUILD, "success", []), ("row sglang-disagg", "lost", [LOST]), (PUBLISH, "success", [])]
    service.finish_run(first["run_id"], "failure", lost, only_rows(full, [], missing_stop=True))
    _, retry = service.wait_dispatches(2)
    service.finish_run(retry["run_id"], "failure", lost, only_rows(full, [], missing_stop=True))
    ended = service.wait_state(S.ERRORED)
    assert "after retrying rows sglang-disagg once" in ended.reason
    assert "job 'row sglang-disagg' failed: its runner was lost" in ended.reason
    assert len(service.fake.dispatches(REPO)) == 2, "retried once, not twice"


def test_a_row_printing_the_lost_runner_message_is_not_retried(service: Service) -> None:
    """A row job runs pull-request code, which can print GitHub's lost-runner text as an annotation
    (`::error::The self-hosted runner ...`); its steps completed, one with a failure: no re-roll."""
    service.label()
    [first] = service.wait_dispatches(1)
    campaign = service.wait_state(S.RUNNING)
    full = report_for(campaign.id, service.history.base, service.history.head)
    imitated: list[Job] = [
        (BUILD, "success", []),
        ("row vllm-disagg", "success", []),
        ("row sglang-disagg", "failure", [LOST]),
        (PUBLISH, "success", []),
    ]
    service.finish_run(first["run_id"], "failure", imitated, only_rows(full, ["vllm-disagg"], missing_stop=True))
    ended = service.wait_state(S.ERRORED)
    assert "job 'row sglang-disagg' concluded failure" in ended.reason and "runner was lost" not in ended.reason
    assert len(service.fake.dispatches(REPO)) == 1


def test_a_lost_fixtures_job_is_not_retried_as_rows(service: Service) -> None:
    """A retry is a `rows=` subset, which runs no Stage 6 fixtures: a lost fixtures job ends the campaign."""
    service.label()
    [first] = service.wait_dispatches(1)
    campaign = service.wait_state(S.RUNNING)
    full = report_for(campaign.id, service.history.base, service.history.head)
    jobs: list[Job] = [*ok_jobs(["vllm-disagg", "sglang-disagg"])[:-1], (f"row {FIXTURES_ROW}", "lost", [LOST]),
                       (PUBLISH, "success", [])]
    service.finish_run(first["run_id"], "failure", jobs, full)
    ended = service.wait_state(S.ERRORED)
    assert f"job 'row {FIXTURES_ROW}' concluded failure" in ended.reason, ended.reason
    assert len(service.fake.dispatches(REPO)) == 1


def test_cancel_command_cancels_the_workflow_run(service: Service) -> None:
    service.label()
    [dispatch] = service.wait_dispatches(1)
    service.wait_state(S.RUNNING)
    service.fake.set_run_status(dispatch["run_id"], "in_progress")
    assert post(service.url, "issue_comment", comment_event("/parity cancel")).status_code == 202
    ended = service.wait_state(S.CANCELLED)
    # The ending is persisted before the run is stopped, so the cancel request may still be on its way.
    wait_until(lambda: service.fake.cancelled_runs(REPO), "the run's cancel request")
    assert service.fake.cancelled_runs(REPO) == [dispatch["run_id"]]
    assert service.fake.run(dispatch["run_id"])["conclusion"] == "cancelled"
    service.wait_published(ended.id, "ended")


# ----------------------------------------------------------------- the pieces


def _job(conclusion: str | None, steps: list[tuple[str, str, str | None]], runner: str | None = "bm-kv-02") -> Any:
    return WorkflowJobInfo(
        id=1,
        name="row a",
        status="completed",
        conclusion=conclusion,
        runner_id=None if runner is None else 7,
        runner_name=runner,
        html_url=None,
        steps=[
            WorkflowStepInfo(number=n, name=name, status=status, conclusion=done)
            for n, (name, status, done) in enumerate(steps, start=1)
        ],
    )


def test_lost_runner_is_read_from_githubs_job_record() -> None:
    assert lost_runner(_job("failure", STEPS["lost"])) == (
        "bm-kv-02 stopped reporting during step 'kv-parity', which never completed"
    )
    assert lost_runner(_job("failure", [])) == "bm-kv-02 stopped reporting before any step was recorded"
    assert lost_runner(_job("failure", STEPS["failure"])) is None, "a step failed: the job's own verdict"
    assert lost_runner(_job("failure", [*STEPS["failure"], ("post", "in_progress", None)])) is None
    assert lost_runner(_job("failure", [], runner=None)) is None, "never had a runner"
    assert lost_runner(_job("cancelled", STEPS["lost"])) is None
    assert lost_runner(_job("success", STEPS["success"])) is None


def _duplicate_zip() -> bytes:
    """Two entries of one name: unpacking must not let the second silently replace the first."""
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w") as archive:
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate this test builds on purpose
        for text in ("honest", "forged"):
            archive.writestr(zipfile.ZipInfo("report.json"), text)
    return buffer.getvalue()


def _symlink_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo("report.json")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def _patched_zip(local_offset: int, central_offset: int, value: int) -> bytes:
    """A one-member stored zip whose 2-byte header field (flags or method) is set in both headers."""
    data = bytearray(zipped_stored({"report.json": b"{}"}))
    central = data.index(b"PK\x01\x02")
    for at in (local_offset, central + central_offset):
        data[at:at + 2] = value.to_bytes(2, "little")
    return bytes(data)


def zipped_stored(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (zipped({"../escape.txt": b"x"}), "outside the artifact directory"),
        (zipped({"/etc/cron.d/x": b"x"}), "outside the artifact directory"),
        (zipped({"a\\..\\..\\x": b"x"}), "outside the artifact directory"),
        (_symlink_zip(), "symbolic link"),
        (_duplicate_zip(), "cannot be unpacked"),
        (b"not a zip", "not a readable zip"),
        (_patched_zip(6, 8, 0x0001), "cannot decode: .*encrypted"),
        (_patched_zip(8, 10, 97), "cannot decode: .*compression method"),
    ],
    ids=["dotdot", "absolute", "backslash", "symlink", "duplicate", "garbage", "encrypted", "unknown-method"],
)
def test_unsafe_artifacts_are_refused(tmp_path: Path, data: bytes, problem: str) -> None:
    with pytest.raises(ArtifactError, match=problem):
        extract_artifact(data, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()
    assert not (tmp_path / "escape.txt").exists()


def test_artifact_size_is_bounded_while_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bot.dispatch.artifact_zip.MAX_ARTIFACT_BYTES", 1000)
    bomb = zipped({"report.json": b"0" * 5000})
    assert len(bomb) < 1000, "the compressed zip is small; only its content is large"
    with pytest.raises(ArtifactError, match="declares more than 1000 bytes of content"):
        extract_artifact(bomb, tmp_path / "out")
    extract_artifact(zipped({"a/b.txt": b"ok"}), tmp_path / "out")
    assert (tmp_path / "out" / "a" / "b.txt").read_bytes() == b"ok"


def _campaign(report: CampaignReport) -> Campaign:
    revisions = {r.arm: r.sha for r in report.revisions}
    return Campaign(
        id=report.campaign_id,
        repo=REPO,
        pr_number=1,
        head_sha=revisions["candidate"],
        base_sha=revisions["baseline"],
        relationship="diverged",
        rows=None,
        state=S.RUNNING,
        requested_by="maintainer",
        trigger="label",
        created_at=datetime(2025, 11, 29, tzinfo=UTC),
        deadline=None,
        artifact_dir=None,
        queue_position=0,
        attempt=1,
        reason="",
        conclusion=None,
        config_source="",
    )


def test_a_report_of_another_campaign_or_revision_is_refused(tmp_path: Path) -> None:
    report = report_for("kvp-000000000001", "a" * 40, "b" * 40)
    (tmp_path / "report.json").write_text(report.model_dump_json())
    assert read_report(tmp_path, _campaign(report), "here") == report
    other = _campaign(report).model_copy(update={"id": "kvp-000000000002"})
    with pytest.raises(ArtifactError, match="is for campaign 'kvp-000000000001'"):
        read_report(tmp_path, other, "here")
    moved = _campaign(report).model_copy(update={"head_sha": "c" * 40})
    with pytest.raises(ArtifactError, match="not this campaign's"):
        read_report(tmp_path, moved, "here")
    (tmp_path / "report.json").write_text("{}")
    with pytest.raises(ArtifactError, match="not a valid report"):
        read_report(tmp_path, _campaign(report), "here")


def test_rows_of_different_builds_are_never_combined() -> None:
    full = report_for("kvp-000000000001", "a" * 40, "b" * 40)
    first = only_rows(full, ["vllm-disagg"], missing_stop=True)
    retry = only_rows(full, ["sglang-disagg"], missing_stop=False)
    combined = combine_retry(first, retry, ["sglang-disagg"], None)
    assert combined.verdicts == full.verdicts
    rebuilt = retry.model_copy(
        update={"artifacts": [a.model_copy(update={"binary_sha256": "f" * 64}) for a in retry.artifacts]}
    )
    with pytest.raises(ArtifactError, match="artifacts differ"):
        combine_retry(first, rebuilt, ["sglang-disagg"], None)
    with pytest.raises(ArtifactError, match="no result for rows sglang-disagg"):
        combine_retry(first, only_rows(full, [], missing_stop=False), ["sglang-disagg"], None)


def test_a_retry_of_rows_keeps_the_first_runs_stage6_fixtures() -> None:
    """The retry is a `rows=` subset (no fixtures run); the combined report keeps the first run's fixtures."""
    full = make_report("stage6").model_copy(update={"campaign_id": "kvp-000000000001"})
    first = only_rows(full, ["vllm-disagg"], missing_stop=True)
    retry = only_rows(full.model_copy(update={"fixtures": []}), ["sglang-disagg"], missing_stop=False)
    combined = combine_retry(first, retry, ["sglang-disagg"], None)
    assert combined.fixtures == full.fixtures and combined.verdicts == full.verdicts


class _StubApi:
    """Counts API calls; `find` serves the earliest of `runs` not excluded, and no run ever completes."""

    def __init__(self, runs: list[WorkflowRunInfo]) -> None:
        self.calls: list[str] = []
        self.runs = runs

    def dispatch_workflow(self, workflow_file: str, ref: str, inputs: Mapping[str, str]) -> None:
        self.calls.append("dispatch")

    def find_dispatched_run(self, workflow_file: str, created_after: datetime, exclude: Any = ()) -> int | None:
        self.calls.append("find")
        return next((run.id for run in self.runs if run.id not in exclude), None)

    def workflow_run(self, run_id: int) -> WorkflowRunInfo:
        self.calls.append("run")
        return next(run for run in self.runs if run.id == run_id)

    def workflow_jobs(self, run_id: int) -> list[WorkflowJobInfo]:
        self.calls.append("jobs")
        return []

    def cancel_workflow_run(self, run_id: int) -> bool:
        raise AssertionError("no run to cancel")

    def download_artifact(self, run_id: int, name: str, max_bytes: int | None = None) -> bytes | None:
        raise AssertionError("no run to download from")


class _Clock:
    def __init__(self) -> None:
        self.now = 1_764_410_400.0

    def __call__(self) -> float:
        return self.now


CAMPAIGN_ID = "kvp-000000000001"


def _run(run_id: int, campaign_id: str) -> WorkflowRunInfo:
    title = f"kv-parity {campaign_id} #1 {'b' * 40} rows="
    return WorkflowRunInfo(
        id=run_id,
        display_title=title,
        status="queued",
        conclusion=None,
        html_url=f"https://github.com/{REPO}/actions/runs/{run_id}",
        created_at=datetime(2025, 11, 29, 10, tzinfo=UTC),
    )


@contextmanager
def _backend(
    tmp_path: Path, runs: list[WorkflowRunInfo]
) -> Iterator[tuple[ActionsBackend, _StubApi, _Clock, Callable[[], Any]]]:
    api, clock = _StubApi(runs), _Clock()
    backend = ActionsBackend(lambda repo: api, workflow=WORKFLOW, ref="main", poll_seconds=30, clock=clock)
    campaign = _campaign(report_for(CAMPAIGN_ID, "a" * 40, "b" * 40)).model_copy(
        update={"artifact_dir": tmp_path / "attempt-1" / "out"}
    )
    handle = backend.start(campaign, "")
    yield backend, api, clock, lambda: backend.poll(campaign, handle)


def test_polls_are_spaced_and_a_run_that_never_appears_is_an_error(tmp_path: Path) -> None:
    with _backend(tmp_path, []) as (_, api, clock, poll):
        assert poll().running and api.calls == ["dispatch", "find"]
        clock.now += 10
        assert poll().running and api.calls == ["dispatch", "find"], "no API call within the poll interval"
        clock.now += 30
        assert poll().running and api.calls.count("find") == 2
        clock.now += 600
        result = poll()
        assert not result.running and result.error is not None and "created no run" in result.error


def test_a_run_of_another_campaign_in_the_same_second_is_skipped(tmp_path: Path) -> None:
    with _backend(tmp_path, [_run(7, "kvp-someone-else"), _run(8, CAMPAIGN_ID)]) as (_, api, clock, poll):
        assert poll().running
        state = json.loads((tmp_path / "attempt-1" / "actions.json").read_text())
        assert state["foreign"] == [7] and state["dispatches"][0]["run_id"] is None
        clock.now += 30
        result = poll()
        assert result.running and [event.stage for event in result.progress] == ["queued"]
        state = json.loads((tmp_path / "attempt-1" / "actions.json").read_text())
        assert state["dispatches"][0]["run_id"] == 8
        assert api.calls == ["dispatch", "find", "run", "find", "run", "jobs"]


def test_a_dispatch_is_adopted_after_a_restart(tmp_path: Path) -> None:
    with _backend(tmp_path, []) as (backend, _, _, _):
        campaign = _campaign(report_for(CAMPAIGN_ID, "a" * 40, "b" * 40)).model_copy(
            update={"artifact_dir": tmp_path / "attempt-1" / "out"}
        )
        handle = backend.adopt(campaign)
        assert handle is not None and handle.ref == campaign.id
        state = json.loads((tmp_path / "attempt-1" / "actions.json").read_text())
        assert state["campaign_id"] == campaign.id and state["dispatches"][0]["run_id"] is None
        assert backend.adopt(campaign.model_copy(update={"artifact_dir": tmp_path / "attempt-2" / "out"})) is None
