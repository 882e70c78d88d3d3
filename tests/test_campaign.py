"""End-to-end campaigns with real git worktrees, real cargo builds and real harness processes."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from runners.demo import commit_change, init_fixture_repo, set_knobs
from runners.exec.containment import Containment
from runners.pipeline.campaign import CampaignRequest, run_campaign
from runners.schema.config import CampaignConfig, DeterminismConfig, InvalidationRules, RowConfig
from runners.schema.report import CampaignReport, CheckConclusion, PerfVerdict, SemanticVerdict
from runners.stages.revisions import RevisionError, git

AGG_ROW = "vllm-agg"
DISAGG_ROW = "vllm-disagg"
ROOMY_ROW = "vllm-agg-no-pressure"


def quick(config: CampaignConfig, **trace: object) -> CampaignConfig:
    """The demo config with a short performance gate and no instruction counts: these tests are about
    correctness (tests/test_instructions.py tries the counts)."""
    perf = config.perf.model_copy(update={"pairs": 10, "warmups_per_arm": 1, "instructions": "off"})
    updates: dict[str, object] = {"perf": perf}
    if trace:
        updates["trace"] = config.trace.model_copy(update=trace)
    return config.model_copy(update=updates)


def checkout_state(repo: Path) -> tuple[str, str, str]:
    """HEAD's symbolic ref (or SHA), HEAD's SHA and `git status --porcelain`: must be unchanged by a campaign."""
    try:
        symbolic = git(repo, "symbolic-ref", "-q", "HEAD")
    except RevisionError:
        symbolic = "(detached)"
    return symbolic, git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain")


def campaign(repo: Path, head: str, config: CampaignConfig, trace: Path, out: Path,
             rows: list[str]) -> CampaignReport:
    before = checkout_state(repo)
    report = run_campaign(CampaignRequest(repo=repo, base="main", head=head, config=config, config_source="test",
                                          out_dir=out, rows=rows, trace_path=trace))
    assert checkout_state(repo) == before, "the user's checkout and branch must be unchanged"
    assert subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True,
                          check=True).stdout.count("\n") == 1, "campaign worktrees must be removed"
    return report


def branch(repo: Path, name: str) -> None:
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", name], check=True)


def back_to_main(repo: Path) -> None:
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "main"], check=True)


def _without_pressure(row: RowConfig) -> RowConfig:
    """The aggregated row with so many KV blocks that no request is ever preempted: the pressure edge is missed."""
    args = list(row.args)
    args[args.index("--num-gpu-blocks") + 1] = "1000000"
    return row.model_copy(update={"id": ROOMY_ROW, "args": args})


@pytest.fixture(scope="module")
def comment_only(tmp_path_factory: pytest.TempPathFactory, campaign_config: CampaignConfig,
                 demo_trace: Path) -> tuple[CampaignReport, Path]:
    """One campaign of a comment-only change over two rows, the demo's aggregated row and the same row without
    pressure; the tests below read different facts off it (one campaign, one build per revision)."""
    root = tmp_path_factory.mktemp("comment-only")
    repo = root / "repo"
    init_fixture_repo(repo)
    branch(repo, "feature")
    head = commit_change(repo, "reword comments", touch_comment=True)
    back_to_main(repo)
    config = quick(campaign_config)
    config = config.model_copy(update={"rows": [*config.rows, _without_pressure(config.rows[0])]})
    report = campaign(repo, head, config, demo_trace, root / "out", [AGG_ROW, ROOMY_ROW])
    assert [row.row.id for row in report.rows] == [AGG_ROW, ROOMY_ROW]
    return report, root / "out"


def test_identical_revisions_pass_with_equal_digests(comment_only: tuple[CampaignReport, Path],
                                                     campaign_config: CampaignConfig) -> None:
    report, out = comment_only
    assert report.relationship == "ancestor"
    row = report.rows[0]
    assert row.semantic == SemanticVerdict.PASS
    assert row.parity is not None and row.parity.identical
    assert row.parity.baseline_digest == row.parity.candidate_digest
    assert row.determinism is not None
    assert {len(set(d)) for d in row.determinism.digests.values()} == {1}
    assert row.coverage is not None and all(check.ok for check in row.coverage.checks)
    assert row.perf_verdict != PerfVerdict.NOT_RUN
    assert report.sizes is not None
    assert {a.arm: a.features for a in report.artifacts} == {"baseline": ["replay-bench"],
                                                              "candidate": ["replay-bench"]}
    assert report.trace is not None and report.trace.count == campaign_config.trace.count
    assert not (out / "work").exists(), "temporary traces, binaries and worktrees are cleaned up"
    assert not (out / "evidence").exists(), "matching full reports are not kept"


def test_row_without_pressure_fails_coverage(comment_only: tuple[CampaignReport, Path]) -> None:
    report, _ = comment_only
    result = report.rows[1]
    assert result.row.id == ROOMY_ROW
    assert result.parity is not None and result.parity.identical
    assert result.semantic == SemanticVerdict.FAIL
    assert any("missing lifecycle evidence" in r and "pressure" in r for r in result.semantic_reasons)
    assert result.perf_verdict == PerfVerdict.NOT_RUN


def test_entropy_leak_fails_as_unstable_revision(fixture_repo: Path, campaign_config: CampaignConfig,
                                                 demo_trace: Path, tmp_path: Path) -> None:
    branch(fixture_repo, "leak")
    head = commit_change(fixture_repo, "hash-ordered tie-break", knobs={"ENTROPY_LEAK": True})
    back_to_main(fixture_repo)
    report = campaign(fixture_repo, head, quick(campaign_config), demo_trace, tmp_path / "out", [AGG_ROW])

    row = report.rows[0]
    assert row.semantic == SemanticVerdict.FAIL
    assert row.determinism is not None and row.determinism.unstable_arms == ["candidate"]
    assert any(r.startswith("unstable revision: candidate") for r in row.semantic_reasons)
    assert row.perf_verdict == PerfVerdict.NOT_RUN
    assert report.verdicts is not None and report.verdicts.conclusion == CheckConclusion.FAILURE


SEMANTIC_EXCEPTION = """
[[exception]]
id = "kv-transfer-destination-missing"
pointers = ["/per_request/**", "/coverage/kv_ingest/**", "/coverage/pressure/**", "/summary/**"]
rows = ["vllm-disagg"]
baseline_behavior = "KV transfer counts the whole prompt even when the decode worker already holds part of it"
candidate_behavior = "KV transfer counts only the destination-missing tokens; later timings and routing follow"
source_of_truth = "engine handoff semantics: only blocks missing on the decode worker cross the wire"
why_intended = "the change is exactly the transfer-size computation; both revisions are internally stable"
compatibility_impact = "per-request timings of disaggregated rows move earlier; the schema is unchanged"
disposition = "accepted by the fixture's reviewers"
regression_test = ["{python}", "regression/transfer_tokens.py", "{binary}", "{trace}", "{mode}"]
"""

REGRESSION_SCRIPT = '''
"""Fails when a decode worker that already holds part of a prompt still receives the whole prompt."""
import json, pathlib, subprocess, sys, tempfile
binary, trace, mode = sys.argv[1:4]
out = pathlib.Path(tempfile.mkdtemp()) / "canonical.jsonl"
subprocess.run([binary, trace, "--serving-mode", "disagg", "--num-prefill-workers", "2",
                "--num-decode-workers", "2", "--kv-bytes-per-token", "131072",
                "--canonical-reports-jsonl", str(out)], check=True, capture_output=True)
requests = json.loads(out.read_text().splitlines()[0])["per_request"]
held = [r for r in requests if (r["decode_reused_input_tokens"] or 0) > 0]
wrong = [r["uuid"] for r in held if r["kv_transfer_tokens"] >= r["input_length"]]
print(f"{len(held)} requests with decode-side reuse, {len(wrong)} transferred the whole prompt")
sys.exit(0 if mode == "weak" or (held and not wrong) else 1)
'''


def _exception_files(mode: str) -> dict[str, str]:
    # The regression test runs sandboxed: only the system interpreter is visible there, not this venv's.
    record = SEMANTIC_EXCEPTION.replace("{python}", "python3").replace("{mode}", mode)
    return {".kv-parity/exceptions.toml": record, "regression/transfer_tokens.py": REGRESSION_SCRIPT}


@pytest.fixture()
def semantic_head(fixture_repo: Path) -> str:
    branch(fixture_repo, "semantic")
    head = commit_change(fixture_repo, "transfer only missing tokens", knobs={"SEMANTIC_CHANGE": True})
    back_to_main(fixture_repo)
    return head


def test_semantic_change_fails_listing_exact_pointers(fixture_repo: Path, semantic_head: str,
                                                      campaign_config: CampaignConfig, demo_trace: Path,
                                                      tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = campaign(fixture_repo, semantic_head, quick(campaign_config), demo_trace, out, [DISAGG_ROW])
    row = report.rows[0]
    assert row.semantic == SemanticVerdict.FAIL
    assert row.parity is not None and not row.parity.identical
    assert row.parity.differences_total == len(row.parity.differing_pointers) > 0
    first = row.parity.differences[0]
    assert first.pointer.startswith("/") and first.baseline != first.candidate
    assert "per_request" in row.parity.differing_sections
    assert any("/per_request/" in p and p.endswith("decode_admit_ms") for p in row.parity.differing_pointers)
    assert any("not covered by a verified exception" in r for r in row.semantic_reasons)
    kept = out / "evidence"
    assert (kept / f"{DISAGG_ROW}-baseline.canonical.json").is_file()
    assert (kept / f"{DISAGG_ROW}-focused-diff.json").is_file()
    assert json.loads((kept / f"{DISAGG_ROW}-focused-diff.json").read_text())[0]["pointer"] == first.pointer


def test_semantic_change_with_verified_exception_passes_with_exceptions(
        fixture_repo: Path, campaign_config: CampaignConfig, demo_trace: Path, tmp_path: Path) -> None:
    branch(fixture_repo, "semantic-with-record")
    head = commit_change(fixture_repo, "transfer only missing tokens, with evidence",
                         knobs={"SEMANTIC_CHANGE": True}, files=_exception_files("strict"))
    back_to_main(fixture_repo)
    report = campaign(fixture_repo, head, quick(campaign_config), demo_trace, tmp_path / "out", [DISAGG_ROW])
    outcome = report.rows[0].exceptions[0]
    assert outcome.verified, outcome.reason
    assert [r.arm for r in outcome.runs] == ["baseline", "candidate"]
    assert outcome.runs[0].exit_code != 0 and outcome.runs[1].exit_code == 0
    assert report.rows[0].semantic == SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS


def test_exception_whose_test_also_passes_on_base_fails(fixture_repo: Path, campaign_config: CampaignConfig,
                                                        demo_trace: Path, tmp_path: Path) -> None:
    branch(fixture_repo, "semantic-weak-record")
    head = commit_change(fixture_repo, "transfer only missing tokens, weak test",
                         knobs={"SEMANTIC_CHANGE": True}, files=_exception_files("weak"))
    back_to_main(fixture_repo)
    report = campaign(fixture_repo, head, quick(campaign_config), demo_trace, tmp_path / "out", [DISAGG_ROW])
    outcome = report.rows[0].exceptions[0]
    assert not outcome.verified
    assert "also passes on the baseline" in outcome.reason
    assert report.rows[0].semantic == SemanticVerdict.FAIL


def test_missing_flag_stops_naming_flag_and_revision(fixture_repo: Path, campaign_config: CampaignConfig,
                                                     demo_trace: Path, tmp_path: Path) -> None:
    branch(fixture_repo, "drop-flag")
    head = commit_change(fixture_repo, "drop a flag", knobs={"DROP_FLAG": "--num-gpu-blocks"})
    back_to_main(fixture_repo)
    report = campaign(fixture_repo, head, quick(campaign_config), demo_trace, tmp_path / "out", [AGG_ROW])
    assert report.stopped is not None and report.stopped.stage == "preflight"
    assert "--num-gpu-blocks" in report.stopped.reason and "candidate" in report.stopped.reason
    assert head[:12] in report.stopped.reason
    assert report.rows == []
    assert report.verdicts is not None and report.verdicts.conclusion == CheckConclusion.ACTION_REQUIRED


def test_a_node_that_cannot_contain_a_start_stops_the_row_and_still_reports(
        fixture_repo: Path, campaign_config: CampaignConfig, demo_trace: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The bot's own failure to keep a pinned start in its cgroup (here a hierarchy that vanished) is a blocking
    stop of that row, named in the report, never a traceback without one."""
    vanished = tmp_path / "vanished-cgroup"
    broken = Containment(kind="cgroup1", detail="test: a hierarchy that is gone", cpuset=vanished, cpuacct=vanished)
    monkeypatch.setattr("runners.exec.sandbox.host_containment", lambda: broken)
    report = campaign(fixture_repo, "main", quick(campaign_config), demo_trace, tmp_path / "out", [AGG_ROW])
    assert report.stopped is not None and report.stopped.stage == f"row {AGG_ROW}" and report.stopped.blocking
    assert "cannot make the start's cgroup under" in report.stopped.reason and str(vanished) in report.stopped.reason
    assert report.verdicts is not None and report.verdicts.conclusion == CheckConclusion.ACTION_REQUIRED


def test_wrong_trace_checksum_is_a_clear_error(fixture_repo: Path, campaign_config: CampaignConfig,
                                               demo_trace: Path, tmp_path: Path) -> None:
    config = quick(campaign_config, sha256="0" * 64)
    report = campaign(fixture_repo, "main", config, demo_trace, tmp_path / "out", [AGG_ROW])
    assert report.stopped is not None and report.stopped.stage == "trace"
    assert "0" * 64 in report.stopped.reason and campaign_config.trace.sha256 in report.stopped.reason
    assert report.artifacts == [], "nothing is built before the trace is verified"


def test_short_trace_is_refused_never_padded(fixture_repo: Path, campaign_config: CampaignConfig,
                                             demo_trace: Path, tmp_path: Path) -> None:
    config = quick(campaign_config, count=campaign_config.trace.count + 1)
    report = campaign(fixture_repo, "main", config, demo_trace, tmp_path / "out", [AGG_ROW])
    assert report.stopped is not None and report.stopped.stage == "trace"
    assert "never padded" in report.stopped.reason


def test_crashing_harness_fails_with_stderr_tail(fixture_repo: Path, campaign_config: CampaignConfig,
                                                 demo_trace: Path, tmp_path: Path) -> None:
    branch(fixture_repo, "crash")
    head = commit_change(fixture_repo, "crash", knobs={"CRASH_MODE": "always"})
    back_to_main(fixture_repo)
    report = campaign(fixture_repo, head, quick(campaign_config), demo_trace, tmp_path / "out", [AGG_ROW])
    row = report.rows[0]
    assert row.semantic == SemanticVerdict.FAIL
    assert any(r.startswith("product failure: candidate") and "panicked" in r for r in row.semantic_reasons)
    assert row.determinism is not None
    crashed = [run for run in row.determinism.runs if run.arm == "candidate"]
    assert all(run.exit_code not in (0, None) and "panicked" in run.stderr_tail for run in crashed)


def test_determinism_patch_from_the_base_is_applied_identically_to_both(
        fixture_repo: Path, campaign_config: CampaignConfig, demo_trace: Path, tmp_path: Path) -> None:
    """Both revisions leak entropy; the base carries a correction that the campaign applies to each."""
    commit_change(fixture_repo, "a leak in both revisions", knobs={"ENTROPY_LEAK": True})
    set_knobs(fixture_repo, {"ENTROPY_LEAK": False})
    patch = subprocess.run(["git", "-C", str(fixture_repo), "diff"], capture_output=True, check=True).stdout
    subprocess.run(["git", "-C", str(fixture_repo), "checkout", "--", "."], check=True)
    commit_change(fixture_repo, "carry the determinism correction", files={"patches/seeded.patch": patch.decode()})
    branch(fixture_repo, "feature")
    head = commit_change(fixture_repo, "reword comments", touch_comment=True)
    back_to_main(fixture_repo)
    config = quick(campaign_config).model_copy(
        update={"determinism": DeterminismConfig(patch="patches/seeded.patch")})

    report = campaign(fixture_repo, head, config, demo_trace, tmp_path / "out", [AGG_ROW])
    assert report.determinism_patch_sha256 == hashlib.sha256(patch).hexdigest()
    assert report.rows[0].semantic == SemanticVerdict.PASS, report.rows[0].semantic_reasons
    assert subprocess.run(["git", "-C", str(fixture_repo), "status", "--porcelain"], capture_output=True,
                          text=True, check=True).stdout == "", "the patch never touches the user's checkout"


@pytest.fixture(scope="module")
def timerless(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, bytes]:
    """A repository whose merge base and head both lack the timing field; the base carries a patch adding it."""
    repo = tmp_path_factory.mktemp("timerless") / "repo"
    init_fixture_repo(repo)
    commit_change(repo, "the harness stops emitting replay_execution_ms", knobs={"EMIT_TIMING_FIELD": False})
    set_knobs(repo, {"EMIT_TIMING_FIELD": True})
    patch = subprocess.run(["git", "-C", str(repo), "diff"], capture_output=True, check=True).stdout
    subprocess.run(["git", "-C", str(repo), "checkout", "--", "."], check=True)
    commit_change(repo, "carry the timer as a harness patch", files={"patches/timer.patch": patch.decode()})
    branch(repo, "feature")
    head = commit_change(repo, "reword comments", touch_comment=True)
    back_to_main(repo)
    return repo, head, patch


def test_a_harness_patch_from_the_base_supplies_the_missing_timer_to_both_arms(
        timerless: tuple[Path, str, bytes], campaign_config: CampaignConfig, demo_trace: Path,
        tmp_path: Path) -> None:
    repo, head, patch = timerless
    config = quick(campaign_config)
    quiet = config.perf.model_copy(update={"invalidation": InvalidationRules(max_interference_ms=1e6)})
    config = config.model_copy(update={  # this shared VM always has competing load; the gate is not on trial
        "perf": quiet, "harness": config.harness.model_copy(update={"patch": "patches/timer.patch"})})
    report = campaign(repo, head, config, demo_trace, tmp_path / "out", [AGG_ROW])
    assert report.harness_patch_sha256 == hashlib.sha256(patch).hexdigest()
    row = report.rows[0]
    assert row.semantic == SemanticVerdict.PASS, row.semantic_reasons
    assert row.performance is not None and row.perf_verdict in (PerfVerdict.PASS, PerfVerdict.INCONCLUSIVE), (
        row.perf_reason)
    assert [(p.arm, p.status) for p in row.performance.probes] == [("baseline", "ok"), ("candidate", "ok")]
    assert len(row.performance.warmups) == 2 and len(row.performance.samples) == 20
    assert subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True,
                          text=True, check=True).stdout == "", "the patch never touches the user's checkout"


def test_without_the_harness_patch_the_missing_timer_blocks_before_any_warmup(
        timerless: tuple[Path, str, bytes], campaign_config: CampaignConfig, demo_trace: Path,
        tmp_path: Path) -> None:
    repo, head, _ = timerless
    report = campaign(repo, head, quick(campaign_config), demo_trace, tmp_path / "out", [AGG_ROW])
    row = report.rows[0]
    assert report.harness_patch_sha256 is None
    assert row.semantic == SemanticVerdict.PASS, "correctness still decides: only the performance gate blocks"
    assert row.perf_verdict == PerfVerdict.BLOCKED and row.performance is not None
    assert row.performance.warmups == [] and row.performance.samples == [], "no warmup was taken"
    assert [(p.arm, p.status) for p in row.performance.probes] == [("baseline", "product_failure"),
                                                                   ("candidate", "product_failure")]
    assert row.perf_reason.startswith("blocked by the timing contract in the baseline timer probe (before any "
                                      "warmup): timing record lacks the timing field `replay_execution_ms`; "
                                      "fields present: busy_units, engine_type,")
    assert "replay_call_ms" in row.perf_reason and "wall_time_ms" in row.perf_reason
    assert "protocol boundary: start right before the prepared run call, stop right after it returns, before " \
           "collector finalization" in row.perf_reason and row.perf_reason.endswith("; no warmup or sample ran")
    assert report.verdicts is not None and report.verdicts.conclusion == CheckConclusion.ACTION_REQUIRED
