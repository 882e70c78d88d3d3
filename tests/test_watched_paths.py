"""`[checks] watched_paths`: an unlabelled pull request's head gets the campaign check at once, `skipped` when it
changes none of the watched paths and `action_required` naming them when it does, so a team can make the check
required without labelling every pull request. Through the webhook service (signed deliveries, real SQLite, the
real publisher) and through Actions-only mode (`kv-parity event`), both against the GitHub stand-in serving a real
git history, whose compare answer lists the changed files as GitHub's does (at most 300).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.core.campaign import CampaignState
from bot.core.watched_paths import needs_campaign_id, needs_campaign_pr, watched_change
from bot.modes.wiring import default_publisher
from bot.service.app import create_app
from bot.store.campaigns import Store
from runners.schema.config import ConfigError, parse_config
from tests.fakes.github_api import FakeGitHub
from tests.service_fixtures import BOT, TOKEN, Env, service, standin_env, widgets_history
from tests.webhooks import (
    CONFIG_TOML,
    REPO,
    check_run_event,
    commit,
    git,
    merge_group_event,
    post,
    pull_request_event,
    register_test_app,
    serve_app,
    wait_until,
)

WATCHED = ["src/sim/**", "!src/sim/**/*.md", "Cargo.lock"]
CONFIG = CONFIG_TOML + "\n[checks]\nwatched_paths = " + json.dumps(WATCHED) + "\n"


# ----------------------------------------------------------------- the rule, pure


def test_the_last_matching_pattern_decides_as_in_gitignore() -> None:
    change = watched_change(1, "a" * 40, "cfg", WATCHED,
                            ("Cargo.lock", "README.md", "src/sim/NOTES.md", "src/sim/engine/replay.rs", "src/x.rs"))
    assert change.watched == ("Cargo.lock", "src/sim/engine/replay.rs")
    assert (change.needs_campaign, change.conclusion) == (True, "action_required")
    docs = watched_change(1, "a" * 40, "cfg", WATCHED, ("README.md", "src/sim/NOTES.md", "lib/Cargo.lock.txt"))
    assert (docs.watched, docs.conclusion) == ((), "skipped")
    assert watched_change(1, "a" * 40, "cfg", WATCHED, ()).conclusion == "skipped", "no change, nothing to measure"


def test_a_list_cut_at_githubs_limit_cannot_clear_a_head() -> None:
    cut = watched_change(1, "a" * 40, "cfg", WATCHED, None)
    assert (cut.watched, cut.needs_campaign, cut.conclusion) == ((), True, "action_required")


def test_a_watched_paths_check_run_names_its_pull_request_and_nothing_else_does() -> None:
    head = "a" * 40
    assert needs_campaign_pr(needs_campaign_id(512, head)) == 512
    for other in ("kvp-0123456789ab", f"needs-campaign-x-{head}", "needs-campaign-512-abc", f"needs-campaign-{head}",
                  f"campaign-512-{head}"):
        assert needs_campaign_pr(other) is None, other


@pytest.mark.parametrize("pattern", ["", "   ", "# a comment", "src/***/x\\"])
def test_a_pattern_that_is_no_path_is_a_config_error_naming_it(pattern: str) -> None:
    with pytest.raises(ConfigError, match=r"checks\.watched_paths"):
        parse_config(CONFIG_TOML + "\n[checks]\nwatched_paths = " + json.dumps([pattern]) + "\n", "base")


# ----------------------------------------------------------------- a history served by the stand-in


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """main: root - base (the config watching src/sim); #1 changes the replay loop, #2 (a fork) only docs (one of
    them a Markdown file under src/sim, which the config excludes), #3 moves a file out of src/sim, #4 adds 300
    files, more than GitHub lists, #5 (a fork) changes the replay loop after #2's docs."""
    repo = tmp_path_factory.mktemp("watched")
    git(repo, "init", "--quiet", "-b", "main")
    shas: dict[str, Any] = {"repo": repo}
    shas["root"] = commit(repo, {"README.md": "# sim\n", "src/sim/replay.rs": "fn a() {}\n",
                                 "src/sim/old.rs": "fn old() {}\n"}, "root")
    shas["base"] = shas["main2"] = commit(repo, {".github/kv-parity.toml": CONFIG}, "add the campaign config")
    git(repo, "checkout", "--quiet", "-b", "feature", shas["base"])
    shas["head"] = commit(repo, {"src/sim/replay.rs": "fn b() {}\n"}, "change the replay loop")
    shas["head2"] = commit(repo, {"src/sim/replay.rs": "fn c() {}\n"}, "again")
    git(repo, "checkout", "--quiet", "-b", "fork", shas["base"])
    shas["fork1"] = commit(repo, {"README.md": "# sim, documented\n", "src/sim/NOTES.md": "why\n"}, "docs only")
    shas["fork2"] = commit(repo, {"src/sim/replay.rs": "fn forked() {}\n"}, "a fork changes the replay loop")
    git(repo, "checkout", "--quiet", "-b", "moves", shas["base"])
    git(repo, "mv", "src/sim/old.rs", "tools_old.rs")
    git(repo, "commit", "--quiet", "-m", "move a file out of the watched paths")
    shas["moved"] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "--quiet", "-b", "many", shas["base"])
    shas["many"] = commit(repo, {f"docs/page{n:03}.md": f"{n}\n" for n in range(300)}, "300 pages")
    shas["legacy_head"] = shas["broken_head"] = shas["base"]
    git(repo, "checkout", "--quiet", "main")
    return shas


def _serve(fake: FakeGitHub, history: dict[str, Any]) -> None:
    fake.add_repo(REPO, history["repo"])
    fake.add_pull(REPO, 1, history["head"], "feature", "main")
    fake.add_pull(REPO, 2, history["fork1"], "fork", "main", head_repo_full_name="contributor/widgets")
    fake.add_pull(REPO, 3, history["moved"], "moves", "main")
    fake.add_pull(REPO, 4, history["many"], "many", "main")
    fake.add_pull(REPO, 5, history["fork2"], "fork", "main", head_repo_full_name="contributor/widgets")
    fake.set_permission(REPO, "reader", "read")
    fake.set_permission(REPO, "maintainer", "write")


def _opened(history: dict[str, Any], number: int, head: str, action: str = "opened") -> dict[str, Any]:
    return pull_request_event(action, number=number, head_sha=history[head], base_sha=history["base"],
                              sender="contributor", fork=number in (2, 5))


def _runs(fake: FakeGitHub, head: str) -> list[dict[str, Any]]:
    return [run for run in fake.check_runs(REPO) if run["head_sha"] == head]


# ----------------------------------------------------------------- the webhook service


@pytest.fixture()
def env(tmp_path: Path, history: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    with FakeGitHub() as fake:
        fake.add_token(TOKEN, BOT)
        _serve(fake, history)
        yield Env(tmp_path, fake, **{key: sha for key, sha in history.items() if key not in ("moved", "many")})
        fake.check_conformance()


def test_the_service_concludes_each_unlabelled_head_by_what_it_changes(env: Env, history: dict[str, Any]) -> None:
    settings = env.settings(**register_test_app(env.fake, env.tmp))
    app = create_app(settings, publisher_factory=default_publisher)
    store: Store = app.state.store

    def outcome(delivery: str) -> str:
        found = wait_until(lambda: (s := store.delivery_status(delivery)) and s[0] != "pending" and s, delivery)
        return str(found[1])

    with serve_app(app) as url:
        for number, head in ((1, "head"), (2, "fork1"), (3, "moved"), (4, "many")):
            post(url, "pull_request", _opened(history, number, head), delivery=f"opened-{number}")
        assert outcome("opened-1").startswith("action_required: 1 watched path(s) changed")
        assert outcome("opened-2").startswith("skipped: 0 watched path(s) changed")
        assert outcome("opened-3").startswith("action_required: 1 watched path(s) changed"), "a move out counts"
        assert outcome("opened-4").startswith("action_required: 0 watched path(s) changed")

        [needed] = _runs(env.fake, history["head"])
        assert (needed["name"], needed["status"], needed["conclusion"]) == ("kv-parity", "completed", "action_required")
        assert needed["external_id"] == needs_campaign_id(1, history["head"])
        assert [action["identifier"] for action in needed["actions"]] == ["rerun"], "its Run button"
        assert needed["output"]["title"] == "⏸ kv-parity needed: 1 watched path changed"
        assert "- `src/sim/replay.rs`" in needed["output"]["summary"]
        assert "Nothing has been measured" in needed["output"]["summary"]
        assert needed["details_url"] == "https://github.com/acme/widgets/pull/1"
        [skipped] = _runs(env.fake, history["fork1"])
        assert (skipped["conclusion"], skipped["output"]["title"]) == (
            "skipped", "⏭ kv-parity not needed: no watched path changed")
        assert skipped["actions"] == [], "nothing to run"
        assert "changes 2 file(s), none of them under the paths" in skipped["output"]["summary"]
        [moved] = _runs(env.fake, history["moved"])
        assert "- `src/sim/old.rs`" in moved["output"]["summary"]
        [many] = _runs(env.fake, history["many"])
        assert many["output"]["title"] == "⏸ kv-parity needed: more files changed than GitHub lists"

        # A repeated delivery, or a reopen of the same head, adds nothing: the head already has its check run.
        post(url, "pull_request", _opened(history, 1, "head", "reopened"), delivery="reopened-1")
        assert outcome("reopened-1") == (f"ignored: the head {history['head'][:12]} already has a 'kv-parity' "
                                         "check run")
        # The maintainer's label runs the campaign, whose check run is the newer one: it answers for the head.
        post(url, "pull_request", env.label(), delivery="label")
        campaign = wait_until(lambda: (done := [c for c in store.for_pr(REPO, 1) if c.state == CampaignState.COMPLETED])
                              and done[0], "the labelled campaign completed")
        newest = max(_runs(env.fake, history["head"]), key=lambda run: run["id"])  # what GitHub's latest is
        assert newest["external_id"] == campaign.id and newest["id"] > needed["id"]

        # A fork's head that needs a campaign: GitHub names no pull request in a fork's check run, the external
        # id does, so the Run button reaches #5; a reader's click is refused there, a maintainer's approves and
        # runs exactly that head.
        post(url, "pull_request", _opened(history, 5, "fork2"), delivery="opened-5")
        assert outcome("opened-5").startswith("action_required: 1 watched path(s) changed")
        [fork_run] = _runs(env.fake, history["fork2"])

        def click(sender: str, delivery: str) -> str:
            post(url, "check_run", check_run_event("requested_action", external_id=fork_run["external_id"],
                                                   head_sha=history["fork2"], identifier="rerun", sender=sender,
                                                   pulls=()), delivery=delivery)
            return outcome(delivery)

        assert click("reader", "click-reader").startswith("refused: @reader has 'read' permission")
        [refusal] = [c["body"] for c in env.fake.comments(REPO, 5)]
        assert "the 'rerun' button needs at least 'write'" in refusal, "answered on the fork's pull request"
        click("maintainer", "click-maintainer")
        [launched] = wait_until(lambda: store.for_pr(REPO, 5), "the fork's campaign")
        assert (launched.head_sha, launched.trigger, launched.requested_by) == (
            history["fork2"], "check_run", "maintainer")


def test_a_repository_that_watches_no_paths_pays_one_read_per_unlabelled_push(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every unlabelled push asks; where the base branch's config watches nothing (most repositories) the answer
    is one read of the config at the branch, and nothing is written."""
    (tmp_path / "widgets").mkdir()
    history = widgets_history(tmp_path / "widgets")
    with standin_env(tmp_path, history, monkeypatch, config_pulls=False) as plain, service(plain.settings()) as svc:
        paths: list[tuple[str, str]] = []
        for push, head in (("first", plain.head), ("second", plain.head2)):  # the first also learns who the bot is
            before = len(plain.fake.calls)
            post(svc.url, "pull_request", pull_request_event("synchronize", head_sha=head, base_sha=plain.base),
                 delivery=push)
            assert svc.wait_delivery(push) == "ignored: push to a pull request without the 'kv-parity' label"
            paths = [(call.method, call.path) for call in plain.fake.calls[before:]]
    assert paths == [("GET", f"/repos/{REPO}/contents/.github/kv-parity.toml")], paths


def test_the_merge_queue_carries_a_head_that_needs_no_campaign(env: Env, history: dict[str, Any]) -> None:
    """Carry mode under watched paths: a queued pull request whose head changes none of them carries as needing no
    campaign (its own check concluded `skipped`); one that changes them still needs a successful campaign."""
    app = create_app(env.settings(**register_test_app(env.fake, env.tmp)), publisher_factory=default_publisher)
    store: Store = app.state.store
    repo, tip = history["repo"], history["base"]

    def queue(number: int, head: str) -> str:
        git(repo, "checkout", "--quiet", "-B", f"gh-readonly-queue/main/pr-{number}-{tip}", tip)
        git(repo, "merge", "--quiet", "--no-ff", "-m", f"Merge pull request #{number}", history[head])
        group = git(repo, "rev-parse", "HEAD")
        git(repo, "checkout", "--quiet", "main")
        return group

    def outcome(delivery: str) -> str:
        found = wait_until(lambda: (s := store.delivery_status(delivery)) and s[0] != "pending" and s, delivery)
        return str(found[1])

    try:
        with serve_app(app) as url:
            docs = queue(2, "fork1")
            post(url, "merge_group", merge_group_event("checks_requested", head_sha=docs, base_sha=tip, number=2),
                 delivery="queue-docs")
            assert outcome("queue-docs").startswith(f"carried success to merge group {docs[:12]} (#2;")
            [carried] = _runs(env.fake, docs)
            assert carried["conclusion"] == "success"
            assert f"its head {history['fork1'][:12]} changes no watched path" in carried["output"]["summary"]
            moved = queue(3, "moved")
            post(url, "merge_group", merge_group_event("checks_requested", head_sha=moved, base_sha=tip, number=3),
                 delivery="queue-moved")
            assert outcome("queue-moved").startswith(f"carried failure to merge group {moved[:12]} (#3;")
    finally:
        for number in (2, 3):
            subprocess.run(["git", "-C", str(repo), "branch", "-D", f"gh-readonly-queue/main/pr-{number}-{tip}"],
                           capture_output=True, check=False)


# ----------------------------------------------------------------- Actions-only mode


def test_actions_only_mode_concludes_the_same_way_when_the_trigger_workflow_is_told_to(
    tmp_path: Path, history: dict[str, Any]
) -> None:
    """kv-parity-trigger.yml run step by step (tests/actions_local.py): its pre-filter skips unlabelled heads unless
    the repository variable KV_PARITY_WATCHED_PATHS is `true` (a runner per push costs minutes), then
    `kv-parity event` concludes the check as the service does, with the workflow's token (github-actions)."""
    from tests.actions_local import LocalRun

    token = "ghs_github_token"
    trigger = Path(__file__).resolve().parents[1] / ".github" / "workflows" / "kv-parity-trigger.yml"
    pinned = {"KV_PARITY_BOT_SPEC": "kv-parity-bot @ git+https://github.com/acme/kv-parity-bot@" + "0" * 40}
    with FakeGitHub() as fake:
        _serve(fake, history)
        fake.register_app(15368, "unused", "github-actions")
        fake.add_installation(31, 15368, [REPO])
        fake.add_installation_token(token, 31)

        def replay(number: int, head: str, variables: dict[str, str]) -> str:
            run = LocalRun(trigger, history["repo"], tmp_path / f"runner-{number}-{len(variables)}", inputs={},
                           variables=variables, token=token, api_url=fake.url, event_name="pull_request_target",
                           event=_opened(history, number, head))
            [job] = run.run().values()
            return job.result

        assert replay(1, "head", pinned) == "skipped"
        assert fake.check_runs(REPO) == [], "without the variable no runner starts for an unlabelled head"
        watching = {**pinned, "KV_PARITY_WATCHED_PATHS": "true"}
        assert (replay(1, "head", watching), replay(2, "fork1", watching)) == ("success", "success")
        [needed] = _runs(fake, history["head"])
        [skipped] = _runs(fake, history["fork1"])
        assert (needed["conclusion"], skipped["conclusion"]) == ("action_required", "skipped")
        assert needed["app"]["slug"] == "github-actions"
        assert fake.dispatches(REPO) == [], "nothing runs by itself"
        fake.check_conformance()
