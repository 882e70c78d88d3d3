"""Actions-only mode (no database): `/parity accept` and the merge queue through `kv-parity event` and
`kv-parity publish`, against the GitHub stand-in over real HTTP, from event files shaped like the ones Actions
writes (the merge_group payloads are checked against GitHub's own webhook schema).

A campaign here is what the campaign workflow leaves behind: a dispatched run, completed, with its
`kv-parity-report` artifact, published by `kv-parity publish` as the workflow's publish step runs it. The
acceptance lives in GitHub only: the accept comment, and the bot's reply pointing at it.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from bot.cli.event import event_main
from bot.cli.publish import publish_main
from bot.cli.reports import main_verify
from bot.github.gateway import GitHubGateway
from bot.github.models import TokenAuth
from runners.schema.report import CampaignReport, Revision
from tests.fakes.github_api import FakeGitHub
from tests.fakes.openapi import github_openapi
from tests.report_factory import make_report
from tests.test_event_cli import History, make_history, serve_repo
from tests.webhooks import REPO, comment_event, git, loopback, merge_group_event, pull_request_event

TOKEN = "ghs_github_token"
LEAD_TOKEN = "ghp_lead"
ACCEPT = "/parity accept perf max=1.13 the new admission pass is intended work"
LINE = "performance FAIL accepted by @lead (max 1.13): the new admission pass is intended work"


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    return make_history(tmp_path_factory.mktemp("widgets"))


class Actions:
    """One repository in Actions-only mode: the trigger workflow's `kv-parity event`, the campaign workflow's
    `kv-parity publish`, and people commenting."""

    def __init__(self, fake: FakeGitHub, history: History, tmp: Path) -> None:
        self.fake, self.history, self.tmp = fake, history, tmp

    @property
    def environ(self) -> dict[str, str]:
        return {
            "GITHUB_TOKEN": TOKEN,
            "GITHUB_REPOSITORY": REPO,
            "GITHUB_API_URL": self.fake.url,
            "KV_PARITY_ACTIONS_REF": "main",
            "KV_PARITY_API_SECONDS_BETWEEN_REQUESTS": "0",
            "KV_PARITY_API_SECONDS_BETWEEN_WRITES": "0",
        }

    def event(self, name: str, payload: dict[str, Any]) -> int:
        path = self.tmp / f"event-{len(list(self.tmp.glob('event-*')))}.json"
        path.write_text(json.dumps(payload))
        return event_main(["--event-name", name, "--event-path", str(path)], environ=self.environ)

    def say(self, body: str, token: str = LEAD_TOKEN) -> dict[str, Any]:
        """Post a comment as a person (through the API, so it can be read back by id)."""
        response = loopback().post(
            f"{self.fake.url}/repos/{REPO}/issues/1/comments", json={"body": body},
            headers={"Authorization": f"token {token}"},
        )
        assert response.status_code == 201, response.text
        data: dict[str, Any] = response.json()
        return data

    def comment_event(self, comment: dict[str, Any], sender: str = "lead") -> int:
        payload = comment_event(comment["body"], sender=sender, comment_id=comment["id"],
                                created_at=comment["created_at"])
        return self.event("issue_comment", payload)

    def label(self) -> dict[str, Any]:
        payload = pull_request_event("labeled", number=1, head_sha=self.history.head, base_sha=self.history.main2,
                                     label="kv-parity", labels=("kv-parity",))
        assert self.event("pull_request_target", payload) == 0
        return self.fake.dispatches(REPO)[-1]

    def finish(self, dispatch: dict[str, Any], outcome: str = "perf_fail") -> Path:
        """The campaign workflow's run completes: its report artifact, then its publish step."""
        inputs = dispatch["inputs"]
        report = make_report(outcome).model_copy(update={
            "campaign_id": inputs["campaign_id"],
            "revisions": [
                Revision(arm="baseline", sha=inputs["base_sha"], requested=inputs["base_sha"]),
                Revision(arm="candidate", sha=inputs["head_sha"], requested=inputs["head_sha"]),
            ],
        })
        out = self.tmp / f"report-{inputs['campaign_id']}"
        out.mkdir()
        (out / "report.json").write_text(report.model_dump_json())
        self.fake.add_artifact(dispatch["run_id"], "kv-parity-report", _zip(out / "report.json"))
        self.fake.set_run_status(dispatch["run_id"], "completed", "success")
        assert self.publish(out / "report.json", inputs) == 0
        return out / "report.json"

    def publish(self, report: Path, inputs: dict[str, str]) -> int:
        gateway = GitHubGateway(REPO, TokenAuth(token=SecretStr(TOKEN)), self.fake.url,
                                bot_login="github-actions[bot]", seconds_between_requests=0,
                                seconds_between_writes=0)
        argv = ["--report", str(report), "--repo", REPO, "--pr", inputs["pr_number"],
                "--expect-campaign-id", inputs["campaign_id"], "--expect-head", inputs["head_sha"],
                "--expect-base", inputs["base_sha"], "--expect-rows", inputs["rows"], "--api-url", self.fake.url,
                "--bot-login", "github-actions[bot]"]
        return publish_main(argv, gateway=gateway)

    def check_run(self, campaign_id: str) -> dict[str, Any]:
        [run] = [r for r in self.fake.check_runs(REPO) if r["external_id"] == campaign_id]
        return run

    def comments(self) -> list[str]:
        return [c["body"] for c in self.fake.comments(REPO, 1)]


def _zip(report: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.write(report, "report.json")
    return buffer.getvalue()


@pytest.fixture()
def actions(tmp_path: Path, history: History) -> Iterator[Actions]:
    with FakeGitHub() as fake:
        serve_repo(fake, history)
        fake.add_token(LEAD_TOKEN, "lead")
        fake.add_token("ghp_maintainer", "maintainer")
        fake.set_permission(REPO, "lead", "maintain")
        yield Actions(fake, history, tmp_path)
        fake.check_conformance()


def test_an_acceptance_republishes_at_once_and_a_rerun_reads_it_back_from_the_comment(
    actions: Actions, capsys: pytest.CaptureFixture[str]
) -> None:
    first = actions.label()
    actions.finish(first)
    campaign = first["inputs"]["campaign_id"]
    assert actions.check_run(campaign)["conclusion"] == "failure"
    accept = actions.say(ACCEPT)
    assert actions.comment_event(accept) == 0
    assert f"accepted: {LINE}; republished campaign {campaign}: success" in capsys.readouterr().out
    run = actions.check_run(campaign)
    assert run["conclusion"] == "success" and run["output"]["title"].startswith(f"☑️ {LINE}")
    assert f"[the acceptance]({accept['html_url']})" in run["output"]["summary"]
    [reply] = [b for b in actions.comments() if b.startswith(f"<!-- kv-parity:accept comment={accept['id']} ")]
    assert f"head={actions.history.head} " in reply and "permission=maintain" in reply
    [result] = [b for b in actions.comments() if b.startswith("<!-- kv-parity:result")]
    assert "**Accepted**" in result, "the result comment was edited with the acceptance"

    # A rerun of the same head: its publish step reads the acceptance back from the accept comment itself, and
    # the report it leaves for the artifact carries it (`kv-parity verify` recomputes the conclusion).
    assert actions.comment_event(actions.say("/parity rerun"), sender="lead") == 0
    second = actions.fake.dispatches(REPO)[-1]
    report = actions.finish(second)
    assert actions.check_run(second["inputs"]["campaign_id"])["conclusion"] == "success"
    [acceptance] = CampaignReport.model_validate_json(report.read_text()).acceptances
    assert (acceptance.login, acceptance.permission, acceptance.comment_id) == ("lead", "maintain", accept["id"])
    assert main_verify(report) == 0

    # An edited accept comment is refused the next time anything is published.
    edited = loopback().patch(f"{actions.fake.url}/repos/{REPO}/issues/comments/{accept['id']}",
                              json={"body": ACCEPT.replace("1.13", "5.00")},
                              headers={"Authorization": f"token {LEAD_TOKEN}"})
    assert edited.status_code == 200
    capsys.readouterr()
    assert actions.comment_event(actions.say("/parity rerun"), sender="lead") == 0
    rerun = actions.fake.dispatches(REPO)[-1]
    actions.finish(rerun)
    assert actions.check_run(rerun["inputs"]["campaign_id"])["conclusion"] == "failure"
    assert f"accept comment {accept['id']} was edited after it was accepted, so it is not applied" in (
        capsys.readouterr().err
    )


def test_write_permission_is_not_enough_by_default_and_nothing_is_recorded(actions: Actions) -> None:
    first = actions.label()
    actions.finish(first)
    accept = actions.say(ACCEPT, token="ghp_maintainer")
    assert actions.comment_event(accept, sender="maintainer") == 0
    [refusal] = [b for b in actions.comments() if b.startswith("🚫 Not accepting")]
    assert "@\u200bmaintainer has 'write' permission" in refusal and "at least 'maintain'" in refusal
    assert not any(b.startswith("<!-- kv-parity:accept") for b in actions.comments())
    assert actions.check_run(first["inputs"]["campaign_id"])["conclusion"] == "failure"


def test_an_inconclusive_result_is_not_accepted(actions: Actions) -> None:
    first = actions.label()
    actions.finish(first, "inconclusive_straddle")
    measured = actions.check_run(first["inputs"]["campaign_id"])["conclusion"]
    assert actions.comment_event(actions.say(ACCEPT)) == 0
    [refusal] = [b for b in actions.comments() if b.startswith("🚫 Not accepting")]
    assert "INCONCLUSIVE or BLOCKED result is not accepted" in refusal and "`/parity rerun`" in refusal
    assert not any(b.startswith("<!-- kv-parity:accept") for b in actions.comments()), "nothing was recorded"
    assert actions.check_run(first["inputs"]["campaign_id"])["conclusion"] == measured == "action_required"


def test_revoke_withdraws_it_and_republishes_as_measured(actions: Actions) -> None:
    first = actions.label()
    actions.finish(first)
    assert actions.comment_event(actions.say(ACCEPT)) == 0
    assert actions.check_run(first["inputs"]["campaign_id"])["conclusion"] == "success"
    assert actions.comment_event(actions.say("/parity accept revoke")) == 0
    assert actions.check_run(first["inputs"]["campaign_id"])["conclusion"] == "failure"
    assert any(b.startswith("<!-- kv-parity:revoke ") for b in actions.comments())


# ----------------------------------------------------------------- the merge queue


def _group(actions: Actions) -> tuple[str, str]:
    """A merge queue branch for pull request #1 on main: (group commit, main's tip)."""
    repo = actions.history.repo
    tip = git(repo, "rev-parse", "main")
    git(repo, "checkout", "--quiet", "-B", f"gh-readonly-queue/main/pr-1-{tip}", tip)
    git(repo, "merge", "--quiet", "--no-ff", "-X", "theirs", "-m", "Merge pull request #1", actions.history.head)
    group = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "--quiet", "main")
    return group, tip


def test_a_merge_group_carries_the_pull_requests_kv_parity_forward(
    actions: Actions, capsys: pytest.CaptureFixture[str]
) -> None:
    group, tip = _group(actions)
    try:
        event = merge_group_event("checks_requested", head_sha=group, base_sha=tip, number=1)
        assert github_openapi().check_webhook("webhook-merge-group-checks-requested", event) == []
        assert actions.event("merge_group", event) == 0
        assert "carried failure to merge group" in capsys.readouterr().out
        [carried] = [r for r in actions.fake.check_runs(REPO) if r["head_sha"] == group]
        assert (carried["name"], carried["conclusion"]) == ("kv-parity", "failure")
        assert f"no kv-parity check run on its head {actions.history.head[:12]}" in carried["output"]["summary"]

        first = actions.label()
        actions.finish(first, "pass")
        assert actions.event("merge_group", event) == 0
        newest = max((r for r in actions.fake.check_runs(REPO) if r["head_sha"] == group), key=lambda r: r["id"])
        assert newest["conclusion"] == "success"
        assert "Nothing was measured on this merge group's commit" in newest["output"]["summary"]
        assert actions.fake.dispatches(REPO) == [first], "carrying forward dispatches nothing"
    finally:
        git(actions.history.repo, "branch", "-D", f"gh-readonly-queue/main/pr-1-{tip}")


def test_measure_mode_dispatches_a_campaign_of_the_group_published_on_the_groups_check_run(actions: Actions) -> None:
    """`[merge_queue] mode = "measure"` at the base branch's tip: the group's commit against the group's base; its
    publish step recognises the merge group (a queue branch names the pull request and the commit) and reports on
    the group's check run only."""
    repo = actions.history.repo
    git(repo, "checkout", "--quiet", "-B", "measure-main", actions.history.main2)
    config = (repo / ".github/kv-parity.toml").read_text() + '\n[merge_queue]\nmode = "measure"\n'
    (repo / ".github/kv-parity.toml").write_text(config)
    git(repo, "commit", "--quiet", "-am", "measure the merge queue")
    tip = git(repo, "rev-parse", "HEAD")
    branch = f"gh-readonly-queue/measure-main/pr-1-{tip}"
    git(repo, "checkout", "--quiet", "-B", branch, tip)
    git(repo, "merge", "--quiet", "--no-ff", "-X", "theirs", "-m", "Merge pull request #1", actions.history.head)
    group = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "--quiet", "main")
    try:
        event = merge_group_event("checks_requested", head_sha=group, base_sha=tip, number=1, base="measure-main")
        assert actions.event("merge_group", event) == 0
        [dispatch] = actions.fake.dispatches(REPO)
        inputs = dispatch["inputs"]
        assert (inputs["head_sha"], inputs["base_sha"], inputs["pr_number"]) == (group, tip, "1")
        actions.finish(dispatch, "pass")
        run = actions.check_run(inputs["campaign_id"])
        assert (run["head_sha"], run["conclusion"]) == (group, "success")
        assert actions.comments() == [], "a merge group's campaign comments on no pull request"
    finally:
        git(repo, "branch", "-D", branch, "measure-main")


def test_the_trigger_workflow_carries_a_merge_group_forward_when_replayed(actions: Actions, tmp_path: Path) -> None:
    """kv-parity-trigger.yml's job, run step by step on this machine (tests/actions_local.py) for a merge_group
    event: its pinned-requirement check, then `kv-parity event` with the workflow's own environment and token."""
    from tests.actions_local import LocalRun

    group, tip = _group(actions)
    try:
        created = loopback().post(
            f"{actions.fake.url}/repos/{REPO}/check-runs",
            json={"name": "kv-parity", "head_sha": actions.history.head, "external_id": "kvp-000000000001",
                  "status": "completed", "conclusion": "success"},
            headers={"Authorization": f"token {TOKEN}"},
        )
        assert created.status_code == 201, "the pull request's own kv-parity check, as a publish step leaves it"
        trigger = Path(__file__).resolve().parents[1] / ".github" / "workflows" / "kv-parity-trigger.yml"
        run = LocalRun(
            trigger, actions.history.repo, tmp_path / "runner",
            inputs={}, variables={"KV_PARITY_BOT_SPEC": "kv-parity-bot @ git+https://github.com/acme/kv-parity-bot@"
                                                       + "0" * 40},
            token=TOKEN, api_url=actions.fake.url, event_name="merge_group",
            event=merge_group_event("checks_requested", head_sha=group, base_sha=tip, number=1),
        )
        [(name, job)] = run.definition["jobs"].items()
        assert run.run_job(name, job).result == "success"
        [carried] = [r for r in actions.fake.check_runs(REPO) if r["head_sha"] == group]
        assert (carried["name"], carried["status"], carried["conclusion"]) == ("kv-parity", "completed", "success")
        assert any("carried success to merge group" in line for line in run.log), run.log[-1]
    finally:
        git(actions.history.repo, "branch", "-D", f"gh-readonly-queue/main/pr-1-{tip}")
