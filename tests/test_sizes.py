"""The binary/.text growth gate and the .text measurement, checked against an independent ELF reader."""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import pytest
from runners.schema.report import Artifact, GateVerdict
from runners.schema.verdicts import size_gate
from runners.stages.sizes import text_size


def _text_size_by_hand(path: Path) -> int:
    """Independent little-endian ELF64 section-header walk (the layout of every Linux x86-64/arm64 binary)."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "ELF64 little-endian expected"
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]
    for name, _type, _flags, _addr, _offset, size, *_ in headers:
        end = data.index(b"\0", names_offset + name)
        if data[names_offset + name : end] == b".text":
            return int(size)
    raise AssertionError(".text not found")


@pytest.mark.parametrize("binary", [Path(os.path.realpath(sys.executable)), Path("/bin/ls")])
def test_text_size_matches_an_independent_reader(binary: Path) -> None:
    assert text_size(binary) == _text_size_by_hand(binary)
    assert 0 < text_size(binary) < binary.stat().st_size


def test_text_size_of_a_non_elf_file_is_an_error(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    with pytest.raises(ValueError, match="not an ELF"):
        text_size(script)


def _artifact(arm: str, binary: int, text: int) -> Artifact:
    return Artifact.model_validate(
        {
            "arm": arm,
            "sha": "0" * 40,
            "features": ["replay-bench"],
            "no_default_features": True,
            "feature_closure": ["offline-replay", "replay-bench"],
            "build_command": ["cargo", "build"],
            "binary_name": "offline_replay_bench",
            "binary_sha256": "0" * 64,
            "binary_size": binary,
            "text_size": text,
            "build_seconds": 1.0,
        }
    )


def test_small_growth_passes_with_both_numbers_in_the_reason() -> None:
    gate = size_gate(
        _artifact("baseline", 1_000_000, 400_000), _artifact("candidate", 1_010_000, 404_000), 0.05
    )
    assert gate.verdict == GateVerdict.PASS
    assert gate.binary_growth == pytest.approx(0.01) and gate.text_growth == pytest.approx(0.01)
    assert "1,000,000 -> 1,010,000" in gate.reason and "+1.00%" in gate.reason


def test_text_growth_above_the_limit_fails() -> None:
    gate = size_gate(
        _artifact("baseline", 1_000_000, 400_000), _artifact("candidate", 1_020_000, 430_000), 0.05
    )
    assert gate.verdict == GateVerdict.FAIL
    assert gate.reason.startswith(".text grew more than 5.00%")
    assert "400,000 -> 430,000 bytes (+7.50%)" in gate.reason and "+2.00%" in gate.reason


def test_binary_growth_above_the_limit_fails_and_the_limit_itself_passes() -> None:
    base = _artifact("baseline", 1_000_000, 400_000)
    assert size_gate(base, _artifact("candidate", 1_050_001, 400_000), 0.05).verdict == GateVerdict.FAIL
    assert size_gate(base, _artifact("candidate", 1_050_000, 420_000), 0.05).verdict == GateVerdict.PASS


def test_shrinking_passes() -> None:
    gate = size_gate(
        _artifact("baseline", 1_000_000, 400_000), _artifact("candidate", 900_000, 300_000), 0.05
    )
    assert gate.verdict == GateVerdict.PASS and gate.text_growth == pytest.approx(-0.25)
