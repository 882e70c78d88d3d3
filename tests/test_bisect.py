"""`kv-parity bisect` on real commits of the fixture harness: one commit makes the replay loop slower, a later one
changes what the disaggregated row computes; the bisect probes real campaigns (real worktrees, cargo builds through
the build cache, pinned processes) and names each culprit by the gate the bad endpoint FAILs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bot.cli.main import main as cli_main
from bot.cli.reports import main_verify
from bot.core.campaign import FINAL_STATES, CampaignState
from bot.modes.wiring import default_publisher
from bot.service.app import create_app
from bot.settings import Settings
from bot.store.campaigns import Store
from runners.demo import commit_change, init_fixture_repo
from runners.exec.build_cache import configured_dir
from runners.pipeline.bisect import BisectRequest, run_bisect
from runners.schema.bisect_rule import BisectReport
from runners.schema.config import DEFAULT_CONFIG_PATH, CampaignConfig
from runners.schema.report import PerfVerdict, SemanticVerdict
from runners.verify import verify_bisect
from tests.configs import config_text, quick
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

DISAGG = "vllm-disagg"
FINAL = FINAL_STATES


def bisect_config(base: CampaignConfig, trace: Path) -> CampaignConfig:
    """The demo's disaggregated row alone (the semantic change touches disaggregated rows), no Stage 6 fixtures,
    ten pairs gated on the replay call's thread CPU time (immune to this shared machine's time slicing): a
    comment-only commit PASSes under 1.3 and a commit doing twice the work FAILs it."""
    config = quick(base)
    perf = config.perf.model_copy(update={"threshold": 1.3})
    harness = config.harness.model_copy(update={"timing_field": "replay_cpu_ms"})
    rows = [row for row in config.rows if row.id == DISAGG]
    return config.model_copy(update={"rows": rows, "fixtures": [], "perf": perf, "harness": harness,
                                     "trace": config.trace.model_copy(update={"path": str(trace)})})


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """good, then: a comment, twice the replay work, a comment, the semantic change, a comment."""
    repo = tmp_path_factory.mktemp("bisect") / "repo"
    good = init_fixture_repo(repo)
    shas = [good,
            commit_change(repo, "docs: reword the replay loop", touch_comment=True),
            commit_change(repo, "perf: more work per request", knobs={"WORK_SCALE": 2.0}),
            commit_change(repo, "docs: reword it again", touch_comment=True),
            commit_change(repo, "fix: transfer only destination-missing KV tokens", knobs={"SEMANTIC_CHANGE": True}),
            commit_change(repo, "docs: one more reword", touch_comment=True)]
    return repo, shas


def test_kv_parity_bisect_names_the_semantic_change_as_the_culprit(
        history: tuple[Path, list[str]], campaign_config: CampaignConfig, demo_trace: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The bad end FAILs parity (performance is not measured past it), so the target is the semantic gate: the
    slower commit before it is good for this search, and the culprit is the semantic change."""
    repo, shas = history
    config = tmp_path / "kv-parity.toml"
    config.write_text(config_text(bisect_config(campaign_config, demo_trace)), encoding="utf-8")
    out = tmp_path / "out"
    code = cli_main(["bisect", "--repo", str(repo), "--good", shas[0], "--bad", "main", "--config", str(config),
                     "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out.splitlines()
    assert code == 0, printed
    assert printed[-1] == f"culprit: {shas[4]}", "the last line names the culprit by its full SHA"
    bisect = BisectReport.model_validate_json((out / "bisect.json").read_text())
    assert bisect.rule.target == ["semantic"]
    assert [probe.commit for probe in bisect.probes] == [shas[5], shas[2], shas[3], shas[4]]
    slower = bisect.probes[1].attempts[0].report
    assert slower.rows[0].semantic == SemanticVerdict.PASS and slower.rows[0].perf_verdict == PerfVerdict.FAIL, \
        "the slower commit FAILs performance, which is not this search's target"
    endpoint = bisect.probes[0].attempts[0].report
    assert endpoint.rows[0].semantic == SemanticVerdict.FAIL and endpoint.rows[0].perf_verdict == PerfVerdict.NOT_RUN
    for probe in bisect.probes:
        [attempt] = probe.attempts
        assert (out / attempt.directory / "report.json").is_file()
        assert attempt.report.revisions[0].sha == shas[0], "every probe compares its commit with good"
    baseline_builds = [probe.attempts[0].report.artifact("baseline").build_cache for probe in bisect.probes]
    assert all(record is not None and record.reused_from for record in baseline_builds[1:]), \
        "good is built once and reused by every later probe"
    markdown = (out / "bisect.md").read_text()
    assert f"**Culprit** `{shas[4]}`" in markdown
    assert verify_bisect(bisect) == []
    assert main_verify(out / "bisect.json") == 0
    data = json.loads((out / "bisect.json").read_text())
    data["probes"][1]["attempts"][0]["report"]["rows"][0]["semantic"] = "FAIL"
    (tmp_path / "forged.json").write_text(json.dumps(data), encoding="utf-8")
    capsys.readouterr()  # what the consistent file's verify printed
    assert main_verify(tmp_path / "forged.json") == 1
    forged = f"probe 2 ({shas[2][:12]}) attempt 1"
    row = slower.rows[0].row.id
    assert capsys.readouterr().out.splitlines() == [
        f"{tmp_path / 'forged.json'}: 5 disagreement(s) with the recomputation:",
        f"  - {forged}: row {row}: semantic verdict FAIL, recomputed PASS",
        f"  - {forged}: row {row}: performance was measured although correctness was not established (FAIL); the"
        " protocol stops the row first",
        f"  - {forged}: campaign semantic: stored PASS, recomputed FAIL",
        f"  - {forged}: campaign summary: stored semantic PASS · performance FAIL · sizes PASS, recomputed semantic"
        " FAIL · performance FAIL · sizes PASS",
        f"  - {forged}: state good, recomputed bad",
    ], "the forged row's verdict, what follows from it, and the probe's state"


def test_a_bisect_before_the_semantic_change_names_the_slower_commit(
        history: tuple[Path, list[str]], campaign_config: CampaignConfig, demo_trace: Path, tmp_path: Path) -> None:
    """Up to the commit before the semantic change, the bad end FAILs performance: the culprit is the commit that
    doubled the work, found by the same probes against good."""
    repo, shas = history
    request = BisectRequest(repo=repo, good=shas[0], bad=shas[3], config=bisect_config(campaign_config, demo_trace),
                            config_source="test", out_dir=tmp_path / "out")
    bisect = run_bisect(request, lambda report, directory: None)
    assert bisect.rule.target == ["performance"]
    assert [probe.commit for probe in bisect.probes] == [shas[3], shas[1], shas[2]]
    assert [probe.state for probe in bisect.probes] == ["bad", "good", "bad"]
    assert bisect.result.culprit == shas[2] and bisect.result.good == shas[1]
    assert verify_bisect(bisect) == []


def test_parity_bisect_on_a_failed_pull_request_posts_the_culprit_and_completes_its_check_run(
        tmp_path: Path, campaign_config: CampaignConfig, demo_trace: Path, kv_parity: KvParity,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole path once: a labelled pull request's campaign FAILs parity, `/parity bisect` runs `kv-parity
    bisect` through the local backend (real builds and probes), and the real side-run publisher completes
    `kv-parity / bisect` on the head and posts the culprit on the pull request."""
    monkeypatch.delenv("PYTHONPATH", raising=False)
    repo = tmp_path / "repo"
    init_fixture_repo(repo)
    base = commit_change(repo, "add the campaign config",
                         files={DEFAULT_CONFIG_PATH: config_text(bisect_config(campaign_config, demo_trace))})
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "feature"], check=True)
    commit_change(repo, "docs: reword", touch_comment=True)
    culprit = commit_change(repo, "fix: transfer only destination-missing KV tokens", knobs={"SEMANTIC_CHANGE": True})
    head = commit_change(repo, "docs: reword again", touch_comment=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "main"], check=True)
    with FakeGitHub() as fake:
        fake.add_repo(REPO, repo)
        fake.add_pull(REPO, 9, head, "feature", "main")
        fake.set_permission(REPO, "maintainer", "write")
        settings = Settings.model_validate({
            "local_campaign_argv": [str(kv_parity.executable), "campaign"],
            "local_bisect_argv": [str(kv_parity.executable), "bisect"],
            "webhook_secret": SECRET, "api_base_url": fake.url, "api_seconds_between_requests": 0,
            "api_seconds_between_writes": 0, "repo": REPO, "db_path": tmp_path / "bot.sqlite3",
            "work_dir": tmp_path / "work", "local_repo_path": repo, "poll_interval_seconds": 0.1,
            "build_cache_dir": configured_dir(), **register_test_app(fake, tmp_path),
        })
        app = create_app(settings, publisher_factory=default_publisher)
        with serve_app(app) as url:
            store: Store = app.state.store
            labelled = pull_request_event("labeled", number=9, head_sha=head, base_sha=base, label="kv-parity",
                                          labels=("kv-parity",))
            assert post(url, "pull_request", labelled).status_code == 202
            [failed] = wait_until(lambda: [c for c in store.for_pr(REPO, 9) if c.state in FINAL], "campaign",
                                  timeout=600)
            assert failed.conclusion == "failure", failed.reason
            assert post(url, "issue_comment", comment_event("/parity bisect", number=9)).status_code == 202
            [done] = wait_until(lambda: [c for c in store.for_pr(REPO, 9) if c.purpose == "bisect"
                                         and c.state in FINAL], "the bisect", timeout=900)
            wait_until(lambda: store.publications(done.id) == [("finished", "done")], "the bisect published")
        check_runs = fake.check_runs(REPO)
        comments = fake.comments(REPO, 9)

    assert done.state == CampaignState.COMPLETED and done.conclusion == "success", done.reason
    assert (done.base_sha, done.head_sha) == (base, head)
    assert done.artifact_dir is not None
    bisect = BisectReport.model_validate_json((done.artifact_dir / "bisect.json").read_text())
    assert bisect.result.culprit == culprit and bisect.bisect_id == done.id
    assert verify_bisect(bisect) == []
    [run] = [r for r in check_runs if r["external_id"] == done.id]
    assert (run["name"], run["head_sha"], run["conclusion"]) == ("kv-parity / bisect", head, "success")
    assert run["output"]["title"] == f"Culprit {culprit[:7]}"
    [posted] = [c for c in comments if c["body"].startswith(f"<!-- kv-parity:bisect {done.id} -->")]
    assert f"**Culprit** `{culprit}`" in posted["body"]
    [campaign_run] = [r for r in check_runs if r["external_id"] == failed.id]
    assert campaign_run["name"] == "kv-parity" and campaign_run["conclusion"] == "failure", \
        "the pull request's own check is left as its campaign concluded it"
