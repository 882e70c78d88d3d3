"""Verify the Mooncake trace and cut its deterministic contiguous window (protocol Stage 3).

The trace is read once, as a stream, so the file digest and the window's bytes come from the same read
(a trace that changes under us cannot pass the checksum with different window contents) and a 23,608-row
trace never has to fit in memory.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from pathlib import Path
from typing import BinaryIO

import orjson

from runners.schema.config import TraceConfig
from runners.schema.report import TraceEvidence

_CHUNK = 1 << 20


class TraceError(ValueError):
    """A trace or window that cannot be used; the message names the file, the line or the digests."""


def sha256_file(path: Path) -> str:
    """SHA-256 hex digest of a file, streamed in 1 MiB chunks (traces and release binaries alike)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _is_int(value: object) -> bool:
    """JSON integers only: `bool` is an `int` subclass in Python but `true` is not a count."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


def _row_problem(line: bytes) -> str | None:
    """Why one trace line is not a Mooncake row the harness can replay, or None when it is."""
    if not line.strip():
        return "blank line"
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return f"not JSON: {exc}"
    if not isinstance(row, dict):
        return f"not a JSON object but {type(row).__name__}"
    if "hash_ids" not in row:
        return "missing hash_ids"
    hash_ids = row["hash_ids"]
    if not isinstance(hash_ids, list) or not all(_is_int(h) and h >= 0 for h in hash_ids):
        return "hash_ids must be a list of non-negative integers"
    if "output_length" not in row:
        return "missing output_length"
    if not (_is_int(row["output_length"]) and row["output_length"] >= 0):
        return f"output_length must be a non-negative integer, got {row['output_length']!r}"
    for key in ("input_length", "timestamp"):
        if row.get(key) is not None and not _is_number(row[key]):
            return f"{key} must be a number, got {row[key]!r}"
    return None


class _Scan:
    """What one streaming pass over the trace learned."""

    def __init__(self) -> None:
        self.file_digest = hashlib.sha256()
        self.slice_digest = hashlib.sha256()
        self.rows = 0
        self.problem: str | None = None


def _scan(source: Path, start: int, end: int, writer: BinaryIO) -> _Scan:
    """Hash every line, validate the window's rows and copy them; the first bad row is kept, not raised,
    so a wrong file is still reported as a checksum mismatch rather than as its first odd-looking row."""
    scan = _Scan()
    try:
        reader = source.open("rb")
    except OSError as exc:
        raise TraceError(f"{source}: cannot read trace: {exc.strerror}") from exc
    with reader:
        for line in reader:
            scan.file_digest.update(line)
            scan.rows += 1
            if scan.rows > end or scan.problem is not None:
                continue
            if scan.rows <= start:
                if not line.strip():
                    scan.problem = f"{source}:{scan.rows}: blank line before the window [{start}, {end})"
                continue
            reason = _row_problem(line)
            if reason is not None:
                scan.problem = f"{source}:{scan.rows}: {reason}"
                continue
            row_bytes = line if line.endswith(b"\n") else line + b"\n"
            writer.write(row_bytes)
            scan.slice_digest.update(row_bytes)
    return scan


def prepare_trace(source: Path, config: TraceConfig, out_path: Path) -> TraceEvidence:
    """Check the trace checksum, validate rows [offset, offset+count) and write exactly those rows.

    Rows are lines in file order. A blank line before the window is an error because it would make the
    offset ambiguous; inside the window every row must be a valid Mooncake row. Errors are raised in the
    order a reviewer needs them: wrong file first, then a bad row, then a short trace, then a slice digest.
    The window is written to a temporary file and renamed, so a failure never leaves a partial window.
    """
    start, end = config.offset, config.offset + config.count
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out_path.name}.", dir=out_path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as writer:
            scan = _scan(source, start, end, writer)
        actual = scan.file_digest.hexdigest()
        if actual != config.sha256:
            raise TraceError(f"{source}: SHA-256 mismatch: expected {config.sha256}, actual {actual}")
        if scan.problem is not None:
            raise TraceError(scan.problem)
        if scan.rows < end:
            raise TraceError(
                f"{source}: trace has {scan.rows} rows; window [{start}, {end}) needs {end} rows; "
                "a short trace is never padded or duplicated"
            )
        slice_sha = scan.slice_digest.hexdigest()
        if config.slice_sha256 is not None and slice_sha != config.slice_sha256:
            raise TraceError(
                f"{source}: window [{start}, {end}) SHA-256 mismatch: "
                f"expected {config.slice_sha256}, actual {slice_sha}"
            )
        tmp.replace(out_path)
    finally:
        tmp.unlink(missing_ok=True)
    return TraceEvidence(
        source_path=str(source),
        sha256=actual,
        rows_total=scan.rows,
        offset=start,
        count=config.count,
        slice_sha256=slice_sha,
    )
