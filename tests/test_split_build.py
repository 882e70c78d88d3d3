"""The Actions path split by trust, through the real CLI: plan -> one build per arm -> manifest -> row -> merge.

`plan` and `manifest` run no pull-request code; each arm builds alone in its sandbox; `manifest` refuses a
build.json or binary that does not match the plan or itself, naming the field or both digests.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.cli.main import main as cli_main
from bot.publish.report_guard import DispatchedCampaign, ReportMismatch, check_report_matches
from runners.demo import Knob, commit_change, demo_config, init_fixture_repo, set_knobs
from runners.pipeline.distributed.artifacts import FixturesResult, RowResult, load_manifest, materialise_fixture_traces
from runners.pipeline.distributed.common import FIXTURES_ROW, FIXTURES_SUFFIX, MANIFEST_NAME, ROW_SUFFIX
from runners.pipeline.distributed.merge import merge_results
from runners.schema.config import DEFAULT_CONFIG_PATH, FixtureTraceSpec
from runners.schema.report import CampaignReport, CheckConclusion, FixtureStatus, PerfVerdict, SemanticVerdict
from runners.stages.trace import sha256_file
from runners.verify import verify_report
from tests.configs import config_text, one_row_config

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (the bubblewrap package)")

ROW = "vllm-agg"


@pytest.fixture()
def planned(fixture_repo: Path, tmp_path: Path) -> tuple[Path, Path, str, str]:
    base = subprocess.run(["git", "-C", str(fixture_repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "-b", "head"], check=True)
    head = commit_change(fixture_repo, "comment-only change", touch_comment=True)
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "-q", "main"], check=True)
    plan = tmp_path / "plan"
    output = tmp_path / "github_output"
    code = cli_main(["plan", "--repo", str(fixture_repo), "--config-ref", base, "--profile", "demo", "--base", base,
                     "--head", head, "--rows", ROW, "--campaign-id", "c0ffee", "--out", str(plan),
                     "--github-output", str(output)])
    assert code == 0
    lines = output.read_text(encoding="utf-8").splitlines()
    assert lines == ['matrix={"include":[{"row":"vllm-agg","runs_on":["kv-parity-bare-metal"]}]}', "row_count=1"]
    return fixture_repo, plan, base, head


def build_arm(repo: Path, plan: Path, arm: str, out: Path, work: Path, *extra: str) -> int:
    return cli_main(["build", "--plan", str(plan), "--repo", str(repo), "--arm", arm, "--out", str(out), "--work",
                     str(work), *extra])


def test_plan_then_each_arm_alone_then_manifest(planned: tuple[Path, Path, str, str], demo_trace: Path,
                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, plan, base, head = planned
    github_output = tmp_path / "untouched"
    github_output.write_text("", encoding="utf-8")
    monkeypatch.setenv("GITHUB_OUTPUT", str(github_output))
    assert build_arm(repo, plan, "baseline", tmp_path / "arm-b", tmp_path / "wb") == 0
    assert build_arm(repo, plan, "candidate", tmp_path / "arm-c", tmp_path / "wc",
                     "--baseline", str(tmp_path / "arm-b")) == 0
    assert github_output.read_text(encoding="utf-8") == "", "a build writes nothing to $GITHUB_OUTPUT"
    built = json.loads((tmp_path / "arm-c" / "build.json").read_text(encoding="utf-8"))
    assert built["sha"] == head and built["stopped"] is None and built["sandbox"]["kind"] == "bwrap"
    assert built["artifact"]["settings"]["rustc"].startswith("rustc ")
    dist = tmp_path / "dist"
    assert cli_main(["manifest", "--plan", str(plan), "--baseline", str(tmp_path / "arm-b"), "--candidate",
                     str(tmp_path / "arm-c"), "--trace", str(demo_trace), "--out", str(dist)]) == 0
    manifest = json.loads((dist / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["report"]["stopped"] is None
    assert [r["sha"] for r in manifest["report"]["revisions"]] == [base, head]
    assert manifest["report"]["sizes"]["verdict"] == "PASS"
    assert all((dist / "bin" / a["binary_name"]).stat().st_mode & 0o777 == 0o555
               for a in manifest["report"]["artifacts"])


def test_manifest_refuses_a_build_for_another_head_or_a_swapped_binary(
        planned: tuple[Path, Path, str, str], demo_trace: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo, plan, base, head = planned
    assert build_arm(repo, plan, "baseline", tmp_path / "arm-b", tmp_path / "wb") == 0
    # The baseline's build copied as the candidate's: its recorded SHA is the base, not the planned head.
    shutil.copytree(tmp_path / "arm-b", tmp_path / "arm-c")
    args = ["manifest", "--plan", str(plan), "--baseline", str(tmp_path / "arm-b"), "--candidate",
            str(tmp_path / "arm-c"), "--trace", str(demo_trace), "--out", str(tmp_path / "dist")]
    capsys.readouterr()
    assert cli_main(args) == 1
    assert "arm is 'baseline', the plan says 'candidate'" in capsys.readouterr().err
    assert not (tmp_path / "dist" / "manifest.json").exists()
    built = json.loads((tmp_path / "arm-b" / "build.json").read_text(encoding="utf-8"))
    binary = tmp_path / "arm-b" / built["artifact"]["binary_name"]
    binary.chmod(0o755)
    binary.write_bytes(binary.read_bytes() + b"\0")
    assert cli_main(args) == 1
    err = capsys.readouterr().err
    assert "baseline binary SHA-256 mismatch" in err and built["artifact"]["binary_sha256"] in err


# ----------------------------------------------------------------- Stage 6 fixtures and profile mode on the split path


@dataclass
class Split:
    """One plan -> two arm builds -> manifest, through the real CLI, for one config and head."""

    repo: Path
    plan: Path
    dist: Path
    base: str
    head: str

    @property
    def manifest(self) -> Path:
        return self.dist / MANIFEST_NAME


def _split(root: Path, trace: Path, *, knobs: dict[str, Knob] | None = None, rows: str = "",
           mode: str = "campaign") -> Split:
    repo = root / "repo"
    init_fixture_repo(repo)
    base = commit_change(repo, "campaign config", files={DEFAULT_CONFIG_PATH: config_text(one_row_config(trace))})
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "head"], check=True)
    head = commit_change(repo, "the candidate", knobs=knobs, touch_comment=not knobs)
    plan, dist = root / "plan", root / "dist"
    assert cli_main(["plan", "--repo", str(repo), "--config-ref", base, "--base", base, "--head", head, "--rows", rows,
                     "--mode", mode, "--campaign-id", f"c-{mode}-{root.name}", "--out", str(plan),
                     "--github-output", str(root / "github_output")]) == 0
    assert build_arm(repo, plan, "baseline", root / "arm-b", root / "wb") == 0
    assert build_arm(repo, plan, "candidate", root / "arm-c", root / "wc", "--baseline", str(root / "arm-b")) == 0
    assert cli_main(["manifest", "--plan", str(plan), "--baseline", str(root / "arm-b"), "--candidate",
                     str(root / "arm-c"), "--out", str(dist)]) == 0
    return Split(repo=repo, plan=plan, dist=dist, base=base, head=head)


def _row(split: Split, row: str, out: Path) -> int:
    return cli_main(["row", "--manifest", str(split.manifest), "--row", row, "--out", str(out)])


@dataclass
class FullCampaign:
    split: Split
    row_out: Path
    fixtures_out: Path
    report: CampaignReport


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory, demo_trace: Path) -> FullCampaign:
    """A full campaign (no rows subset): its plan adds the fixtures entry; one row job, the fixtures job, merge."""
    root = tmp_path_factory.mktemp("split-full")
    split = _split(root, demo_trace)
    row_out, fixtures_out = root / "row-out", root / "fixtures-out"
    assert _row(split, ROW, row_out) == 0
    assert _row(split, FIXTURES_ROW, fixtures_out) == 0
    assert cli_main(["merge", "--manifest", str(split.manifest), "--out", str(root / "report"), str(row_out),
                     str(fixtures_out)]) == 0
    report = CampaignReport.model_validate_json((root / "report" / "report.json").read_text(encoding="utf-8"))
    return FullCampaign(split=split, row_out=row_out, fixtures_out=fixtures_out, report=report)


def test_the_plan_makes_each_fixture_trace_and_adds_the_fixtures_job(full: FullCampaign) -> None:
    split = full.split
    plan = json.loads((split.plan / "plan.json").read_text(encoding="utf-8"))
    config = demo_config()
    assert [item["id"] for item in plan["fixtures"]] == [f.id for f in config.fixtures]
    assert plan["fixtures_not_run"] is None and plan["mode"] == "campaign"
    for item, fixture in zip(plan["fixtures"], config.fixtures, strict=True):
        path = split.plan / item["trace_file"]
        assert item["trace_sha256"] == fixture.trace.sha256 == sha256_file(path) and item["problem"] is None
        assert path.stat().st_mode & 0o777 == 0o444
    labels = config.rows[0].runner_labels
    outputs = (split.plan.parent / "github_output").read_text(encoding="utf-8").splitlines()
    matrix = {"include": [{"row": ROW, "runs_on": labels}, {"row": FIXTURES_ROW, "runs_on": labels}]}
    assert outputs == [f"matrix={json.dumps(matrix, separators=(',', ':'))}", "row_count=2"]
    manifest = load_manifest(split.manifest)
    assert [item.model_dump() for item in manifest.fixtures] == plan["fixtures"], "the manifest carries them"
    assert all(sha256_file(split.dist / item.trace_file) == item.trace_sha256
               for item in manifest.fixtures if item.trace_file)


def test_the_fixtures_job_runs_every_fixture_on_the_staged_binaries(full: FullCampaign) -> None:
    manifest = load_manifest(full.split.manifest)
    result = FixturesResult.model_validate_json(
        (full.fixtures_out / f"{FIXTURES_ROW}{FIXTURES_SUFFIX}").read_text(encoding="utf-8"))
    assert result.campaign_id == manifest.campaign_id and result.binary_sha256 == manifest.binary_sha256()
    assert result.fixture_trace_sha256 == {item.id: item.trace_sha256 for item in manifest.fixtures}
    statuses = {fixture.id: fixture.status for fixture in result.fixtures}
    assert statuses == {"router-queueing": FixtureStatus.PASS, "preemption-edge": FixtureStatus.PASS,
                        "handoff-vllm": FixtureStatus.PASS, "handoff-sglang": FixtureStatus.PASS,
                        "scale-to-zero": FixtureStatus.UNSUPPORTED}, [f.reason for f in result.fixtures]


def test_merge_puts_the_fixtures_in_the_report_and_verify_recomputes_them(full: FullCampaign) -> None:
    report = full.report
    assert [f.id for f in report.fixtures] == [f.id for f in demo_config().fixtures]
    assert report.verdicts is not None
    assert report.verdicts.semantic == SemanticVerdict.PASS, report.verdicts.summary
    assert report.verdicts.conclusion == CheckConclusion.SUCCESS, report.verdicts.summary
    assert verify_report(report) == []
    assert any(line.startswith("Stage 6 fixture scale-to-zero: UNSUPPORTED") for line in report.skipped)
    assert not any("not run on the Actions path" in line for line in report.skipped)
    forged = report.model_copy(deep=True)
    forged.fixtures[0].assertions["candidate"][0].passed = False
    assert any("fixture router-queueing: stored PASS, recomputed FAIL" in p for p in verify_report(forged))


def test_without_the_fixtures_result_semantic_parity_cannot_pass(full: FullCampaign) -> None:
    manifest = load_manifest(full.split.manifest)
    row = full.row_out / f"{ROW}{ROW_SUFFIX}"
    report = merge_results(manifest, {row: RowResult.model_validate_json(row.read_text(encoding="utf-8"))})
    assert [f.status for f in report.fixtures] == [FixtureStatus.STOPPED] * len(manifest.fixtures)
    assert all(f"no result from the {FIXTURES_ROW} job" in f.reason for f in report.fixtures)
    assert report.verdicts is not None and report.verdicts.semantic == SemanticVerdict.BLOCKED
    assert report.verdicts.conclusion == CheckConclusion.ACTION_REQUIRED
    assert "Stage 6 fixtures without a result: router-queueing, preemption-edge" in "; ".join(report.skipped)
    assert verify_report(report) == []


def test_a_tampered_fixture_trace_is_refused_before_any_process(full: FullCampaign, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    dist = tmp_path / "dist"
    shutil.copytree(full.split.dist, dist)
    manifest = load_manifest(dist / MANIFEST_NAME)
    [item] = [i for i in manifest.fixtures if i.id == "handoff-vllm"]
    assert item.trace_file is not None
    trace = dist / item.trace_file
    trace.chmod(0o644)
    trace.write_bytes(trace.read_bytes() + b" ")
    out = tmp_path / "out"
    capsys.readouterr()
    assert cli_main(["row", "--manifest", str(dist / MANIFEST_NAME), "--row", FIXTURES_ROW, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "fixture handoff-vllm: trace SHA-256 mismatch" in err
    assert item.trace_sha256 is not None and item.trace_sha256 in err and sha256_file(trace) in err
    assert "no harness process was started" in err and not out.exists()


def test_the_manifest_refuses_a_fixture_trace_that_is_not_the_plans(full: FullCampaign, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    split, plan = full.split, tmp_path / "plan"
    shutil.copytree(split.plan, plan)
    trace = plan / "fixtures" / "router-queueing.trace.jsonl"
    trace.chmod(0o644)
    trace.write_bytes(trace.read_bytes() + b"\n")
    capsys.readouterr()
    assert cli_main(["manifest", "--plan", str(plan), "--baseline", str(split.plan.parent / "arm-b"),
                     "--candidate", str(split.plan.parent / "arm-c"), "--out", str(tmp_path / "dist")]) == 1
    err = capsys.readouterr().err
    assert "fixture router-queueing: trace SHA-256 mismatch" in err and sha256_file(trace) in err
    assert not (tmp_path / "dist" / MANIFEST_NAME).exists()


@pytest.mark.parametrize(("change", "expected"), [
    (lambda d: d.update(campaign_id="c-other"), "mixed campaign ids"),
    (lambda d: d["binary_sha256"].update(candidate="1" * 64), "candidate binary SHA-256 mismatch"),
    (lambda d: d["fixtures"].pop(1), "fixture ids ['router-queueing', 'handoff-vllm'"),
    (lambda d: d["fixture_trace_sha256"].update({"handoff-vllm": "2" * 64}), "fixture_trace_sha256"),
    (lambda d: d["fixtures"][0].update(args=[]), "fixture router-queueing: args is []"),
], ids=["campaign-id", "binary", "fixture-ids", "trace-digest", "frozen-args"])
def test_merge_refuses_a_fixtures_result_that_does_not_match_the_manifest(
        full: FullCampaign, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        change: Callable[[dict[str, Any]], object], expected: str) -> None:
    data = json.loads((full.fixtures_out / f"{FIXTURES_ROW}{FIXTURES_SUFFIX}").read_text(encoding="utf-8"))
    change(data)
    forged = tmp_path / "forged" / f"{FIXTURES_ROW}{FIXTURES_SUFFIX}"
    forged.parent.mkdir()
    forged.write_text(json.dumps(data), encoding="utf-8")
    capsys.readouterr()
    assert cli_main(["merge", "--manifest", str(full.split.manifest), "--out", str(tmp_path / "report"),
                     str(full.row_out), str(forged.parent)]) == 1
    err = capsys.readouterr().err
    assert "refusing to merge" in err and expected in err, err
    assert not (tmp_path / "report" / "report.json").exists()


def test_a_rows_subset_or_a_profile_plans_no_fixtures(fixture_repo: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    base = subprocess.run(["git", "-C", str(fixture_repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    common = ["plan", "--repo", str(fixture_repo), "--config-ref", base, "--profile", "demo", "--base", base,
              "--head", base, "--campaign-id", "c1"]
    expected = {("--rows", ROW): f"Stage 6 fixtures not run: only rows {ROW} were requested",
                ("--mode", "profile"): "Stage 6 fixtures not run: a profile was requested"}
    for extra, reason in expected.items():
        out = tmp_path / "-".join(extra)
        assert cli_main([*common, *extra, "--out", str(out), "--github-output", str(out / "gh")]) == 0
        plan = json.loads((out / "plan.json").read_text(encoding="utf-8"))
        assert plan["fixtures"] == [] and plan["fixtures_not_run"] == reason and not (out / "fixtures").exists()
        assert FIXTURES_ROW not in (out / "gh").read_text(encoding="utf-8")
    capsys.readouterr()
    assert cli_main([*common, "--mode", "benchmark", "--out", str(tmp_path / "bad")]) == 2
    assert "mode 'benchmark' is not one of campaign, profile" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_a_fixture_trace_file_is_read_at_the_config_ref_and_checked(fixture_repo: Path, tmp_path: Path) -> None:
    good, bad = b'{"a": 1}\n', b'{"b": 2}\n'
    trusted = commit_change(fixture_repo, "fixture traces", files={"traces/good.jsonl": good.decode(),
                                                                    "traces/bad.jsonl": bad.decode()})
    config = demo_config()
    source = config.fixtures[2]
    fixtures = [
        source.model_copy(update={"id": "from-file", "trace": FixtureTraceSpec(
            path="traces/good.jsonl", sha256=hashlib.sha256(good).hexdigest())}),
        source.model_copy(update={"id": "wrong-digest", "trace": FixtureTraceSpec(
            path="traces/bad.jsonl", sha256=hashlib.sha256(good).hexdigest())}),
        source.model_copy(update={"id": "absent", "trace": FixtureTraceSpec(
            path="traces/absent.jsonl", sha256=hashlib.sha256(good).hexdigest())}),
    ]
    made = materialise_fixture_traces(config.model_copy(update={"fixtures": fixtures}), fixture_repo, trusted,
                                      tmp_path)
    assert made[0].problem is None and (tmp_path / "fixtures" / "from-file.trace.jsonl").read_bytes() == good
    assert made[1].trace_file is None and made[1].problem is not None
    assert hashlib.sha256(bad).hexdigest() in made[1].problem and "the config declares" in made[1].problem
    assert not (tmp_path / "fixtures" / "wrong-digest.trace.jsonl").exists()
    assert made[2].problem is not None and made[2].problem.startswith("fixture absent: trace traces/absent.jsonl")


def test_the_fixtures_job_fails_naming_the_assertion_a_variant_breaks(tmp_path: Path, demo_trace: Path) -> None:
    split = _split(tmp_path, demo_trace, knobs={"BREAK_LIFECYCLE": "handoff_order"})
    out, row_out = tmp_path / "fixtures-out", tmp_path / "row-out"
    assert _row(split, FIXTURES_ROW, out) == 0
    assert _row(split, ROW, row_out) == 0, "an aggregated row has no handoff to break"
    result = FixturesResult.model_validate_json((out / f"{FIXTURES_ROW}{FIXTURES_SUFFIX}").read_text(encoding="utf-8"))
    broken = {f.id: f for f in result.fixtures if f.status == FixtureStatus.FAIL}
    assert sorted(broken) == ["handoff-sglang", "handoff-vllm"]
    for fixture in broken.values():
        failing = [a.name for a in fixture.assertions["candidate"] if not a.passed]
        assert failing == ["prefill done -> transfer -> decode activated, per request"], fixture.reason
        assert all(a.passed for a in fixture.assertions["baseline"])
        assert "/destination_activated_ms" in fixture.reason, "the broken handoff also differs from the baseline"
    assert cli_main(["merge", "--manifest", str(split.manifest), "--out", str(tmp_path / "report"), str(row_out),
                     str(out)]) == 0
    report = CampaignReport.model_validate_json((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    [row] = report.rows
    assert row.semantic == SemanticVerdict.PASS, row.semantic_reasons
    assert [f.status for f in report.fixtures if f.id.startswith("handoff")] == [FixtureStatus.FAIL] * 2
    assert report.verdicts is not None and report.verdicts.semantic == SemanticVerdict.FAIL
    assert report.verdicts.conclusion == CheckConclusion.FAILURE
    assert verify_report(report) == []


def test_profile_mode_merges_to_a_profile_report_without_a_performance_gate(tmp_path: Path,
                                                                            demo_trace: Path) -> None:
    split = _split(tmp_path, demo_trace, mode="profile")
    manifest = load_manifest(split.manifest)
    assert manifest.report.mode == "profile" and manifest.fixtures == []
    assert _row(split, ROW, tmp_path / "row-out") == 0
    assert cli_main(["merge", "--manifest", str(split.manifest), "--out", str(tmp_path / "report"),
                     str(tmp_path / "row-out")]) == 0
    report = CampaignReport.model_validate_json((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    assert report.mode == "profile" and report.fixtures == []
    [row] = report.rows
    assert row.semantic == SemanticVerdict.PASS and row.performance is None
    assert row.perf_verdict == PerfVerdict.NOT_RUN
    assert row.perf_reason == "performance not measured: a profile was requested"
    assert row.attribution is not None and row.attribution.trigger == "requested"
    assert "Stage 6 fixtures not run: a profile was requested" in report.skipped
    assert report.verdicts is not None and report.verdicts.performance == PerfVerdict.NOT_RUN
    assert verify_report(report) == []
    expected = DispatchedCampaign(campaign_id=report.campaign_id, head_sha=split.head, base_sha=split.base,
                                  pr_number=1, mode="profile")
    check_report_matches(report, expected)
    with pytest.raises(ReportMismatch, match="mode is 'profile' in the report but 'campaign' was dispatched"):
        check_report_matches(report, expected.model_copy(update={"mode": "campaign"}))


def test_the_harness_patch_reaches_both_arm_builds_the_manifest_and_the_row(tmp_path: Path,
                                                                           demo_trace: Path) -> None:
    """Merge base and head lack the timer; the trusted config's harness.patch adds it to both arm builds."""
    repo = tmp_path / "repo"
    init_fixture_repo(repo)
    commit_change(repo, "the harness stops emitting replay_execution_ms", knobs={"EMIT_TIMING_FIELD": False})
    set_knobs(repo, {"EMIT_TIMING_FIELD": True})
    patch = subprocess.run(["git", "-C", str(repo), "diff"], capture_output=True, check=True).stdout
    subprocess.run(["git", "-C", str(repo), "checkout", "--", "."], check=True)
    config = one_row_config(demo_trace)
    config = config.model_copy(update={"harness": config.harness.model_copy(update={"patch": "patches/timer.patch"})})
    base = commit_change(repo, "config and the timer patch", files={
        DEFAULT_CONFIG_PATH: config_text(config),
        "patches/timer.patch": patch.decode()})
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "head"], check=True)
    head = commit_change(repo, "the candidate", touch_comment=True)
    plan, dist = tmp_path / "plan", tmp_path / "dist"
    assert cli_main(["plan", "--repo", str(repo), "--config-ref", base, "--base", base, "--head", head, "--rows", ROW,
                     "--campaign-id", "c-patch", "--out", str(plan), "--github-output", str(tmp_path / "out")]) == 0
    assert build_arm(repo, plan, "baseline", tmp_path / "arm-b", tmp_path / "wb") == 0
    assert build_arm(repo, plan, "candidate", tmp_path / "arm-c", tmp_path / "wc",
                     "--baseline", str(tmp_path / "arm-b")) == 0
    digest = hashlib.sha256(patch).hexdigest()
    for arm in ("arm-b", "arm-c"):
        assert json.loads((tmp_path / arm / "build.json").read_text(encoding="utf-8"))["harness_patch_sha256"] == digest
    assert cli_main(["manifest", "--plan", str(plan), "--baseline", str(tmp_path / "arm-b"), "--candidate",
                     str(tmp_path / "arm-c"), "--out", str(dist)]) == 0
    assert load_manifest(dist / MANIFEST_NAME).report.harness_patch_sha256 == digest
    row_out = tmp_path / "row-out"
    assert cli_main(["row", "--manifest", str(dist / MANIFEST_NAME), "--row", ROW, "--out", str(row_out)]) == 0
    result = RowResult.model_validate_json((row_out / f"{ROW}{ROW_SUFFIX}").read_text(encoding="utf-8"))
    performance = result.report.performance
    assert performance is not None and [p.status for p in performance.probes] == ["ok", "ok"]
    assert result.report.perf_verdict != PerfVerdict.BLOCKED, result.report.perf_reason
