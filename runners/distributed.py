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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from runners import __version__
from runners.build import store_binary
from runners.campaign import (
    CampaignRequest,
    CampaignStop,
    Prepared,
    fixtures_not_run,
    new_report,
    prepare,
    run_fixture_set,
    run_row,
    selected_rows,
    unsupported_fixture_lines,
)
from runners.config import (
    DEFAULT_CONFIG_PATH,
    CampaignConfig,
    ConfigError,
    LifecycleFixture,
    RowConfig,
    resolve_config,
)
from runners.harness import PreflightError, help_text
from runners.lifecycles import FixtureTraceError, fixture_trace
from runners.placement import host_facts
from runners.progress import ProgressSink
from runners.report import (
    ARMS,
    REPORT_SCHEMA_VERSION,
    Arm,
    CampaignReport,
    ExceptionOutcome,
    FixtureReport,
    FixtureStatus,
    HostFacts,
    RowReport,
    StopRecord,
)
from runners.revisions import RevisionError
from runners.sandbox import BinaryMismatch, Sandbox, SandboxUnavailable, add_sandbox_argument
from runners.sandbox import check as check_sandbox
from runners.terminal import PlainProgress
from runners.trace import TraceError, prepare_trace, sha256_file
from runners.untrusted import UntrustedFileError, refuse_symlinks
from runners.verdicts import campaign_verdicts, gated_build_differences

SCHEMA_VERSION = "kv-parity.distributed.v1"
MANIFEST_NAME = "manifest.json"
MATRIX_NAME = "matrix.json"
BINARY_DIR = "bin"
ROW_SUFFIX = ".row.json"
REPORT_NAME = "report.json"
FIXTURES_ROW = "stage6-fixtures"
"""The matrix entry (and `kv-parity row --row`) that runs every Stage 6 fixture of a full campaign."""
FIXTURE_DIR = "fixtures"
FIXTURES_SUFFIX = ".fixtures.json"

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


class FixtureInput(_Model):
    """One Stage 6 fixture's trace as a trusted job produced it (generator, or the file at the config ref),
    already checked against the config's SHA-256; `problem` says why it could not be, and the fixture stops."""

    id: str
    trace_file: str | None = None
    """Relative to the plan or dist directory: fixtures/<id>.trace.jsonl."""
    trace_sha256: str | None = None
    problem: str | None = None


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
    fixtures: list[FixtureInput] = Field(default_factory=list)
    """Stage 6 fixtures the `stage6-fixtures` job runs (config order, traces in fixtures/); empty when the
    campaign runs none (the report's `skipped` says why)."""

    @model_validator(mode="after")
    def _consistent(self) -> BuildManifest:
        if self.report.campaign_id != self.campaign_id:
            raise ValueError(f"campaign_id {self.campaign_id} differs from the report's "
                             f"{self.report.campaign_id}")
        if self.report.rows or self.report.verdicts is not None or self.report.fixtures:
            raise ValueError("a build manifest carries no rows, fixtures or verdicts: row jobs and merge add them")
        configured = [fixture.id for fixture in self.report.config.fixtures]
        if self.fixtures and [fixture.id for fixture in self.fixtures] != configured:
            raise ValueError(f"fixtures {[f.id for f in self.fixtures]} are not the config's {configured}")
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


class FixturesResult(_Model):
    """Every Stage 6 fixture as run on one node, with the checksums that node verified before its first process;
    merge checks it like a row result (campaign id, binaries, fixture ids and traces against the manifest)."""

    schema_version: str = SCHEMA_VERSION
    report_schema_version: str = REPORT_SCHEMA_VERSION
    campaign_id: str
    binary_sha256: dict[Arm, str]
    fixture_trace_sha256: dict[str, str]
    """SHA-256 of each staged fixture trace (fixtures whose trace could not be produced have none)."""
    node: HostFacts
    started_unix: float
    ended_unix: float
    fixtures: list[FixtureReport]


# --- pure helpers -------------------------------------------------------------------------------------------


def _rows_arg(value: str | None) -> list[str] | None:
    return [name.strip() for name in value.split(",") if name.strip()] if value else None


def campaign_matrix(config: CampaignConfig, rows: list[str], fixtures: bool) -> dict[str, list[dict[str, object]]]:
    """The Actions matrix: one entry per selected row on that row's runner labels, plus `stage6-fixtures` on the
    first row's labels when the campaign runs fixtures (fixtures need correctness CPUs only, no quiet node)."""
    by_id = {row.id: row for row in config.rows}
    include: list[dict[str, object]] = [{"row": row_id, "runs_on": list(by_id[row_id].runner_labels)}
                                        for row_id in rows]
    if fixtures:
        include.append({"row": FIXTURES_ROW, "runs_on": list(by_id[rows[0]].runner_labels)})
    return {"include": include}


def row_matrix(manifest: BuildManifest) -> dict[str, list[dict[str, object]]]:
    """The manifest's matrix (`campaign_matrix`); none after a stop."""
    if manifest.report.stopped is not None:
        return {"include": []}
    return campaign_matrix(manifest.config, manifest.rows, bool(manifest.fixtures))


def materialise_fixture_traces(config: CampaignConfig, repo: Path, trusted_ref: str, out: Path) -> list[FixtureInput]:
    """Each fixture's trace, made on a trusted job (generator, or the file at the trusted ref) and checked against
    the config's SHA-256, into out/fixtures/; no file a pull request controls decides a fixture's input. A trace
    that cannot be produced is recorded as the fixture's problem (it stops, as on the single-machine path)."""
    if FIXTURES_ROW in {row.id for row in config.rows}:
        raise ConfigError(f"row id {FIXTURES_ROW!r} is reserved for the Stage 6 fixtures job; rename the row")
    inputs: list[FixtureInput] = []
    for fixture in config.fixtures:
        target = out / FIXTURE_DIR / f"{fixture.id}.trace.jsonl"
        try:
            path = fixture_trace(fixture, repo, trusted_ref, out / FIXTURE_DIR)
        except (FixtureTraceError, RevisionError, OSError) as exc:
            target.unlink(missing_ok=True)
            problem = str(exc) if isinstance(exc, FixtureTraceError) else \
                f"fixture {fixture.id}: trace {fixture.trace.describe()}: {exc}"
            inputs.append(FixtureInput(id=fixture.id, problem=problem))
            continue
        path.chmod(0o444)
        inputs.append(FixtureInput(id=fixture.id, trace_file=f"{FIXTURE_DIR}/{path.name}",
                                   trace_sha256=fixture.trace.sha256))
    return inputs


def copy_fixture_traces(inputs: list[FixtureInput], config: CampaignConfig, source: Path, out: Path) -> None:
    """Carry the plan's fixture traces into the dist directory, re-hashed: the copy must be the declared file."""
    declared = {fixture.id: fixture.trace.sha256 for fixture in config.fixtures}
    for item in inputs:
        if item.trace_file is None:
            continue
        target = out / item.trace_file
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(source / item.trace_file, target)
        except OSError as exc:
            raise Refusal(f"fixture {item.id}: trace {source / item.trace_file} cannot be copied: "
                          f"{exc.strerror}") from exc
        actual = sha256_file(target)
        if actual != item.trace_sha256 or actual != declared.get(item.id):
            target.unlink()
            raise Refusal(f"fixture {item.id}: trace SHA-256 mismatch: plan {item.trace_sha256}, config "
                          f"{declared.get(item.id)}, file {actual}")
        target.chmod(0o444)


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


def fixtures_refusals(manifest: BuildManifest, results: dict[Path, FixturesResult]) -> list[str]:
    """Why these fixtures results must not join the report: each names the file and the field."""
    problems: list[str] = []
    if results and not manifest.fixtures:
        problems.append(f"{', '.join(map(str, results))}: this campaign runs no Stage 6 fixtures")
        return problems
    if len(results) > 1:
        problems.append(f"the Stage 6 fixtures have {len(results)} results ({', '.join(map(str, results))}): "
                        "one job runs them all")
    expected = manifest.binary_sha256()
    planned = [item.id for item in manifest.fixtures]
    traces = {item.id: item.trace_sha256 for item in manifest.fixtures if item.trace_sha256 is not None}
    frozen = {fixture.id: fixture for fixture in manifest.config.fixtures}
    for path, result in results.items():
        versions = (result.schema_version, result.report_schema_version)
        if versions != (manifest.schema_version, manifest.report_schema_version):
            problems.append(f"mixed schema versions: {path} has {'/'.join(versions)}, the manifest has "
                            f"{manifest.schema_version}/{manifest.report_schema_version}")
        if result.campaign_id != manifest.campaign_id:
            problems.append(f"mixed campaign ids: {path} belongs to campaign {result.campaign_id}, "
                            f"the manifest to {manifest.campaign_id}")
        problems.extend(f"{path}: {line}" for line in checksum_mismatches(expected, result.binary_sha256))
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
    recomputed. A fixtures result that is missing leaves every fixture STOPPED, so semantic parity cannot PASS."""
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


def _refused_upload(directory: Path) -> bool:
    """True (the refusal printed, naming the links) when a directory that is uploaded or merged holds a link:
    upload-artifact and copytree follow links, so a planted one would carry whatever it points at."""
    try:
        refuse_symlinks(directory)
    except UntrustedFileError as exc:
        print(f"kv-parity: {exc}", file=sys.stderr)
        return True
    return False


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


def load_fixtures_result(path: Path, manifest: BuildManifest) -> FixturesResult:
    """Like a row result: schema versions first, so a mixed version is named, not a parse error."""
    raw = _read(path)
    versions = _versions_of(path, raw)
    expected = (manifest.schema_version, manifest.report_schema_version)
    if versions != expected:
        raise Refusal(f"refusing to merge: mixed schema versions: {path} has {versions}, "
                      f"the manifest has {expected}")
    try:
        return FixturesResult.model_validate(raw)
    except ValidationError as exc:
        raise DistributedError(f"{path}: invalid fixtures result: {exc}") from exc


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


def _copy_row_evidence(result_path: Path, out: Path) -> None:
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


# --- build --------------------------------------------------------------------------------------------------


def build_manifest(request: CampaignRequest, work: Path, out: Path,
                   progress: ProgressSink | None = None) -> BuildManifest:
    """Run `prepare` once and move its two binaries into `out/bin`; a stop is recorded, never raised."""
    report = new_report(request)
    rows = selected_rows(request, report)
    exceptions: list[ExceptionOutcome] = []
    fixtures: list[FixtureInput] = []
    try:
        prepared = prepare(request, report, work, progress)
    except CampaignStop as stop:
        report.stopped = stop.record
    else:
        exceptions = prepared.exceptions
        (out / BINARY_DIR).mkdir(parents=True, exist_ok=True)
        for arm in ARMS:
            store_binary(prepared.binaries[arm], out / BINARY_DIR / prepared.binaries[arm].name)
        skip = fixtures_not_run(request.config, request.profile_only, request.rows)
        if skip is None:
            fixtures = materialise_fixture_traces(request.config, request.repo,
                                                  request.config_ref or prepared.shas["baseline"], out)
        else:
            report.skipped.append(skip)
    return BuildManifest(campaign_id=request.campaign_id, rows=[row.id for row in rows], report=report,
                         exceptions=exceptions, fixtures=fixtures)


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
            sandbox=sandbox, config_ref=args.config_ref,
            **({"campaign_id": args.campaign_id} if args.campaign_id else {}),
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


def stage_binaries(manifest: BuildManifest, manifest_dir: Path, work: Path) -> tuple[dict[Arm, Path], dict[Arm, str]]:
    """Copy both binaries onto node-local storage and verify their checksums (of the copies, the files that will
    actually run); a mismatch is refused before anything runs."""
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
    return staged, seen


def stage_inputs(manifest: BuildManifest, manifest_dir: Path, trace_source: Path,
                 work: Path) -> tuple[Prepared, dict[Arm, str], str]:
    """Copy both binaries and cut the trace slice onto node-local storage, and verify every checksum.

    The checksums are of the staged copies, the files that will actually run; nothing runs before all match.
    Returns what `run_row` needs, the binaries' SHA-256 and the slice's SHA-256.
    """
    staged, seen = stage_binaries(manifest, manifest_dir, work)
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
                              campaign_id=manifest.campaign_id, sandbox=sandbox,
                              profile_only=manifest.report.mode == "profile")
    out.mkdir(parents=True, exist_ok=True)
    row_report = run_row(request, prepared, row, work, progress)
    return RowResult(campaign_id=manifest.campaign_id, binary_sha256=seen, trace_slice_sha256=slice_sha,
                     node=node, started_unix=started, ended_unix=round(time.time(), 3), report=row_report)


def stage_fixture_traces(manifest: BuildManifest, manifest_dir: Path, work: Path) -> dict[str, Path]:
    """Copy every fixture trace the manifest carries onto node-local storage and re-hash the copy against the
    manifest's digest; a mismatch is refused naming the fixture and both digests before any process runs."""
    staged: dict[str, Path] = {}
    problems: list[str] = []
    for item in manifest.fixtures:
        if item.trace_file is None:
            continue
        source, target = manifest_dir / item.trace_file, work / FIXTURE_DIR / Path(item.trace_file).name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(source, target)
        except OSError as exc:
            problems.append(f"fixture {item.id}: trace {source} cannot be staged: {exc.strerror}")
            continue
        target.chmod(0o444)
        actual = sha256_file(target)
        if actual != item.trace_sha256:
            problems.append(f"fixture {item.id}: trace SHA-256 mismatch: manifest {item.trace_sha256}, "
                            f"staged copy {actual}")
        staged[item.id] = target
    if problems:
        raise Refusal("; ".join(problems))
    return staged


def run_manifest_fixtures(manifest: BuildManifest, manifest_dir: Path, work: Path, out: Path,
                          progress: ProgressSink | None = None, sandbox: Sandbox | None = None) -> FixturesResult:
    """Stage and verify both binaries and every fixture trace, then run the single-machine campaign's own
    Stage 6 (`run_fixture_set`). Raises CampaignStop when a binary's re-hash fails before a process starts."""
    sandbox = sandbox or Sandbox.default()
    if manifest.report.stopped is not None:
        stop = manifest.report.stopped
        raise DistributedError(f"the build stopped at {stop.stage} ({stop.reason}); no fixture can run")
    if not manifest.fixtures:
        raise DistributedError("this campaign runs no Stage 6 fixtures (the manifest lists none)")
    binaries, seen = stage_binaries(manifest, manifest_dir, work)
    traces = stage_fixture_traces(manifest, manifest_dir, work)
    expected = manifest.binary_sha256()
    for arm, path in binaries.items():
        sandbox.pin(path, arm, expected[arm])
    problems = {item.id: item.problem for item in manifest.fixtures if item.problem is not None}

    def trace(fixture: LifecycleFixture) -> Path:
        if fixture.id in traces:
            return traces[fixture.id]
        raise FixtureTraceError(problems.get(fixture.id) or f"fixture {fixture.id}: no trace in the manifest")

    node = host_facts()
    started = round(time.time(), 3)
    try:
        help_texts = {arm: help_text(path, sandbox) for arm, path in binaries.items()}
    except PreflightError as exc:
        raise CampaignStop("fixtures", str(exc), blocking=False) from exc
    except BinaryMismatch as exc:
        raise CampaignStop("fixtures", str(exc), blocking=False) from exc
    out.mkdir(parents=True, exist_ok=True)
    reports = run_fixture_set(manifest.config, binaries=binaries, help_texts=help_texts,
                              exceptions=manifest.exceptions, trace=trace, work=work, evidence_dir=out / "evidence",
                              sandbox=sandbox, progress=progress)
    return FixturesResult(campaign_id=manifest.campaign_id, binary_sha256=seen,
                          fixture_trace_sha256={i: sha256_file(p) for i, p in traces.items()}, node=node,
                          started_unix=started, ended_unix=round(time.time(), 3), fixtures=reports)


def _fixtures_main(args: argparse.Namespace, manifest: BuildManifest, manifest_path: Path, sandbox: Sandbox) -> int:
    """`kv-parity row --row stage6-fixtures`: every fixture on this node -> OUT/stage6-fixtures.fixtures.json."""
    out = Path(args.out)
    work = _scratch(args.work, "kv-parity-fixtures-")
    try:
        result = run_manifest_fixtures(manifest, manifest_path.parent, work, out, PlainProgress(), sandbox)
    except Refusal as exc:
        print(f"kv-parity row: refusing to run the Stage 6 fixtures: {exc}; no harness process was started",
              file=sys.stderr)
        return EXIT_REFUSED
    except CampaignStop as stop:
        print(f"kv-parity row: stopped the Stage 6 fixtures: {stop.record.reason}", file=sys.stderr)
        return EXIT_REFUSED
    except DistributedError as exc:
        print(f"kv-parity row: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    if _refused_upload(out):
        return EXIT_REFUSED
    _write_json(out / f"{FIXTURES_ROW}{FIXTURES_SUFFIX}", result.model_dump_json(indent=2))
    print(f"Stage 6 fixtures on {result.node.hostname}: "
          + ", ".join(f"{f.id} {f.status.value}" for f in result.fixtures))
    return EXIT_OK


def row_main(argv: Sequence[str]) -> int:
    """`kv-parity row`: one row on this node -> OUT/<row>.row.json plus the row's kept evidence.

    Exits 0 when a row result was written (its verdicts are inside), 1 when a checksum refused the inputs
    before any process ran, 2 for a manifest or row that cannot be used.
    """
    parser = argparse.ArgumentParser(prog="kv-parity row", description=row_main.__doc__)
    parser.add_argument("--manifest", required=True, help="the build's manifest.json (binaries in its bin/)")
    parser.add_argument("--row", required=True,
                        help=f"row id to run on this node, or {FIXTURES_ROW} for every Stage 6 fixture")
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
        if args.row != FIXTURES_ROW:
            runnable_row(manifest, args.row)
    except (DistributedError, SandboxUnavailable) as exc:
        print(f"kv-parity row: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.row == FIXTURES_ROW:
        return _fixtures_main(args, manifest, manifest_path, sandbox)
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
    if _refused_upload(out):
        return EXIT_REFUSED
    _write_json(out / f"{args.row}{ROW_SUFFIX}", result.model_dump_json(indent=2))
    doctor = result.report.doctor
    print(f"row {args.row} on {result.node.hostname}: semantic {result.report.semantic.value}, "
          f"performance {result.report.perf_verdict.value}"
          + (f"; node doctor {doctor.summary}" if doctor is not None else ""))
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
                        help=f"row and fixtures result files, or directories searched for *{ROW_SUFFIX} and "
                             f"*{FIXTURES_SUFFIX}")
    args = parser.parse_args(list(argv))

    out = Path(args.out)
    if any(_refused_upload(given) for given in args.results):
        return EXIT_REFUSED
    try:
        manifest = load_manifest(Path(args.manifest))
        row_paths, fixture_paths = find_results(args.results)
        results = {path: load_row_result(path, manifest) for path in row_paths}
        fixtures = {path: load_fixtures_result(path, manifest) for path in fixture_paths}
        report = merge_results(manifest, results, fixtures)
    except Refusal as exc:
        print(f"kv-parity merge: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except DistributedError as exc:
        print(f"kv-parity merge: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out.mkdir(parents=True, exist_ok=True)
    for path in [*results, *fixtures]:
        _copy_row_evidence(path, out)
    if _refused_upload(out):
        return EXIT_REFUSED
    _write_json(out / REPORT_NAME, report.model_dump_json(indent=2))
    assert report.verdicts is not None
    print(report.verdicts.summary)
    print(f"report: {out / REPORT_NAME}")
    return EXIT_OK
