"""`kv-parity manifest` (trusted, runs no pull-request code): plan + both arm builds -> DIST/manifest.json.

It re-hashes both uploaded binaries itself, refuses a build.json that disagrees with the plan or with the file
it describes (naming the field), and writes DIST/manifest.json, DIST/bin/ and the row matrix.
"""

from __future__ import annotations

import time
from pathlib import Path

from runners import build_info
from runners.exec.build_cache import BuildCacheError, CampaignCache
from runners.pipeline.campaign import STANDING_SKIPS
from runners.pipeline.distributed.artifacts import BuildManifest, copy_fixture_traces
from runners.pipeline.distributed.build import ArmBuild, checked_arm
from runners.pipeline.distributed.common import (
    BINARY_DIR,
)
from runners.pipeline.distributed.plan import Plan
from runners.schema.report import ARMS, Arm, CampaignReport, Revision, StopRecord
from runners.schema.verdicts import gated_build_differences, size_gate
from runners.stages.build import store_binary, store_candidate
from runners.stages.symbols import attribute_sizes
from runners.stages.trace import TraceError, prepare_trace


def assemble_manifest(plan: Plan, plan_sha: str, arm_dirs: dict[Arm, Path], trace_source: Path,
                      out: Path, plan_dir: Path, build_cache: Path | None = None) -> BuildManifest:
    """The build manifest from the plan and both checked arm builds; copies the binaries into out/bin and the
    plan's fixture traces (re-hashed) into out/fixtures. With `build_cache`, a candidate its build job compiled
    is stored there once the size gate passed (the build job stores only a baseline)."""
    builds = {arm: checked_arm(arm_dirs[arm], arm, plan, plan_sha) for arm in ARMS}
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
        report.stopped = _store_candidate(builds["candidate"], report, out, build_cache, plan.campaign_id)
        copy_fixture_traces(plan.fixtures, config, plan_dir, out)
    return BuildManifest(campaign_id=plan.campaign_id, rows=plan.rows, report=report,
                         exceptions=builds["candidate"].exceptions,
                         fixtures=plan.fixtures if report.stopped is None else [])


def _store_candidate(build: ArmBuild, report: CampaignReport, out: Path, directory: Path | None,
                     campaign_id: str) -> StopRecord | None:
    """The candidate its build job compiled, stored in the cache now that the size gate ran (if it passed); a
    cache that cannot be used stops the campaign, as it does a single-machine one."""
    artifact = report.artifact("candidate")
    if build.cache_key is None or artifact.build_cache is None:
        return None
    if directory is None:
        artifact.build_cache.not_stored = ("a candidate is stored only once its size gate passed, and the gate ran "
                                           "without a build cache (`kv-parity manifest --build-cache`)")
        return None
    try:
        cache = CampaignCache.for_campaign(directory, campaign_id, build.sandbox.kind)
        store_candidate(cache, build.cache_key, artifact, out / BINARY_DIR / artifact.binary_name, report.sizes)
    except BuildCacheError as exc:
        return StopRecord(stage="build", reason=str(exc), blocking=True)
    return None
