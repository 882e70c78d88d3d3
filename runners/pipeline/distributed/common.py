"""The bottom of the distributed split: file names, errors and the file helpers every job shares.

It imports nothing else of `runners.pipeline.distributed`, so every job module can import it.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from pydantic import BaseModel, ConfigDict

from runners.exec.untrusted import UntrustedFileError, refuse_symlinks

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

class DistributedError(RuntimeError):
    """Input a distributed step cannot use: an unreadable file, a stopped build, an unknown row."""


class Refusal(DistributedError):
    """Evidence that must not be used: the message names the file or arm and both conflicting values."""


class StrictModel(BaseModel):
    """Files passed between jobs: an unknown field is refused, never ignored."""

    model_config = ConfigDict(extra="forbid")


def write_json(path: Path, text: str) -> None:
    """Write-then-rename, so a reader never sees half a manifest or row result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text + "\n", encoding="utf-8")
    temporary.replace(path)


def refused_upload(directory: Path) -> bool:
    """True (the refusal printed, naming the links) when a directory that is uploaded or merged holds a link:
    upload-artifact and copytree follow links, so a planted one would carry whatever it points at."""
    try:
        refuse_symlinks(directory)
    except UntrustedFileError as exc:
        print(f"kv-parity: {exc}", file=sys.stderr)
        return True
    return False


@contextmanager
def scratch(parent: str | None, prefix: str, *, keep: bool = False) -> Iterator[Path]:
    """A fresh directory of our own (under `parent` when given), so cleaning up never deletes a user's files,
    removed on the way out unless `keep`. While it exists SIGTERM (Slurm's scancel and time limit, a runner's
    cancel) is SystemExit(143), so that removal still runs: the default action ended the job and left a
    worktree, staged binaries and a target directory on the node per cancelled job."""
    if parent:
        Path(parent).mkdir(parents=True, exist_ok=True)
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)  # before the directory exists: no unguarded moment
    try:
        work = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        try:
            yield work
        finally:
            if not keep:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def versions_of(path: Path, raw: object) -> tuple[object, object]:
    """The two schema versions a job file claims, read before validation so a mismatch is named as one."""
    if not isinstance(raw, dict):
        raise DistributedError(f"{path}: not a JSON object")
    return raw.get("schema_version"), raw.get("report_schema_version")


def read_json(path: Path) -> object:
    """A job file's JSON; unreadable or malformed is a DistributedError naming the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DistributedError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise DistributedError(f"{path}: not JSON: {exc}") from exc
