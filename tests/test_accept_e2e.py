"""`/parity accept`, GitHub's merge queue and its Re-run buttons through the webhook service end to end: signed
deliveries over real HTTP, real SQLite, the real publisher against the GitHub stand-in (held to GitHub's OpenAPI
description), campaigns run by the local backend as real subprocesses (the stand-in runner).

The runner writes the factory's performance-FAIL report (row sglang-disagg FAILs with upper bound 1.1248), so an
acceptance with `max=1.13` covers it and one with `max=1.10` does not. No sleeps: every wait is `wait_until`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.cli.history import history_main
from bot.cli.reports import main_verify
from bot.core.campaign import CampaignState
from bot.modes.wiring import default_publisher
from bot.service.app import create_app
from bot.store.campaigns import Store
from runners.schema.report import CampaignReport
from tests.report_factory import make_report
from tests.service_fixtures import Env, standin_env, widgets_history
from tests.webhooks import (
    REPO,
    check_suite_event,
    comment_event,
    commit,
    git,
    github_time,
    loopback,
    merge_group_event,
    post,
    register_test_app,
    serve_app,
    wait_until,
)

S = CampaignState
ACCEPT = "/parity accept perf max=1.13 the new admission pass is intended work"
LINE = "performance FAIL accepted by @lead (max 1.13): the new admission pass is intended work"


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return widgets_history(tmp_path_factory.mktemp("widgets"))


@pytest.fixture()
def env(tmp_path: Path, history: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    with standin_env(tmp_path, history, monkeypatch) as found:
        found.fake.set_permission(REPO, "lead", "maintain")
        yield found


class Service:
    """The real service and publisher in a thread, the runner writing a performance FAIL."""

    def __init__(self, env: Env, url: str, store: Store) -> None:
        self.env, self.url, self.store = env, url, store

    def campaigns(self, pr: int = 1) -> list[Any]:
        return list(reversed(self.store.for_pr(REPO, pr)))

    def completed(self, count: int = 1, pr: int = 1) -> list[Any]:
        return wait_until(  # type: ignore[no-any-return]
            lambda: (done := [c for c in self.campaigns(pr) if c.state == S.COMPLETED]) and len(done) >= count and done,
            f"{count} completed campaign(s)",
        )

    def published(self, campaign_id: str) -> None:
        wait_until(lambda: self.store.publications(campaign_id) == [("finished", "done")], f"{campaign_id} published")

    def outcome(self, delivery: str) -> str:
        status = wait_until(lambda: (s := self.store.delivery_status(delivery)) and s[0] != "pending" and s, delivery)
        return str(status[1])

    def check_run(self, external_id: str) -> dict[str, Any]:
        [run] = [r for r in self.env.fake.check_runs(REPO) if r["external_id"] == external_id]
        return run

    def comments(self, pr: int = 1) -> list[str]:
        return [c["body"] for c in self.env.fake.comments(REPO, pr)]


@pytest.fixture()
def svc(env: Env) -> Iterator[Service]:
    template = env.tmp / "perf-fail-report.json"
    template.write_text(make_report("perf_fail").model_dump_json())
    settings = env.settings(runner=("--report-template", str(template)), **register_test_app(env.fake, env.tmp))
    app = create_app(settings, publisher_factory=default_publisher)
    with serve_app(app) as url:
        yield Service(env, url, app.state.store)
    env.fake.check_conformance()


def _accept(svc: Service, body: str, *, sender: str = "lead", comment_id: int = 7001, delivery: str = "accept") -> str:
    written = github_time(time.time() + 1)  # after the head was seen, whatever the clock's second
    post(svc.url, "issue_comment", comment_event(body, sender=sender, comment_id=comment_id, created_at=written),
         delivery=delivery)
    return svc.outcome(delivery)


def test_an_accepted_performance_fail_republishes_at_once_and_verify_recomputes_it(svc: Service, env: Env) -> None:
    post(svc.url, "pull_request", env.label(), delivery="label")
    [first] = svc.completed()
    svc.published(first.id)
    assert svc.check_run(first.id)["conclusion"] == "failure"
    outcome = _accept(svc, ACCEPT)
    assert outcome == f"accepted: {LINE}; republishing campaign {first.id}"
    wait_until(lambda: svc.check_run(first.id)["conclusion"] == "success", "the check run republished")
    run = svc.check_run(first.id)
    assert run["output"]["title"].startswith(f"☑️ {LINE} — semantic PASS · performance FAIL")
    summary = run["output"]["summary"]
    assert "### Accepted" in summary
    assert "[the acceptance](https://github.com/acme/widgets/pull/1#issuecomment-7001)" in summary
    assert "maintain permission" in summary and "covers `sglang-disagg`" in summary
    [reply] = [b for b in svc.comments() if b.startswith("<!-- kv-parity:accept comment=7001 ")]
    assert f"head={env.head} " in reply.splitlines()[0] and "which now concludes `success`" in reply
    results = wait_until(
        lambda: (found := [b for b in svc.comments() if b.startswith("<!-- kv-parity:result")])
        and "**Accepted**" in found[0] and found,
        "the result comment edited",
    )
    assert len(results) == 1, "the result comment is edited, not posted again"
    assert svc.store.require(first.id).conclusion == "success"
    # Recorded where the verdict is: report.json in the artifact, recomputed by `kv-parity verify`.
    assert first.artifact_dir is not None
    wait_until(lambda: CampaignReport.model_validate_json((first.artifact_dir / "report.json").read_text()).acceptances,
               "the artifact rewritten")
    report = CampaignReport.model_validate_json((first.artifact_dir / "report.json").read_text())
    [acceptance] = report.acceptances
    assert (acceptance.login, acceptance.permission, acceptance.comment_id, acceptance.max) == ("lead", "maintain",
                                                                                               7001, 1.13)
    assert acceptance.head_sha == env.head and report.concluded.conclusion == "success"
    assert main_verify(first.artifact_dir / "report.json") == 0

    # A rerun of the same head is judged with it.
    post(svc.url, "issue_comment", comment_event("/parity rerun"), delivery="rerun")
    second = svc.completed(2)[-1]
    svc.published(second.id)
    assert svc.check_run(second.id)["conclusion"] == "success"
    assert svc.store.require(second.id).conclusion == "success"

    # Revoking republishes the head's latest finished campaign as measured (as accepting does: the check run GitHub
    # reads for the head); the earlier campaign's run, superseded by it, keeps what it said when it was current.
    assert _accept(svc, "/parity accept revoke", comment_id=7002, delivery="revoke").startswith(
        f"revoked 1 acceptance(s) of {env.head[:12]}"
    )
    wait_until(lambda: svc.check_run(second.id)["conclusion"] == "failure", "republished as measured")
    assert svc.store.acceptances(REPO, 1, env.head) == []
    assert svc.check_run(first.id)["conclusion"] == "success" and svc.check_run(first.id)["id"] < \
        svc.check_run(second.id)["id"]


def test_history_shows_the_acceptance(svc: Service, env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    post(svc.url, "pull_request", env.label(), delivery="label")
    svc.published(svc.completed()[0].id)
    _accept(svc, ACCEPT)
    assert history_main(["--db", str(svc.store.path), "--pr", f"{REPO}#1"]) == 0
    out = capsys.readouterr().out
    assert f"acceptance by lead (maintain) of head {env.head[:12]}: {LINE}" in out
    assert "https://github.com/acme/widgets/pull/1#issuecomment-7001" in out


def test_a_fail_above_max_stays_a_failure_and_says_by_how_much(svc: Service, env: Env) -> None:
    post(svc.url, "pull_request", env.label(), delivery="label")
    [first] = svc.completed()
    svc.published(first.id)
    _accept(svc, "/parity accept perf max=1.10 intended")
    wait_until(lambda: "### Accepted" in (svc.check_run(first.id)["output"]["summary"] or ""), "republished")
    run = svc.check_run(first.id)
    assert run["conclusion"] == "failure"
    assert "upper bound 1.1248 is above the accepted max 1.10 by 0.0248 (2.3%)" in run["output"]["summary"]


def test_who_may_accept_comes_from_the_base_branch_and_is_explained_once(svc: Service, env: Env) -> None:
    post(svc.url, "pull_request", env.label(), delivery="label")
    svc.published(svc.completed()[0].id)
    first = _accept(svc, ACCEPT, sender="maintainer", delivery="write-1")
    second = _accept(svc, ACCEPT, sender="maintainer", comment_id=7003, delivery="write-2")
    assert first.startswith("refused: @maintainer has 'write' permission")
    assert "`[checks] accept_permission` in .github/kv-parity.toml @" in first
    assert second.startswith("refused again, not answered")
    refusals = [b for b in svc.comments() if b.startswith("🚫 Not accepting:")]
    assert len(refusals) == 1 and "at least 'maintain'" in refusals[0]
    assert svc.store.acceptances(REPO, 1, env.head) == []


def test_a_semantic_fail_is_never_accepted(svc: Service, env: Env) -> None:
    template = env.tmp / "perf-fail-report.json"
    template.write_text(make_report("parity_fail").model_dump_json())
    post(svc.url, "pull_request", env.label(), delivery="label")
    svc.published(svc.completed()[0].id)
    outcome = _accept(svc, ACCEPT)
    assert outcome.startswith("accept refused: semantic parity FAILed on") and "never accepted" in outcome
    [reply] = [b for b in svc.comments() if b.startswith("🚫 Not accepting")]
    assert "semantic exception record" in reply and "docs/configuration.md#semantic-exceptions" in reply


# ----------------------------------------------------------------- GitHub's Re-run buttons


def test_rerunning_the_check_suite_is_a_rerun_by_whoever_pressed_it(svc: Service, env: Env) -> None:
    post(svc.url, "pull_request", env.label(), delivery="label")
    [first] = svc.completed()
    svc.published(first.id)
    suite = svc.check_run(first.id)["check_suite"]["id"]
    post(svc.url, "check_suite", check_suite_event("rerequested", suite_id=suite, head_sha=env.head, sender="reader"),
         delivery="reader")
    assert svc.outcome("reader").startswith("refused: @reader has 'read' permission")
    post(svc.url, "check_suite", check_suite_event("rerequested", suite_id=suite, head_sha=env.head), delivery="suite")
    assert svc.outcome("suite").startswith("campaign ")
    second = svc.completed(2)[-1]
    assert (second.trigger, second.requested_by, second.head_sha, second.rows) == (
        "check_suite", "maintainer", env.head, None
    )
    post(svc.url, "check_suite", check_suite_event("rerequested", suite_id=999_999, head_sha=env.head),
         delivery="other")
    assert svc.outcome("other") == "ignored: check suite 999999 holds no kv-parity check run"


# ----------------------------------------------------------------- the merge queue


def _queue(env: Env, head: str, number: int = 1) -> str:
    """The merge queue's branch and commit for pull request `number` on main: main's tip plus its head."""
    repo = env.repo
    tip = git(repo, "rev-parse", "main")
    git(repo, "checkout", "--quiet", "-B", f"gh-readonly-queue/main/pr-{number}-{tip}", tip)
    git(repo, "merge", "--quiet", "--no-ff", "-X", "theirs", "-m", f"Merge pull request #{number}", head)
    group = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "--quiet", "main")
    return group


def test_a_merge_group_carries_forward_each_pull_requests_conclusion(svc: Service, env: Env) -> None:
    post(svc.url, "pull_request", env.label(), delivery="label")
    [first] = svc.completed()
    svc.published(first.id)
    group = _queue(env, env.head)
    tip = git(env.repo, "rev-parse", "main")
    post(svc.url, "merge_group", merge_group_event("checks_requested", head_sha=group, base_sha=tip, number=1),
         delivery="queue-1")
    assert svc.outcome("queue-1").startswith(f"carried failure to merge group {group[:12]} (#1;")
    [carried] = [r for r in env.fake.check_runs(REPO) if r["head_sha"] == group]
    assert (carried["name"], carried["conclusion"]) == ("kv-parity", "failure")
    assert "Nothing was measured on this merge group's commit" in carried["output"]["summary"]
    assert f"campaign {first.id} of its head {env.head[:12]} concluded failure" in carried["output"]["summary"]
    _accept(svc, ACCEPT)
    wait_until(lambda: svc.store.require(first.id).conclusion == "success", "accepted")
    post(svc.url, "merge_group", merge_group_event("checks_requested", head_sha=group, base_sha=tip, number=1),
         delivery="queue-2")
    assert svc.outcome("queue-2").startswith(f"carried success to merge group {group[:12]}")
    newest = max((r for r in env.fake.check_runs(REPO) if r["head_sha"] == group), key=lambda r: r["id"])
    assert newest["conclusion"] == "success" and newest["output"]["title"].startswith("✅ Carried forward")
    git(env.repo, "branch", "-D", f"gh-readonly-queue/main/pr-1-{tip}")


def _measured_group(env: Env) -> tuple[str, str]:
    """A base branch whose config measures the merge queue, and the group of pull request #1 on it."""
    repo = env.repo
    git(repo, "checkout", "--quiet", "-B", "measure-main", env.main2)
    config = (repo / ".github/kv-parity.toml").read_text() + '\n[merge_queue]\nmode = "measure"\n'
    tip = commit(repo, {".github/kv-parity.toml": config}, "measure the merge queue")
    git(repo, "checkout", "--quiet", "-B", f"gh-readonly-queue/measure-main/pr-1-{tip}", tip)
    git(repo, "merge", "--quiet", "--no-ff", "-X", "theirs", "-m", "Merge pull request #1", env.head)
    group = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "--quiet", "main")
    return group, tip


def test_measure_mode_runs_a_campaign_of_the_group_and_destroyed_cancels_it(env: Env) -> None:
    """`[merge_queue] mode = "measure"` on the base branch: a campaign of the group's commit against its base."""
    group, tip = _measured_group(env)
    settings = env.settings(hold=True, **register_test_app(env.fake, env.tmp))
    app = create_app(settings, publisher_factory=default_publisher)
    with serve_app(app) as url:
        store: Store = app.state.store
        event = merge_group_event("checks_requested", head_sha=group, base_sha=tip, number=1, base="measure-main")
        post(url, "merge_group", event, delivery="measure")
        [campaign] = wait_until(lambda: [c for c in store.for_pr(REPO, 1) if c.state == S.RUNNING], "running")
        assert (campaign.head_sha, campaign.base_sha, campaign.trigger) == (group, tip, "merge_group")
        destroyed = merge_group_event("destroyed", head_sha=group, base_sha=tip, number=1, base="measure-main",
                                      reason="dequeued")
        post(url, "merge_group", destroyed, delivery="destroyed")
        wait_until(lambda: store.require(campaign.id).state == S.CANCELLED, "cancelled")
        wait_until(lambda: store.publications(campaign.id) == [("ended", "done")], "ended published")
        assert store.require(campaign.id).reason == "the merge group was destroyed (dequeued)"
    [run] = [r for r in env.fake.check_runs(REPO) if r["head_sha"] == group]
    assert (run["name"], run["conclusion"]) == ("kv-parity", "cancelled")
    assert env.fake.comments(REPO, 1) == [], "a merge group's campaign comments on no pull request"
    env.fake.check_conformance()


def test_a_rerun_of_a_queued_pull_request_leaves_its_groups_measurement_running(env: Env) -> None:
    """The group's measurement is recorded under the pull request but is of the group's commit, not an older head
    of the pull request: a `/parity rerun` there starts the head's own campaign and supersedes nothing."""
    group, tip = _measured_group(env)
    app = create_app(env.settings(hold=True, **register_test_app(env.fake, env.tmp)),
                     publisher_factory=default_publisher)
    with serve_app(app) as url:
        store: Store = app.state.store
        post(url, "merge_group", merge_group_event("checks_requested", head_sha=group, base_sha=tip, number=1,
                                                   base="measure-main"), delivery="measure")
        [measuring] = wait_until(lambda: [c for c in store.for_pr(REPO, 1) if c.state == S.RUNNING], "running")
        post(url, "issue_comment", comment_event("/parity rerun"), delivery="rerun")
        wait_until(lambda: (s := store.delivery_status("rerun")) and s[0] != "pending", "the rerun handled")
        assert [c.head_sha for c in store.for_pr(REPO, 1) if c.trigger == "comment"] == [env.head]
        assert store.require(measuring.id).state == S.RUNNING, store.require(measuring.id).reason
        post(url, "merge_group", merge_group_event("destroyed", head_sha=group, base_sha=tip, number=1,
                                                   base="measure-main", reason="dequeued"), delivery="destroyed")
        wait_until(lambda: store.require(measuring.id).state == S.CANCELLED, "cancelled by the queue")
    env.fake.check_conformance()


def test_the_pull_requests_page_the_campaign_page_and_the_row_history_show_the_acceptance(env: Env) -> None:
    public = "https://kv-parity.example.org"
    template = env.tmp / "perf-fail-report.json"
    template.write_text(make_report("perf_fail").model_dump_json())
    settings = env.settings(runner=("--report-template", str(template)), public_url=public,
                            **register_test_app(env.fake, env.tmp))
    app = create_app(settings, publisher_factory=default_publisher)
    with serve_app(app) as url:
        svc = Service(env, url, app.state.store)
        label = env.label()
        label["repository"]["private"] = False
        post(url, "pull_request", label, delivery="label")
        [first] = svc.completed()
        svc.published(first.id)
        accept = comment_event(ACCEPT, sender="lead", comment_id=7001, created_at=github_time(time.time() + 1))
        accept["repository"]["private"] = False
        post(url, "issue_comment", accept, delivery="accept")
        wait_until(lambda: svc.check_run(first.id)["conclusion"] == "success", "republished")
        wait_until(lambda: svc.store.publications(first.id) == [("finished", "done")], "published again")
        pr_token = svc.store.pr_token(REPO, 1)
        page = svc.store.campaign_page(first.id)
        assert pr_token is not None and page is not None and page.token is not None
        listing = loopback().get(f"{url}/pr/{pr_token}").text
        assert "Acceptances of this pull request" in listing and "(max 1.13)" in listing
        assert 'href="https://github.com/acme/widgets/pull/1#issuecomment-7001"' in listing
        campaign_page = loopback().get(f"{url}/c/{page.token}").text
        assert "Accepted: performance FAIL accepted by @lead (max 1.13)" in campaign_page
        row = loopback().get(f"{url}/pr/{pr_token}/rows/sglang-disagg").text
        assert "Accepted performance FAILs that may name row sglang-disagg" in row and "#1" in row
    env.fake.check_conformance()
