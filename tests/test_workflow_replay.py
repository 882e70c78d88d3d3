"""kv-parity-campaign.yml, run job by job on this machine against the fixture harness (tests/actions_local.py).

The lint and structure tests in test_workflows.py read the workflow; this one runs its scripts for real, so a
flag the workflow passes that the `kv-parity` CLI does not take, an artifact one job expects that another does
not upload, or a matrix that does not reach the rows job fails here. The candidate carries a hostile build
script that appends a forged matrix to $GITHUB_OUTPUT: the rows that run are the plan's, nothing else.

The config keeps one row and the smallest Stage 6 fixture, and no `rows` subset is asked for: a full campaign,
so the plan adds the `stage6-fixtures` entry and the fixture trace travels plan -> manifest -> rows job ->
merge through the workflow's own artifacts, for about the cost of one more short job (the other fixtures and
the failure paths are covered through the CLI in test_split_build.py).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from runners.pipeline.distributed.common import FIXTURES_ROW
from runners.schema.config import DEFAULT_CONFIG_PATH
from runners.schema.report import CampaignReport, CheckConclusion, FixtureStatus

from runners.demo import commit_change, init_fixture_repo
from tests.actions_local import LocalRun
from tests.fakes.github_api import FakeGitHub
from tests.installed import KvParity

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = ROOT / ".github" / "workflows" / "kv-parity-campaign.yml"
DEMO = ROOT / "runners" / "profiles" / "demo.toml"
PIN = "kv-parity-bot @ git+https://github.com/acme/kv-parity-bot@" + "0" * 40
REPO = "acme/widgets"
TOKEN = "ghs_actions_token"
APP_ID, INSTALLATION_ID = 15368, 31
ROW, FIXTURE = "vllm-agg", "handoff-vllm"
QUICK_PERF = """[perf]
warmups_per_arm = 1
pairs = 30
seed = 20261129
threshold = 10.0
confidence = 0.95
diagnostics = { max_abs_autocorr = 1.0, min_trend_p = 1e-9, min_order_effect_p = 1e-9, min_telemetry_p = 1e-9 }
invalidation = { max_interference_ms = 1000000.0 }
"""
FORGING_BUILD_SCRIPT = r"""use std::io::Write;
fn main() {
    // The attack: append a matrix of the pull request's choosing to the job's outputs.
    if let Ok(path) = std::env::var("GITHUB_OUTPUT") {
        if let Ok(mut file) = std::fs::OpenOptions::new().append(true).open(path) {
            let _ = writeln!(file, "matrix={{\"include\":[{{\"row\":\"evil\",\"runs_on\":[\"attacker\"]}}]}}");
            let _ = writeln!(file, "row_count=1");
        }
    }
    // Evidence for the test: any runner or bot variable in reach fails the build...
    for (name, _) in std::env::vars() {
        if ["GITHUB_", "ACTIONS_", "RUNNER_", "KV_PARITY_"].iter().any(|prefix| name.starts_with(prefix)) {
            panic!("the build script can see {name}");
        }
    }
    // ...and the crate only compiles if this script ran.
    println!("cargo:rustc-env=KVP_BUILD_SCRIPT_RAN=1");
}
"""
BUILD_SCRIPT_RAN = '\nconst _: &str = env!("KVP_BUILD_SCRIPT_RAN");\n'
"""Appended to the candidate's lib.rs: without the build script having run, the candidate does not compile."""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def _only(text: str, table: str, keep: str) -> str:
    """The TOML without every `[[table]]` entry (and its sub-tables) whose id is not `keep`."""
    kept, dropping = [], False
    for block in re.split(r"(?m)^(?=\[)", text):
        if block.startswith(f"[[{table}]]"):
            dropping = f'id = "{keep}"' not in block
        elif not block.startswith(f"[{table}."):
            dropping = False
        if not dropping:
            kept.append(block)
    return "".join(kept)


def _config(trace: Path) -> str:
    """The demo profile with the trace where this machine has it, one row and one fixture, and a short gate that
    this shared, noisy test machine cannot block (no interference limit, threshold 10): the verdict checks the
    plumbing, not speed."""
    text = DEMO.read_text(encoding="utf-8").replace('path = "demo-trace.jsonl"', f'path = "{trace}"')
    text = _only(_only(text, "rows", ROW), "fixtures", FIXTURE)
    return re.sub(r"\[perf\]\n(?:[^\[\n][^\n]*\n)*", QUICK_PERF, text, count=1)


def test_the_campaign_workflow_runs_end_to_end_and_a_forged_matrix_decides_nothing(
    tmp_path: Path, demo_trace: Path, kv_parity: KvParity
) -> None:
    origin = tmp_path / "origin"
    init_fixture_repo(origin)
    _git(origin, "config", "uploadpack.allowAnySHA1InWant", "true")
    base = commit_change(origin, "campaign config", files={DEFAULT_CONFIG_PATH: _config(demo_trace)})
    _git(origin, "checkout", "-q", "-b", "feature")
    lib = (origin / "lib/bench/src/lib.rs").read_text(encoding="utf-8") + BUILD_SCRIPT_RAN
    head = commit_change(origin, "a build script, comments reworded", touch_comment=True,
                         files={"lib/bench/build.rs": FORGING_BUILD_SCRIPT, "lib/bench/src/lib.rs": lib})
    _git(origin, "checkout", "-q", "main")

    with FakeGitHub() as fake:
        fake.add_repo(REPO, origin)
        fake.register_app(APP_ID, "unused", "github-actions")
        fake.add_installation(INSTALLATION_ID, APP_ID, [REPO])
        fake.add_installation_token(TOKEN, INSTALLATION_ID)
        fake.add_pull(REPO, 7, head, "feature", "main")
        run = LocalRun(
            CAMPAIGN,
            origin,
            tmp_path / "actions",
            inputs={"campaign_id": "kvp-replay", "base_sha": base, "head_sha": head, "rows": "",
                    "config_ref": base, "pr_number": "7"},
            variables={"KV_PARITY_BOT_SPEC": PIN, "KV_PARITY_MODE": "actions"},
            token=TOKEN,
            api_url=fake.url,
            bin_dir=kv_parity.bin_dir,
        )
        try:
            jobs = run.run()
        except AssertionError:
            print("\n".join(run.log[-8:]))
            raise
        [check_run] = fake.check_runs(REPO)
        comments = [comment["body"] for comment in fake.comments(REPO, 7)]
    assert (check_run["head_sha"], check_run["status"], check_run["conclusion"]) == (head, "completed", "success")
    assert any("kvp-replay" in body and "semantic PASS" in body for body in comments), comments
    matrix = json.loads(jobs["plan"].outputs["matrix"])
    assert [entry["row"] for entry in matrix["include"]] == [ROW, FIXTURES_ROW]
    assert jobs["plan"].outputs["row_count"] == "2"
    assert jobs["build-candidate"].outputs == {}, "the job that ran the build script has no outputs"
    written = [key for outputs in jobs["build-candidate"].step_outputs.values() for key in outputs]
    assert written == ["artifact-id"], "only the upload step reported anything; no matrix reached $GITHUB_OUTPUT"
    assert jobs["publish"].result == "success"
    assert sorted(run.artifacts) == ["kv-parity-arm-baseline", "kv-parity-arm-candidate", "kv-parity-build",
                                     "kv-parity-plan", "kv-parity-report", f"kv-parity-row-{FIXTURES_ROW}",
                                     f"kv-parity-row-{ROW}"]
    report_dir = tmp_path / "actions" / "artifacts" / str(run.artifacts["kv-parity-report"])
    report = CampaignReport.model_validate_json((report_dir / "report.json").read_text(encoding="utf-8"))
    assert report.campaign_id == "kvp-replay"
    assert report.tool_version == kv_parity.version, "the jobs ran the kv-parity of the kv_parity fixture"
    assert [(r.arm, r.sha) for r in report.revisions] == [("baseline", base), ("candidate", head)]
    assert [row.row.id for row in report.rows] == [ROW]
    assert report.mode == "campaign"
    assert [(f.id, f.status) for f in report.fixtures] == [(FIXTURE, FixtureStatus.PASS)], report.fixtures
    [row] = report.rows
    assert report.verdicts is not None and report.verdicts.conclusion == CheckConclusion.SUCCESS, (
        report.verdicts.summary if report.verdicts else None, row.perf_reason, row.semantic_reasons, report.stopped)
    installs = [line for line in run.log if "skipped `python -m pip install" in line]
    runs = len(jobs) - 1 + len(matrix["include"])  # every job once, the rows job once per matrix entry
    assert len(installs) == runs, "every job installed the validated requirement file (and nothing else)"

