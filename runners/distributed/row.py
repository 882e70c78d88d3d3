"""`kv-parity row`: one row (or, as `stage6-fixtures`, every Stage 6 fixture) on this node from the manifest.

The protocol makes one comparison row the unit of node placement: every row runs on one node from the same
two prebuilt binaries and the same trace slice, staged onto node-local storage and re-hashed before the first
process; the row itself is the single-machine campaign's own `run_row`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from runners.exec.placement import host_facts
from runners.exec.sandbox import BinaryMismatch, Sandbox, SandboxUnavailable, add_sandbox_argument
from runners.exec.sandbox import check as check_sandbox
from runners.pipeline.campaign import CampaignRequest, CampaignStop, Prepared, run_row
from runners.pipeline.distributed.artifacts import BuildManifest, FixturesResult, RowResult, load_manifest
from runners.pipeline.distributed.common import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    FIXTURES_ROW,
    FIXTURES_SUFFIX,
    ROW_SUFFIX,
    DistributedError,
    Refusal,
    refused_upload,
    scratch,
    write_json,
)
from runners.pipeline.distributed.fixtures import run_manifest_fixtures
from runners.pipeline.distributed.staging import stage_binaries
from runners.progress import ProgressSink
from runners.schema.config import RowConfig
from runners.schema.report import Arm
from runners.schema.verdicts import gated_build_differences
from runners.stages.trace import TraceError, prepare_trace
from runners.terminal import PlainProgress


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


def row_main(argv: Sequence[str]) -> int:
    """`kv-parity row`: one row on this node -> OUT/<row>.row.json plus the row's kept evidence (with
    `--row stage6-fixtures`: every fixture -> OUT/stage6-fixtures.fixtures.json).

    Exits 0 when a result was written (its verdicts are inside), 1 when a checksum refused the inputs before
    any process ran or a binary's re-hash stopped it, 2 for a manifest or row that cannot be used.
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
    out = Path(args.out)
    job: Callable[[Path], RowResult | FixturesResult]
    if args.row == FIXTURES_ROW:
        what, target = "the Stage 6 fixtures", out / f"{FIXTURES_ROW}{FIXTURES_SUFFIX}"

        def job(work: Path) -> RowResult | FixturesResult:
            return run_manifest_fixtures(manifest, manifest_path.parent, work, out, PlainProgress(), sandbox)
    else:
        what, target = f"row {args.row}", out / f"{args.row}{ROW_SUFFIX}"
        trace_source = Path(args.trace) if args.trace else Path(manifest.config.trace.path)

        def job(work: Path) -> RowResult | FixturesResult:
            return run_manifest_row(manifest, manifest_path.parent, args.row, trace_source, work, out,
                                    PlainProgress(), sandbox)
    try:
        with scratch(args.work, "kv-parity-row-", keep=args.keep_work) as work:
            result = job(work)
    except Refusal as exc:
        print(f"kv-parity row: refusing to run {what}: {exc}; no harness process was started", file=sys.stderr)
        return EXIT_REFUSED
    except (CampaignStop, BinaryMismatch) as exc:
        print(f"kv-parity row: stopped {what}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except DistributedError as exc:
        print(f"kv-parity row: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if refused_upload(out):
        return EXIT_REFUSED
    write_json(target, result.model_dump_json(indent=2))
    print(_outcome(result))
    return EXIT_OK


def _outcome(result: RowResult | FixturesResult) -> str:
    """The one line `kv-parity row` prints for the result it wrote."""
    if isinstance(result, FixturesResult):
        return (f"Stage 6 fixtures on {result.node.hostname}: "
                + ", ".join(f"{f.id} {f.status.value}" for f in result.fixtures))
    doctor = result.report.doctor
    return (f"row {result.report.row.id} on {result.node.hostname}: semantic {result.report.semantic.value}, "
            f"performance {result.report.perf_verdict.value}"
            + (f"; node doctor {doctor.summary}" if doctor is not None else ""))
