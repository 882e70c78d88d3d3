"""A node job's inputs copied onto node-local storage and re-hashed there: the copies are the files that run,
so a mismatch is refused, naming both digests, before any process starts."""

from __future__ import annotations

import shutil
from pathlib import Path

from runners.pipeline.distributed.artifacts import BuildManifest, checksum_mismatches
from runners.pipeline.distributed.common import BINARY_DIR, FIXTURE_DIR, Refusal
from runners.schema.report import Arm
from runners.stages.trace import sha256_file


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
