"""Artifact zips are sized up from their End Of Central Directory record and central directory headers
before zipfile parses them: a row job runs pull-request code and can upload any zip it likes."""

from __future__ import annotations

import io
import struct
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from bot.dispatch.artifact_zip import MAX_ARTIFACT_FILES, ArtifactError, extract_artifact

HEADER = struct.Struct("<4s4B4HL2L5H2L")


def stored(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def eocd(entries: int, size: int, offset: int) -> bytes:
    return struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, min(entries, 0xFFFF), min(entries, 0xFFFF), size, offset, 0)


def zip64_end(entries: int, size: int, offset: int, at: int, *, locator: bool = True) -> bytes:
    """A zip64 end of central directory record at `at`, its locator, and a classic record pointing to them."""
    record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, size, offset)
    pointer = struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1) if locator else b""
    return record + pointer + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)


def many_members(count: int) -> bytes:
    """A central directory of `count` one-letter, empty, stored members (no local data needed to refuse it),
    ended by zip64 records as a real archive of that many members would be."""
    header = HEADER.pack(b"PK\x01\x02", 20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0) + b"a"
    directory = header * count
    return directory + zip64_end(count, len(directory), 0, len(directory))


def test_a_huge_member_count_is_refused_from_the_end_record_without_parsing(tmp_path: Path) -> None:
    data = many_members(400_000)
    tracemalloc.start()
    try:
        with pytest.raises(ArtifactError, match=f"declares 400000 entries; the limit is {MAX_ARTIFACT_FILES}"):
            extract_artifact(data, tmp_path / "out")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"refusing allocated {peak} bytes; parsing 400k members would take ~200 MB"
    assert not (tmp_path / "out").exists()


def test_an_end_record_that_understates_the_count_is_caught_walking_the_directory(tmp_path: Path) -> None:
    data = many_members(MAX_ARTIFACT_FILES + 1)
    size = len(data) - len(zip64_end(0, 0, 0, 0))
    forged = data[:size] + eocd(1, size, 0)
    with pytest.raises(ArtifactError, match=f"more than {MAX_ARTIFACT_FILES} entries"):
        extract_artifact(forged, tmp_path / "out")


def test_declared_content_over_the_limit_is_refused_before_unpacking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bot.dispatch.artifact_zip.MAX_ARTIFACT_BYTES", 1000)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("a.bin", b"x" * 600)
        archive.writestr("b.bin", b"y" * 600)
    assert len(buffer.getvalue()) < 1000, "small compressed, large declared"
    with pytest.raises(ArtifactError, match="declares more than 1000 bytes of content"):
        extract_artifact(buffer.getvalue(), tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_a_zip64_end_record_is_followed(tmp_path: Path) -> None:
    data = stored({"report.json": b"{}", "rows/a.json": b"[]"})
    end = data.rindex(b"PK\x05\x06")
    _, _, _, _, entries, size, offset, _ = struct.unpack_from("<4s4H2LH", data, end)
    as_zip64 = data[:end] + zip64_end(entries, size, offset, end)
    extract_artifact(as_zip64, tmp_path / "out")
    assert (tmp_path / "out" / "report.json").read_bytes() == b"{}"
    assert (tmp_path / "out" / "rows" / "a.json").read_bytes() == b"[]"


def test_a_zip64_marker_without_its_locator_is_refused_clearly(tmp_path: Path) -> None:
    data = stored({"report.json": b"{}"})
    end = data.rindex(b"PK\x05\x06")
    broken = data[:end] + zip64_end(1, 0, 0, end, locator=False)
    with pytest.raises(ArtifactError, match="zip64 archive without its zip64 end of central directory locator"):
        extract_artifact(broken, tmp_path / "out")


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"PK\x05\x06" + b"\x00" * 10, "no end of central directory record"),
        (eocd(1, 1000, 0), "central directory is larger than the archive"),
        (b"junk" * 20 + eocd(1, 80, 0), "central directory header is malformed"),
    ],
    ids=["short", "oversized-directory", "bad-header"],
)
def test_broken_end_records_are_named(tmp_path: Path, data: bytes, problem: str) -> None:
    with pytest.raises(ArtifactError, match=problem):
        extract_artifact(data, tmp_path / "out")
