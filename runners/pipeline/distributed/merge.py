"""`kv-parity merge`: the manifest and every node's result -> one campaign report with every verdict recomputed.

Merge refuses anything that could mix evidence from other campaigns or binaries: each result's schema
versions, campaign id and binary checksums must be the manifest's, and no row is ever pooled across nodes.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from runners.pipeline.campaign import unsupported_fixture_lines
from runners.pipeline.distributed.artifacts import (
    BuildManifest,
    FixturesResult,
    NodeResult,
    RowResult,
    checksum_mismatches,
)
from runners.pipeline.distributed.common import (
    FIXTURES_ROW,
    FIXTURES_SUFFIX,
    ROW_SUFFIX,
    Refusal,
)
from runners.schema.report import CampaignReport, FixtureReport, FixtureStatus, StopRecord
from runners.verify import UnverifiedReport, accept_merged_report


def _origin_refusals(manifest: BuildManifest, path: Path, result: NodeResult) -> list[str]:
    """Why a node's result is not from this build: schema versions, campaign id, binary checksums."""
    problems: list[str] = []
    versions = (result.schema_version, result.report_schema_version)
    if versions != (manifest.schema_version, manifest.report_schema_version):
        problems.append(f"mixed schema versions: {path} has {'/'.join(versions)}, the manifest has "
                        f"{manifest.schema_version}/{manifest.report_schema_version}")
    if result.campaign_id != manifest.campaign_id:
        problems.append(f"mixed campaign ids: {path} belongs to campaign {result.campaign_id}, "
                        f"the manifest to {manifest.campaign_id}")
    problems.extend(f"{path}: {line}" for line in checksum_mismatches(manifest.binary_sha256(), result.binary_sha256))
    return problems


def merge_refusals(manifest: BuildManifest, results: dict[Path, RowResult]) -> list[str]:
    """Why these row results must not become one campaign report; empty when they belong together."""
    problems: list[str] = []
    slice_sha = manifest.report.trace.slice_sha256 if manifest.report.trace else None
    frozen = {row.id: row for row in manifest.config.rows}
    seen_rows: dict[str, list[Path]] = {}
    for path, result in results.items():
        problems.extend(_origin_refusals(manifest, path, result))
        if result.trace_slice_sha256 != slice_sha:
            problems.append(f"{path}: trace slice SHA-256 {result.trace_slice_sha256} differs from the "
                            f"manifest's {slice_sha}")
        row_id = result.report.row.id
        if row_id not in manifest.rows:
            problems.append(f"{path}: row {row_id} is not one of this campaign's rows {manifest.rows}")
        elif result.report.row != frozen[row_id]:
            problems.append(f"{path}: row {row_id} ran a configuration other than the manifest's frozen one")
        seen_rows.setdefault(row_id, []).append(path)
    problems.extend(
        f"row {row_id} has {len(paths)} results ({', '.join(map(str, paths))}): "
        "a row is never pooled across nodes"
        for row_id, paths in seen_rows.items() if len(paths) > 1
    )
    return problems


def fixtures_refusals(manifest: BuildManifest, results: dict[Path, FixturesResult]) -> list[str]:
    """Why these fixtures results must not join the report: each names the file and the field."""
    problems: list[str] = []
    if results and not manifest.fixtures:
        problems.append(f"{', '.join(map(str, results))}: this campaign runs no Stage 6 fixtures")
        return problems
    if len(results) > 1:
        problems.append(f"the Stage 6 fixtures have {len(results)} results ({', '.join(map(str, results))}): "
                        "one job runs them all")
    planned = [item.id for item in manifest.fixtures]
    traces = {item.id: item.trace_sha256 for item in manifest.fixtures if item.trace_sha256 is not None}
    frozen = {fixture.id: fixture for fixture in manifest.config.fixtures}
    for path, result in results.items():
        problems.extend(_origin_refusals(manifest, path, result))
        ran = [fixture.id for fixture in result.fixtures]
        if ran != planned:
            problems.append(f"{path}: fixture ids {ran} differ from the manifest's {planned}")
        if result.fixture_trace_sha256 != traces:
            problems.append(f"{path}: fixture_trace_sha256 {result.fixture_trace_sha256} differs from the "
                            f"manifest's {traces}")
        for fixture in result.fixtures:
            config = frozen.get(fixture.id)
            if config is None:
                continue
            declared = {"kind": config.kind, "args": list(config.args), "trace": config.trace.describe(),
                        "trace_sha256": config.trace.sha256}
            problems.extend(
                f"{path}: fixture {fixture.id}: {name} is {getattr(fixture, name)!r}, the manifest's frozen "
                f"config says {value!r}"
                for name, value in declared.items() if getattr(fixture, name) != value
            )
            if fixture.exceptions != manifest.exceptions:
                problems.append(f"{path}: fixture {fixture.id}: exceptions are not the ones the manifest verified")
    return problems


def _merged_fixtures(manifest: BuildManifest, results: dict[Path, FixturesResult]) -> list[FixtureReport]:
    """The fixtures in config order; without a result each is STOPPED naming the missing job (never PASS)."""
    if not manifest.fixtures or manifest.report.stopped is not None:
        return []
    if results:
        [result] = results.values()
        return list(result.fixtures)
    reason = (f"no result from the {FIXTURES_ROW} job: it failed, was refused or was cancelled before writing "
              "one (the runner logs say why), so this fixture was not checked")
    return [FixtureReport(id=f.id, kind=f.kind, args=list(f.args), trace=f.trace.describe(),
                          trace_sha256=f.trace.sha256, status=FixtureStatus.STOPPED, reason=reason)
            for f in manifest.config.fixtures]


def merge_results(manifest: BuildManifest, results: dict[Path, RowResult],
                  fixtures: dict[Path, FixturesResult] | None = None) -> CampaignReport:
    """The campaign report: the manifest's prepare evidence, rows and fixtures in config order, verdicts
    recomputed and verified (`accept_merged_report`). A fixtures result that is missing leaves every fixture
    STOPPED, so semantic parity cannot PASS."""
    fixtures = fixtures or {}
    problems = merge_refusals(manifest, results) + fixtures_refusals(manifest, fixtures)
    if problems:
        raise Refusal("refusing to merge:\n  " + "\n  ".join(problems))
    by_row = {result.report.row.id: result.report for result in results.values()}
    report = manifest.report.model_copy(deep=True)
    report.rows = [by_row[row_id] for row_id in manifest.rows if row_id in by_row]
    missing = [row_id for row_id in manifest.rows if row_id not in by_row]
    if missing and report.stopped is None:
        report.stopped = StopRecord(
            stage="rows", blocking=True,
            reason=f"no row result for {', '.join(missing)}: the row job failed, was refused or was "
                   "cancelled before writing one; the runner logs say why",
        )
    report.fixtures = _merged_fixtures(manifest, fixtures)
    report.skipped.extend(unsupported_fixture_lines(report.fixtures))
    if report.fixtures and not fixtures:
        report.skipped.append(f"Stage 6 fixtures without a result: {', '.join(f.id for f in report.fixtures)}")
    try:
        return accept_merged_report(report)
    except UnverifiedReport as exc:
        raise Refusal(f"refusing to merge: {exc}") from exc


def find_results(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """Row result files and fixtures result files, given directly or found under directories (one downloaded
    artifact per job); a file given directly is a fixtures result only by its suffix."""
    rows: list[Path] = []
    fixtures: list[Path] = []
    for path in paths:
        if path.is_dir():
            rows.extend(sorted(path.rglob(f"*{ROW_SUFFIX}")))
            fixtures.extend(sorted(path.rglob(f"*{FIXTURES_SUFFIX}")))
        elif path.is_file():
            (fixtures if path.name.endswith(FIXTURES_SUFFIX) else rows).append(path)
        else:
            print(f"kv-parity merge: {path} does not exist; no results from it", file=sys.stderr)
    return rows, fixtures


def copy_row_evidence(result_path: Path, out: Path) -> None:
    """A row's kept evidence (mismatch reports, persisted schedule) lands beside the merged report."""
    source = result_path.parent
    if source.resolve() == out.resolve():
        return
    for entry in source.iterdir():
        if entry.name.endswith((ROW_SUFFIX, FIXTURES_SUFFIX)):
            continue
        if entry.is_dir():
            shutil.copytree(entry, out / entry.name, dirs_exist_ok=True)
        else:
            shutil.copy2(entry, out / entry.name)
