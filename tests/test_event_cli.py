"""Actions-only mode: `kv-parity event` against the GitHub stand-in over real HTTP, from event files shaped like
the ones Actions writes to $GITHUB_EVENT_PATH.

The stand-in validates dispatches as GitHub does (at most 25 inputs, every value a string, known inputs), so
an accepted dispatch is one GitHub would accept. The campaign workflow is registered with its real inputs and
`run-name`, so the runs `kv-parity event` later finds, cancels or reports are the ones it dispatched.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.cli.event import event_main
from bot.dispatch.campaign_workflow import RUN_NAME, parse_run_title
from bot.modes.actions_only import actions_settings
from bot.publish import comment_markers
from tests.fakes.github_api import FakeGitHub
from tests.webhooks import CONFIG_TOML, REPO, comment_event, commit, git, pull_request_event

ROOT = Path(__file__).resolve().parents[1]
TRIGGER = ROOT / ".github" / "workflows" / "kv-parity-trigger.yml"
CAMPAIGN_WORKFLOW = ROOT / ".github" / "workflows" / "kv-parity-campaign.yml"
WORKFLOW = "kv-parity-campaign.yml"
INPUTS = ("campaign_id", "base_sha", "head_sha", "rows", "config_ref", "pr_number")
WORKFLOW_INPUTS = (*INPUTS, "mode")
"""The campaign workflow also declares `mode` (default `campaign`), sent only for `/parity profile`."""
TOKEN = "ghs_github_token"
APP_ID = 15368
INSTALLATION_ID = 31
MAX_INPUTS = 25
TIP_CONFIG = CONFIG_TOML + """
[[rows]]
id = "sglang-agg"
args = ["--engine-type", "sglang"]
expect = { pressure = [10, 20] }
"""
"""main's config after the feature branched: one row more, so which config a dispatch used is visible."""




@dataclass(frozen=True)
class History:
    """main: root - base (adds the config) - main2 (a config with one row more); feature: base - head - head2;
    fork: base - fork1 - fork2; legacy: root - legacy_head (no config at the legacy branch's tip)."""

    repo: Path
    root: str
    base: str
    main2: str
    head: str
    head2: str
    fork1: str
    fork2: str
    legacy_head: str


def make_history(repo: Path) -> History:
    git(repo, "init", "--quiet", "-b", "main")
    root = commit(repo, {"README.md": "# widgets\n"}, "root")
    base = commit(repo, {".github/kv-parity.toml": CONFIG_TOML}, "add the campaign config")
    main2 = commit(repo, {"src/lib.rs": "fn main2() {}\n", ".github/kv-parity.toml": TIP_CONFIG}, "main moves on")
    git(repo, "checkout", "--quiet", "-b", "feature", base)
    head = commit(repo, {"src/lib.rs": "fn head() {}\n"}, "head")
    head2 = commit(repo, {"src/lib.rs": "fn head2() {}\n"}, "head 2")
    git(repo, "checkout", "--quiet", "-b", "fork", base)
    fork1 = commit(repo, {"src/fork.rs": "1\n"}, "fork 1")
    fork2 = commit(repo, {"src/fork.rs": "2\n"}, "fork 2")
    git(repo, "checkout", "--quiet", "-b", "legacy", root)
    legacy_head = commit(repo, {"src/x.rs": "x\n"}, "no config at the base")
    git(repo, "checkout", "--quiet", "main")
    return History(repo, root, base, main2, head, head2, fork1, fork2, legacy_head)


def serve_repo(fake: FakeGitHub, history: History) -> None:
    """The repository, its pull requests and people, the Actions token, and the campaign workflow."""
    fake.add_repo(REPO, history.repo)
    fake.register_app(APP_ID, "unused", "github-actions")
    fake.add_installation(INSTALLATION_ID, APP_ID, [REPO])
    fake.add_installation_token(TOKEN, INSTALLATION_ID)
    fake.add_workflow(REPO, WORKFLOW, name="kv-parity campaign", inputs=WORKFLOW_INPUTS, run_name=RUN_NAME)
    fake.add_pull(REPO, 1, history.head, "feature", "main")
    fake.add_pull(REPO, 2, history.fork1, "fork", "main", head_repo_full_name="contributor/widgets")
    fake.add_pull(REPO, 3, history.legacy_head, "legacy-feature", "legacy")
    fake.set_permission(REPO, "maintainer", "write")
    fake.set_permission(REPO, "reader", "read")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    return make_history(tmp_path_factory.mktemp("widgets"))


@dataclass
class Actions:
    """One GitHub Actions runner's view: its environment and a place for event files."""

    fake: FakeGitHub
    history: History
    tmp: Path

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

    def label(self, number: int = 1, head: str | None = None, *, sender: str = "maintainer", fork: bool = False) -> int:
        payload = pull_request_event(
            "labeled",
            number=number,
            head_sha=head or self.history.head,
            base_sha=self.history.main2,
            label="kv-parity",
            labels=("kv-parity",),
            sender=sender,
            fork=fork,
        )
        return self.event("pull_request_target", payload)

    def comment(self, body: str, number: int = 1, sender: str = "maintainer") -> int:
        return self.event("issue_comment", comment_event(body, number=number, sender=sender))

    def dispatches(self) -> list[dict[str, Any]]:
        return self.fake.dispatches(REPO)

    def comments(self, number: int = 1) -> list[str]:
        return [c["body"] for c in self.fake.comments(REPO, number)]

    def replies(self, number: int = 1) -> list[str]:
        return [body for body in self.comments(number) if not comment_markers.is_status_comment(body)]

    def status(self, number: int = 1) -> str:
        [body] = [body for body in self.comments(number) if comment_markers.is_status_comment(body)]
        return body


@pytest.fixture()
def actions(tmp_path: Path, history: History) -> Iterator[Actions]:
    with FakeGitHub() as fake:
        serve_repo(fake, history)
        yield Actions(fake, history, tmp_path)


def assert_valid_dispatch(dispatch: dict[str, Any], mode: str | None = None) -> dict[str, str]:
    inputs: dict[str, str] = dispatch["inputs"]
    assert dispatch["workflow"] == WORKFLOW and dispatch["ref"] == "main"
    assert len(inputs) <= MAX_INPUTS and all(isinstance(value, str) for value in inputs.values())
    assert set(inputs) == set(INPUTS) | ({"mode"} if mode else set())
    assert inputs.get("mode") == mode
    assert re.fullmatch(r"kvp-[0-9a-f]{12}", inputs["campaign_id"])
    return inputs


# ----------------------------------------------------------------- starting


def test_a_maintainers_label_dispatches_once_with_the_pinned_head_and_the_merge_base(actions: Actions) -> None:
    assert actions.label() == 0
    [dispatch] = actions.dispatches()
    inputs = assert_valid_dispatch(dispatch)
    history = actions.history
    assert inputs["head_sha"] == history.head
    assert inputs["base_sha"] == history.base != history.main2, "the merge base, not the base branch's tip"
    assert inputs["config_ref"] == history.main2, "the config is read at the base branch's tip, never the head"
    assert (inputs["rows"], inputs["pr_number"]) == ("", "1")
    title = parse_run_title(actions.fake.run(dispatch["run_id"])["display_title"])
    assert title is not None and (title.campaign_id, title.pr_number, title.head_sha) == (
        inputs["campaign_id"],
        1,
        history.head,
    )
    status = actions.status()
    assert inputs["campaign_id"] in status and "Running" in status
    assert actions.replies() == []


def test_an_unauthorised_label_is_refused_and_nothing_is_dispatched(actions: Actions) -> None:
    assert actions.label(sender="reader") == 0
    assert actions.dispatches() == []
    [reply] = actions.replies()
    assert "Not starting a parity campaign" in reply and "reader has 'read' permission" in reply


def test_a_push_to_a_labelled_fork_pull_request_never_dispatches(actions: Actions) -> None:
    payload = pull_request_event(
        "synchronize",
        number=2,
        head_sha=actions.history.fork2,
        base_sha=actions.history.main2,
        labels=("kv-parity",),
        sender="contributor",
        fork=True,
    )
    assert actions.event("pull_request_target", payload) == 0
    assert actions.dispatches() == []
    [reply] = actions.replies(2)
    assert "a maintainer must approve it" in reply


def test_the_approval_hint_for_a_fork_push_when_commented_back_dispatches_exactly_that_head(
    actions: Actions,
) -> None:
    """Every command a hint names is one the bot accepts (it once wrote 12 hex digits and then refused them)."""
    fork2 = actions.history.fork2
    actions.fake.add_pull(REPO, 2, fork2, "fork", "main", head_repo_full_name="contributor/widgets")
    payload = pull_request_event(
        "synchronize", number=2, head_sha=fork2, base_sha=actions.history.main2, labels=("kv-parity",),
        sender="contributor", fork=True,
    )
    assert actions.event("pull_request_target", payload) == 0
    [reply] = actions.replies(2)
    hinted = re.findall(r"`(/parity rerun sha=[^`]*)`", reply)
    assert hinted and set(hinted) == {f"/parity rerun sha={fork2}"}, reply
    assert actions.comment(hinted[0], number=2) == 0
    [dispatch] = actions.dispatches()
    assert assert_valid_dispatch(dispatch)["head_sha"] == fork2
    assert len(actions.replies(2)) == 1, "the hinted command is accepted, not refused"


def test_a_plain_rerun_on_a_fork_dispatches_nothing_and_answers_with_the_current_heads_sha_command(
    actions: Actions,
) -> None:
    """Without a record of heads nothing tells which head the maintainer reviewed: after BAD, GOOD and BAD again
    (A-B-A), a plain rerun written while GOOD was the head would otherwise dispatch BAD."""
    fork2 = actions.history.fork2
    actions.fake.add_pull(REPO, 2, fork2, "fork", "main", head_repo_full_name="contributor/widgets")
    assert actions.comment("/parity rerun", number=2) == 0
    assert actions.dispatches() == []
    [reply] = actions.replies(2)
    assert "nothing records which head the comment was written about" in reply
    assert re.findall(r"`(/parity rerun sha=[^`]*)`", reply) == [f"/parity rerun sha={fork2}"], reply
    assert actions.comment(f"/parity rerun sha={fork2}", number=2) == 0
    [dispatch] = actions.dispatches()
    assert assert_valid_dispatch(dispatch)["head_sha"] == fork2


def test_a_maintainers_label_on_a_fork_approves_and_dispatches_exactly_that_head(actions: Actions) -> None:
    assert actions.label(2, actions.history.fork1, fork=True) == 0
    [dispatch] = actions.dispatches()
    inputs = assert_valid_dispatch(dispatch)
    assert (inputs["head_sha"], inputs["base_sha"], inputs["pr_number"]) == (
        actions.history.fork1,
        actions.history.base,
        "2",
    )


def test_rerun_with_rows_dispatches_those_rows_and_a_second_request_is_a_duplicate(actions: Actions) -> None:
    assert actions.comment("/parity rerun rows=vllm-disagg") == 0
    [dispatch] = actions.dispatches()
    assert assert_valid_dispatch(dispatch)["rows"] == "vllm-disagg"
    assert actions.comment("/parity rerun rows=vllm-disagg") == 0
    assert len(actions.dispatches()) == 1
    [duplicate] = actions.replies()
    assert dispatch["inputs"]["campaign_id"] in duplicate and "not starting a second one" in duplicate
    assert actions.comment("/parity rerun rows=nope") == 0
    assert len(actions.dispatches()) == 1
    assert "unknown rows" in actions.replies()[-1] and "nope" in actions.replies()[-1]


def test_profile_dispatches_mode_profile_and_only_a_second_profile_is_its_duplicate(actions: Actions) -> None:
    assert actions.comment("/parity rerun") == 0
    assert actions.comment("/parity profile") == 0
    campaign, profile = actions.dispatches()
    assert_valid_dispatch(campaign)
    inputs = assert_valid_dispatch(profile, mode="profile")
    title = parse_run_title(actions.fake.run(profile["run_id"])["display_title"])
    assert title is not None and (title.campaign_id, title.mode) == (inputs["campaign_id"], "profile")
    first = parse_run_title(actions.fake.run(campaign["run_id"])["display_title"])
    assert first is not None and first.mode == "campaign", "a title without a mode value is a campaign"
    assert actions.fake.cancelled_runs(REPO) == [], "a profile runs beside the campaign, never replaces it"

    assert actions.comment("/parity profile") == 0
    assert len(actions.dispatches()) == 2, "the same head, rows and mode: a duplicate"
    assert inputs["campaign_id"] in actions.replies()[-1] and "not starting a second one" in actions.replies()[-1]


def test_rows_are_checked_against_the_base_branch_tips_config_not_the_merge_bases(
    actions: Actions, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pull request branched before main's config changed is judged by main's config as it is now (issue
    10.4): a row that exists only at the tip is accepted, and the workflow is told to read the tip."""
    assert actions.comment("/parity rerun rows=sglang-agg") == 0
    [dispatch] = actions.dispatches()
    inputs = assert_valid_dispatch(dispatch)
    assert (inputs["rows"], inputs["config_ref"], inputs["base_sha"]) == (
        "sglang-agg",
        actions.history.main2,
        actions.history.base,
    )
    assert capsys.readouterr().out.strip().endswith(f"config at {actions.history.main2}")


def test_rerun_of_a_moved_head_is_refused(actions: Actions) -> None:
    assert actions.comment(f"/parity rerun sha={actions.history.head2}") == 0
    assert actions.dispatches() == []
    assert "the head moved" in actions.replies()[-1]


def test_rerun_naming_a_head_by_a_prefix_is_refused(actions: Actions) -> None:
    """A 12-hex prefix of the current head is still not an approval: another commit can share it."""
    assert actions.comment(f"/parity rerun sha={actions.history.head[:12]}") == 0
    assert actions.dispatches() == []
    assert "is not a full commit SHA" in actions.replies()[-1] and actions.history.head in actions.replies()[-1]


def test_a_push_supersedes_the_running_campaign_of_the_old_head(actions: Actions) -> None:
    actions.label()
    [first] = actions.dispatches()
    actions.fake.add_pull(REPO, 1, actions.history.head2, "feature", "main", labels=["kv-parity"])
    push = pull_request_event(
        "synchronize",
        head_sha=actions.history.head2,
        base_sha=actions.history.main2,
        labels=("kv-parity",),
        sender="maintainer",
    )
    assert actions.event("pull_request_target", push) == 0
    first_run, second = actions.dispatches()
    assert assert_valid_dispatch(second)["head_sha"] == actions.history.head2
    assert actions.fake.cancelled_runs(REPO) == [first["run_id"]]
    assert actions.fake.run(first["run_id"])["conclusion"] == "cancelled"
    assert second["inputs"]["campaign_id"] in actions.status(), "the newest campaign owns the status comment"


def test_a_base_without_config_completes_the_check_run_as_action_required(actions: Actions) -> None:
    payload = pull_request_event(
        "labeled",
        number=3,
        head_sha=actions.history.legacy_head,
        base_sha=actions.history.root,
        label="kv-parity",
        labels=("kv-parity",),
    )
    payload["pull_request"]["base"]["ref"] = "legacy"
    assert actions.event("pull_request_target", payload) == 0
    assert actions.dispatches() == []
    [check_run] = actions.fake.check_runs(REPO)
    assert (check_run["status"], check_run["conclusion"]) == ("completed", "action_required")
    assert "no campaign config at the tip of legacy" in check_run["output"]["summary"]


# ----------------------------------------------------------------- answering and cancelling


def test_help_and_status_are_answered(actions: Actions) -> None:
    assert actions.comment("/parity help") == 0
    assert "/parity rerun" in actions.replies()[-1]
    assert actions.comment("/parity status") == 0
    assert "No parity campaign for this pull request" in actions.replies()[-1]
    actions.label()
    [dispatch] = actions.dispatches()
    assert actions.comment("/parity status") == 0
    status = actions.replies()[-1]
    assert dispatch["inputs"]["campaign_id"] in status and "queued" in status
    assert actions.comment("/parity frobnicate") == 0
    assert "Did not understand" in actions.replies()[-1]


def test_cancel_cancels_the_run_and_says_so(actions: Actions) -> None:
    assert actions.comment("/parity cancel") == 0
    assert "no queued or running campaign to cancel" in actions.replies()[-1]
    actions.label()
    [dispatch] = actions.dispatches()
    actions.fake.set_run_status(dispatch["run_id"], "in_progress")
    assert actions.comment("/parity cancel") == 0
    assert actions.fake.cancelled_runs(REPO) == [dispatch["run_id"]]
    status = actions.status()
    assert "Cancelled" in status and "`cancel` by @\u200bmaintainer" in status


def test_removing_the_label_cancels(actions: Actions) -> None:
    actions.label()
    [dispatch] = actions.dispatches()
    payload = pull_request_event(
        "unlabeled", head_sha=actions.history.head, base_sha=actions.history.main2, label="kv-parity"
    )
    assert actions.event("pull_request_target", payload) == 0
    assert actions.fake.cancelled_runs(REPO) == [dispatch["run_id"]]
    assert actions.replies() == [], "a label removal cancels quietly"


def test_an_unauthorised_command_is_refused(actions: Actions) -> None:
    assert actions.comment("/parity rerun", sender="reader") == 0
    assert actions.dispatches() == []
    assert "reader has 'read' permission" in actions.replies()[-1]


# ----------------------------------------------------------------- the command line and the workflow


def test_kv_parity_event_reads_the_actions_environment(actions: Actions) -> None:
    """The real entry point in a subprocess: event name and path from GITHUB_EVENT_NAME / GITHUB_EVENT_PATH."""
    path = actions.tmp / "event.json"
    payload = pull_request_event(
        "labeled",
        head_sha=actions.history.head,
        base_sha=actions.history.main2,
        label="kv-parity",
        labels=("kv-parity",),
    )
    path.write_text(json.dumps(payload))
    env = {
        **os.environ,
        **actions.environ,
        "GITHUB_EVENT_NAME": "pull_request_target",
        "GITHUB_EVENT_PATH": str(path),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "event"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("dispatched campaign kvp-")
    assert len(actions.dispatches()) == 1
    path.write_text("not json")
    bad = subprocess.run(
        [sys.executable, "-m", "bot.cli", "event"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert bad.returncode == 2 and "payload is not JSON" in bad.stderr


def test_event_for_another_repository_is_ignored(actions: Actions) -> None:
    payload = comment_event("/parity rerun", repo="someone/else")
    assert actions.event("issue_comment", payload) == 0
    assert actions.dispatches() == [] and actions.replies() == []


def _load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_trigger_workflow_runs_no_pull_request_code_with_least_privilege() -> None:
    workflow = _load(TRIGGER)
    triggers = workflow.get("on", workflow.get(True))
    assert triggers == {
        "pull_request_target": {"types": ["labeled", "synchronize", "unlabeled", "closed", "opened", "reopened"]},
        "issue_comment": {"types": ["created"]},
        "merge_group": {"types": ["checks_requested"]},
    }
    assert workflow["permissions"] == {}
    assert "github.event.merge_group.head_sha" in workflow["concurrency"]["group"]
    assert "github.event.pull_request.number" in workflow["concurrency"]["group"]
    assert "github.event.issue.number" in workflow["concurrency"]["group"]
    [job] = workflow["jobs"].values()
    assert job["permissions"] == {
        "actions": "write",
        "checks": "write",
        "pull-requests": "write",
        "contents": "read",
    }
    assert isinstance(job["timeout-minutes"], int)
    text = yaml.safe_dump(job)
    assert "checkout" not in text and "secrets." not in text, "nothing of the pull request is fetched"
    assert "head.sha" not in text and "head.ref" not in text
    campaign_jobs = _load(CAMPAIGN_WORKFLOW)["jobs"].values()
    campaign_uses = {step["uses"] for j in campaign_jobs for step in j["steps"] if "uses" in step}
    assert {step["uses"] for step in job["steps"] if "uses" in step} <= campaign_uses, "reuse the pinned SHAs"
    scripts = [step["run"] for step in job["steps"] if "run" in step]
    assert scripts[-1].startswith("kv-parity event") and '"$GITHUB_EVENT_PATH"' in scripts[-1]
    env = job["steps"][-1]["env"]
    assert env["GITHUB_TOKEN"] == "${{ github.token }}"


def test_campaign_workflow_names_its_runs_so_actions_only_mode_can_find_them() -> None:
    """Actions-only mode has no database: a run's display title (the `run-name`) is the campaign record."""
    assert _load(CAMPAIGN_WORKFLOW).get("run-name") == RUN_NAME


def test_an_event_of_a_repository_it_does_not_serve_is_ignored_with_no_call_to_github(
    actions: Actions, capsys: pytest.CaptureFixture[str]
) -> None:
    """`settings.repo` names the one repository served (`Settings.unserved`, the service's intake too): an
    event of another one is answered by nothing, not even a permission lookup."""
    payload = comment_event("/parity rerun", number=1, sender="maintainer")
    payload["repository"]["full_name"] = "someone-else/fork-of-widgets"
    assert actions.event("issue_comment", payload) == 0
    assert capsys.readouterr().out.strip() == (
        f"ignored: repository someone-else/fork-of-widgets is not served (settings.repo = {REPO})")
    assert actions.fake.calls == [] and actions.dispatches() == [] and actions.comments() == []


def test_the_served_repository_is_compared_without_case() -> None:
    settings = actions_settings(None, {"GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": "Acme/Widgets"})
    assert settings.unserved("acme/widgets") is None
    assert settings.unserved("acme/gadgets") == "repository acme/gadgets is not served (settings.repo = Acme/Widgets)"
