"""`kv-parity build`: the binaries every row node runs, built once.

- `kv-parity build --base B --head H` (one trusted machine, e.g. Slurm's build job or a laptop) runs the
  single-machine campaign's `prepare` once and writes OUT/manifest.json, OUT/bin/* and the row matrix.
- `kv-parity build --plan PLAN --arm ARM` (Actions) builds ONE revision in the sandbox (the baseline's job
  never sees the head's code) and writes ARM_DIR/<binary> plus ARM_DIR/build.json; the candidate's exception
  records are verified there when the baseline build is given (`--baseline`), each regression test sandboxed.
  `kv-parity manifest` checks both against the plan.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pydantic import ValidationError

from runners.exec.build_cache import BuildCacheError, BuildKey, CampaignCache
from runners.exec.harness import PreflightError, preflight_flags
from runners.exec.sandbox import BinaryMismatch, Sandbox, SandboxUnavailable, sha256_of
from runners.pipeline.campaign import (
    CampaignRequest,
    CampaignStop,
    fixtures_not_run,
    new_report,
    prepare,
    selected_rows,
)
from runners.pipeline.distributed.artifacts import (
    BuildManifest,
    FixtureInput,
    materialise_fixture_traces,
)
from runners.pipeline.distributed.common import (
    BINARY_DIR,
    DistributedError,
    Refusal,
    StrictModel,
    read_json,
)
from runners.pipeline.distributed.plan import Plan
from runners.progress import ProgressSink
from runners.schema.report import (
    ARMS,
    Arm,
    Artifact,
    ExceptionOutcome,
    ExceptionRecord,
    SandboxRecord,
    StopRecord,
    Toolchain,
)
from runners.stages.build import (
    BuildError,
    ProtocolMismatch,
    StartedBuild,
    finish_build,
    start_build,
    store_binary,
    toolchain,
)
from runners.stages.exceptions import ExceptionFileError, load_records, verify_records
from runners.stages.revisions import RevisionError, apply_patch, show_file, worktree, worktree_head
from runners.stages.sizes import ElfError
from runners.stages.trace import TraceError, prepare_trace

ARM_BUILD_SCHEMA = "kv-parity.arm-build.v1"
ARM_BUILD_NAME = "build.json"


class ArmBuild(StrictModel):
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
    cache_key: BuildKey | None = None
    """The candidate's build cache key when it was compiled here with a cache: `kv-parity manifest --build-cache`
    stores it under this key once the size gate passed (a candidate is never stored before)."""


class _Stop(Exception):
    def __init__(self, record: StopRecord) -> None:
        super().__init__(record.reason)
        self.record = record


def build_one_arm(plan: Plan, plan_sha: str, repo: Path, arm: Arm, out: Path, work: Path, sandbox: Sandbox,
                  baseline_dir: Path | None = None, build_cache: Path | None = None) -> ArmBuild:
    """Build `arm` at the plan's SHA in its own sandbox; a stop is recorded in the result, never raised.

    With `build_cache`, the arm is reused when built before as that arm under the same key (runners/exec/build_cache.py
    decides), and a baseline stored once built, exactly as in a single-machine campaign; a candidate compiled
    here records its key for the manifest, which stores it once its size gate passed."""
    sha = plan.sha(arm)
    record = ArmBuild(campaign_id=plan.campaign_id, plan_sha256=plan_sha, arm=arm, sha=sha, artifact=None,
                      toolchain=None, determinism_patch_sha256=None, preflight_problems=[], exception_records=[],
                      exceptions=[], stopped=None, sandbox=sandbox.record())
    try:
        record.toolchain = toolchain()
        patch = _patch(plan, repo, work, plan.config.determinism.patch, "determinism")
        harness_patch = _patch(plan, repo, work, plan.config.harness.patch, "harness")
        cache = CampaignCache.for_campaign(build_cache, plan.campaign_id, sandbox.kind)
        with worktree(repo, sha, work / f"tree-{arm}") as tree:
            applied: dict[str, str] = {}
            if patch is not None:
                record.determinism_patch_sha256 = applied["determinism"] = apply_patch(tree, patch)
            if harness_patch is not None:
                record.harness_patch_sha256 = applied["harness"] = apply_patch(tree, harness_patch, "harness patch")
            try:
                started = start_build(tree, arm, sha, plan.config.build, out, sandbox=sandbox,
                                      cache=cache and replace(cache, patches=applied))
                artifact = finish_build(started)
            except BuildError as exc:
                raise _Stop(StopRecord(stage="build", reason=str(exc), blocking=isinstance(exc, ProtocolMismatch),
                                       output_tail=exc.output_tail)) from exc
            except ElfError as exc:
                raise _Stop(StopRecord(stage="sizes", reason=str(exc), blocking=False)) from exc
            if worktree_head(repo, tree) != sha:
                raise _Stop(StopRecord(stage="build", reason=f"{arm} checkout moved off {sha} during its build",
                                       blocking=False))
            record.artifact = artifact
            if isinstance(started, StartedBuild) and arm == "candidate":
                record.cache_key = started.key
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
    except (RevisionError, SandboxUnavailable, TraceError, BuildCacheError) as exc:
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
    baseline = checked_arm(baseline_dir, "baseline", plan, plan_sha)
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


def checked_arm(directory: Path, arm: Arm, plan: Plan, plan_sha: str) -> ArmBuild:
    """A build.json that belongs to this plan and arm, whose binary is the file next to it; else Refusal."""
    raw = read_json(directory / ARM_BUILD_NAME)
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
    if build.cache_key is not None:
        record = build.artifact.build_cache if build.artifact is not None else None
        if arm != "candidate" or build.cache_key.arm != arm or record is None or \
                build.cache_key.digest() != record.key_sha256:
            raise Refusal(f"{directory / ARM_BUILD_NAME}: cache_key is not the key of the {arm} build it records "
                          "(only a candidate's own key may be stored after its size gate)")
    return build


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
