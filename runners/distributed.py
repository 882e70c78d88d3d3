"""The campaign split across nodes: `build` once, `row` once per node, `merge` the rows into one report.

The protocol makes one comparison row the unit of node placement: every row runs on one node from the same
two prebuilt binaries and the same trace slice, and no row's evidence is ever pooled across nodes. This
module only carries the single-machine campaign's own pieces (`prepare`, `run_row`) across file boundaries:
the build manifest holds what `prepare` established, a row result holds one `RowReport` plus the checksums
its node verified, and merge refuses anything that could mix evidence from other campaigns or binaries.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from runners import __version__
from runners.build import store_binary
from runners.campaign import (
    CampaignRequest,
    CampaignStop,
    Prepared,
    new_report,
    prepare,
    run_row,
    selected_rows,
)
from runners.config import (
    DEFAULT_CONFIG_PATH,
    CampaignConfig,
    ConfigError,
    RowConfig,
    resolve_config,
)
from runners.placement import host_facts
from runners.progress import ProgressSink
from runners.report import (
    ARMS,
    REPORT_SCHEMA_VERSION,
    Arm,
    CampaignReport,
    ExceptionOutcome,
    HostFacts,
    RowReport,
    StopRecord,
    campaign_verdicts,
    gated_build_differences,
)
from runners.revisions import RevisionError
from runners.sandbox import BinaryMismatch, Sandbox, SandboxUnavailable, add_sandbox_argument
from runners.sandbox import check as check_sandbox
from runners.terminal import PlainProgress
from runners.trace import TraceError, prepare_trace, sha256_file

SCHEMA_VERSION = "kv-parity.distributed.v1"
MANIFEST_NAME = "manifest.json"
MATRIX_NAME = "matrix.json"
BINARY_DIR = "bin"
ROW_SUFFIX = ".row.json"
REPORT_NAME = "report.json"

EXIT_OK = 0
EXIT_REFUSED = 1
"""Evidence that must not be used: a checksum mismatch, or row results that do not belong together."""
EXIT_USAGE = 2


class DistributedError(RuntimeError):
    """Input a distributed step cannot use: an unreadable file, a stopped build, an unknown row."""


class Refusal(DistributedError):
    """Evidence that must not be used: the message names the file or arm and both conflicting values."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BuildManifest(_Model):
    """Everything `prepare` established on the builder, so every row node reuses it instead of redoing it.

    `report` is the campaign report as it stands after prepare (revisions, relationship, merge base,
    toolchain, artifacts with their SHA-256, trace evidence, exception records, sizes, skipped coverage,
    config and its source, determinism patch checksum, or the stop record), with no rows and no verdicts yet.
    """

    schema_version: str = SCHEMA_VERSION
    report_schema_version: str = REPORT_SCHEMA_VERSION
    campaign_id: str
    rows: list[str]
    """The selected row ids, in config order: one row job each."""
    report: CampaignReport
    exceptions: list[ExceptionOutcome]
    """Exception records as verified on the builder (their regression tests ran against both binaries)."""

    @model_validator(mode="after")
    def _consistent(self) -> BuildManifest:
        if self.report.campaign_id != self.campaign_id:
            raise ValueError(f"campaign_id {self.campaign_id} differs from the report's "
                             f"{self.report.campaign_id}")
        if self.report.rows or self.report.verdicts is not None:
            raise ValueError("a build manifest carries no rows and no verdicts: row jobs and merge add them")
        return self

    @property
    def config(self) -> CampaignConfig:
        return self.report.config

    def binary_sha256(self) -> dict[Arm, str]:
        return {artifact.arm: artifact.binary_sha256 for artifact in self.report.artifacts}


class RowResult(_Model):
    """One row as run on one node, with the checksums that node verified before its first process."""

    schema_version: str = SCHEMA_VERSION
    report_schema_version: str = REPORT_SCHEMA_VERSION
    campaign_id: str
    binary_sha256: dict[Arm, str]
    """SHA-256 of the staged binaries each arm actually ran."""
    trace_slice_sha256: str
    node: HostFacts
    """The node's characteristics when the row started (the row report's CPU sets say where it ran)."""
    started_unix: float
    ended_unix: float
    report: RowReport


# --- pure helpers -------------------------------------------------------------------------------------------


def _rows_arg(value: str | None) -> list[str] | None:
    return [name.strip() for name in value.split(",") if name.strip()] if value else None


def row_matrix(manifest: BuildManifest) -> dict[str, list[dict[str, object]]]:
    """The Actions matrix: one entry per selected row, on that row's runner labels; none after a stop."""
    if manifest.report.stopped is not None:
        return {"include": []}
    by_id = {row.id: row for row in manifest.config.rows}
    return {"include": [{"row": row_id, "runs_on": list(by_id[row_id].runner_labels)}
                        for row_id in manifest.rows]}


def checksum_mismatches(expected: dict[Arm, str], seen: dict[Arm, str]) -> list[str]:
    """One line per arm whose binary is not the one the build recorded (a missing arm counts)."""
    return [
        f"{arm} binary SHA-256 mismatch: manifest {expected.get(arm, '(none)')}, "
        f"staged copy {seen.get(arm, '(none)')}"
        for arm in ARMS
        if expected.get(arm) is None or expected.get(arm) != seen.get(arm)
    ]


def merge_refusals(manifest: BuildManifest, results: dict[Path, RowResult]) -> list[str]:
    """Why these row results must not become one campaign report; empty when they belong together."""
    problems: list[str] = []
    expected = manifest.binary_sha256()
    slice_sha = manifest.report.trace.slice_sha256 if manifest.report.trace else None
    frozen = {row.id: row for row in manifest.config.rows}
    seen_rows: dict[str, list[Path]] = {}
    for path, result in results.items():
        versions = (result.schema_version, result.report_schema_version)
        if versions != (manifest.schema_version, manifest.report_schema_version):
            problems.append(f"mixed schema versions: {path} has {'/'.join(versions)}, the manifest has "
                            f"{manifest.schema_version}/{manifest.report_schema_version}")
        if result.campaign_id != manifest.campaign_id:
            problems.append(f"mixed campaign ids: {path} belongs to campaign {result.campaign_id}, "
                            f"the manifest to {manifest.campaign_id}")
        problems.extend(f"{path}: {line}" for line in checksum_mismatches(expected, result.binary_sha256))
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


def merge_results(manifest: BuildManifest, results: dict[Path, RowResult]) -> CampaignReport:
    """The campaign report: the manifest's prepare evidence, rows in config order, verdicts recomputed."""
    problems = merge_refusals(manifest, results)
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
    if report.config.fixtures and not report.fixtures:
        report.skipped.append(
            f"Stage 6 fixtures ({', '.join(f.id for f in report.config.fixtures)}): not run on the Actions path "
            "yet; the single-machine campaign and the local backend run them"
        )
    report.verdicts = campaign_verdicts(report)
    return report


# --- config -------------------------------------------------------------------------------------------------


# --- files --------------------------------------------------------------------------------------------------


def _write_json(path: Path, text: str) -> None:
    """Write-then-rename, so a reader never sees half a manifest or row result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text + "\n", encoding="utf-8")
    temporary.replace(path)


def _scratch(parent: str | None, prefix: str) -> Path:
    """A fresh directory of our own (under `parent` when given), so cleaning up never deletes a user's files."""
    if parent:
        Path(parent).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def _versions_of(path: Path, raw: object) -> tuple[object, object]:
    if not isinstance(raw, dict):
        raise DistributedError(f"{path}: not a JSON object")
    return raw.get("schema_version"), raw.get("report_schema_version")


def _read(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DistributedError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise DistributedError(f"{path}: not JSON: {exc}") from exc


def load_manifest(path: Path) -> BuildManifest:
    raw = _read(path)
    versions = _versions_of(path, raw)
    if versions != (SCHEMA_VERSION, REPORT_SCHEMA_VERSION):
        raise DistributedError(f"{path}: manifest schema versions {versions} are not the "
                               f"({SCHEMA_VERSION!r}, {REPORT_SCHEMA_VERSION!r}) "
                               f"this kv-parity {__version__} reads")
    try:
        return BuildManifest.model_validate(raw)
    except ValidationError as exc:
        raise DistributedError(f"{path}: invalid build manifest: {exc}") from exc


def load_row_result(path: Path, manifest: BuildManifest) -> RowResult:
    """Schema versions are compared before validation, so a mixed version is named, not a parse error."""
    raw = _read(path)
    versions = _versions_of(path, raw)
    expected = (manifest.schema_version, manifest.report_schema_version)
    if versions != expected:
        raise Refusal(f"refusing to merge: mixed schema versions: {path} has {versions}, "
                      f"the manifest has {expected}")
    try:
        return RowResult.model_validate(raw)
    except ValidationError as exc:
        raise DistributedError(f"{path}: invalid row result: {exc}") from exc


def find_row_results(paths: Sequence[Path]) -> list[Path]:
    """Row result files given directly or found under directories (one downloaded artifact per row)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(path.rglob(f"*{ROW_SUFFIX}")))
        elif path.is_file():
            found.append(path)
        else:
            print(f"kv-parity merge: {path} does not exist; no row results from it", file=sys.stderr)
    return found


def _copy_row_evidence(result_path: Path, out: Path) -> None:
    """A row's kept evidence (mismatch reports, persisted schedule) lands beside the merged report."""
    source = result_path.parent
    if source.resolve() == out.resolve():
        return
    for entry in source.iterdir():
        if entry.name.endswith(ROW_SUFFIX):
            continue
        if entry.is_dir():
            shutil.copytree(entry, out / entry.name, dirs_exist_ok=True)
        else:
            shutil.copy2(entry, out / entry.name)


# --- build --------------------------------------------------------------------------------------------------


def build_manifest(request: CampaignRequest, work: Path, out: Path,
                   progress: ProgressSink | None = None) -> BuildManifest:
    """Run `prepare` once and move its two binaries into `out/bin`; a stop is recorded, never raised."""
    report = new_report(request)
    rows = selected_rows(request, report)
    exceptions: list[ExceptionOutcome] = []
    try:
        prepared = prepare(request, report, work, progress)
    except CampaignStop as stop:
        report.stopped = stop.record
    else:
        exceptions = prepared.exceptions
        (out / BINARY_DIR).mkdir(parents=True, exist_ok=True)
        for arm in ARMS:
            store_binary(prepared.binaries[arm], out / BINARY_DIR / prepared.binaries[arm].name)
    return BuildManifest(campaign_id=request.campaign_id, rows=[row.id for row in rows], report=report,
                         exceptions=exceptions)


def build_main(argv: Sequence[str]) -> int:
    """`kv-parity build`: both revisions once -> OUT/manifest.json, OUT/bin/*, OUT/matrix.json.

    Exits 0 whenever a manifest was written, a recorded stop included (merge turns it into the verdict).
    """
    if any(word == "--plan" or word.startswith("--plan=") for word in argv):
        from runners.split_build import arm_build_main

        return arm_build_main(argv)
    parser = argparse.ArgumentParser(prog="kv-parity build", description=build_main.__doc__,
                                     epilog="With --plan: `kv-parity build --plan DIR --arm ARM ...` builds one arm "
                                            "(see `kv-parity build --plan x --help`).")
    parser.add_argument("--repo", default=".", help="git repository holding both revisions (default: .)")
    parser.add_argument("--base", required=True, help="baseline revision (pinned to a SHA)")
    parser.add_argument("--head", required=True, help="candidate revision (pinned to a SHA)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", help="campaign config TOML file")
    source.add_argument("--profile", help="a shipped profile: dynamo or demo")
    source.add_argument("--config-ref", help=f"revision whose {DEFAULT_CONFIG_PATH} is used "
                        "(default: --base)")
    parser.add_argument("--rows", help="comma-separated row ids (default: every row)")
    parser.add_argument("--trace", help="trace path overriding the config's (its checksum is still verified)")
    parser.add_argument("--campaign-id", help="campaign id (default: random)")
    parser.add_argument("--determinism-patch", help="patch applied identically to both revisions")
    parser.add_argument("--out", required=True, help="directory for the manifest, binaries and matrix")
    parser.add_argument("--work", help="parent of the scratch directory for worktrees and builds")
    parser.add_argument("--keep-work", action="store_true", help="keep the scratch directory")
    parser.add_argument("--github-output", help="append `matrix=` and `row_count=` lines to this file")
    add_sandbox_argument(parser)
    args = parser.parse_args(list(argv))

    out = Path(args.out)
    try:
        sandbox = check_sandbox(args.sandbox)
    except SandboxUnavailable as exc:
        print(f"kv-parity build: {exc}", file=sys.stderr)
        return EXIT_USAGE
    work = _scratch(args.work, "kv-parity-build-")
    try:
        repo = Path(args.repo)
        config, config_source = resolve_config(repo, args.config, args.profile, args.config_ref or args.base)
        request = CampaignRequest(
            repo=repo, base=args.base, head=args.head, config=config, config_source=config_source,
            out_dir=out, rows=_rows_arg(args.rows), trace_path=Path(args.trace) if args.trace else None,
            determinism_patch=Path(args.determinism_patch) if args.determinism_patch else None,
            sandbox=sandbox, **({"campaign_id": args.campaign_id} if args.campaign_id else {}),
        )
        manifest = build_manifest(request, work, out, PlainProgress())
    except (ConfigError, RevisionError) as exc:
        print(f"kv-parity build: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    _write_json(out / MANIFEST_NAME, manifest.model_dump_json(indent=2))
    matrix = row_matrix(manifest)
    compact = json.dumps(matrix, separators=(",", ":"))
    _write_json(out / MATRIX_NAME, compact)
    if args.github_output:
        with Path(args.github_output).open("a", encoding="utf-8") as handle:
            handle.write(f"matrix={compact}\nrow_count={len(matrix['include'])}\n")
    stopped = manifest.report.stopped
    if stopped is not None:
        print(f"build stopped at {stopped.stage}: {stopped.reason}")
        print("no row will run; merge publishes the stop")
    else:
        print(f"campaign {manifest.campaign_id}: {out / MANIFEST_NAME}, rows {', '.join(manifest.rows)}")
    return EXIT_OK


# --- row ----------------------------------------------------------------------------------------------------


def runnable_row(manifest: BuildManifest, row_id: str) -> RowConfig:
    """The row's frozen configuration, when this manifest can run it at all."""
    stop = manifest.report.stopped
    if stop is not None:
        raise DistributedError(f"the build stopped at {stop.stage} ({stop.reason}); no row can run")
    if row_id not in manifest.rows:
        raise DistributedError(f"row {row_id!r} is not one of this campaign's rows {manifest.rows}")
    return next(row for row in manifest.config.rows if row.id == row_id)


def stage_inputs(manifest: BuildManifest, manifest_dir: Path, trace_source: Path,
                 work: Path) -> tuple[Prepared, dict[Arm, str], str]:
    """Copy both binaries and cut the trace slice onto node-local storage, and verify every checksum.

    The checksums are of the staged copies, the files that will actually run; nothing runs before all match.
    Returns what `run_row` needs, the binaries' SHA-256 and the slice's SHA-256.
    """
    staged: dict[Arm, Path] = {}
    seen: dict[Arm, str] = {}
    problems: list[str] = []
    for artifact in manifest.report.artifacts:
        source = manifest_dir / BINARY_DIR / artifact.binary_name
        target = work / BINARY_DIR / artifact.binary_name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(source, target)
        except OSError as exc:
            problems.append(f"{artifact.arm} binary {source} cannot be staged: {exc.strerror}")
            continue
        target.chmod(0o555)
        staged[artifact.arm] = target
        seen[artifact.arm] = sha256_file(target)
    problems.extend(checksum_mismatches(manifest.binary_sha256(), seen))
    if problems:
        raise Refusal("; ".join(problems))
    recorded = manifest.report.trace
    if recorded is None:
        raise Refusal("the manifest has no trace evidence, so the trace cannot be verified")
    trace = work / "trace-slice.jsonl"
    try:
        evidence = prepare_trace(trace_source, manifest.config.trace, trace)
    except TraceError as exc:
        raise Refusal(str(exc)) from exc
    trace.chmod(0o444)
    if evidence.slice_sha256 != recorded.slice_sha256:
        raise Refusal(f"{trace_source}: trace slice SHA-256 mismatch: build {recorded.slice_sha256}, "
                      f"this node {evidence.slice_sha256}")
    shas: dict[Arm, str] = {revision.arm: revision.sha for revision in manifest.report.revisions}
    prepared = Prepared(binaries=staged, shas=shas, trace=trace, exceptions=manifest.exceptions,
                        build_differences=gated_build_differences(manifest.report))
    return prepared, seen, evidence.slice_sha256


def run_manifest_row(manifest: BuildManifest, manifest_dir: Path, row_id: str, trace_source: Path,
                     work: Path, out: Path, progress: ProgressSink | None = None,
                     sandbox: Sandbox | None = None) -> RowResult:
    """Stage and verify, then run the single-machine campaign's own row: correctness, then performance.

    Every harness process re-hashes its binary against the manifest first (BinaryMismatch propagates)."""
    sandbox = sandbox or Sandbox.default()
    row = runnable_row(manifest, row_id)
    prepared, seen, slice_sha = stage_inputs(manifest, manifest_dir, trace_source, work)
    expected = manifest.binary_sha256()
    for arm, path in prepared.binaries.items():
        sandbox.pin(path, arm, expected[arm])
    node = host_facts()
    started = round(time.time(), 3)
    request = CampaignRequest(repo=manifest_dir, base=prepared.shas["baseline"],
                              head=prepared.shas["candidate"], config=manifest.config,
                              config_source=manifest.report.config_source, out_dir=out,
                              campaign_id=manifest.campaign_id, sandbox=sandbox)
    out.mkdir(parents=True, exist_ok=True)
    row_report = run_row(request, prepared, row, work, progress)
    return RowResult(campaign_id=manifest.campaign_id, binary_sha256=seen, trace_slice_sha256=slice_sha,
                     node=node, started_unix=started, ended_unix=round(time.time(), 3), report=row_report)


def row_main(argv: Sequence[str]) -> int:
    """`kv-parity row`: one row on this node -> OUT/<row>.row.json plus the row's kept evidence.

    Exits 0 when a row result was written (its verdicts are inside), 1 when a checksum refused the inputs
    before any process ran, 2 for a manifest or row that cannot be used.
    """
    parser = argparse.ArgumentParser(prog="kv-parity row", description=row_main.__doc__)
    parser.add_argument("--manifest", required=True, help="the build's manifest.json (binaries in its bin/)")
    parser.add_argument("--row", required=True, help="row id to run on this node")
    parser.add_argument("--out", required=True, help="directory for the row result and its evidence")
    parser.add_argument("--trace", help="node-local trace overriding the config's (checksum still verified)")
    parser.add_argument("--work", help="node-local parent of the staging directory")
    parser.add_argument("--keep-work", action="store_true", help="keep staged binaries, trace and outputs")
    add_sandbox_argument(parser)
    args = parser.parse_args(list(argv))

    manifest_path = Path(args.manifest)
    try:
        sandbox = check_sandbox(args.sandbox)
        manifest = load_manifest(manifest_path)
        runnable_row(manifest, args.row)
    except (DistributedError, SandboxUnavailable) as exc:
        print(f"kv-parity row: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out)
    trace_source = Path(args.trace) if args.trace else Path(manifest.config.trace.path)
    work = _scratch(args.work, "kv-parity-row-")
    try:
        result = run_manifest_row(manifest, manifest_path.parent, args.row, trace_source, work, out,
                                  PlainProgress(), sandbox)
    except Refusal as exc:
        print(f"kv-parity row: refusing to run row {args.row}: {exc}; no harness process was started",
              file=sys.stderr)
        return EXIT_REFUSED
    except BinaryMismatch as exc:
        print(f"kv-parity row: stopped row {args.row}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    _write_json(out / f"{args.row}{ROW_SUFFIX}", result.model_dump_json(indent=2))
    print(f"row {args.row} on {result.node.hostname}: semantic {result.report.semantic.value}, "
          f"performance {result.report.perf_verdict.value}")
    return EXIT_OK


# --- merge --------------------------------------------------------------------------------------------------


def merge_main(argv: Sequence[str]) -> int:
    """`kv-parity merge`: manifest + row results -> OUT/report.json with every verdict recomputed.

    Exits 0 when the report was written (its conclusion is inside), 1 when the inputs were refused as not
    belonging together, 2 for unreadable input.
    """
    parser = argparse.ArgumentParser(prog="kv-parity merge", description=merge_main.__doc__)
    parser.add_argument("--manifest", required=True, help="the build's manifest.json")
    parser.add_argument("--out", required=True, help="directory for report.json and the rows' evidence")
    parser.add_argument("results", nargs="*", type=Path,
                        help=f"row result files, or directories searched for *{ROW_SUFFIX}")
    args = parser.parse_args(list(argv))

    out = Path(args.out)
    try:
        manifest = load_manifest(Path(args.manifest))
        paths = find_row_results(args.results)
        results = {path: load_row_result(path, manifest) for path in paths}
        report = merge_results(manifest, results)
    except Refusal as exc:
        print(f"kv-parity merge: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except DistributedError as exc:
        print(f"kv-parity merge: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out.mkdir(parents=True, exist_ok=True)
    for path in results:
        _copy_row_evidence(path, out)
    _write_json(out / REPORT_NAME, report.model_dump_json(indent=2))
    assert report.verdicts is not None
    print(report.verdicts.summary)
    print(f"report: {out / REPORT_NAME}")
    return EXIT_OK
