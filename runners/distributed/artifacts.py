"""The files the distributed jobs pass each other: the build manifest, row and fixtures results, the matrix.

The manifest holds what `prepare` established, a row result one `RowReport` plus the checksums its node
verified, a fixtures result every Stage 6 fixture; each is read back with its schema versions checked first.
Fixture traces enter here too: made on a trusted job, carried with their SHA-256.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import ClassVar, TypeVar

from pydantic import Field, ValidationError, model_validator

from runners import __version__
from runners.pipeline.distributed.common import (
    FIXTURE_DIR,
    FIXTURES_ROW,
    MATRIX_NAME,
    SCHEMA_VERSION,
    DistributedError,
    Refusal,
    StrictModel,
    read_json,
    versions_of,
    write_json,
)
from runners.schema.config import CampaignConfig, ConfigError
from runners.schema.report import (
    ARMS,
    REPORT_SCHEMA_VERSION,
    Arm,
    CampaignReport,
    ExceptionOutcome,
    FixtureReport,
    HostFacts,
    RowReport,
)
from runners.stages.lifecycles import FixtureTraceError, fixture_trace
from runners.stages.revisions import RevisionError
from runners.stages.trace import sha256_file


class FixtureInput(StrictModel):
    """One Stage 6 fixture's trace as a trusted job produced it (generator, or the file at the config ref),
    already checked against the config's SHA-256; `problem` says why it could not be, and the fixture stops."""

    id: str
    trace_file: str | None = None
    """Relative to the plan or dist directory: fixtures/<id>.trace.jsonl."""
    trace_sha256: str | None = None
    problem: str | None = None


class BuildManifest(StrictModel):
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


class NodeResult(StrictModel):
    """What every job on a node returns: the campaign, the binaries it verified before its first process, the node
    and when it ran; merge checks these fields the same way for a row and for the fixtures."""

    kind: ClassVar[str]
    """How the file is named in a refusal (`row result`, `fixtures result`)."""
    schema_version: str = SCHEMA_VERSION
    report_schema_version: str = REPORT_SCHEMA_VERSION
    campaign_id: str
    binary_sha256: dict[Arm, str]
    """SHA-256 of the staged binaries each arm actually ran."""
    node: HostFacts
    """The node's characteristics when the job started (a row report's CPU sets say where it ran)."""
    started_unix: float
    ended_unix: float


class RowResult(NodeResult):
    """One row as run on one node."""

    kind: ClassVar[str] = "row result"
    trace_slice_sha256: str
    report: RowReport


class FixturesResult(NodeResult):
    """Every Stage 6 fixture as run on one node; merge also checks its fixture ids and traces against the
    manifest."""

    kind: ClassVar[str] = "fixtures result"
    fixture_trace_sha256: dict[str, str]
    """SHA-256 of each staged fixture trace (fixtures whose trace could not be produced have none)."""
    fixtures: list[FixtureReport]


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


def write_matrix(out: Path, matrix: dict[str, list[dict[str, object]]], github_output: str | None) -> None:
    """OUT/matrix.json and, for Actions, `matrix=` / `row_count=` lines appended to $GITHUB_OUTPUT."""
    compact = json.dumps(matrix, separators=(",", ":"))
    write_json(out / MATRIX_NAME, compact)
    if github_output:
        with Path(github_output).open("a", encoding="utf-8") as handle:
            handle.write(f"matrix={compact}\nrow_count={len(matrix['include'])}\n")


def checksum_mismatches(expected: dict[Arm, str], seen: dict[Arm, str]) -> list[str]:
    """One line per arm whose binary is not the one the build recorded (a missing arm counts)."""
    return [
        f"{arm} binary SHA-256 mismatch: manifest {expected.get(arm, '(none)')}, "
        f"staged copy {seen.get(arm, '(none)')}"
        for arm in ARMS
        if expected.get(arm) is None or expected.get(arm) != seen.get(arm)
    ]


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


def load_manifest(path: Path) -> BuildManifest:
    """The build manifest, refused by schema versions before validation (another kv-parity wrote it)."""
    raw = read_json(path)
    versions = versions_of(path, raw)
    if versions != (SCHEMA_VERSION, REPORT_SCHEMA_VERSION):
        raise DistributedError(f"{path}: manifest schema versions {versions} are not the "
                               f"({SCHEMA_VERSION!r}, {REPORT_SCHEMA_VERSION!r}) "
                               f"this kv-parity {__version__} reads")
    try:
        return BuildManifest.model_validate(raw)
    except ValidationError as exc:
        raise DistributedError(f"{path}: invalid build manifest: {exc}") from exc


NodeResultT = TypeVar("NodeResultT", RowResult, FixturesResult)


def load_result(path: Path, manifest: BuildManifest, kind: type[NodeResultT]) -> NodeResultT:
    """A row or fixtures result; schema versions are compared before validation, so a mixed version is named,
    not a parse error."""
    raw = read_json(path)
    versions = versions_of(path, raw)
    expected = (manifest.schema_version, manifest.report_schema_version)
    if versions != expected:
        raise Refusal(f"refusing to merge: mixed schema versions: {path} has {versions}, "
                      f"the manifest has {expected}")
    try:
        return kind.model_validate(raw)
    except ValidationError as exc:
        raise DistributedError(f"{path}: invalid {kind.kind}: {exc}") from exc
