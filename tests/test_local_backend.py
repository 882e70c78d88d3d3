"""The local backend contains what it starts (issue 9): each campaign in a fresh clone of its own, with an
allow-listed environment, and never without a working sandbox unless the operator opted out on record.

Campaigns are real processes: a stand-in runner (a Python script honouring `kv-parity campaign`'s argv) does
what a hostile build script would do to the clone it is given, or dumps the environment it received. The
refusal is checked through the real `kv-parity serve` entry point.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.core.campaign import Campaign, CampaignState
from bot.dispatch.base import PollResult
from bot.dispatch.clone import UNSANDBOXED, SandboxRequired
from bot.dispatch.local import CAMPAIGN_ENV, CLONE_DIR, LocalBackend, group_running
from tests.webhooks import commit, free_port, git, wait_until

ROOT = Path(__file__).resolve().parents[1]
SECRETS = {
    "KV_PARITY_WEBHOOK_SECRET": "whsec-do-not-leak",
    "KV_PARITY_TOKEN": "ghp_do_not_leak",
    "KV_PARITY_PRIVATE_KEY_PATH": "/etc/kv-parity/app.pem",
    "GITHUB_TOKEN": "ghs_do_not_leak",
    "GITHUB_OUTPUT": "/runner/_temp/_runner_file_commands/set_output",
    "ACTIONS_RUNTIME_TOKEN": "runtime-do-not-leak",
    "AWS_SECRET_ACCESS_KEY": "aws-do-not-leak",
}
RUNNER = '''
"""Stand-in for `kv-parity campaign`: act like a hostile build script on the clone it is given."""
import argparse, json, os, subprocess, sys, time
from pathlib import Path

parser = argparse.ArgumentParser()
for flag in ("--sandbox", "--repo", "--base", "--head", "--config", "--rows", "--out", "--campaign-id",
             "--progress-jsonl"):
    parser.add_argument(flag)
args, _ = parser.parse_known_args()
repo, work = Path(args.repo), Path(args.out).parent
marker = work.parent / "hook-ran"
record = {"argv": sys.argv, "env": dict(os.environ), "pid": os.getpid()}
if args.campaign_id == "kvp-planter":
    hooks = repo / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    hook = hooks / "post-checkout"
    hook.write_text(f"#!/bin/sh\\necho \\"$PWD\\" >> {marker}\\n")
    hook.chmod(0o755)
    subprocess.run(["git", "-C", str(repo), "config", "core.hooksPath", str(hooks)], check=True)
else:
    done = subprocess.run(["git", "-C", str(repo), "worktree", "add", "--quiet", "--detach", str(work / "wt"),
                           args.head], capture_output=True, text=True)
    record["checkout"] = [done.returncode, done.stderr]
if args.campaign_id == "kvp-hold":
    (work / "started").touch()
    deadline = time.monotonic() + 60
    while not (work / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
(work / "runner.json").write_text(json.dumps(record))
sys.exit(2)
'''


def _view(campaign_id: str, repo: tuple[Path, str, str], root: Path) -> Campaign:
    _, base, head = repo
    return Campaign(
        id=campaign_id,
        repo="acme/widgets",
        pr_number=1,
        head_sha=head,
        base_sha=base,
        relationship="ancestor",
        rows=None,
        state=CampaignState.DISPATCHED,
        requested_by="maintainer",
        trigger="label",
        created_at=datetime.now(UTC),
        deadline=None,
        artifact_dir=root / campaign_id / "out",
        queue_position=0,
        attempt=1,
        reason="",
        conclusion=None,
        config_source=".github/kv-parity.toml",
    )


@pytest.fixture()
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    """The service's clone: two commits."""
    path = tmp_path / "service-clone"
    path.mkdir()
    git(path, "init", "--quiet", "-b", "main")
    base = commit(path, {"README.md": "base\n"}, "base")
    head = commit(path, {"README.md": "head\n"}, "head")
    return path, base, head


@pytest.fixture()
def runner(tmp_path: Path) -> list[str]:
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    return [sys.executable, str(script)]


def _run(backend: LocalBackend, view: Campaign) -> tuple[PollResult, dict[str, Any]]:
    handle = backend.start(view, "config = true\n")
    result: PollResult = wait_until(
        lambda: (r := backend.poll(view, handle)) and not r.running and r, f"campaign {view.id} ended"
    )
    assert view.artifact_dir is not None
    record: dict[str, Any] = json.loads((view.artifact_dir.parent / "runner.json").read_text())
    return result, record


def test_a_hook_planted_in_one_campaigns_clone_never_runs_in_another(
    tmp_path: Path, repo: tuple[Path, str, str], runner: list[str]
) -> None:
    backend = LocalBackend(repo[0], argv_prefix=runner)
    campaigns = tmp_path / "work"
    planter, victim = _view("kvp-planter", repo, campaigns), _view("kvp-victim", repo, campaigns)
    _, planted = _run(backend, planter)
    result, record = _run(backend, victim)
    assert result.exit_code == 2 and record["checkout"][0] == 0, record["checkout"]
    assert (campaigns / "kvp-victim" / "wt" / "README.md").read_text() == "head\n", "the victim checked out"
    assert not (campaigns / "hook-ran").exists(), "the planted hook ran in a later campaign"

    clones = [campaigns / name / CLONE_DIR for name in ("kvp-planter", "kvp-victim")]
    assert [record["argv"][record["argv"].index("--repo") + 1] for record in (planted, record)] == list(
        map(str, clones)
    ), "each campaign is handed its own clone, never the service's"
    assert git(clones[1], "config", "core.hooksPath") == "/dev/null"
    assert not (clones[1] / ".git" / "hooks").exists(), "no template hooks either"
    alternates = (clones[1] / ".git" / "objects" / "info" / "alternates").read_text().strip()
    assert Path(alternates) == repo[0] / ".git" / "objects", "objects are borrowed, the .git is its own"
    assert not (repo[0] / ".git" / "hooks" / "post-checkout").exists(), "the service's clone is untouched"

    # The control: the planted hook is real, and fires in the clone it was planted in.
    git(clones[0], "worktree", "add", "--quiet", "--detach", str(tmp_path / "control"), repo[2])
    assert (campaigns / "hook-ran").read_text().strip() == str(tmp_path / "control")


def test_the_campaign_process_inherits_no_secret(
    tmp_path: Path, repo: tuple[Path, str, str], runner: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    backend = LocalBackend(repo[0], argv_prefix=runner)
    view = _view("kvp-hold", repo, tmp_path / "work")
    assert view.artifact_dir is not None
    handle = backend.start(view, "config = true\n")
    # Until the new program has set up its stack, the kernel reports an empty environment: wait for it to run.
    wait_until(lambda: (view.artifact_dir.parent / "started").exists(), "runner started")
    live = Path(f"/proc/{handle.ref}/environ").read_bytes()
    (view.artifact_dir.parent / "release").touch()
    wait_until(lambda: not backend.poll(view, handle).running, "runner ended")
    environ = dict(entry.split("=", 1) for entry in live.decode().split("\0") if entry)
    dumped = json.loads((view.artifact_dir.parent / "runner.json").read_text())["env"]
    for seen in (environ, dumped):
        assert set(seen) <= set(CAMPAIGN_ENV), f"not allow-listed: {sorted(set(seen) - set(CAMPAIGN_ENV))}"
        leaked = [name for name, secret in SECRETS.items() if any(secret in value for value in seen.values())]
        assert leaked == []
        assert seen["PATH"] == os.environ["PATH"], "what the runner needs still reaches it"


def test_the_local_backend_refuses_to_exist_without_a_working_sandbox(
    tmp_path: Path, repo: tuple[Path, str, str], runner: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    nowhere = tmp_path / "empty-bin"
    nowhere.mkdir()
    monkeypatch.setenv("PATH", str(nowhere))
    with pytest.raises(SandboxRequired, match=r'bubblewrap \(bwrap\) is not installed.*sandbox = "none"'):
        LocalBackend(repo[0], argv_prefix=runner)


def test_kv_parity_serve_exits_2_without_a_sandbox_and_names_the_opt_out(tmp_path: Path) -> None:
    """The real entry point: no bwrap on PATH means no service (it must not start and run PR code)."""
    nowhere = tmp_path / "empty-bin"
    nowhere.mkdir()
    settings = tmp_path / "bot.toml"
    settings.write_text(
        f'webhook_secret = "s"\ntoken = "t"\nlocal_repo_path = "{tmp_path}"\n'
        f'db_path = "{tmp_path / "db.sqlite3"}"\nwork_dir = "{tmp_path / "work"}"\n'
    )
    env = {"PATH": str(nowhere), "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "bot.cli", "serve", "--settings", str(settings), "--port", str(free_port())]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "needs a working sandbox" in done.stderr and 'sandbox = "none"' in done.stderr
    assert "Traceback" not in done.stderr


def test_sandbox_none_is_logged_at_start_and_for_every_campaign_and_passed_to_the_runner(
    tmp_path: Path, repo: tuple[Path, str, str], runner: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bot.dispatch.local")
    backend = LocalBackend(repo[0], argv_prefix=runner, sandbox="none")
    assert [r.getMessage() for r in caplog.records] == [UNSANDBOXED]
    for name in ("kvp-one", "kvp-two"):
        _, record = _run(backend, _view(name, repo, tmp_path / "work"))
        argv = record["argv"]
        assert argv[argv.index("--sandbox") + 1] == "none"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [UNSANDBOXED, f"campaign kvp-one: {UNSANDBOXED}", f"campaign kvp-two: {UNSANDBOXED}"]


def test_a_sandboxed_backend_tells_the_runner_so(
    tmp_path: Path, repo: tuple[Path, str, str], runner: list[str]
) -> None:
    backend = LocalBackend(repo[0], argv_prefix=runner)
    _, record = _run(backend, _view("kvp-one", repo, tmp_path / "work"))
    assert record["argv"][record["argv"].index("--sandbox") + 1] == "bwrap"


def test_a_restarted_attempt_gets_a_clean_clone(tmp_path: Path, repo: tuple[Path, str, str], runner: list[str]) -> None:
    """Same attempt directory started again (the service restarted): the old clone is not reused."""
    backend = LocalBackend(repo[0], argv_prefix=runner)
    planter = _view("kvp-planter", repo, tmp_path / "work")
    _run(backend, planter)
    clone = tmp_path / "work" / "kvp-planter" / CLONE_DIR
    assert git(clone, "config", "core.hooksPath") == str(clone / ".git" / "hooks"), "the planter rewrote it"
    _, record = _run(backend, planter.model_copy(update={"id": "kvp-again"}))
    assert record["checkout"][0] == 0 and git(clone, "config", "core.hooksPath") == "/dev/null"
    assert not (tmp_path / "work" / "hook-ran").exists()


def test_a_process_group_runs_until_its_last_member_has_died() -> None:
    """What cancel and a finished campaign wait for after SIGKILL: no member running; a zombie has died."""
    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        assert group_running(leader.pid)
        os.killpg(leader.pid, signal.SIGKILL)
        os.waitid(os.P_PID, leader.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
        assert not group_running(leader.pid), "a zombie does not count"
    finally:
        leader.kill()
        leader.wait()
    assert not group_running(leader.pid), "reaped: no such group"
