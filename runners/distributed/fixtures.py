"""The `stage6-fixtures` job: every Stage 6 fixture on one node, from the manifest's binaries and the fixture
traces the trusted plan made, through the single-machine campaign's own `run_fixture_set`."""

from __future__ import annotations

import time
from pathlib import Path

from runners.exec.harness import PreflightError, help_text
from runners.exec.placement import host_facts
from runners.exec.sandbox import BinaryMismatch, Sandbox
from runners.pipeline.campaign import CampaignStop, run_fixture_set
from runners.pipeline.distributed.artifacts import BuildManifest, FixturesResult
from runners.pipeline.distributed.common import DistributedError
from runners.pipeline.distributed.staging import stage_binaries, stage_fixture_traces
from runners.progress import ProgressSink
from runners.schema.config import LifecycleFixture
from runners.stages.lifecycles import FixtureTraceError
from runners.stages.trace import sha256_file


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
