"""The whole product once, for real: a signed `labeled` webhook → the service pins SHAs, reads the config from
the base, runs `kv-parity campaign` on the fixture harness (real git worktrees, cargo builds, pinned
processes) through the local backend, and the real publisher completes the check run and posts one result.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli.main import main as cli_main
from bot.core.campaign import CampaignState
from bot.modes.wiring import default_publisher
from bot.service.app import create_app
from bot.settings import Settings
from bot.store.campaigns import Store
from runners.demo import commit_change, init_fixture_repo
from runners.exec.build_cache import configured_dir
from runners.schema.config import DEFAULT_CONFIG_PATH
from runners.schema.report import CampaignReport
from tests.configs import config_text, one_row_config
from tests.fakes.github_api import FakeGitHub
from tests.installed import KvParity
from tests.webhooks import (
    REPO,
    SECRET,
    comment_event,
    post,
    pull_request_event,
    register_test_app,
    serve_app,
    wait_until,
)


def _settings(fake: FakeGitHub, tmp_path: Path, repo: Path, kv_parity: KvParity) -> Settings:
    """The service as an operator runs it with the local backend, talking to the stand-in as an App; campaigns
    run the `kv-parity` of the kv_parity fixture (in CI, the installed wheel's)."""
    return Settings.model_validate({
        "local_campaign_argv": [str(kv_parity.executable), "campaign"],
        "webhook_secret": SECRET, "api_base_url": fake.url, "api_seconds_between_requests": 0,
        "api_seconds_between_writes": 0, "repo": REPO, "db_path": tmp_path / "bot.sqlite3",
        "work_dir": tmp_path / "work", "local_repo_path": repo, "poll_interval_seconds": 0.1,
        "build_cache_dir": configured_dir(),  # the session's: the fixture's base tree is built once
        **register_test_app(fake, tmp_path),
    })


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_labeled_pull_request_runs_the_fixture_campaign_and_publishes_once(
        tmp_path: Path, demo_trace: Path, capsys: pytest.CaptureFixture[str], kv_parity: KvParity,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)  # the campaign process imports only its own installation
    repo = tmp_path / "repo"
    init_fixture_repo(repo)
    config = config_text(one_row_config(demo_trace))
    base = commit_change(repo, "add the campaign config", files={DEFAULT_CONFIG_PATH: config})
    _git(repo, "checkout", "-q", "-b", "feature")
    head = commit_change(repo, "refactor: reword comments", touch_comment=True)
    _git(repo, "checkout", "-q", "main")

    with FakeGitHub() as fake:
        fake.add_repo(REPO, repo)
        fake.add_pull(REPO, 7, head, "feature", "main")
        fake.set_permission(REPO, "maintainer", "write")
        settings = _settings(fake, tmp_path, repo, kv_parity)
        app = create_app(settings, publisher_factory=default_publisher)
        with serve_app(app) as url:
            event = pull_request_event("labeled", number=7, head_sha=head, base_sha=base, label="kv-parity",
                                       labels=("kv-parity",), sender="maintainer")
            assert post(url, "pull_request", event, delivery="label-7").status_code == 202
            store: Store = app.state.store
            [done] = wait_until(
                lambda: [c for c in store.for_pr(REPO, 7) if c.state in (CampaignState.COMPLETED,
                                                                          CampaignState.ERRORED)],
                "the campaign finished", timeout=600)
            wait_until(lambda: store.publications(done.id) == [("finished", "done")], "finished published")
        assert done.state == CampaignState.COMPLETED, done.reason
        check_runs = fake.check_runs(REPO)
        comments = fake.comments(REPO, 7)

    assert done.head_sha == head and done.base_sha == base
    assert done.config_source == f"{DEFAULT_CONFIG_PATH} @ {base} (base branch tip)" and done.config_sha == base
    assert done.artifact_dir is not None
    report = CampaignReport.model_validate_json((done.artifact_dir / "report.json").read_text())
    assert [r.sha for r in report.revisions] == [base, head]
    assert [row.row.id for row in report.rows] == ["vllm-agg"]
    assert report.rows[0].semantic.value == "PASS"
    assert report.verdicts is not None
    [check_run] = check_runs
    assert check_run["status"] == "completed" and check_run["head_sha"] == head
    assert check_run["conclusion"] == report.verdicts.conclusion.value
    assert check_run["external_id"] == done.id
    results = [c for c in comments if c["body"].startswith("<!-- kv-parity:result")]
    statuses = [c for c in comments if c["body"].startswith("<!-- kv-parity:status")]
    assert len(results) == 1 and done.id in results[0]["body"]
    assert len(statuses) == 1, "one sticky status comment, edited in place"

    # The installed command once as a process; the other queries through the same entry point in this process
    # (each process start imports the whole campaign runner, about two seconds here).
    history = ["history", "--db", str(tmp_path / "bot.sqlite3")]
    shown = subprocess.run([sys.executable, "-m", "bot.cli", *history, "--campaign", done.id], capture_output=True,
                           text=True, check=True).stdout
    assert f"campaign {done.id}: completed" in shown
    assert "(new) -> requested" in shown and "running -> completed" in shown
    assert "publication finished: done" in shown
    capsys.readouterr()
    assert cli_main([*history, "--delivery", "label-7"]) == 0
    by_delivery = capsys.readouterr().out
    assert by_delivery.startswith("delivery label-7: done") and done.id in by_delivery
    assert cli_main([*history, "--pr", f"{REPO}#7"]) == 0
    assert done.id in capsys.readouterr().out
    assert cli_main([*history, "--campaign", "nope"]) == 1
    capsys.readouterr()
    assert cli_main([*history, "--rejected"]) == 1
    assert "nothing recorded" in capsys.readouterr().err, "no malformed delivery was sent"


def test_parity_profile_attributes_the_candidates_added_work_and_publishes_it(
        tmp_path: Path, demo_trace: Path, kv_parity: KvParity, monkeypatch: pytest.MonkeyPatch) -> None:
    """`/parity profile` through the real service: correctness, then attribution instead of sampling; the
    comment names the function the candidate added work to."""
    monkeypatch.delenv("PYTHONPATH", raising=False)
    repo = tmp_path / "repo"
    init_fixture_repo(repo)
    config = config_text(one_row_config(demo_trace))
    base = commit_change(repo, "add the campaign config", files={DEFAULT_CONFIG_PATH: config})
    _git(repo, "checkout", "-q", "-b", "feature")
    head = commit_change(repo, "perf: more work in one place", knobs={"HOT_SPOT_WORK": 2.0})
    _git(repo, "checkout", "-q", "main")

    with FakeGitHub() as fake:
        fake.add_repo(REPO, repo)
        fake.add_pull(REPO, 8, head, "feature", "main")
        fake.set_permission(REPO, "maintainer", "write")
        settings = _settings(fake, tmp_path, repo, kv_parity)
        app = create_app(settings, publisher_factory=default_publisher)
        with serve_app(app) as url:
            event = comment_event("/parity profile", number=8, sender="maintainer")
            assert post(url, "issue_comment", event, delivery="profile-8").status_code == 202
            store: Store = app.state.store
            [done] = wait_until(
                lambda: [c for c in store.for_pr(REPO, 8) if c.state in (CampaignState.COMPLETED,
                                                                          CampaignState.ERRORED)],
                "the profile finished", timeout=900)
            wait_until(lambda: store.publications(done.id) == [("finished", "done")], "finished published")
        assert done.state == CampaignState.COMPLETED, done.reason
        comments = fake.comments(REPO, 8)

    assert done.mode == "profile" and done.base_sha == base
    assert done.artifact_dir is not None
    report = CampaignReport.model_validate_json((done.artifact_dir / "report.json").read_text())
    assert report.mode == "profile"
    [row] = report.rows
    assert row.performance is None and row.perf_reason == "performance not measured: a profile was requested"
    assert row.attribution is not None and row.attribution.trigger == "requested"
    assert row.attribution.findings[0].startswith("`dynamo_bench::hotspot::hot_spot`")
    [result] = [c for c in comments if c["body"].startswith("<!-- kv-parity:result")]
    assert "🔎 Profile" in result["body"]
    assert "Where the time went in `vllm-agg`" in result["body"]
    assert "dynamo_bench::hotspot::hot_spot" in result["body"]
