"""Main-branch tracking through the service: signed `push` deliveries (GitHub's payload shape) over real HTTP,
real SQLite, the local backend running a stand-in `kv-parity campaign` as a real subprocess, and the real
side-run publisher talking to the GitHub stand-in (check runs, commit pulls, labels, issues and comments
validated against GitHub's OpenAPI description)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.cli.event import event_main
from bot.cli.main import main as cli_main
from bot.cli.track import track_main
from bot.core.campaign import Campaign, CampaignState
from bot.dispatch.campaign_workflow import RUN_NAME, parse_run_title
from bot.service.app import create_app
from bot.settings import Settings
from bot.store.campaigns import Store
from runners.schema.config import MainConfig
from runners.schema.report import Revision
from tests.fakes.github_api import FakeGitHub
from tests.report_factory import make_report
from tests.service_fixtures import ROOT
from tests.webhooks import (
    CONFIG_TOML,
    REPO,
    SECRET,
    RecordingPublisher,
    check_run_event,
    commit,
    git,
    loopback,
    post,
    push_event,
    register_test_app,
    serve_app,
    wait_until,
)

S = CampaignState
TRACKED = CONFIG_TOML + "\n[main]\ntrack = true\n"
NEWEST = CONFIG_TOML + '\n[main]\ntrack = true\nqueue = "newest"\n'
CREEP = CONFIG_TOML + '\n[main]\ntrack = true\nreference = "v0"\nevery = 2\n'


@dataclass
class History:
    repo: Path
    shas: dict[str, str]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    """main: root - cfg (tracking on; tag v0) - m1 (PR #5's merge) - m2 (a direct push) - nq (queue = "newest") -
    n1 - n2 - n3 - off (no [main]); feature: f1; creep (a default branch of its own in the creep test): cfg - e1
    (reference v0 every 2 pushes) - e2 - e3."""
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
    git(repo, "tag", "v0", shas["cfg"])
    git(repo, "checkout", "--quiet", "-b", "creep", shas["cfg"])
    shas["e1"] = commit(repo, {".github/kv-parity.toml": CREEP}, "measure the creep since v0 every 2 pushes")
    for name in ("e2", "e3"):
        shas[name] = commit(repo, {"src/lib.rs": f"fn {name}() {{}}\n"}, name)
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

    def main_campaigns(self) -> list[Campaign]:
        return list(reversed(self.store.side_runs(REPO, ("main", "reference"))))

    def wait(self, state: CampaignState, count: int = 1, timeout: float = 30) -> list[Campaign]:
        return wait_until(  # type: ignore[no-any-return]
            lambda: len(found := [c for c in self.main_campaigns() if c.state == state]) >= count and found,
            f"{count} main campaign(s) {state}; have {[(c.state, c.reason) for c in self.main_campaigns()]}",
            timeout)


@pytest.fixture()
def tracking(tmp_path: Path, history: History, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tracking]:
    """The service as an App on the stand-in; its campaigns write performance FAIL reports (report_factory's)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    template = tmp_path / "fail-report.json"
    failing = make_report("perf_fail")
    # The stand-in runner writes this report for every campaign; a real one embeds the config it ran, whose
    # [main] names the reference the tracking issue shows.
    config = failing.config.model_copy(update={"main": MainConfig(track=True, reference="v0", every=2)})
    template.write_text(failing.model_copy(update={"config": config}).model_dump_json(), encoding="utf-8")
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
            "poll_interval_seconds": 0.05, "cancel_grace_seconds": 5, "public_url": "https://kv-parity.example",
            **register_test_app(fake, tmp_path),
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
    # The check run's Rerun measures the same pair again, under the same config.
    tracking.fake.set_permission(REPO, "maintainer", "write")
    rerun = check_run_event("rerequested", external_id=first.id, head_sha=shas["m1"], pulls=())
    assert post(tracking.url, "check_run", rerun, delivery="rerun-m1").status_code == 202
    [_, _, third] = tracking.wait(S.COMPLETED, count=3)
    assert (third.head_sha, third.base_sha, third.purpose, third.trigger) == (shas["m1"], shas["cfg"], "main",
                                                                             "check_run")
    assert tracking.store.config_text(third.id) == tracking.store.config_text(first.id)


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


def test_every_second_push_also_measures_the_tip_against_the_reference_and_the_page_draws_both(
        tracking: Tracking) -> None:
    """`every = 2`: the second tracked push since the last reference campaign also starts one (the tip against
    v0: the cumulative change); its FAIL goes to the same tracking issue, and the default branch's page draws
    each push's ratio and the cumulative one per row."""
    tracking.hold.touch()
    shas = tracking.shas
    creep = {"ref": "refs/heads/creep", "default_branch": "creep"}
    assert tracking.push("e1", "cfg", "e1", **creep).startswith("main: campaign")
    outcome = tracking.push("e2", "e1", "e2", **creep)
    assert outcome.startswith("main: campaign") and "; reference: campaign kvp-" in outcome
    assert "reference" not in tracking.push("e3", "e2", "e3", **creep), "two pushes since the reference: not yet"
    done = tracking.wait(S.COMPLETED, count=4, timeout=60)
    [reference] = [c for c in done if c.purpose == "reference"]
    assert (reference.head_sha, reference.base_sha) == (shas["e2"], shas["cfg"]), "the tip against v0, pinned"
    wait_until(lambda: all(tracking.store.publications(c.id) == [("finished", "done")] for c in done), "published")
    [run] = [r for r in tracking.fake.check_runs(REPO) if r["external_id"] == reference.id]
    assert (run["name"], run["head_sha"], run["conclusion"]) == ("kv-parity / reference", shas["e2"], "failure")
    [issue] = tracking.fake.issues(REPO)
    bodies = [issue["body"], *(c["body"] for c in tracking.fake.comments(REPO, issue["number"]))]
    [creep_body] = [body for body in bodies if body.startswith(f"<!-- kv-parity:tracking issue {reference.id}")]
    assert "Creep past the threshold since the reference" in creep_body and "the reference `v0`" in creep_body
    assert "Brought by" not in creep_body, "a cumulative change names no single pull request"

    page = loopback().get(f"{tracking.url}/main/{tracking.store.main_token(REPO)}")
    assert page.status_code == 200
    assert "per push: head / first parent" in page.text and "cumulative: tip / reference" in page.text
    assert page.text.count("<h2>Row ") == 2 and "threshold 1.05" in page.text
    assert loopback().get(f"{tracking.url}/main/not-a-token").status_code == 404
    history = subprocess.run([sys.executable, "-m", "bot.cli", "history", "--db", str(tracking.store.path),
                              "--main", REPO, "--row", "vllm-disagg"], capture_output=True, text=True, check=True)
    lines = history.stdout.splitlines()
    assert lines[0].startswith("row vllm-disagg (push: head / first parent; reference: tip / reference")
    assert len(lines) == 5 and sum("reference " in line for line in lines[1:]) == 1
    kept = tracking.store.campaign_page(reference.id)
    assert kept is not None and kept.token is not None
    assert "History of the default branch" in loopback().get(f"{tracking.url}/c/{kept.token}").text


# ----------------------------------------------------------------- Actions-only mode

ACTIONS_TOKEN = "ghs_github_token"
WORKFLOW = "kv-parity-campaign.yml"
MAIN_WORKFLOW = ROOT / ".github" / "workflows" / "kv-parity-main.yml"
CAMPAIGN_WORKFLOW = ROOT / ".github" / "workflows" / "kv-parity-campaign.yml"
PIN_STEP = "Refuse an unpinned kv-parity requirement"


@pytest.fixture()
def actions(tmp_path: Path, history: History) -> Iterator[tuple[FakeGitHub, dict[str, str]]]:
    """The stand-in as a workflow's GITHUB_TOKEN sees it, with the campaign workflow's real inputs and run-name."""
    with FakeGitHub() as fake:
        fake.add_repo(REPO, history.repo)
        fake.register_app(15368, "unused", "github-actions")
        fake.add_installation(31, 15368, [REPO])
        fake.add_installation_token(ACTIONS_TOKEN, 31)
        inputs = yaml.safe_load(CAMPAIGN_WORKFLOW.read_text())[True]["workflow_dispatch"]["inputs"]
        fake.add_workflow(REPO, WORKFLOW, name="kv-parity campaign", inputs=inputs, run_name=RUN_NAME)
        fake.add_pull(REPO, 5, history.shas["f1"], "feature", "main", title="Faster routing",
                      merge_commit_sha=history.shas["m1"])
        environ = {"GITHUB_TOKEN": ACTIONS_TOKEN, "GITHUB_REPOSITORY": REPO, "GITHUB_API_URL": fake.url,
                   "KV_PARITY_ACTIONS_REF": "main", "KV_PARITY_API_SECONDS_BETWEEN_REQUESTS": "0",
                   "KV_PARITY_API_SECONDS_BETWEEN_WRITES": "0"}
        yield fake, environ


def _event(tmp_path: Path, environ: dict[str, str], payload: dict[str, Any]) -> int:
    path = tmp_path / f"push-{len(list(tmp_path.glob('push-*')))}.json"
    path.write_text(json.dumps(payload))
    return event_main(["--event-name", "push", "--event-path", str(path)], environ=environ)


def test_actions_only_mode_dispatches_each_push_and_publishes_a_fail_on_its_own_check_run(
        tmp_path: Path, history: History, actions: tuple[FakeGitHub, dict[str, str]],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fake, environ = actions
    shas = history.shas
    assert _event(tmp_path, environ, push_event(after=shas["m1"], before=shas["cfg"])) == 0
    [dispatch] = fake.dispatches(REPO)
    assert dispatch["ref"] == "main"
    inputs = dispatch["inputs"]
    assert (inputs["head_sha"], inputs["base_sha"], inputs["config_ref"]) == (shas["m1"], shas["cfg"], shas["m1"])
    assert (inputs["pr_number"], inputs["purpose"], inputs["rows"]) == ("", "main", "")
    title = parse_run_title(fake.run(dispatch["run_id"])["display_title"])
    assert title is not None and (title.purpose, title.pr_number, title.head_sha) == ("main", 0, shas["m1"])

    # `queue = "newest"`: a push cancels the main run still waiting for a runner, not pull requests' runs.
    assert _event(tmp_path, environ, push_event(after=shas["n1"], before=shas["nq"])) == 0
    assert _event(tmp_path, environ, push_event(after=shas["n2"], before=shas["n1"])) == 0
    runs = [d["run_id"] for d in fake.dispatches(REPO)]
    assert fake.cancelled_runs(REPO) == runs[:2], "both waiting main runs gave way to the newest push"
    capsys.readouterr()

    # The campaign workflow's publish job, for the first push's FAIL: `kv-parity publish --purpose main`.
    report = make_report("perf_fail").model_copy(update={
        "campaign_id": title.campaign_id,
        "revisions": [Revision(arm="baseline", sha=shas["cfg"], requested=shas["cfg"]),
                      Revision(arm="candidate", sha=shas["m1"], requested=shas["m1"])]})
    path = tmp_path / "report" / "report.json"
    path.parent.mkdir()
    path.write_text(report.model_dump_json())
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    argv = ["publish", "--report", str(path), "--repo", REPO, "--pr", "", "--purpose", "main",
            "--expect-campaign-id", title.campaign_id, "--expect-head", shas["m1"], "--expect-base", shas["cfg"],
            "--expect-rows", "", "--expect-mode", "campaign"]
    forged = [*argv[:-8], "--expect-head", shas["m2"], *argv[-6:]]
    assert cli_main(forged) == 3, "a report that is not the dispatched campaign publishes nothing"
    assert cli_main(argv) == 0
    [run] = fake.check_runs(REPO)
    assert (run["name"], run["head_sha"], run["conclusion"]) == ("kv-parity / main", shas["m1"], "failure")
    [issue] = fake.issues(REPO)
    assert issue["user"] == "github-actions[bot]" and issue["labels"] == ["kv-parity-regression"]
    assert "#5 (Faster routing)" in issue["body"]
    [comment] = fake.comments(REPO, 5)
    assert f"#{issue['number']}" in comment["body"]
    assert cli_main(argv) == 0, "publishing again is idempotent"
    assert len(fake.issues(REPO)) == 1 and len(fake.comments(REPO, 5)) == 1
    assert fake.comments(REPO, issue["number"]) == []


def test_publish_purpose_main_links_the_artifact_url_from_the_check_run_and_the_tracking_issue(
        tmp_path: Path, history: History, actions: tuple[FakeGitHub, dict[str, str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--artifact-url` is the report link of a main campaign as of a pull request's: the check run's Details and
    summary, the tracking issue and the merged pull request's comment (no --details-url, so nothing else is)."""
    fake, environ = actions
    shas = history.shas
    campaign_id = "kvp-main-artifact"
    report = make_report("perf_fail").model_copy(update={
        "campaign_id": campaign_id,
        "revisions": [Revision(arm="baseline", sha=shas["cfg"], requested=shas["cfg"]),
                      Revision(arm="candidate", sha=shas["m1"], requested=shas["m1"])]})
    path = tmp_path / "report" / "report.json"
    path.parent.mkdir()
    path.write_text(report.model_dump_json())
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    artifact = "https://github.com/acme/widgets/actions/runs/42/artifacts/7"

    assert cli_main(["publish", "--report", str(path), "--repo", REPO, "--purpose", "main",
                     "--expect-campaign-id", campaign_id, "--expect-head", shas["m1"],
                     "--expect-base", shas["cfg"], "--artifact-url", artifact]) == 0

    [run] = fake.check_runs(REPO)
    assert (run["name"], run["conclusion"], run["details_url"]) == ("kv-parity / main", "failure", artifact)
    assert f"]({artifact})" in run["output"]["summary"]
    [issue] = fake.issues(REPO)
    assert f"[Full report and every sample]({artifact})" in issue["body"]
    [on_pull] = fake.comments(REPO, 5)
    assert f"[Report]({artifact})" in on_pull["body"]


def test_kv_parity_track_dispatches_the_tip_against_the_reference(
        history: History, actions: tuple[FakeGitHub, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    fake, environ = actions
    shas = history.shas
    assert track_main([], environ=environ) == 2, "the tip's config names no [main] reference"
    assert "no reference: pass --reference or set [main] reference" in capsys.readouterr().err
    assert track_main(["--reference", "no-such-tag"], environ=environ) == 2
    assert "reference 'no-such-tag' does not name a commit" in capsys.readouterr().err
    assert track_main(["--reference", shas["cfg"]], environ=environ) == 0
    [dispatch] = fake.dispatches(REPO)
    inputs = dispatch["inputs"]
    assert (inputs["head_sha"], inputs["base_sha"], inputs["purpose"]) == (shas["off"], shas["cfg"], "reference")
    assert inputs["config_ref"] == shas["off"] and inputs["pr_number"] == ""
    assert capsys.readouterr().out.startswith("reference: dispatched campaign kvp-")


def test_the_main_workflow_decides_pushes_with_least_privilege_and_the_pinned_install() -> None:
    workflow = yaml.safe_load(MAIN_WORKFLOW.read_text())
    assert workflow[True]["push"] == {"branches": ["main"]} and "schedule" in workflow[True]
    assert workflow["permissions"] == {} and "concurrency" not in workflow, "every push is decided on its own"
    [job] = workflow["jobs"].values()
    assert job["permissions"] == {"actions": "write", "contents": "read"}
    text = yaml.safe_dump(job)
    assert "checkout" not in text and "secrets." not in text, "nothing of the repository is run"
    campaign = yaml.safe_load(CAMPAIGN_WORKFLOW.read_text())
    [pin] = [step["run"] for j in campaign["jobs"].values() for step in j["steps"]
             if step.get("name") == PIN_STEP]
    [main_pin] = [step["run"] for step in job["steps"] if step.get("name") == PIN_STEP]
    assert main_pin.split("python -", 1)[1] == pin.split("python -", 1)[1], "the same validator as the others"
    installs = [step["run"] for step in job["steps"] if "pip install" in step.get("run", "")]
    assert installs == ['python -m pip install --no-input -r "$KV_PARITY_REQUIREMENTS"']
    script = job["steps"][-1]["run"]
    assert 'kv-parity event --event-name "$GITHUB_EVENT_NAME" --event-path "$GITHUB_EVENT_PATH"' in script
    assert "kv-parity track" in script and job["steps"][-1]["env"]["GITHUB_TOKEN"] == "${{ github.token }}"
    publish = campaign["jobs"]["publish"]
    assert publish["permissions"]["issues"] == "write", "the tracking issue is opened by the publish job"
    assert '--purpose "$PURPOSE"' in next(s["run"] for s in publish["steps"] if "kv-parity publish" in s.get("run", ""))
    assert campaign["env"]["PURPOSE"] == "${{ inputs.purpose || 'pull_request' }}"
