"""Stage 1.4-1.6: build one release artifact per revision and record what it is.

The executable is located from cargo's JSON messages (never by globbing `target/`), copied into the campaign
directory, and described by its exact features, SHA-256, size and `.text` size.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from runners.config import BuildConfig
from runners.report import Arm, Artifact, Toolchain
from runners.revisions import git
from runners.sizes import text_size
from runners.trace import sha256_file


class BuildError(RuntimeError):
    """A build that failed or produced no usable artifact."""


class ProtocolMismatch(BuildError):
    """The revision no longer has what the protocol names: stop and update the protocol, never guess."""


def _version(argv: list[str]) -> str:
    completed = subprocess.run(argv, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise BuildError(f"{' '.join(argv)} failed: {completed.stderr.strip()}")
    return completed.stdout.strip()


def toolchain() -> Toolchain:
    """The host toolchain both revisions are built with (same host, same toolchain: Stage 1.2)."""
    verbose = _version(["rustc", "-vV"])
    host = next((line.split(":", 1)[1].strip() for line in verbose.splitlines() if line.startswith("host:")), "")
    return Toolchain(
        rustc=verbose.splitlines()[0],
        cargo=_version(["cargo", "--version"]),
        rustflags=os.environ.get("RUSTFLAGS", ""),
        host=host,
    )


def feature_closure(workspace: Path, config: BuildConfig) -> list[str]:
    """Check every configured feature exists in the package manifest and expand what it enables."""
    completed = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"],
        cwd=workspace, capture_output=True, text=True, check=False,
    )
    if completed.returncode != 0:
        raise BuildError(f"cargo metadata failed in {workspace}: {completed.stderr.strip()[-2000:]}")
    packages = [p for p in json.loads(completed.stdout)["packages"] if p["name"] == config.package]
    if not packages:
        raise ProtocolMismatch(f"package {config.package!r} not found; the protocol needs updating")
    declared: dict[str, list[str]] = packages[0]["features"]
    missing = [f for f in config.features if f not in declared]
    if missing:
        raise ProtocolMismatch(
            f"feature(s) {missing} not in {config.package}'s manifest (has {sorted(declared)}); "
            "the protocol needs updating rather than a guessed replacement"
        )
    closure: set[str] = set()
    pending = list(config.features)
    while pending:
        feature = pending.pop()
        if feature in closure:
            continue
        closure.add(feature)
        pending.extend(dep for dep in declared.get(feature, []) if dep in declared)
    return sorted(closure)


def build_artifact(tree: Path, arm: Arm, sha: str, config: BuildConfig, out_dir: Path) -> Artifact:
    """Build `tree` once with the configured command and copy the bench executable to `out_dir`."""
    workspace = tree / config.workspace_dir
    closure = feature_closure(workspace, config)
    command = list(config.command)
    if not any(word.startswith("--message-format") for word in command):
        command.append("--message-format=json-render-diagnostics")
    started = time.monotonic()
    completed = subprocess.run(command, cwd=workspace, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if completed.returncode != 0:
        raise BuildError(f"build of {arm} {sha[:12]} failed (exit {completed.returncode}):\n"
                         f"{completed.stderr.strip()[-3000:]}")
    executable = _executable_from_messages(completed.stdout, config.bench_target)
    if git(tree, "rev-parse", "HEAD") != sha:
        raise BuildError(f"{arm} checkout moved off {sha} during its build; refusing its binary")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{arm}-{sha[:12]}-{config.bench_target}"
    shutil.copy2(executable, target)
    return Artifact(
        arm=arm,
        sha=sha,
        features=list(config.features),
        feature_closure=closure,
        no_default_features=config.no_default_features,
        build_command=command,
        binary_name=target.name,
        binary_sha256=sha256_file(target),
        binary_size=target.stat().st_size,
        text_size=text_size(target),
        build_seconds=round(seconds, 3),
    )


def _executable_from_messages(stdout: str, bench_target: str) -> Path:
    """The `compiler-artifact` message for the bench target whose `executable` is set."""
    found: list[str] = []
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if message["target"]["name"] == bench_target and "bench" in message["target"]["kind"]:
            found.append(message["executable"])
    if len(found) != 1:
        raise BuildError(f"expected one executable for bench target {bench_target!r} in cargo's messages, "
                         f"found {len(found)}: {found}")
    return Path(found[0])
