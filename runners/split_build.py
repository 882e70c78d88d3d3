"""The Actions path split by trust: `plan` and `manifest` run no pull-request code, each arm builds alone.

- `kv-parity plan` (trusted): reads the config at --config-ref with `git show` (never the head), pins both
  SHAs and their relationship, writes PLAN/plan.json and, with --github-output, the row matrix.
- `kv-parity build --plan PLAN --arm ARM` builds ONE revision in the sandbox (the baseline's job never sees
  the head's code) and writes ARM_DIR/<binary> plus ARM_DIR/build.json. The candidate's exception records are
  verified there when the baseline build is given (`--baseline`), each regression test sandboxed.
- `kv-parity manifest` (trusted): re-hashes both uploaded binaries itself, refuses a build.json that disagrees
  with the plan or with the file it describes (naming the field), and writes DIST/manifest.json + DIST/bin/.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runners import build_info
from runners.build import BuildError, ProtocolMismatch, build_artifact, store_binary, toolchain
from runners.campaign import STANDING_SKIPS, fixtures_not_run
from runners.config import DEFAULT_CONFIG_PATH, PROFILES_DIR, CampaignConfig, ConfigError, parse_config
from runners.distributed import (
    BINARY_DIR,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    MANIFEST_NAME,
    MATRIX_NAME,
    BuildManifest,
    DistributedError,
    FixtureInput,
    Refusal,
    _read,
    _rows_arg,
    _scratch,
    _write_json,
    campaign_matrix,
    copy_fixture_traces,
    materialise_fixture_traces,
    row_matrix,
)
from runners.exceptions import ExceptionFileError, load_records, verify_records
from runners.harness import PreflightError, preflight_flags
from runners.report import (
    ARMS,
    Arm,
    Artifact,
    CampaignReport,
    ExceptionOutcome,
    ExceptionRecord,
    Revision,
    SandboxRecord,
    StopRecord,
    Toolchain,
)
from runners.revisions import RevisionError, apply_patch, relationship, resolve_sha, show_file, worktree, worktree_head
from runners.sandbox import BinaryMismatch, Sandbox, SandboxUnavailable, add_sandbox_argument, sha256_of
from runners.sandbox import check as check_sandbox
from runners.sizes import ElfError, size_gate
from runners.symbols import attribute_sizes
from runners.trace import TraceError, prepare_trace
from runners.verdicts import gated_build_differences

PLAN_SCHEMA = "kv-parity.plan.v1"
ARM_BUILD_SCHEMA = "kv-parity.arm-build.v1"
PLAN_NAME = "plan.json"
ARM_BUILD_NAME = "build.json"
Mode = Literal["campaign", "profile"]
MODES: tuple[str, ...] = get_args(Mode)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Plan(_Model):
    """What the campaign will compare, fixed before any pull-request code runs."""

    schema_version: str = PLAN_SCHEMA
    campaign_id: str
    base_sha: str
    head_sha: str
    config_ref: str
    config_source: str
    config_text: str
    config_sha256: str
    config: CampaignConfig
    rows: list[str]
    unselected_rows: list[str]
    relationship: str
    merge_base: str | None
    mode: Mode = "campaign"
    """`profile` (`/parity profile`): rows check correctness and are profiled; no performance gate, no fixtures."""
    fixtures: list[FixtureInput] = Field(default_factory=list)
    """Stage 6 fixtures this campaign runs, their traces made here in PLAN/fixtures/ (none when not run)."""
    fixtures_not_run: str | None = None
    """Why the campaign runs no Stage 6 fixtures (the single-machine rule: full campaigns only)."""

    def sha(self, arm: Arm) -> str:
        return self.base_sha if arm == "baseline" else self.head_sha


class ArmBuild(_Model):
    """One arm's build as its own job recorded it; `manifest` checks every field against the plan and file."""

    schema_version: str = ARM_BUILD_SCHEMA
    campaign_id: str
    plan_sha256: str
    """SHA-256 of the plan.json bytes this build followed."""
    arm: Arm
    sha: str
    artifact: Artifact | None
    toolchain: Toolchain | None
    determinism_patch_sha256: str | None
    preflight_problems: list[str]
    harness_patch_sha256: str | None = None
    exception_records: list[ExceptionRecord]
    exceptions: list[ExceptionOutcome]
    stopped: StopRecord | None
    sandbox: SandboxRecord


# --- plan ---------------------------------------------------------------------------------------------------


def make_plan(repo: Path, config_ref: str, base: str, head: str, rows: list[str] | None, campaign_id: str,
              profile: str | None = None, mode: Mode = "campaign", out: Path | None = None) -> Plan:
    """Pin the revisions and read the config from the trusted ref (or a shipped profile); runs no PR code.
    With `out`, a full campaign's fixture traces are made there (generator, or the file at the config ref)."""
    ref_sha = resolve_sha(repo, config_ref)
    if profile is not None:
        path = PROFILES_DIR / f"{profile}.toml"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"no shipped profile {profile!r}") from exc
        source = f"profile:{profile}"
    else:
        try:
            text = show_file(repo, ref_sha, DEFAULT_CONFIG_PATH).decode("utf-8")
        except (RevisionError, UnicodeDecodeError) as exc:
            raise ConfigError(f"no readable campaign config at {DEFAULT_CONFIG_PATH} in {ref_sha[:12]}: {exc}") \
                from exc
        source = f"{DEFAULT_CONFIG_PATH}@{ref_sha}"
    config = parse_config(text, source)
    selected = config.select_rows(rows)
    base_sha, head_sha = resolve_sha(repo, base), resolve_sha(repo, head)
    related, merge_base = relationship(repo, base_sha, head_sha)
    skip = fixtures_not_run(config, mode == "profile", rows)
    fixtures = materialise_fixture_traces(config, repo, ref_sha, out) if skip is None and out is not None else []
    return Plan(campaign_id=campaign_id, base_sha=base_sha, head_sha=head_sha, config_ref=ref_sha,
                config_source=source, config_text=text, config_sha256=hashlib.sha256(text.encode()).hexdigest(),
                config=config, rows=[row.id for row in selected],
                unselected_rows=[row.id for row in config.rows if row not in selected],
                relationship=related, merge_base=merge_base, mode=mode, fixtures=fixtures, fixtures_not_run=skip)


def plan_main(argv: Sequence[str]) -> int:
    """`kv-parity plan`: PLAN/plan.json (+ `matrix=` / `row_count=` for $GITHUB_OUTPUT); runs no PR code."""
    parser = argparse.ArgumentParser(prog="kv-parity plan", description=plan_main.__doc__)
    parser.add_argument("--repo", default=".", help="git repository holding both revisions (default: .)")
    parser.add_argument("--config-ref", required=True, help=f"trusted revision whose {DEFAULT_CONFIG_PATH} is used")
    parser.add_argument("--profile", help="a shipped profile instead of the committed config (demo, tests)")
    parser.add_argument("--base", required=True, help="baseline SHA")
    parser.add_argument("--head", required=True, help="candidate SHA")
    parser.add_argument("--rows", help="comma-separated row ids (default: every row)")
    parser.add_argument("--campaign-id", required=True)
    parser.add_argument("--out", required=True, help="plan directory")
    parser.add_argument("--github-output", help="append `matrix=` and `row_count=` lines to this file")
    parser.add_argument("--mode", default="campaign",
                        help=f"{' or '.join(MODES)} (the workflow's `mode` input; profile: correctness and "
                             "attribution per row, no performance gate)")
    args = parser.parse_args(list(argv))
    if args.mode not in MODES:
        print(f"kv-parity plan: mode {args.mode!r} is not one of {', '.join(MODES)}: dispatch the workflow with "
              "mode=campaign (the default) or mode=profile", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out)
    try:
        plan = make_plan(Path(args.repo), args.config_ref, args.base, args.head, _rows_arg(args.rows),
                         args.campaign_id, args.profile, args.mode, out)
    except (ConfigError, RevisionError) as exc:
        print(f"kv-parity plan: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _write_json(out / PLAN_NAME, plan.model_dump_json(indent=2))
    matrix = campaign_matrix(plan.config, plan.rows, bool(plan.fixtures))
    compact = json.dumps(matrix, separators=(",", ":"))
    _write_json(out / MATRIX_NAME, compact)
    if args.github_output:
        with Path(args.github_output).open("a", encoding="utf-8") as handle:
            handle.write(f"matrix={compact}\nrow_count={len(matrix['include'])}\n")
    fixtures = f"; Stage 6 fixtures {', '.join(f.id for f in plan.fixtures)}" if plan.fixtures else ""
    print(f"campaign {plan.campaign_id} ({plan.mode}): baseline {plan.base_sha[:12]}, candidate "
          f"{plan.head_sha[:12]}, rows {', '.join(plan.rows)}{fixtures}")
    for item in plan.fixtures:
        if item.problem is not None:
            print(f"fixture {item.id} will stop: {item.problem}")
    return EXIT_OK


def load_plan(directory: Path) -> tuple[Plan, str]:
    """The plan and the SHA-256 of its bytes (every build.json names the plan it followed)."""
    path = directory / PLAN_NAME
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DistributedError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        plan = Plan.model_validate_json(data)
    except ValidationError as exc:
        raise DistributedError(f"{path}: invalid plan: {exc}") from exc
    if plan.schema_version != PLAN_SCHEMA:
        raise DistributedError(f"{path}: plan schema {plan.schema_version!r}, this kv-parity reads {PLAN_SCHEMA!r}")
    return plan, hashlib.sha256(data).hexdigest()


# --- one arm ------------------------------------------------------------------------------------------------


class _Stop(Exception):
    def __init__(self, record: StopRecord) -> None:
        super().__init__(record.reason)
        self.record = record


def build_one_arm(plan: Plan, plan_sha: str, repo: Path, arm: Arm, out: Path, work: Path, sandbox: Sandbox,
                  baseline_dir: Path | None = None) -> ArmBuild:
    """Build `arm` at the plan's SHA in its own sandbox; a stop is recorded in the result, never raised."""
    sha = plan.sha(arm)
    record = ArmBuild(campaign_id=plan.campaign_id, plan_sha256=plan_sha, arm=arm, sha=sha, artifact=None,
                      toolchain=None, determinism_patch_sha256=None, preflight_problems=[], exception_records=[],
                      exceptions=[], stopped=None, sandbox=sandbox.record())
    try:
        record.toolchain = toolchain()
        patch = _patch(plan, repo, work, plan.config.determinism.patch, "determinism")
        harness_patch = _patch(plan, repo, work, plan.config.harness.patch, "harness")
        with worktree(repo, sha, work / f"tree-{arm}") as tree:
            if patch is not None:
                record.determinism_patch_sha256 = apply_patch(tree, patch)
            if harness_patch is not None:
                record.harness_patch_sha256 = apply_patch(tree, harness_patch, "harness patch")
            try:
                artifact = build_artifact(tree, arm, sha, plan.config.build, out, sandbox=sandbox)
            except BuildError as exc:
                raise _Stop(StopRecord(stage="build", reason=str(exc), blocking=isinstance(exc, ProtocolMismatch),
                                       output_tail=exc.output_tail)) from exc
            except ElfError as exc:
                raise _Stop(StopRecord(stage="sizes", reason=str(exc), blocking=False)) from exc
            if worktree_head(repo, tree) != sha:
                raise _Stop(StopRecord(stage="build", reason=f"{arm} checkout moved off {sha} during its build",
                                       blocking=False))
            record.artifact = artifact
            binary = out / artifact.binary_name
            sandbox.pin(binary, arm, artifact.binary_sha256)
            flags = sorted({flag for row in plan.config.rows for flag in plan.config.flags_used(row)})
            try:
                preflight_flags({arm: binary}, {arm: sha}, flags, sandbox)
            except PreflightError as exc:
                record.preflight_problems = [str(exc)]
            if arm == "candidate":
                record.exception_records, record.exceptions = _exceptions(tree, binary, baseline_dir, plan,
                                                                          plan_sha, work, sandbox, repo)
    except _Stop as stop:
        record.stopped = stop.record
    except (RevisionError, SandboxUnavailable, TraceError) as exc:
        record.stopped = StopRecord(stage="build", reason=str(exc), blocking=True)
    except BinaryMismatch as exc:
        record.stopped = StopRecord(stage="build", reason=str(exc), blocking=False)
    return record


def _patch(plan: Plan, repo: Path, work: Path, relative: str | None, purpose: str) -> Path | None:
    """A configured patch (determinism or harness), from the trusted config ref like the config itself."""
    if relative is None:
        return None
    path = work / f"{purpose}.patch"
    path.write_bytes(show_file(repo, plan.config_ref, relative))
    return path


def _exceptions(tree: Path, binary: Path, baseline_dir: Path | None, plan: Plan, plan_sha: str, work: Path,
                sandbox: Sandbox, repo: Path) -> tuple[list[ExceptionRecord], list[ExceptionOutcome]]:
    """The candidate's exception records, verified against both binaries when the baseline build is given."""
    try:
        records = load_records(repo, plan.sha("candidate"))
    except ExceptionFileError as exc:
        raise _Stop(StopRecord(stage="exceptions", reason=str(exc), blocking=False)) from exc
    if not records:
        return [], []
    if baseline_dir is None:
        raise _Stop(StopRecord(stage="exceptions", blocking=True, reason=(
            f"the candidate declares {len(records)} exception record(s); verifying them needs the baseline "
            "build: pass --baseline BASELINE_ARM_DIR to the candidate's build")))
    baseline = _checked_arm(baseline_dir, "baseline", plan, plan_sha)
    assert baseline.artifact is not None
    staged = store_binary(baseline_dir / baseline.artifact.binary_name, work / "baseline-bin" /
                          baseline.artifact.binary_name)
    sandbox.pin(staged, "baseline", baseline.artifact.binary_sha256)
    trace = work / "trace-slice.jsonl"
    try:
        prepare_trace(Path(plan.config.trace.path), plan.config.trace, trace)
    except TraceError as exc:
        raise _Stop(StopRecord(stage="trace", reason=str(exc), blocking=True)) from exc
    trace.chmod(0o444)
    return records, verify_records(records, tree, {"baseline": staged, "candidate": binary}, trace,
                                   sandbox=sandbox)


def _checked_arm(directory: Path, arm: Arm, plan: Plan, plan_sha: str) -> ArmBuild:
    """A build.json that belongs to this plan and arm, whose binary is the file next to it; else Refusal."""
    raw = _read(directory / ARM_BUILD_NAME)
    try:
        build = ArmBuild.model_validate(raw)
    except ValidationError as exc:
        raise DistributedError(f"{directory / ARM_BUILD_NAME}: invalid arm build: {exc}") from exc
    expected = {"schema_version": ARM_BUILD_SCHEMA, "campaign_id": plan.campaign_id, "plan_sha256": plan_sha,
                "arm": arm, "sha": plan.sha(arm)}
    for name, value in expected.items():
        if getattr(build, name) != value:
            raise Refusal(f"{directory / ARM_BUILD_NAME}: {name} is {getattr(build, name)!r}, the plan says "
                          f"{value!r}")
    if build.artifact is not None:
        if build.artifact.arm != arm or build.artifact.sha != plan.sha(arm):
            raise Refusal(f"{directory / ARM_BUILD_NAME}: artifact is {build.artifact.arm} "
                          f"{build.artifact.sha}, the plan says {arm} {plan.sha(arm)}")
        path = directory / build.artifact.binary_name
        if Path(build.artifact.binary_name).name != build.artifact.binary_name or not path.is_file():
            raise Refusal(f"{arm} binary {build.artifact.binary_name!r} is not a file in {directory}")
        actual = sha256_of(path)
        if actual != build.artifact.binary_sha256:
            raise Refusal(f"{arm} binary SHA-256 mismatch: build.json {build.artifact.binary_sha256}, "
                          f"file {actual}")
    return build


def arm_build_main(argv: Sequence[str]) -> int:
    """`kv-parity build --plan PLAN --arm ARM`: one revision -> ARM_DIR/<binary> + ARM_DIR/build.json.

    Exits 0 whenever build.json was written (a recorded stop included), 2 for an unusable plan or sandbox.
    Writes nothing to $GITHUB_OUTPUT.
    """
    parser = argparse.ArgumentParser(prog="kv-parity build --plan", description=arm_build_main.__doc__)
    parser.add_argument("--plan", required=True, help="plan directory written by `kv-parity plan`")
    parser.add_argument("--repo", default=".", help="git repository holding the arm's revision")
    parser.add_argument("--arm", required=True, choices=ARMS)
    parser.add_argument("--out", required=True, help="arm directory for the binary and build.json")
    parser.add_argument("--work", help="parent of the scratch directory")
    parser.add_argument("--baseline", help="the baseline's arm directory (candidate only: verifies exceptions)")
    add_sandbox_argument(parser)
    args = parser.parse_args(list(argv))
    try:
        sandbox = check_sandbox(args.sandbox)
        plan, plan_sha = load_plan(Path(args.plan))
    except (DistributedError, SandboxUnavailable) as exc:
        print(f"kv-parity build: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out).resolve()
    work = _scratch(args.work, f"kv-parity-build-{args.arm}-")
    try:
        record = build_one_arm(plan, plan_sha, Path(args.repo).resolve(), args.arm, out, work.resolve(), sandbox,
                               Path(args.baseline) if args.baseline else None)
    except (Refusal, DistributedError) as exc:
        print(f"kv-parity build: {exc}", file=sys.stderr)
        return EXIT_REFUSED if isinstance(exc, Refusal) else EXIT_USAGE
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _write_json(out / ARM_BUILD_NAME, record.model_dump_json(indent=2))
    if record.stopped is not None:
        print(f"{args.arm} build stopped at {record.stopped.stage}: {record.stopped.reason}")
    else:
        assert record.artifact is not None
        print(f"{args.arm} {record.sha[:12]}: {out / record.artifact.binary_name} "
              f"sha256 {record.artifact.binary_sha256}")
    return EXIT_OK


# --- manifest -----------------------------------------------------------------------------------------------


def assemble_manifest(plan: Plan, plan_sha: str, arm_dirs: dict[Arm, Path], trace_source: Path,
                      out: Path, plan_dir: Path) -> BuildManifest:
    """The build manifest from the plan and both checked arm builds; copies the binaries into out/bin and the
    plan's fixture traces (re-hashed) into out/fixtures."""
    builds = {arm: _checked_arm(arm_dirs[arm], arm, plan, plan_sha) for arm in ARMS}
    config = plan.config
    report = CampaignReport(
        campaign_id=plan.campaign_id, created_unix=round(time.time(), 3), tool_version=build_info.describe(),
        config=config, config_source=plan.config_source,
        revisions=[Revision(arm="baseline", sha=plan.base_sha, requested=plan.base_sha),
                   Revision(arm="candidate", sha=plan.head_sha, requested=plan.head_sha)],
        relationship=plan.relationship, merge_base=plan.merge_base,
        determinism_patch_sha256=builds["baseline"].determinism_patch_sha256,
        harness_patch_sha256=builds["baseline"].harness_patch_sha256,
        toolchain=builds["baseline"].toolchain, exclusions=list(config.harness.exclusions),
        skipped=[*STANDING_SKIPS, *([f"rows not selected for this campaign: {', '.join(plan.unselected_rows)}"]
                                   if plan.unselected_rows else []),
                 *([plan.fixtures_not_run] if plan.fixtures_not_run else [])],
        exception_records=builds["candidate"].exception_records, sandbox=builds["candidate"].sandbox,
        mode=plan.mode,
    )
    report.stopped = next((b.stopped for b in builds.values() if b.stopped is not None), None)
    if report.stopped is None and builds["baseline"].determinism_patch_sha256 != \
            builds["candidate"].determinism_patch_sha256:
        report.stopped = StopRecord(stage="build", blocking=True, reason=(
            f"determinism patch differs between the arms: baseline {builds['baseline'].determinism_patch_sha256}, "
            f"candidate {builds['candidate'].determinism_patch_sha256}"))
    if report.stopped is None and builds["baseline"].harness_patch_sha256 != builds["candidate"].harness_patch_sha256:
        report.stopped = StopRecord(stage="build", blocking=True, reason=(
            f"harness patch differs between the arms: baseline {builds['baseline'].harness_patch_sha256}, "
            f"candidate {builds['candidate'].harness_patch_sha256}"))
    if report.stopped is None:
        try:
            report.trace = prepare_trace(trace_source, config.trace, out / ".trace-check.jsonl")
        except TraceError as exc:
            report.stopped = StopRecord(stage="trace", reason=str(exc), blocking=True)
        finally:
            (out / ".trace-check.jsonl").unlink(missing_ok=True)
    problems = [p for b in builds.values() for p in b.preflight_problems]
    if report.stopped is None and problems:
        report.stopped = StopRecord(stage="preflight", reason="; ".join(problems), blocking=True)
    if report.stopped is None:
        report.artifacts = [b.artifact for b in builds.values() if b.artifact is not None]
        for artifact in report.artifacts:
            store_binary(arm_dirs[artifact.arm] / artifact.binary_name, out / BINARY_DIR / artifact.binary_name)
        report.sizes = size_gate(report.artifact("baseline"), report.artifact("candidate"), config.sizes.max_growth,
                                 gated_build_differences(report))
        report.sizes.attribution = attribute_sizes(
            *(out / BINARY_DIR / report.artifact(arm).binary_name for arm in ("baseline", "candidate")))
        copy_fixture_traces(plan.fixtures, config, plan_dir, out)
    return BuildManifest(campaign_id=plan.campaign_id, rows=plan.rows, report=report,
                         exceptions=builds["candidate"].exceptions,
                         fixtures=plan.fixtures if report.stopped is None else [])


def manifest_main(argv: Sequence[str]) -> int:
    """`kv-parity manifest`: plan + both arm builds -> DIST/manifest.json, DIST/bin/*, DIST/matrix.json.

    Runs no pull-request code. Exits 0 when the manifest was written (a recorded stop included), 1 when an arm
    build was refused (it names the field or both digests), 2 for unreadable input.
    """
    parser = argparse.ArgumentParser(prog="kv-parity manifest", description=manifest_main.__doc__)
    parser.add_argument("--plan", required=True)
    parser.add_argument("--baseline", required=True, help="baseline arm directory (binary + build.json)")
    parser.add_argument("--candidate", required=True, help="candidate arm directory (binary + build.json)")
    parser.add_argument("--trace", help="trace path overriding the config's (its checksum is still verified)")
    parser.add_argument("--out", required=True, help="dist directory")
    args = parser.parse_args(list(argv))
    out = Path(args.out)
    try:
        plan, plan_sha = load_plan(Path(args.plan))
        trace = Path(args.trace) if args.trace else Path(plan.config.trace.path)
        out.mkdir(parents=True, exist_ok=True)
        manifest = assemble_manifest(plan, plan_sha, {"baseline": Path(args.baseline),
                                                      "candidate": Path(args.candidate)}, trace, out,
                                     Path(args.plan))
    except Refusal as exc:
        print(f"kv-parity manifest: refusing: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except DistributedError as exc:
        print(f"kv-parity manifest: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _write_json(out / MANIFEST_NAME, manifest.model_dump_json(indent=2))
    _write_json(out / MATRIX_NAME, json.dumps(row_matrix(manifest), separators=(",", ":")))
    stopped = manifest.report.stopped
    print(f"build stopped at {stopped.stage}: {stopped.reason}" if stopped else
          f"campaign {manifest.campaign_id}: {out / MANIFEST_NAME}, rows {', '.join(manifest.rows)}")
    return EXIT_OK
