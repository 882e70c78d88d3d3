"""`kv-parity build | row | merge` end to end: real git, real cargo builds, real harness processes.

One build and two row jobs are run once per module and compared with the single-machine campaign on the same
fixture (and the node doctor each row records is checked on both); the refusal tests then tamper with copies
of those real files.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.cli.distributed import build_main, merge_main, row_main
from bot.cli.main import main
from bot.exit_codes import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from bot.publish.markdown import md, prose
from runners.demo import commit_change, init_fixture_repo
from runners.pipeline.campaign import CampaignRequest, run_campaign
from runners.pipeline.distributed.artifacts import BuildManifest, RowResult, load_manifest
from runners.pipeline.distributed.common import MANIFEST_NAME, MATRIX_NAME, REPORT_NAME, ROW_SUFFIX
from runners.pipeline.distributed.merge import merge_results
from runners.schema.config import DEFAULT_CONFIG_PATH, CampaignConfig
from runners.schema.report import CampaignReport, CheckConclusion, DoctorStatus, PerfVerdict, SemanticVerdict
from runners.schema.verdicts import campaign_verdicts
from runners.stages.doctor import row_cpus
from runners.stages.trace import sha256_file
from tests.configs import config_text, quick
from tests.test_doctor import CHECK_NAMES

ROWS = ["vllm-agg", "sglang-agg"]
CAMPAIGN_ID = "c-distributed-test"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@dataclass
class Campaigns:
    root: Path
    base: str
    head: str
    trace: Path
    single: CampaignReport
    build_out: Path
    github_output: Path
    row_outs: dict[str, Path]
    row_stdout: dict[str, str]
    merged: CampaignReport

    @property
    def manifest_path(self) -> Path:
        return self.build_out / MANIFEST_NAME

    def row_result(self, row: str) -> Path:
        return self.row_outs[row] / f"{row}{ROW_SUFFIX}"


@pytest.fixture(scope="module")
def campaigns(tmp_path_factory: pytest.TempPathFactory, campaign_config: CampaignConfig,
              demo_trace: Path) -> Campaigns:
    """Identical revisions; the config is committed in the base, where `kv-parity build` reads it."""
    root = tmp_path_factory.mktemp("distributed")
    repo = root / "repo"
    init_fixture_repo(repo)
    config = quick(campaign_config, instructions="corroborate")  # counted on both paths, compared
    toml = config_text(config)
    base = commit_change(repo, "campaign config", files={DEFAULT_CONFIG_PATH: toml})
    git(repo, "checkout", "-q", "-b", "feature")
    head = commit_change(repo, "reword comments", touch_comment=True)
    git(repo, "checkout", "-q", "main")

    single = run_campaign(CampaignRequest(repo=repo, base=base, head=head, config=config,
                                          config_source="test", out_dir=root / "single", rows=ROWS,
                                          trace_path=demo_trace))

    build_out, github_output = root / "build", root / "github-output"
    assert build_main(["--repo", str(repo), "--base", base, "--head", head, "--rows", ",".join(ROWS),
                       "--trace", str(demo_trace), "--campaign-id", CAMPAIGN_ID, "--out", str(build_out),
                       "--github-output", str(github_output)]) == EXIT_OK
    row_outs = {row: root / f"row-{row}" for row in ROWS}
    row_stdout = {}
    for row, out in row_outs.items():
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert row_main(["--manifest", str(build_out / MANIFEST_NAME), "--row", row, "--out", str(out),
                             "--trace", str(demo_trace)]) == EXIT_OK
        row_stdout[row] = printed.getvalue()
    merged_out = root / "merged"
    assert merge_main(["--manifest", str(build_out / MANIFEST_NAME), "--out", str(merged_out),
                       *map(str, row_outs.values())]) == EXIT_OK
    merged = CampaignReport.model_validate_json((merged_out / REPORT_NAME).read_text(encoding="utf-8"))
    return Campaigns(root=root, base=base, head=head, trace=demo_trace, single=single, build_out=build_out,
                     github_output=github_output, row_outs=row_outs, row_stdout=row_stdout, merged=merged)


def _row_conclusion(report: CampaignReport, index: int) -> CheckConclusion:
    """A row's own conclusion: the campaign rule applied to a report holding that row alone."""
    return campaign_verdicts(report.model_copy(update={"rows": [report.rows[index]]})).conclusion


def test_build_rows_merge_gives_the_single_machine_verdicts(campaigns: Campaigns) -> None:
    single, merged = campaigns.single, campaigns.merged
    assert [row.row.id for row in merged.rows] == [row.row.id for row in single.rows] == ROWS
    for index, (one, split) in enumerate(zip(single.rows, merged.rows, strict=True)):
        assert split.semantic == one.semantic == SemanticVerdict.PASS, split.semantic_reasons
        assert split.perf_verdict == one.perf_verdict == PerfVerdict.PASS, split.perf_reason
        assert _row_conclusion(merged, index) == _row_conclusion(single, index) == CheckConclusion.SUCCESS
        assert one.instructions is not None and split.instructions is not None, "both paths count instructions"
        assert split.instructions.ratio == one.instructions.ratio, "the same binaries count the same on both paths"
    assert single.verdicts is not None and merged.verdicts is not None
    assert merged.verdicts.model_dump(exclude={"summary"}) == single.verdicts.model_dump(exclude={"summary"})
    assert merged.verdicts.conclusion == CheckConclusion.SUCCESS
    assert merged.campaign_id == CAMPAIGN_ID
    assert [r.sha for r in merged.revisions] == [campaigns.base, campaigns.head]
    assert merged.relationship == single.relationship == "ancestor"
    assert merged.config_source == f"{DEFAULT_CONFIG_PATH}@{campaigns.base}"
    assert merged.config == single.config
    assert merged.trace == single.trace
    assert any("rows not selected" in note for note in merged.skipped)
    for row in merged.rows:
        assert row.performance is not None
        assert (campaigns.root / "merged" / row.performance.schedule_path).is_file(), "evidence travels along"


def test_the_single_machine_campaign_records_the_doctor_for_each_rows_perf_cpu(campaigns: Campaigns) -> None:
    for row in campaigns.single.rows:
        assert row.doctor is not None and row.performance is not None
        assert row.doctor.cpus == row.performance.placement.cpu_set == row_cpus()
        assert [check.name for check in row.doctor.checks] == CHECK_NAMES
        assert row.doctor.hostname == row.host
        assert {c.name: c.status for c in row.doctor.checks}["sandbox"] == DoctorStatus.PASS


def test_kv_parity_row_records_the_doctor_and_merge_shows_it(campaigns: Campaigns, tmp_path: Path) -> None:
    result = RowResult.model_validate_json(campaigns.row_result(ROWS[0]).read_text(encoding="utf-8"))
    doctor = result.report.doctor
    assert doctor is not None and doctor.cpus == result.report.placement_cpus
    assert f"node doctor {doctor.summary}" in campaigns.row_stdout[ROWS[0]]
    assert campaigns.merged.rows[0].doctor == doctor
    pages = tmp_path / "pages"  # rendered apart: the module's merged directory stays as merge wrote it
    assert main(["report", str(campaigns.root / "merged" / REPORT_NAME), "--out", str(pages)]) == 0  # the publish job
    markdown = (pages / "report.md").read_text(encoding="utf-8")
    assert f"- **Node doctor**: {md(doctor.summary)}" in markdown
    for check in doctor.checks:
        assert f"| {md(check.name)} | {check.status.value} | {prose(check.detail)} |" in markdown
    page = (pages / "report.html").read_text(encoding="utf-8")
    assert f'Node doctor: <span class="verdict-{doctor.status.value}">' in page


def test_manifest_holds_prepare_evidence_and_the_row_matrix(campaigns: Campaigns) -> None:
    manifest = load_manifest(campaigns.manifest_path)
    assert manifest.campaign_id == CAMPAIGN_ID and manifest.rows == ROWS
    assert manifest.report.stopped is None and manifest.report.rows == []
    for artifact in manifest.report.artifacts:
        assert sha256_file(campaigns.build_out / "bin" / artifact.binary_name) == artifact.binary_sha256
    assert manifest.report.toolchain is not None and manifest.report.sizes is not None
    matrix = json.loads((campaigns.build_out / MATRIX_NAME).read_text(encoding="utf-8"))
    labels = {row.id: row.runner_labels for row in manifest.config.rows}
    assert matrix == {"include": [{"row": row, "runs_on": labels[row]} for row in ROWS]}
    outputs = campaigns.github_output.read_text(encoding="utf-8").splitlines()
    assert outputs == [f"matrix={json.dumps(matrix, separators=(',', ':'))}", f"row_count={len(ROWS)}"]


def test_row_result_records_checksums_node_and_cpu_set(campaigns: Campaigns) -> None:
    manifest = load_manifest(campaigns.manifest_path)
    for row in ROWS:
        result = RowResult.model_validate_json(campaigns.row_result(row).read_text(encoding="utf-8"))
        assert result.campaign_id == CAMPAIGN_ID
        assert result.binary_sha256 == manifest.binary_sha256()
        assert manifest.report.trace is not None
        assert result.trace_slice_sha256 == manifest.report.trace.slice_sha256
        assert result.node.logical_cpus > 0 and result.node.hostname == result.report.host
        assert result.report.placement_cpus
        assert result.report.performance is not None
        assert result.report.performance.placement.cpu_set == result.report.placement_cpus
        assert (campaigns.row_outs[row] / f"schedule-{row}.json").is_file()


def test_tampered_binary_is_refused_before_any_process(campaigns: Campaigns, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    build = tmp_path / "build"
    shutil.copytree(campaigns.build_out, build)
    manifest = load_manifest(build / MANIFEST_NAME)
    artifact = manifest.report.artifact("candidate")
    binary = build / "bin" / artifact.binary_name
    data = bytearray(binary.read_bytes())
    data[len(data) // 2] ^= 0xFF
    binary.write_bytes(bytes(data))
    work, out = tmp_path / "work", tmp_path / "out"

    code = row_main(["--manifest", str(build / MANIFEST_NAME), "--row", ROWS[0], "--out", str(out),
                     "--trace", str(campaigns.trace), "--work", str(work), "--keep-work"])

    message = capsys.readouterr().err
    assert code == EXIT_REFUSED
    assert "candidate binary SHA-256 mismatch" in message
    assert artifact.binary_sha256 in message and sha256_file(binary) in message
    assert "baseline binary SHA-256 mismatch" not in message
    [scratch] = work.iterdir()
    staged = sorted(str(path.relative_to(scratch)) for path in scratch.rglob("*"))
    assert staged == ["bin", *sorted(f"bin/{a.binary_name}" for a in manifest.report.artifacts)], (
        "only the staged binaries may exist: no trace slice, no canonical or timing output, no process ran")
    assert not out.exists() or not any(out.iterdir())


def _mutated_results(campaigns: Campaigns, tmp_path: Path, change: dict[str, Any]) -> list[Path]:
    """Copies of the real row results, the first one changed by `change` (top-level keys)."""
    paths = []
    for index, row in enumerate(ROWS):
        data = json.loads(campaigns.row_result(row).read_text(encoding="utf-8"))
        if index == 0:
            data.update(change)
        target = tmp_path / f"rows-{row}" / f"{row}{ROW_SUFFIX}"
        target.parent.mkdir(parents=True)
        target.write_text(json.dumps(data), encoding="utf-8")
        paths.append(target)
    return paths


def _merge(campaigns: Campaigns, out: Path, paths: list[Path]) -> int:
    return merge_main(["--manifest", str(campaigns.manifest_path), "--out", str(out), *map(str, paths)])


@pytest.mark.parametrize(("change", "expected"), [
    ({"campaign_id": "c-someone-else"}, ["mixed campaign ids", "c-someone-else", CAMPAIGN_ID]),
    ({"schema_version": "kv-parity.distributed.v0"},
     ["mixed schema versions", "kv-parity.distributed.v0", "kv-parity.distributed.v1"]),
    ({"binary_sha256": {"baseline": "0" * 64, "candidate": "1" * 64}},
     ["baseline binary SHA-256 mismatch", "candidate binary SHA-256 mismatch", "0" * 64, "1" * 64]),
    ({"trace_slice_sha256": "2" * 64}, ["trace slice SHA-256", "2" * 64]),
], ids=["campaign-id", "schema-version", "binary-checksums", "trace-slice"])
def test_merge_refuses_results_that_do_not_belong_together(
        campaigns: Campaigns, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any],
        expected: list[str]) -> None:
    out = tmp_path / "merged"
    code = _merge(campaigns, out, _mutated_results(campaigns, tmp_path, change))
    message = capsys.readouterr().err
    assert code == EXIT_REFUSED
    assert "refusing to merge" in message
    for text in expected:
        assert text in message
    if "binary_sha256" in change:
        manifest = load_manifest(campaigns.manifest_path)
        assert all(sha in message for sha in manifest.binary_sha256().values())
    assert not (out / REPORT_NAME).exists()


def test_merge_refuses_one_row_from_two_nodes(campaigns: Campaigns, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    twice = tmp_path / "again" / f"{ROWS[0]}{ROW_SUFFIX}"
    twice.parent.mkdir()
    shutil.copy2(campaigns.row_result(ROWS[0]), twice)
    code = _merge(campaigns, tmp_path / "merged", [campaigns.row_result(ROWS[0]), twice])
    assert code == EXIT_REFUSED
    assert f"row {ROWS[0]} has 2 results" in capsys.readouterr().err


def test_a_missing_row_blocks_the_campaign(campaigns: Campaigns) -> None:
    manifest = load_manifest(campaigns.manifest_path)
    only = campaigns.row_result(ROWS[0])
    report = merge_results(manifest, {only: RowResult.model_validate_json(only.read_text(encoding="utf-8"))})
    assert [row.row.id for row in report.rows] == ROWS[:1]
    assert report.stopped is not None and report.stopped.stage == "rows" and ROWS[1] in report.stopped.reason
    assert report.verdicts is not None and report.verdicts.conclusion == CheckConclusion.ACTION_REQUIRED


def test_a_stopped_build_runs_no_row_and_merges_into_its_stop(campaigns: Campaigns, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    wrong_trace = tmp_path / "wrong-trace.jsonl"
    wrong_trace.write_bytes(campaigns.trace.read_bytes() + b"\n")
    repo = campaigns.root / "repo"
    build, github_output = tmp_path / "build", tmp_path / "github-output"
    assert build_main(["--repo", str(repo), "--base", campaigns.base, "--head", campaigns.head,
                       "--trace", str(wrong_trace), "--out", str(build), "--github-output",
                       str(github_output)]) == EXIT_OK
    manifest: BuildManifest = load_manifest(build / MANIFEST_NAME)
    assert manifest.report.stopped is not None and manifest.report.stopped.stage == "trace"
    assert not (build / "bin").exists()
    assert github_output.read_text(encoding="utf-8").splitlines() == ['matrix={"include":[]}', "row_count=0"]

    assert row_main(["--manifest", str(build / MANIFEST_NAME), "--row", ROWS[0], "--out",
                     str(tmp_path / "row")]) == EXIT_USAGE
    assert "the build stopped at trace" in capsys.readouterr().err
    assert merge_main(["--manifest", str(build / MANIFEST_NAME), "--out", str(tmp_path / "merged"),
                       str(tmp_path / "no-rows")]) == EXIT_OK
    merged = tmp_path / "merged" / REPORT_NAME
    report = CampaignReport.model_validate_json(merged.read_text(encoding="utf-8"))
    assert report.rows == [] and report.stopped == manifest.report.stopped
    assert report.verdicts is not None and report.verdicts.conclusion == CheckConclusion.ACTION_REQUIRED
