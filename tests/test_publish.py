"""The publisher end to end against the GitHub stand-in over HTTP, plus the artifact writer.

The stand-in enforces GitHub's payload limits, so "accepted here" means "accepted by GitHub". The progress
rate limit is tested with an injected clock and a recording gateway, so no test sleeps.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from pydantic import SecretStr

from bot.cli.publish import CliSettings, publish_main
from bot.core.campaign import Campaign, CampaignState
from bot.core.repo_values import BotIdentity, CommentInfo
from bot.github.gateway import GitHubGateway
from bot.github.models import CheckAction, CheckConclusion, CheckOutput, CheckStatus, TokenAuth
from bot.publish import comment_markers, limits
from bot.publish.publisher import PROGRESS_INTERVAL_SECONDS, Publisher, web_url, write_artifact
from runners.progress import ProgressEvent
from runners.schema.report import CampaignReport
from tests.fakes.github_api import FakeGitHub
from tests.report_factory import (
    BASE_SHA,
    CAMPAIGN_ID,
    HEAD_SHA,
    make_report,
    make_wide_report,
    with_undecided_conclusion,
)

REPO = "octo-org/dynamo"
PR = 512
APP_ID = 4242
INSTALLATION_ID = 77
TOKEN = "ghs_actions_token"
BOT_LOGIN = "kv-parity[bot]"
"""The installation token acts as the App's bot user; an installation token cannot ask GET /user."""


class Clock:
    """A hand-driven monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def settings(api_url: str = "https://api.github.com") -> CliSettings:
    return CliSettings(
        check_name="kv-parity", command_word="/parity", label="kv-parity", api_base_url=api_url
    )


def campaign(campaign_id: str = CAMPAIGN_ID, minute: int = 0) -> Campaign:
    return Campaign(
        id=campaign_id,
        repo=REPO,
        pr_number=PR,
        head_sha=HEAD_SHA,
        base_sha=BASE_SHA,
        relationship="ancestor",
        rows=None,
        state=CampaignState.RUNNING,
        requested_by="alice",
        trigger="label",
        created_at=datetime(2025, 11, 29, 10, minute, tzinfo=UTC),
        deadline=datetime(2025, 11, 29, 16, 0, tzinfo=UTC),
        artifact_dir=None,
        queue_position=0,
        attempt=1,
        reason="",
        conclusion=None,
        config_source=f".github/kv-parity.toml@{BASE_SHA}",
    )


def report_for(campaign_id: str, outcome: str = "pass") -> CampaignReport:
    return make_report(outcome).model_copy(update={"campaign_id": campaign_id})


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    """The stand-in with one repository and pull request."""
    with FakeGitHub() as server:
        server.add_repo(REPO)
        server.register_app(APP_ID, "unused", "kv-parity")
        server.add_installation(INSTALLATION_ID, APP_ID, [REPO])
        server.add_installation_token(TOKEN, INSTALLATION_ID)
        server.add_pull(REPO, PR, HEAD_SHA, "feature", "main", base_sha=BASE_SHA)
        yield server


@pytest.fixture
def gateway(fake: FakeGitHub) -> GitHubGateway:
    return GitHubGateway(
        REPO,
        TokenAuth(token=SecretStr(TOKEN)),
        fake.url,
        bot_login=BOT_LOGIN,
        sleep=lambda _: None,
        seconds_between_requests=None,
        seconds_between_writes=None,
    )


def status_comments(fake: FakeGitHub) -> list[dict[str, Any]]:
    return [c for c in fake.comments(REPO, PR) if comment_markers.is_status_comment(c["body"])]


def result_comments(fake: FakeGitHub) -> list[dict[str, Any]]:
    return [c for c in fake.comments(REPO, PR) if comment_markers.result_marker_campaign(c["body"])]


# --- the whole campaign over HTTP ---------------------------------------------------------------------------


def test_whole_campaign_edits_one_status_comment_and_posts_one_result(
    fake: FakeGitHub, gateway: GitHubGateway, tmp_path: Path
) -> None:
    clock = Clock()
    publisher = Publisher(
        gateway, settings(fake.url), clock, artifact_base_url="https://artifacts.example/kv"
    )
    view = campaign()

    run_id = publisher.queued(view, 2)
    assert run_id is not None
    for done in range(0, 61, 5):
        publisher.progress(view, ProgressEvent(stage="performance", row="vllm-disagg", done=done, total=60))
        clock.now += 4.0
    publisher.finished(view, report_for(CAMPAIGN_ID), tmp_path / "artifact")

    (run,) = fake.check_runs(REPO)
    assert run["id"] == run_id and run["external_id"] == CAMPAIGN_ID and run["head_sha"] == HEAD_SHA
    assert (run["status"], run["conclusion"]) == ("completed", "success")
    assert [a["identifier"] for a in run["actions"]] == ["rerun"], "Cancel only while running"
    assert run["details_url"] == f"https://artifacts.example/kv/{CAMPAIGN_ID}/"
    assert run["output"]["title"].startswith("✅") and "```mermaid" in run["output"]["text"]
    (status,) = status_comments(fake)
    assert "✅ Parity holds" in status["body"] and "[result](" in status["body"]
    (result,) = result_comments(fake)
    assert not result["minimized"] and f"https://artifacts.example/kv/{CAMPAIGN_ID}/" in result["body"]
    assert len(fake.comments(REPO, PR)) == 2
    edits = fake.calls_to("PATCH", r"/issues/comments/\d+$")
    assert 1 <= len(edits) <= 9, "progress edits are rate limited (13 events in 52 s)"
    assert (tmp_path / "artifact" / "report.json").is_file()


def test_restarted_publisher_finds_the_status_comment_and_folds_older_results(
    fake: FakeGitHub, gateway: GitHubGateway, tmp_path: Path
) -> None:
    first = campaign("c-1", minute=0)
    Publisher(gateway, settings(fake.url), Clock()).finished(first, report_for("c-1"), tmp_path / "c-1")

    restarted = Publisher(gateway, settings(fake.url), Clock())
    second = campaign("c-2", minute=5)
    restarted.queued(second, 1)
    restarted.progress(second, ProgressEvent(stage="build", detail="cargo build"))
    restarted.finished(second, report_for("c-2", "perf_fail"), tmp_path / "c-2")

    (status,) = status_comments(fake)
    assert "c-2" in status["body"] and "❌" in status["body"]
    old, new = result_comments(fake)
    assert comment_markers.result_marker_campaign(old["body"]) == "c-1" and old["minimized"]
    assert old["minimized_reason"] == "outdated"
    assert comment_markers.result_marker_campaign(new["body"]) == "c-2" and not new["minimized"]
    assert [r["conclusion"] for r in fake.check_runs(REPO)] == ["success", "failure"]


def test_restart_mid_campaign_keeps_one_status_comment(
    fake: FakeGitHub, gateway: GitHubGateway, tmp_path: Path
) -> None:
    before = Publisher(gateway, settings(fake.url), Clock())
    view = campaign()
    before.queued(view, 1)
    before.progress(view, ProgressEvent(stage="determinism", row="vllm-disagg"))

    after = Publisher(gateway, settings(fake.url), Clock())
    after.progress(view, ProgressEvent(stage="performance", row="vllm-disagg", done=30, total=60))
    after.finished(view, report_for(CAMPAIGN_ID), tmp_path)

    assert len(status_comments(fake)) == 1 and len(result_comments(fake)) == 1
    assert len(fake.check_runs(REPO)) == 1


def test_finished_twice_posts_nothing_new(fake: FakeGitHub, gateway: GitHubGateway, tmp_path: Path) -> None:
    first = Publisher(gateway, settings(fake.url), Clock())
    view = campaign()
    first.queued(view, 1)
    report = report_for(CAMPAIGN_ID)
    first.finished(view, report, tmp_path)
    before = fake.comments(REPO, PR)

    Publisher(gateway, settings(fake.url), Clock()).finished(view, report, tmp_path)

    assert fake.comments(REPO, PR) == before
    assert len(fake.calls_to("POST", r"/issues/\d+/comments$")) == 2, "one status, one result"
    assert fake.calls_to("POST", r"/graphql") == []


def test_position_zero_means_started(fake: FakeGitHub, gateway: GitHubGateway) -> None:
    publisher = Publisher(gateway, settings(fake.url), Clock())
    view = campaign()
    run_id = publisher.queued(view, 0)

    (run,) = fake.check_runs(REPO)
    assert run["id"] == run_id
    assert run["status"] == "in_progress" and run["output"]["title"] == "🏃 Running: starting"
    (status,) = status_comments(fake)
    assert "🏃 Running" in status["body"]


def test_an_older_campaign_ending_late_does_not_overwrite_the_newer_status(
    fake: FakeGitHub, gateway: GitHubGateway
) -> None:
    publisher = Publisher(gateway, settings(fake.url), Clock())
    older, newer = campaign("c-1", minute=0), campaign("c-2", minute=5)
    publisher.queued(newer, 1)

    publisher.ended(older, "superseded", "superseded by `c-2`")

    (status,) = status_comments(fake)
    assert "Queued" in status["body"] and "c-2" in status["body"]


@pytest.mark.parametrize(
    ("state", "conclusion"),
    [
        ("cancelled", "cancelled"),
        ("superseded", "neutral"),
        ("timed_out", "timed_out"),
        ("errored", "failure"),
        ("config_error", "action_required"),
    ],
)
def test_ended_states_map_to_check_conclusions(
    fake: FakeGitHub, gateway: GitHubGateway, state: str, conclusion: str
) -> None:
    publisher = Publisher(gateway, settings(fake.url), Clock())
    view = campaign()
    publisher.queued(view, 1)

    publisher.ended(view, state, "why it ended\nsecond line of detail")

    (run,) = fake.check_runs(REPO)
    assert (run["status"], run["conclusion"]) == ("completed", conclusion)
    assert [a["identifier"] for a in run["actions"]] == ["rerun"]
    (status,) = status_comments(fake)
    if state == "config_error":
        assert "why it ended (1 more line in the check run)" in status["body"]
        assert "second line of detail" in run["output"]["summary"], "the base config's error is shown whole"
    else:
        assert "why it ended (the rest is not published" in status["body"]
        assert "second line" not in status["body"] + run["output"]["summary"] + run["output"]["title"]


def test_config_error_without_a_check_run_still_gets_one(fake: FakeGitHub, gateway: GitHubGateway) -> None:
    Publisher(gateway, settings(fake.url), Clock()).ended(campaign(), "config_error", "bad toml")

    (run,) = fake.check_runs(REPO)
    assert run["conclusion"] == "action_required" and run["external_id"] == CAMPAIGN_ID


def test_every_publisher_finds_a_campaigns_check_run_by_its_external_id_and_never_makes_a_second(
    fake: FakeGitHub, gateway: GitHubGateway, tmp_path: Path
) -> None:
    """The publisher alone owns the check run (issue 39): a restarted publisher, a retried publication and a second
    campaign of the same head each find their own run by its external_id (every run of the name, not only the
    newest), so nothing is created twice and no campaign completes another's run."""
    older, newer = campaign("c-1", minute=0), campaign("c-2", minute=5)
    first = Publisher(gateway, settings(fake.url), Clock())
    first.queued(older, 1)
    first.queued(newer, 2)

    restarted = Publisher(gateway, settings(fake.url), Clock())
    restarted.ended(older, "superseded", "replaced by c-2")
    restarted.progress(newer, ProgressEvent(stage="build", detail="cargo build"))
    restarted.finished(newer, report_for("c-2"), tmp_path / "c-2")
    Publisher(gateway, settings(fake.url), Clock()).finished(newer, report_for("c-2"), tmp_path / "c-2")

    runs = {run["external_id"]: run for run in fake.check_runs(REPO)}
    assert len(fake.check_runs(REPO)) == 2 and set(runs) == {"c-1", "c-2"}
    assert (runs["c-1"]["status"], runs["c-1"]["conclusion"]) == ("completed", "neutral")
    assert (runs["c-2"]["status"], runs["c-2"]["conclusion"]) == ("completed", "success")
    assert len(fake.calls_to("POST", r"/check-runs$")) == 2


def test_actions_only_publishers_open_a_check_run_only_to_publish_a_result_or_a_failure(
    fake: FakeGitHub, gateway: GitHubGateway, tmp_path: Path
) -> None:
    """In Actions-only mode nothing would end a check run left queued by a workflow run that failed before its
    publish job: a dispatched campaign shows in the status comment only, a cancelled one gets no check run, and
    the publish job (another process) opens and completes the one check run, which a republish finds again."""
    event = Publisher(gateway, settings(fake.url), Clock(), open_when_queued=False)
    cancelled, dispatched = campaign("c-1", minute=0), campaign("c-2", minute=5)
    assert event.queued(cancelled, 0) is None and event.queued(dispatched, 0) is None
    assert event.ended(cancelled, "cancelled", "cancelled by a maintainer") is None
    assert fake.check_runs(REPO) == [] and len(status_comments(fake)) == 1

    publish_job = Publisher(gateway, settings(fake.url), Clock(), open_when_queued=False)
    run_id = publish_job.finished(dispatched, report_for("c-2"), tmp_path / "c-2")
    republish = Publisher(gateway, settings(fake.url), Clock(), open_when_queued=False)
    assert republish.finished(dispatched, report_for("c-2"), tmp_path / "c-2") == run_id
    errored = campaign("c-3", minute=9)
    assert event.ended(errored, "errored", "the runner crashed") is not None

    assert sorted((run["external_id"], run["conclusion"]) for run in fake.check_runs(REPO)) == [
        ("c-2", "success"), ("c-3", "failure")]


def test_unknown_end_state_is_refused(gateway: GitHubGateway) -> None:
    with pytest.raises(ValueError, match="unknown end state"):
        Publisher(gateway, settings(), Clock()).ended(campaign(), "exploded", "x")


def test_forty_row_report_is_accepted_by_the_stand_in(
    fake: FakeGitHub, gateway: GitHubGateway, tmp_path: Path
) -> None:
    report = make_wide_report(40).model_copy(update={"campaign_id": CAMPAIGN_ID})

    Publisher(gateway, settings(fake.url), Clock()).finished(
        campaign(), report, tmp_path, "https://x.example/a"
    )

    (run,) = fake.check_runs(REPO)
    assert len(run["output"]["text"]) <= limits.CHECK_TEXT_LIMIT
    assert "did not fit GitHub's size limit" in run["output"]["text"]
    assert len(result_comments(fake)) == 1


@pytest.mark.parametrize(
    ("kind", "context", "expected"),
    [
        ("refused", {"reason": "@bob lacks `write`", "fix": "ask a maintainer"}, "🚫 Not starting"),
        ("help", {}, "`/parity rerun [rows=a,b]"),
        ("status", {"campaigns": []}, "No parity campaign"),
        ("duplicate", {"campaign": campaign()}, "not starting a second one"),
        ("unknown_command", {"line": "/parity frobnicate", "reason": "unknown subcommand"}, "**Fix:**"),
    ],
)
def test_replies_are_posted(
    fake: FakeGitHub, gateway: GitHubGateway, kind: str, context: dict[str, object], expected: str
) -> None:
    Publisher(gateway, settings(fake.url), Clock()).reply(PR, kind, **context)

    (comment,) = fake.comments(REPO, PR)
    assert expected in comment["body"] and len(comment["body"]) < 4000, "a reply stays short (help lists 7 commands)"


EXPECT = ["--expect-campaign-id", CAMPAIGN_ID, "--expect-head", HEAD_SHA, "--expect-base", BASE_SHA]
"""What the campaign was dispatched with, as the workflow passes it to `kv-parity publish`."""


def test_publish_command_uses_the_same_path(
    fake: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "report.json"
    report_path.write_text(make_report("inconclusive_straddle").model_dump_json(indent=2), encoding="utf-8")
    monkeypatch.setenv("KV_PARITY_TOKEN", TOKEN)

    argv = [
        "--report",
        str(report_path),
        "--repo",
        REPO,
        "--pr",
        str(PR),
        "--api-url",
        fake.url,
        "--artifact-url",
        "https://github.com/octo-org/dynamo/actions/runs/9/artifacts/3",
        "--bot-login",
        BOT_LOGIN,
        *EXPECT,
    ]
    code = publish_main(argv)

    assert code == 0 and "published c-20251129-0001" in capsys.readouterr().out
    (run,) = fake.check_runs(REPO)
    assert run["conclusion"] == "action_required" and run["details_url"].endswith("/artifacts/3")
    assert len(result_comments(fake)) == 1 and len(status_comments(fake)) == 1
    assert (tmp_path / "samples.csv").is_file() and (tmp_path / "digests.txt").is_file()


def test_publish_command_completes_a_profile_under_its_own_check_name(
    fake: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Actions-only mode: a profile's report never completes (nor opens) the campaign's `kv-parity` check."""
    report_path = tmp_path / "report.json"
    report_path.write_text(make_report("profile").model_dump_json(indent=2), encoding="utf-8")
    monkeypatch.setenv("KV_PARITY_TOKEN", TOKEN)
    argv = ["--report", str(report_path), "--repo", REPO, "--pr", str(PR), "--api-url", fake.url,
            "--bot-login", BOT_LOGIN, *EXPECT, "--expect-mode", "profile"]
    assert publish_main(argv) == 0
    (run,) = fake.check_runs(REPO)
    assert run["name"] == "kv-parity / profile" and run["status"] == "completed"


@pytest.mark.parametrize(("configured", "expected"), [(None, "action_required"), ("failure", "failure")])
def test_publish_command_in_actions_concludes_an_undecided_campaign_so_it_blocks_a_required_check(
    fake: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, configured: str | None, expected: str
) -> None:
    """Actions-only mode: the workflow passes no links, so Details is the publishing run (GitHub wants one
    for action_required), and the summary says what the conclusion does and how to get a decision."""
    report = make_report("inconclusive_diagnostics")
    if configured is not None:
        report = with_undecided_conclusion(report, configured)
    report_path = tmp_path / "report.json"
    report_path.write_text(report.model_dump_json(indent=2), encoding="utf-8")
    for key, value in {"KV_PARITY_TOKEN": TOKEN, "GITHUB_SERVER_URL": "https://github.com",
                       "GITHUB_REPOSITORY": REPO, "GITHUB_RUN_ID": "77"}.items():
        monkeypatch.setenv(key, value)
    argv = ["--report", str(report_path), "--repo", REPO, "--pr", str(PR), "--api-url", fake.url,
            "--bot-login", BOT_LOGIN, *EXPECT]
    assert publish_main(argv) == 0
    (run,) = fake.check_runs(REPO)
    assert (run["conclusion"], run["details_url"]) == (expected, f"https://github.com/{REPO}/actions/runs/77")
    summary = run["output"]["summary"]
    assert f"No decision was reached, so this check concludes `{expected}`" in summary
    assert "comment `/parity rerun` to measure again" in summary


def test_publish_command_explains_missing_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "report.json"
    report_path.write_text(make_report("pass").model_dump_json(), encoding="utf-8")
    monkeypatch.delenv("KV_PARITY_TOKEN", raising=False)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)

    assert publish_main(["--report", str(report_path), "--repo", REPO, "--pr", "1", *EXPECT]) == 2
    assert "KV_PARITY_TOKEN or GITHUB_TOKEN" in capsys.readouterr().err


def test_publish_command_rejects_a_broken_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report_path = tmp_path / "report.json"
    report_path.write_text('{"schema_version": "kv-parity.report.v0"}', encoding="utf-8")

    assert publish_main(["--report", str(report_path), "--repo", REPO, "--pr", "1", *EXPECT]) == 2
    assert "cannot read report" in capsys.readouterr().err


# --- progress rate limiting (recording gateway, injected clock) ---------------------------------------------


class Recorder:
    """Records calls in memory; enough of the gateway for rate-limit tests."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.comments: dict[int, CommentInfo] = {}

    def create_check_run(
        self,
        head_sha: str,
        name: str,
        external_id: str,
        status: CheckStatus = "queued",
        output: CheckOutput | None = None,
        actions: Sequence[CheckAction] = (),
        details_url: str | None = None,
    ) -> int:
        return 7

    def check_run_of(self, head_sha: str, name: str, external_id: str) -> int | None:
        return 7  # GitHub already has the campaign's check run

    def update_check_run(
        self,
        check_run_id: int,
        *,
        status: CheckStatus | None = None,
        conclusion: CheckConclusion | None = None,
        output: CheckOutput | None = None,
        actions: Sequence[CheckAction] | None = None,
        details_url: str | None = None,
    ) -> None:
        self.updates.append({"status": status, "output": output, "actions": actions})

    def create_comment(self, number: int, body: str) -> CommentInfo:
        info = CommentInfo(
            id=len(self.comments) + 1, node_id="n", body=body, author_login="bot", author_id=1, html_url="u"
        )
        self.comments[info.id] = info
        return info

    def edit_comment(self, comment_id: int, body: str) -> CommentInfo:
        info = self.comments[comment_id].model_copy(update={"body": body})
        self.comments[comment_id] = info
        return info

    def list_comments(self, number: int) -> list[CommentInfo]:
        return list(self.comments.values())

    def minimize_comment(self, node_id: str, classifier: Any = "OUTDATED") -> None:
        raise AssertionError("not expected")

    def identity(self) -> BotIdentity:
        return BotIdentity(login="bot", id=1)


def test_progress_is_rate_limited_except_on_stage_changes() -> None:
    recorder, clock = Recorder(), Clock()
    publisher = Publisher(recorder, settings(), clock)
    view = campaign()

    def event(stage: str, done: int | None = None, row: str | None = "vllm-disagg") -> None:
        publisher.progress(view, ProgressEvent(stage=stage, row=row, done=done, total=60 if done else None))

    event("determinism")  # first: sent
    clock.now += 1
    event("determinism")  # same stage within 10 s: dropped
    event("performance", 0)  # stage change: sent at once
    clock.now += PROGRESS_INTERVAL_SECONDS - 0.5
    event("performance", 3)  # dropped
    clock.now += 0.5
    event("performance", 4)  # interval elapsed: sent
    event("performance", 0, row="sglang-disagg")  # row change: sent

    assert len(recorder.updates) == 4
    assert all(u["status"] == "in_progress" for u in recorder.updates)
    assert [a.identifier for a in recorder.updates[0]["actions"]] == ["rerun", "cancel"]
    assert (
        recorder.updates[2]["output"].title == "🏃 Running: performance · vllm-disagg · pair 4/60 · ETA 2 min"
    )
    assert recorder.comments == {}, "progress is one write: the check run, never the status comment"


def test_eta_comes_from_the_stage_pace() -> None:
    recorder, clock = Recorder(), Clock()
    publisher = Publisher(recorder, settings(), clock)
    view = campaign()
    publisher.progress(view, ProgressEvent(stage="performance", row="r", done=10, total=60))
    clock.now += 100.0
    publisher.progress(view, ProgressEvent(stage="performance", row="r", done=20, total=60))

    assert "ETA 7 min" in recorder.updates[-1]["output"].title
    assert "| performance | r | pair 20/60 | 7 min |" in recorder.updates[-1]["output"].summary


# --- the artifact ---------------------------------------------------------------------------------------


def test_artifact_keeps_every_attempted_sample(tmp_path: Path) -> None:
    report = make_report("pass")

    written = write_artifact(report, tmp_path)

    names = {p.name for p in written}
    assert {"report.json", "report.md", "samples.csv", "digests.txt"} <= names
    assert {"schedule-vllm-disagg.json", "schedule-sglang-disagg.json"} <= names
    charts = {f"perf-{row}-{kind}.svg" for row in ("vllm-disagg", "sglang-disagg") for kind in ("ratios", "histogram")}
    assert charts <= names
    for name in charts:
        assert ElementTree.parse(tmp_path / name).getroot().tag == "{http://www.w3.org/2000/svg}svg", name
    assert CampaignReport.model_validate_json((tmp_path / "report.json").read_text()) == report
    with (tmp_path / "samples.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    expected = sum(
        len(r.performance.probes) + len(r.performance.warmups) + len(r.performance.samples)
        for r in report.rows if r.performance
    )
    assert len(rows) == expected == 2 * 2 + 2 * 10 + 122 + 120
    invalidated = [r for r in rows if r["status"] == "invalidated"]
    assert len(invalidated) == 2 and all(
        r["invalidation"].startswith("affinity violation") for r in invalidated
    )
    assert {r["kind"] for r in rows} == {"probe", "warmup", "measured"}
    assert all(float(r["kernel_cpu_ms"]) > float(r["metric_ms"] or 0) for r in rows), "the kernel's CPU time"
    schedule = json.loads((tmp_path / "schedule-vllm-disagg.json").read_text())
    first = report.rows[0].performance
    assert first is not None and schedule["seed"] == first.schedule_seed and len(schedule["pairs"]) == 60
    digests = (tmp_path / "digests.txt").read_text()
    assert f"revision candidate {HEAD_SHA}" in digests and "row vllm-disagg parity identical" in digests
    assert "```mermaid" in (tmp_path / "report.md").read_text()


def test_artifact_files_are_deterministic(tmp_path: Path) -> None:
    report = make_report("parity_fail")
    first = {p.name: p.read_bytes() for p in write_artifact(report, tmp_path / "a")}
    second = {p.name: p.read_bytes() for p in write_artifact(report, tmp_path / "b")}

    assert first == second


@pytest.mark.parametrize(
    ("api", "web"),
    [
        ("https://api.github.com", "https://github.com"),
        ("https://ghe.example.com/api/v3", "https://ghe.example.com"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ],
)
def test_web_url_from_api_url(api: str, web: str) -> None:
    assert web_url(api) == web
