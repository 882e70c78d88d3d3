"""Main-branch tracking through the service: signed `push` deliveries (GitHub's payload shape) over real HTTP,
real SQLite, the local backend running a stand-in `kv-parity campaign` as a real subprocess, and the real
side-run publisher talking to the GitHub stand-in (check runs, commit pulls, labels, issues and comments
validated against GitHub's OpenAPI description)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.server import create_app
from bot.settings import Settings
from bot.store.campaigns import CampaignState, CampaignView, Store
from tests.fakes.github_api import FakeGitHub
from tests.report_factory import make_report
from tests.service_fixtures import ROOT
from tests.webhooks import (
    CONFIG_TOML,
    REPO,
    SECRET,
    RecordingPublisher,
    commit,
    git,
    post,
    push_event,
    register_test_app,
    serve_app,
    wait_until,
)

S = CampaignState
TRACKED = CONFIG_TOML + "\n[main]\ntrack = true\n"
NEWEST = CONFIG_TOML + '\n[main]\ntrack = true\nqueue = "newest"\n'


@dataclass
class History:
    repo: Path
    shas: dict[str, str]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    """main: root - cfg (tracking on) - m1 (PR #5's merge) - m2 (a direct push) - nq (queue = "newest") - n1 - n2
    - n3 - off (no [main]); feature: f1."""
    repo = tmp_path_factory.mktemp("tracked") / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "-b", "main")
    shas = {"root": commit(repo, {"README.md": "# widgets\n"}, "root")}
    shas["cfg"] = commit(repo, {".github/kv-parity.toml": TRACKED}, "track the main branch")
    shas["m1"] = commit(repo, {"src/lib.rs": "fn m1() {}\n"}, "Merge pull request #5 from contributor/feature")
    shas["m2"] = commit(repo, {"src/lib.rs": "fn m2() {}\n"}, "a direct push")
    shas["nq"] = commit(repo, {".github/kv-parity.toml": NEWEST}, "measure only the newest waiting push")
    for name in ("n1", "n2", "n3"):
        shas[name] = commit(repo, {"src/lib.rs": f"fn {name}() {{}}\n"}, name)
    shas["off"] = commit(repo, {".github/kv-parity.toml": CONFIG_TOML}, "stop tracking")
    git(repo, "checkout", "--quiet", "-b", "feature", shas["cfg"])
    shas["f1"] = commit(repo, {"src/feature.rs": "1\n"}, "feature work")
    git(repo, "checkout", "--quiet", "main")
    return History(repo, shas)


@dataclass
class Tracking:
    url: str
    store: Store
    fake: FakeGitHub
    publisher: RecordingPublisher
    shas: dict[str, str]
    hold: Path

    def push(self, name: str, before: str, delivery: str, **changes: Any) -> str:
        response = post(self.url, "push", push_event(after=self.shas[name], before=self.shas[before], **changes),
                        delivery=delivery)
        assert response.status_code == 202, response.text
        return str(wait_until(lambda: (s := self.store.delivery_status(delivery)) and s[0] != "pending" and s[1],
                              f"delivery {delivery} handled"))

    def main_campaigns(self) -> list[CampaignView]:
        return list(reversed(self.store.side_runs(REPO, ("main", "reference"))))

    def wait(self, state: CampaignState, count: int = 1, timeout: float = 30) -> list[CampaignView]:
        return wait_until(  # type: ignore[no-any-return]
            lambda: len(found := [c for c in self.main_campaigns() if c.state == state]) >= count and found,
            f"{count} main campaign(s) {state}; have {[(c.state, c.reason) for c in self.main_campaigns()]}",
            timeout)


@pytest.fixture()
def tracking(tmp_path: Path, history: History, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tracking]:
    """The service as an App on the stand-in; its campaigns write performance FAIL reports (report_factory's)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    template = tmp_path / "fail-report.json"
    template.write_text(make_report("perf_fail").model_dump_json(), encoding="utf-8")
    hold = tmp_path / "hold"
    runner = [sys.executable, "-m", "tests.webhooks", "campaign", "--record", str(tmp_path / "runs.jsonl"),
              "--report-template", str(template), "--hold-until", str(hold)]
    with FakeGitHub() as fake:
        fake.add_repo(REPO, history.repo)
        fake.add_pull(REPO, 5, history.shas["f1"], "feature", "main", title="Faster routing",
                      merge_commit_sha=history.shas["m1"])
        settings = Settings.model_validate({
            "webhook_secret": SECRET, "api_base_url": fake.url, "api_seconds_between_requests": 0,
            "api_seconds_between_writes": 0, "repo": REPO, "db_path": tmp_path / "bot.sqlite3",
            "work_dir": tmp_path / "work", "local_repo_path": history.repo, "local_campaign_argv": runner,
            "poll_interval_seconds": 0.05, "cancel_grace_seconds": 5, **register_test_app(fake, tmp_path),
        })
        publisher = RecordingPublisher()
        app = create_app(settings, publisher_factory=lambda gateway, s: publisher)
        with serve_app(app) as url:
            yield Tracking(url, app.state.store, fake, publisher, history.shas, hold)


def test_a_failing_push_opens_one_tracking_issue_naming_its_pull_request_and_comments_on_both(
        tracking: Tracking) -> None:
    tracking.hold.touch()
    shas = tracking.shas
    outcome = tracking.push("m1", "cfg", "push-m1")
    assert outcome.startswith("main: campaign kvp-") and outcome.endswith(" requested")
    [first] = tracking.wait(S.COMPLETED)
    assert (first.head_sha, first.base_sha, first.pr_number, first.purpose) == (shas["m1"], shas["cfg"], 0, "main")
    assert first.config_source == f".github/kv-parity.toml @ {shas['m1']} (default branch tip)"
    wait_until(lambda: tracking.store.publications(first.id) == [("finished", "done")], "the FAIL published")

    [run] = [r for r in tracking.fake.check_runs(REPO) if r["external_id"] == first.id]
    assert run["name"] == "kv-parity / main" and run["head_sha"] == shas["m1"]
    assert run["status"] == "completed" and run["conclusion"] == "failure"
    [issue] = tracking.fake.issues(REPO)
    assert issue["labels"] == ["kv-parity-regression"] and issue["user"] == "kv-parity[bot]"
    body = issue["body"]
    assert body.startswith(f"<!-- kv-parity:tracking issue {first.id} -->")
    assert "#5 (Faster routing)" in body, "the pull request that brought the commit is named"
    assert f"`{shas['m1']}`" in body and "performance FAIL" in body
    assert "| `vllm-disagg` |" in body and "> 1.05" in body, "rows with their bounds against the threshold"
    [label] = tracking.fake.labels(REPO)
    assert label["name"] == "kv-parity-regression" and label["description"]
    [on_pull] = tracking.fake.comments(REPO, 5)
    assert on_pull["body"].startswith(f"<!-- kv-parity:tracking pull_request {first.id} -->")
    assert f"#{issue['number']}" in on_pull["body"] and "merge of this pull request" in on_pull["body"]
    points = tracking.store.main_history(REPO)
    assert {p.row_id for p in points} == {"vllm-disagg", "sglang-disagg"}
    assert all(p.campaign_id == first.id and p.purpose == "main" for p in points)
    assert any(p.performance == "FAIL" and p.lower is not None and p.lower > 1.05 for p in points)
    assert tracking.publisher.calls == [], "a main-branch campaign never touches a pull request's status"

    # A direct push that FAILs too: one more comment on the open issue, no second issue, no pull request.
    tracking.push("m2", "m1", "push-m2")
    [_, second] = tracking.wait(S.COMPLETED, count=2)
    assert second.base_sha == shas["m1"]
    wait_until(lambda: tracking.store.publications(second.id) == [("finished", "done")], "second published")
    assert len(tracking.fake.issues(REPO)) == 1
    [again] = tracking.fake.comments(REPO, issue["number"])
    assert again["body"].startswith(f"<!-- kv-parity:tracking issue {second.id} -->")
    assert "No pull request is associated with this commit" in again["body"]
    assert len(tracking.fake.comments(REPO, 5)) == 1
    # The same delivery again is not a second campaign; a second delivery of the same push is a duplicate.
    assert post(tracking.url, "push", push_event(after=shas["m2"], before=shas["m1"]),
                delivery="push-m2").json() == {"duplicate": "push-m2"}
    assert len(tracking.main_campaigns()) == 2


def test_pushes_queue_behind_the_running_one_and_newest_supersedes_the_waiting_one(tracking: Tracking) -> None:
    shas = tracking.shas
    assert tracking.push("n1", "nq", "push-n1").startswith("main: campaign")
    [running] = tracking.wait(S.RUNNING)
    tracking.push("n2", "n1", "push-n2")
    [waiting] = tracking.wait(S.REQUESTED)
    assert waiting.head_sha == shas["n2"] and waiting.queue_position == 1
    tracking.push("n3", "n2", "push-n3")
    [superseded] = tracking.wait(S.SUPERSEDED)
    assert superseded.id == waiting.id
    assert superseded.reason == f'superseded by the newer push {shas["n3"][:12]} ([main] queue = "newest")'
    tracking.hold.touch()
    done = tracking.wait(S.COMPLETED, count=2, timeout=60)
    assert [c.head_sha for c in done] == [shas["n1"], shas["n3"]], "the running push finished, the newest followed"
    assert running.id == done[0].id


def test_only_pushes_to_the_default_branch_with_tracking_on_start_anything(tracking: Tracking) -> None:
    shas = tracking.shas
    assert tracking.push("f1", "cfg", "feature", ref="refs/heads/feature") == (
        "ignored: push to refs/heads/feature, not to the default branch 'main'")
    assert tracking.push("m1", "cfg", "deleted", deleted=True) == (
        "ignored: push to refs/heads/main (deleted), not to the default branch 'main'")
    assert tracking.push("m1", "cfg", "tag", ref="refs/tags/v1") == (
        "ignored: push to refs/tags/v1, not to the default branch 'main'")
    assert tracking.push("off", "n3", "off") == (
        f"ignored: [main] track is off in .github/kv-parity.toml @ {shas['off']} (default branch tip)")
    malformed = push_event(after=shas["m1"], before=shas["cfg"])
    del malformed["after"]
    response = post(tracking.url, "push", malformed, delivery="malformed")
    assert response.status_code == 400 and "push payload: after: Field required" in response.json()["error"]
    assert tracking.main_campaigns() == [] and tracking.fake.issues(REPO) == []
