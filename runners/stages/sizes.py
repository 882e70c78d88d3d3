"""Release binary and .text sizes from the ELF section table: what the size gate compares
(`runners.schema.verdicts.size_gate`: fail growth above the limit until the footprint is explained)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from elftools.common.exceptions import ELFError, ELFParseError
from elftools.construct import ConstructError
from elftools.elf.elffile import ELFFile


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
