"""Unpacking a report artifact safely: the zip a row or publish job uploaded was made next to pull-request code.

Refused, with the reason: a path that escapes the artifact directory, a link, more than MAX_ARTIFACT_FILES
members or MAX_ARTIFACT_BYTES of content (declared or read), and anything zipfile cannot read. Used by the
Actions backend and by Actions-only mode (`bot.modes.run_title_ledger`).
"""

from __future__ import annotations

import io
import shutil
import stat
import struct
import zipfile
from pathlib import Path, PurePosixPath

MAX_ARTIFACT_BYTES = 512 * 1024 * 1024
"""Bound on both the downloaded zip and everything unpacked from it."""
MAX_ARTIFACT_FILES = 10_000


class ArtifactError(RuntimeError):
    """A report artifact that must not be published; the message names the problem."""


def _member_target(root: Path, info: zipfile.ZipInfo) -> Path:
    name = info.filename
    parts = PurePosixPath(name).parts
    if not parts or name.startswith(("/", "\\")) or "\\" in name or ".." in parts or ":" in parts[0]:
        raise ArtifactError(f"artifact entry {name!r} would be written outside the artifact directory")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise ArtifactError(f"artifact entry {name!r} is a symbolic link; links are refused")
    target = root.joinpath(*parts).resolve()
    if not target.is_relative_to(root.resolve()):
        raise ArtifactError(f"artifact entry {name!r} would be written outside the artifact directory")
    return target


_EOCD = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")
_CENTRAL_HEADER = struct.Struct("<4s4B4HL2L5H2L")


def _central_directory(data: bytes) -> tuple[int, int]:
    """Where the central directory starts and how long it is, from the End Of Central Directory record
    (zip64 too), read the way zipfile finds it: at the very end, else within a trailing comment."""
    at = len(data) - _EOCD.size
    if at < 0 or data[at : at + 4] != b"PK\x05\x06":
        at = data.rfind(b"PK\x05\x06", max(0, len(data) - _EOCD.size - 65535))
    if at < 0 or len(data) - at < _EOCD.size:
        raise ArtifactError("artifact is not a readable zip: no end of central directory record")
    _, _, _, _, entries, size, offset, _ = _EOCD.unpack_from(data, at)
    end = at
    if entries == 0xFFFF or size == 0xFFFFFFFF or offset == 0xFFFFFFFF:
        locator = at - _ZIP64_LOCATOR.size
        if locator < 0 or data[locator : locator + 4] != b"PK\x06\x07":
            raise ArtifactError("artifact is a zip64 archive without its zip64 end of central directory locator")
        record = _ZIP64_LOCATOR.unpack_from(data, locator)[2]
        if not 0 <= record <= len(data) - _ZIP64_EOCD.size or data[record : record + 4] != b"PK\x06\x06":
            raise ArtifactError("artifact is a zip64 archive whose zip64 end of central directory is missing")
        *_, entries, size, offset = _ZIP64_EOCD.unpack_from(data, record)
        end = record
    if entries > MAX_ARTIFACT_FILES:
        raise ArtifactError(f"artifact declares {entries} entries; the limit is {MAX_ARTIFACT_FILES}")
    if size > end:
        raise ArtifactError("artifact is not a readable zip: its central directory is larger than the archive")
    return end - size, size


def _check_central_directory(data: bytes) -> None:
    """Count the members and their declared uncompressed sizes by walking the central directory's headers,
    before zipfile parses it into objects (which costs about 0.5 KB of memory per member, and zipfile reads
    members until the directory's byte length is used up, whatever count the end record claims)."""
    start, size = _central_directory(data)
    position, members, declared = start, 0, 0
    while position < start + size:
        if data[position : position + 4] != b"PK\x01\x02" or position + _CENTRAL_HEADER.size > len(data):
            raise ArtifactError("artifact is not a readable zip: a central directory header is malformed")
        header = _CENTRAL_HEADER.unpack_from(data, position)
        members += 1
        declared += header[11]
        if members > MAX_ARTIFACT_FILES:
            raise ArtifactError(f"artifact has more than {MAX_ARTIFACT_FILES} entries")
        if declared > MAX_ARTIFACT_BYTES:
            raise ArtifactError(f"artifact declares more than {MAX_ARTIFACT_BYTES} bytes of content")
        position += _CENTRAL_HEADER.size + header[12] + header[13] + header[14]


def _unpack(data: bytes, root: Path) -> None:
    _check_central_directory(data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = archive.infolist()
        if len(members) > MAX_ARTIFACT_FILES:
            raise ArtifactError(f"artifact has {len(members)} entries; the limit is {MAX_ARTIFACT_FILES}")
        total = 0
        for info in members:
            target = _member_target(root, info)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, target.open("xb") as sink:
                while chunk := source.read(1 << 20):
                    total += len(chunk)
                    if total > MAX_ARTIFACT_BYTES:
                        raise ArtifactError(f"artifact unpacks to more than {MAX_ARTIFACT_BYTES} bytes")
                    sink.write(chunk)


def _unpack_refusing(data: bytes, root: Path) -> None:
    """`_unpack`, with every way a zip can be unreadable turned into an ArtifactError that says so."""
    try:
        _unpack(data, root)
    except ArtifactError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        raise ArtifactError(f"artifact is not a readable zip: {exc}") from exc
    except RuntimeError as exc:
        # zipfile's signal for a member it cannot decode: encrypted, or an unsupported compression method.
        raise ArtifactError(f"artifact has a member zipfile cannot decode: {exc}") from exc
    except OSError as exc:
        raise ArtifactError(f"artifact cannot be unpacked: {exc}") from exc


def extract_artifact(data: bytes, dest: Path) -> None:
    """Unpack an artifact zip into `dest` (replacing it), refusing path escapes, links and oversize content.

    Sizes are counted while reading, not taken from the headers, which whoever built the zip controls.
    Unpacking goes to a scratch directory first, so a refused or interrupted extraction leaves no `dest`.
    """
    if len(data) > MAX_ARTIFACT_BYTES:
        raise ArtifactError(f"artifact zip is {len(data)} bytes; the limit is {MAX_ARTIFACT_BYTES}")
    scratch = dest.with_name(dest.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        _unpack_refusing(data, scratch)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    shutil.rmtree(dest, ignore_errors=True)
    scratch.replace(dest)
