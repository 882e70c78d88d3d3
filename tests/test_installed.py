"""kv-parity pip-installed from a git commit, non-editable, into a fresh venv, and run from a directory outside
any checkout: what the campaign workflow and a new user get, not this repository's editable checkout.

The wheel must carry every file the code reads at run time (templates, profiles, the demo harness); each
command is driven as a process of the installed venv: `--version`, `demo`, `report`, `verify`, `publish` to
the GitHub stand-in, the Actions chain `plan` -> `build` -> `manifest` -> `row` -> `merge`, and `serve`
answering a signed delivery with a campaign it finishes and publishes. tests/installed.py makes the venv
(once per session) or takes the one .ci/run provides.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bot.exit_codes import EXIT_FOR_CONCLUSION
from runners import build_info
from runners.build_info import BuildInfo, describe
from runners.demo import commit_change, init_fixture_repo
from runners.resources import package_dir
from runners.schema.config import DEFAULT_CONFIG_PATH
from runners.schema.report import CampaignReport, SemanticVerdict
from tests.configs import config_text, one_row_config
from tests.fakes.github_api import FakeGitHub
from tests.installed import ROOT, KvParity, clone_files, is_bytecode
from tests.service_fixtures import widgets_history
from tests.webhooks import (
    REPO,
    SECRET,
    free_port,
    loopback,
    post,
    pull_request_event,
    register_test_app,
    stand_in_runner,
    wait_until,
)

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (the bubblewrap package)")

ROW = "vllm-agg"
TOKEN = "ghs_installed_token"
APP_ID, INSTALLATION_ID = 15368, 31
VERSION = re.compile(r"kv-parity \d+\.\d+\.\d+ \(commit (?P<commit>[0-9a-f]{40})\)\n")


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory in no git checkout, so nothing can be found relative to one."""
    where = tmp_path_factory.mktemp("outside-any-checkout")
    probe = subprocess.run(["git", "-C", str(where), "rev-parse", "--show-toplevel"], capture_output=True, check=False)
    assert probe.returncode != 0, f"{where} is inside a git checkout"
    return where


def run(kv: KvParity, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The installed `kv-parity`, with no PYTHONPATH that could bring this checkout's modules back in."""
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([str(kv.executable), *args], cwd=cwd, env={**environ, **env}, capture_output=True,
                          text=True, check=False, timeout=1800)


def _report(path: Path) -> CampaignReport:
    return CampaignReport.model_validate_json(path.read_text(encoding="utf-8"))


def test_version_names_the_commit_it_was_built_from(installed_kv_parity: KvParity, outside: Path) -> None:
    done = run(installed_kv_parity, ["--version"], outside)
    assert done.returncode == 0, done.stderr
    shown = VERSION.fullmatch(done.stdout)
    assert shown, f"not a release version line: {done.stdout!r}"
    if installed_kv_parity.commit is not None:
        assert shown["commit"] == installed_kv_parity.commit
    python = installed_kv_parity.bin_dir / "python"
    where = subprocess.run([str(python), "-c", "import bot, runners, kv_parity_templates as t; "
                            "print(bot.__file__, runners.__file__, t.__file__)"],
                           cwd=outside, capture_output=True, text=True, check=True).stdout.split()
    site = installed_kv_parity.site_packages()
    assert all(Path(path).is_relative_to(site) for path in where), (where, site)
    assert "editable checkout" in describe(), "this test process runs the editable checkout, which says so"


def test_the_wheel_carries_every_file_the_code_loads(installed_kv_parity: KvParity) -> None:
    """Compared with the checkout: a module, template, profile or harness source missing from the wheel fails."""
    [record] = installed_kv_parity.site_packages().glob("kv_parity_bot-*.dist-info/RECORD")
    shipped = {line.split(",")[0] for line in record.read_text(encoding="utf-8").splitlines()}
    installed_as = {"templates/": "kv_parity_templates/",
                    "tests/fixtures/replay_harness/": "kv_parity_fixtures/replay_harness/",
                    "tests/fixtures/__init__.py": "kv_parity_fixtures/__init__.py"}
    needed = set()
    for name in clone_files():
        if re.fullmatch(r"(bot|runners)/.*\.py|runners/profiles/.*\.toml", name):
            needed.add(name)
        for prefix, target in installed_as.items():
            if name.startswith(prefix):
                needed.add(target + name.removeprefix(prefix))
    assert {"kv_parity_templates/check_run_text.md.j2", "kv_parity_fixtures/replay_harness/Cargo.toml",
            "runners/profiles/demo.toml", "bot/cli/main.py"} <= needed
    assert sorted(needed - shipped) == [], "files the code loads at run time are missing from the wheel"
    assert "runners/_build_info.json" in shipped, "the build hook's commit record"
    assert not [name for name in shipped if "/target/" in name or name.startswith("tests/")], "build output or tests"


@pytest.mark.parametrize(("name", "bytecode"), [
    ("templates/__pycache__/__init__.cpython-311.pyc", True), ("bot/__pycache__/cli.cpython-313.pyc", True),
    ("runners/stray.pyc", True), ("templates/__init__.py", False), ("templates/report.md.j2", False),
    ("tests/fixtures/replay_harness/lib/bench/src/cli.rs", False),
])
def test_a_bytecode_cache_is_never_a_file_a_clone_holds(name: str, bytecode: bool) -> None:
    """The interpreter writes one beside every module it imports, whatever a checkout's ignore rules say: the
    wheel must not be asked to carry it, nor the snapshot pip installs from."""
    assert is_bytecode(name) is bytecode


@pytest.mark.parametrize(("info", "shown"), [
    (BuildInfo(commit="a" * 40, modified=False), f"(commit {'a' * 40})"),
    (BuildInfo(commit="a" * 40, modified=True), f"(commit {'a' * 40}, with uncommitted changes)"),
    (BuildInfo(commit=None, modified=False), "(commit unknown: built outside a git checkout)"),
    (BuildInfo(commit=None, modified=False, editable=True), "(commit unknown: source is not a git checkout)"),
])
def test_the_version_says_what_is_known_of_the_commit(monkeypatch: pytest.MonkeyPatch, info: BuildInfo,
                                                      shown: str) -> None:
    monkeypatch.setattr(build_info, "build_info", lambda: info)
    assert describe().endswith(f" {shown}")


def test_a_resource_missing_from_an_install_is_named_with_the_fix() -> None:
    with pytest.raises(FileNotFoundError, match=r"kv_parity_nothing is not installed: reinstall kv-parity-bot"):
        package_dir("kv_parity_nothing")
    with pytest.raises(FileNotFoundError, match=r"runners/no-such-dir is not installed as a directory"):
        package_dir("runners", "no-such-dir")


def test_data_packages_are_found_without_being_imported() -> None:
    """templates/ and tests/fixtures/ are package data: locating them runs no __init__, so no bytecode of theirs
    is written beside the checkout's templates or read at run time (a wheel never ships one)."""
    probe = ("import sys; from runners.resources import package_dir; "
             "print(package_dir('kv_parity_templates').name, package_dir('kv_parity_fixtures', 'replay_harness').name,"
             " sorted(name for name in sys.modules if name.startswith('kv_parity_')))")
    done = subprocess.run([sys.executable, "-B", "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.split() == ["templates", "replay_harness", "[]"]


@needs_bwrap
def test_demo_then_report_verify_and_publish(installed_kv_parity: KvParity, outside: Path,
                                            tmp_path: Path) -> None:
    out = tmp_path / "demo"
    demo = run(installed_kv_parity, ["demo", "--rows", ROW, "--quiet", "--out", str(out)], outside)
    report_path = out / "campaign" / "report.json"
    assert report_path.is_file(), demo.stderr
    report = _report(report_path)
    assert report.verdicts is not None and report.rows[0].semantic == SemanticVerdict.PASS, report.verdicts
    assert demo.returncode == EXIT_FOR_CONCLUSION[report.verdicts.conclusion], demo.stderr
    assert report.tool_version == installed_kv_parity.version

    pages = tmp_path / "pages"
    rendered = run(installed_kv_parity, ["report", str(report_path), "--out", str(pages)], outside)
    assert rendered.returncode == 0, rendered.stderr
    assert installed_kv_parity.version in (pages / "report.md").read_text(encoding="utf-8")
    assert "<!DOCTYPE html>" in (pages / "report.html").read_text(encoding="utf-8")
    verified = run(installed_kv_parity, ["verify", str(report_path)], outside)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    cache = run(installed_kv_parity, ["cache"], outside)  # the session's ($KV_PARITY_BUILD_CACHE), read only
    assert cache.returncode == 0, cache.stderr
    counts = re.fullmatch(r"build cache \S+: \d+ entr(?:y|ies) \((\d+) baseline, (\d+) candidate\), .+ of 10\.0 GiB\n",
                          cache.stdout)
    assert counts is not None and int(counts[1]) >= 1 and int(counts[2]) >= 1, "the demo's arms are stored"

    baseline, candidate = (revision.sha for revision in report.revisions)
    with FakeGitHub() as fake:
        fake.add_repo(REPO, out / "repo")
        fake.register_app(APP_ID, "unused", "kv-parity")
        fake.add_installation(INSTALLATION_ID, APP_ID, [REPO])
        fake.add_installation_token(TOKEN, INSTALLATION_ID)
        fake.add_pull(REPO, 7, candidate, "demo/identical", "main")
        published = run(installed_kv_parity, [
            "publish", "--report", str(report_path), "--repo", REPO, "--pr", "7", "--expect-campaign-id",
            report.campaign_id, "--expect-head", candidate, "--expect-base", baseline, "--expect-rows", ROW,
            "--bot-login", "kv-parity[bot]", "--api-url", fake.url, "--out", str(tmp_path / "published")],
            outside, KV_PARITY_TOKEN=TOKEN)
        [check_run] = fake.check_runs(REPO)
        comments = fake.comments(REPO, 7)
    assert published.returncode == 0, published.stderr
    assert check_run["conclusion"] == report.verdicts.conclusion.value and check_run["head_sha"] == candidate
    assert f"- **kv-parity**: {installed_kv_parity.version}\n" in check_run["output"]["text"]
    assert any(report.campaign_id in comment["body"] for comment in comments)


@needs_bwrap
def test_plan_build_manifest_row_merge(installed_kv_parity: KvParity, outside: Path, tmp_path: Path,
                                       demo_trace: Path) -> None:
    repo = tmp_path / "repo"
    init_fixture_repo(repo)
    base = commit_change(repo, "campaign config", files={DEFAULT_CONFIG_PATH: config_text(one_row_config(demo_trace))})
    head = commit_change(repo, "the candidate: comments reworded", touch_comment=True)
    plan, dist, merged = tmp_path / "plan", tmp_path / "dist", tmp_path / "report"
    steps = [
        ["plan", "--repo", str(repo), "--config-ref", base, "--base", base, "--head", head, "--rows", ROW,
         "--campaign-id", "c-installed", "--out", str(plan), "--github-output", str(tmp_path / "github_output")],
        ["build", "--plan", str(plan), "--repo", str(repo), "--arm", "baseline", "--out", str(tmp_path / "arm-b"),
         "--work", str(tmp_path / "wb")],
        ["build", "--plan", str(plan), "--repo", str(repo), "--arm", "candidate", "--out", str(tmp_path / "arm-c"),
         "--work", str(tmp_path / "wc"), "--baseline", str(tmp_path / "arm-b")],
        ["manifest", "--plan", str(plan), "--baseline", str(tmp_path / "arm-b"), "--candidate",
         str(tmp_path / "arm-c"), "--out", str(dist)],
        ["row", "--manifest", str(dist / "manifest.json"), "--row", ROW, "--out", str(tmp_path / "row-out")],
        ["merge", "--manifest", str(dist / "manifest.json"), "--out", str(merged), str(tmp_path / "row-out")],
        ["verify", str(merged / "report.json")],
    ]
    for step in steps:
        done = run(installed_kv_parity, step, outside)
        assert done.returncode == 0, f"kv-parity {step[0]} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    report = _report(merged / "report.json")
    assert report.verdicts is not None and report.verdicts.semantic == SemanticVerdict.PASS, report.verdicts
    assert [revision.sha for revision in report.revisions] == [base, head]
    assert report.tool_version == installed_kv_parity.version


def test_serve_runs_a_signed_delivery_to_a_published_finish(installed_kv_parity: KvParity, outside: Path,
                                                           tmp_path: Path) -> None:
    """The installed service verifies the signature, dispatches (the test suite's stand-in runner, which writes
    a valid report), and its publisher renders the finished check run and result from the installed templates."""
    repo = tmp_path / "widgets"
    repo.mkdir()
    history = widgets_history(repo)
    runner = ["/usr/bin/env", f"PYTHONPATH={ROOT}", *stand_in_runner(tmp_path / "runs.jsonl")]
    port = free_port()
    with FakeGitHub() as fake:
        fake.add_repo(REPO, repo)
        fake.add_pull(REPO, 1, history["head"], "feature", "main")
        fake.set_permission(REPO, "maintainer", "write")
        settings = {"webhook_secret": SECRET, "api_base_url": fake.url, "api_seconds_between_requests": 0,
                    "api_seconds_between_writes": 0, "repo": REPO, "db_path": str(tmp_path / "bot.sqlite3"),
                    "work_dir": str(tmp_path / "work"), "local_repo_path": str(repo), "local_campaign_argv": runner,
                    "poll_interval_seconds": 0.1, **register_test_app(fake, tmp_path)}
        settings_file = tmp_path / "settings.toml"
        settings_file.write_text("".join(f"{key} = {json.dumps(str(value) if isinstance(value, Path) else value)}\n"
                                         for key, value in settings.items() if value is not None))
        environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        service = subprocess.Popen([str(installed_kv_parity.executable), "serve", "--port", str(port), "--settings",
                                    str(settings_file)], cwd=outside, env=environ, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until(lambda: _healthy(url, service), "the installed service answering /healthz", timeout=60)
            event = pull_request_event("labeled", head_sha=history["head"], base_sha=history["main2"],
                                       label="kv-parity", labels=("kv-parity",))
            assert post(url, "pull_request", event, delivery="installed-1").status_code == 202
            assert post(url, "pull_request", event, delivery="forged", secret="wrong").status_code == 401
            [check_run] = wait_until(
                lambda: [run for run in fake.check_runs(REPO) if run["status"] == "completed"],
                "the check run completed by the installed publisher", timeout=120)
            [result] = wait_until(
                lambda: [c for c in fake.comments(REPO, 1) if c["body"].startswith("<!-- kv-parity:result")],
                "the result comment posted by the installed publisher")
        finally:
            service.terminate()
            log = service.communicate(timeout=30)[0]
    assert check_run["head_sha"] == history["head"] and check_run["conclusion"] == "success", log
    assert "Parity holds" in check_run["output"]["title"] + check_run["output"]["summary"], check_run["output"]
    assert check_run["external_id"] in result["body"], result["body"]


def _healthy(url: str, service: subprocess.Popen[str]) -> bool:
    assert service.poll() is None, f"kv-parity serve exited {service.returncode}: {service.communicate()[0]}"
    try:
        return loopback().get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False
