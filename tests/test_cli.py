"""The `kv-parity` command line as users run it: real subprocesses, exit codes that never lie."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

KV_PARITY = [sys.executable, "-m", "bot.cli"]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KV_PARITY, *args], capture_output=True, text=True, check=False, cwd=cwd)


def test_demo_semantic_change_fails_and_its_report_verifies(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = run("demo", "--scenario", "semantic-change", "--rows", "vllm-disagg", "--out", "demo", cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "semantic FAIL" in done.stdout
    assert "[determinism/vllm-disagg]" in done.stderr, "progress is shown while the campaign runs"
    report = out / "campaign" / "report.json"
    data = json.loads(report.read_text())
    assert data["verdicts"]["conclusion"] == "failure"
    assert data["rows"][0]["parity"]["differences_total"] > 0
    assert (out / "campaign" / "report.md").is_file() and (out / "campaign" / "report.html").is_file()
    assert done.stdout.splitlines()[-1].startswith("open demo/campaign/report.html "), "the file to open"

    assert run("verify", str(report)).returncode == 0
    data["rows"][0]["semantic"] = "PASS"
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(data))
    checked = run("verify", str(tampered))
    assert checked.returncode == 1 and "semantic" in (checked.stdout + checked.stderr)


def test_campaign_without_a_config_in_the_base_is_a_usage_error(fixture_repo: Path, tmp_path: Path) -> None:
    done = run("campaign", "--repo", str(fixture_repo), "--base", "main", "--head", "main",
               "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert ".github/kv-parity.toml" in done.stderr
    assert not (tmp_path / "out").exists()


def test_bad_config_file_names_the_key(fixture_repo: Path, tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[build]\ncommand = ["cargo"]\nfeatures = []\n')
    done = run("campaign", "--repo", str(fixture_repo), "--base", "main", "--head", "main",
               "--config", str(config), "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "build.features" in done.stderr and "trace" in done.stderr


def test_unknown_revision_is_a_clear_error(fixture_repo: Path, tmp_path: Path) -> None:
    done = run("campaign", "--repo", str(fixture_repo), "--base", "main", "--head", "no-such-branch",
               "--profile", "demo", "--out", str(tmp_path / "out"))
    assert done.returncode == 3, done.stderr[-2000:]
    assert "no-such-branch" in done.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["stopped"]["stage"] == "pin" and report["artifacts"] == []
    assert "(not pinned)" in (tmp_path / "out" / "report.md").read_text()
