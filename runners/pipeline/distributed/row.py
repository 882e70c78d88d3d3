"""`kv-parity row`: one row (or, as `stage6-fixtures`, every Stage 6 fixture) on this node from the manifest.

The protocol makes one comparison row the unit of node placement: every row runs on one node from the same
two prebuilt binaries and the same trace slice, staged onto node-local storage and re-hashed before the first
process; the row itself is the single-machine campaign's own `run_row`.
"""

from __future__ import annotations

import time
from pathlib import Path

from runners.exec.placement import host_facts
from runners.exec.sandbox import Sandbox
from runners.pipeline.campaign import CampaignRequest, Prepared, run_row
from runners.pipeline.distributed.artifacts import BuildManifest, RowResult
from runners.pipeline.distributed.common import (
    DistributedError,
    Refusal,
)
from runners.pipeline.distributed.staging import stage_binaries
from runners.progress import ProgressSink
from runners.schema.config import RowConfig
from runners.schema.report import Arm
from runners.schema.verdicts import gated_build_differences
from runners.stages.trace import TraceError, prepare_trace


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
