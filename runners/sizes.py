"""Release binary and .text growth gate: fail growth above the limit until the footprint is explained."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from elftools.common.exceptions import ELFError, ELFParseError
from elftools.construct import ConstructError
from elftools.elf.elffile import ELFFile

from runners.schema.report import Artifact, GateVerdict, SizeGate, build_difference_reason


class ElfError(ValueError):
    """A binary that is not an ELF file, or is one beyond the bounds the bot parses (size, table shapes, time):
    the candidate's build output decides its own shape, so parsing it must never hang or crash the campaign."""


ELF_MAX_BYTES = 4 << 30
"""Far above a real harness release binary (hundreds of MB with symbols); a larger one is refused unparsed."""


@contextmanager
def elf(binary: Path) -> Iterator[tuple[ELFFile, int]]:
    """The parsed ELF file and its size in bytes, refused (ElfError naming why) when it is over the bound or
    malformed; pyelftools' own errors on a malformed file are turned into ElfError too."""
    size = binary.stat().st_size
    if size > ELF_MAX_BYTES:
        raise ElfError(f"{binary.name} is {size:,} bytes, over the {ELF_MAX_BYTES:,}-byte bound for ELF parsing")
    try:
        with binary.open("rb") as handle:
            parsed = ELFFile(handle)
            headers_end = parsed["e_shoff"] + parsed.num_sections() * parsed["e_shentsize"]
            if headers_end > size:
                raise ElfError(f"{binary.name}: {parsed.num_sections():,} section headers end at byte "
                               f"{headers_end:,} of a {size:,}-byte file")
            yield parsed, size
    except (ELFError, ELFParseError, ConstructError, struct.error, ZeroDivisionError, OverflowError,
            UnicodeDecodeError) as exc:
        raise ElfError(f"{binary.name} is not an ELF file, or a malformed one: {exc}") from exc


def text_size(binary: Path) -> int:
    """Size in bytes of the ELF `.text` section (code only, unlike the file size that includes symbols)."""
    with elf(binary) as (parsed, size):
        section = parsed.get_section_by_name(".text")
        if section is None:
            raise ElfError(f"{binary.name} has no .text section")
        if section["sh_size"] > size:
            raise ElfError(f"{binary.name}: .text claims {section['sh_size']:,} bytes of a {size:,}-byte file")
        return int(section["sh_size"])


def _growth(baseline: int, candidate: int) -> float:
    if baseline <= 0:
        raise ValueError(f"baseline size {baseline} must be positive to compute growth")
    return (candidate - baseline) / baseline


def size_gate(baseline: Artifact, candidate: Artifact, max_growth: float,
              build_differences: list[str] | None = None) -> SizeGate:
    """FAIL when the candidate's binary or .text is more than `max_growth` larger than the baseline's, or when
    the arms were built with different settings (`build_differences`), which makes sizes incomparable."""
    binary_growth = _growth(baseline.binary_size, candidate.binary_size)
    text_growth = _growth(baseline.text_size, candidate.text_size)
    lines = [
        f"binary {baseline.binary_size:,} -> {candidate.binary_size:,} bytes ({binary_growth:+.2%})",
        f".text {baseline.text_size:,} -> {candidate.text_size:,} bytes ({text_growth:+.2%})",
    ]
    over = [
        name for name, growth in (("binary", binary_growth), (".text", text_growth)) if growth > max_growth
    ]
    if build_differences:
        verdict = GateVerdict.FAIL
        reason = build_difference_reason(build_differences) + "; " + "; ".join(lines)
    elif over:
        verdict = GateVerdict.FAIL
        reason = (
            f"{' and '.join(over)} grew more than {max_growth:.2%}: "
            + "; ".join(lines)
            + "; explain and narrow the added footprint"
        )
    else:
        verdict = GateVerdict.PASS
        reason = f"within {max_growth:.2%}: " + "; ".join(lines)
    return SizeGate(
        max_growth=max_growth,
        binary_growth=binary_growth,
        text_growth=text_growth,
        verdict=verdict,
        reason=reason,
    )
