"""Size attribution: which symbols grew, appeared or vanished between the two release binaries.

The protocol fails binary or .text growth above 5% "until the added footprint is explained and narrowed"; this
module does the explaining from the ELF symbol tables, so a reviewer sees *where* the bytes went instead of two
totals. Names are demangled by binutils' `c++filt` (Rust legacy and v0 manglings), with the legacy hash suffix and
v0 crate disambiguators and LLVM promotion suffixes removed so one function keeps one name across revisions
(LLVM's hash-named anonymous constants are pooled under one name); instantiations of one generic
function (`f::<A>`, `f::<B>`, or legacy names that differ only by hash) are grouped under their generic name.
Evidence only: the size gate itself decides on the totals, as the protocol says.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import time
from collections import defaultdict
from pathlib import Path

from elftools.elf.sections import SymbolTableSection

from runners.schema.report import SizeAttribution, SymbolDelta, SymbolGroup
from runners.stages.sizes import ElfError, elf

TOP = 10

_LEGACY_HASH = re.compile(r"::h[0-9a-f]{16}$")
_V0_DISAMBIGUATOR = re.compile(r"\[[0-9a-f]{1,16}\]")
_LLVM_SUFFIX = re.compile(r"\.llvm\.\d+$")
_LLVM_ANONYMOUS = re.compile(r"^anon\.[0-9a-f]+\.\d+$")
ANONYMOUS = "<LLVM anonymous constants>"
MAX_SYMBOLS = 5_000_000
"""Far above a real harness (the dynamo replay binary has ~200k symbols); a table claiming more is refused."""
MAX_NAME_CHARS = 4096
"""Longer names are cut: a name is shown, never parsed, and one string table entry must not cost megabytes."""
ELF_PARSE_SECONDS = 120
_SEPARATOR = "--kv-parity-end-of-name--"
"""A line c++filt passes through unchanged (not a mangled name), written after every name."""


_SYMBOL_LAYOUT = {64: "IBBHQQ", 32: "IIIBBH"}
"""Elf64_Sym (name, info, other, shndx, value, size) and Elf32_Sym (name, value, size, info, other, shndx)."""
_STT_OBJECT, _STT_FUNC, _SHN_UNDEF = 1, 2, 0


def _raw_symbols(binary: Path) -> list[tuple[str, int]] | None:
    """(mangled name, size) of every sized function and data object; None when the binary has no symbol table.

    The binary is the candidate's own output, so its symbol table is read within bounds (`runners.stages.sizes.elf`):
    entry size as the format says, table and string table inside the file, at most MAX_SYMBOLS entries,
    ELF_PARSE_SECONDS. Entries are unpacked with `struct` in one pass (pyelftools' per-symbol objects cost
    ten times as much on a 900-symbol binary); only the section headers come from pyelftools."""
    with elf(binary) as (parsed, size):
        table = parsed.get_section_by_name(".symtab")
        if not isinstance(table, SymbolTableSection):
            return None
        expected_entry = 24 if parsed.elfclass == 64 else 16
        if table["sh_entsize"] != expected_entry or table["sh_offset"] + table["sh_size"] > size:
            raise ElfError(f"{binary.name}: malformed .symtab (entry size {table['sh_entsize']}, "
                           f"{table['sh_size']} bytes at offset {table['sh_offset']} of a {size}-byte file)")
        count = table["sh_size"] // expected_entry
        if count > MAX_SYMBOLS:
            raise ElfError(f"{binary.name}: .symtab holds {count:,} symbols, over the {MAX_SYMBOLS:,} bound")
        names = parsed.get_section(table["sh_link"]) if table["sh_link"] < parsed.num_sections() else None
        if names is None or names["sh_offset"] + names["sh_size"] > size:
            raise ElfError(f"{binary.name}: the string table of .symtab (section {table['sh_link']}) is not "
                           f"inside the {size}-byte file")
        strings = names.data()
        order = "<" if parsed.little_endian else ">"
        deadline = time.monotonic() + ELF_PARSE_SECONDS
        found = []
        for index, entry in enumerate(struct.iter_unpack(order + _SYMBOL_LAYOUT[parsed.elfclass],
                                                         table.data()[:count * expected_entry])):
            if index % 65536 == 0 and time.monotonic() > deadline:
                raise ElfError(f"{binary.name}: reading its symbol table took over {ELF_PARSE_SECONDS} s")
            if parsed.elfclass == 64:
                name_offset, info, _, shndx, _, symbol_size = entry
            else:
                name_offset, _, symbol_size, info, _, shndx = entry
            if symbol_size <= 0 or info & 0xF not in (_STT_FUNC, _STT_OBJECT) or shndx == _SHN_UNDEF:
                continue
            if name_offset >= len(strings):
                raise ElfError(f"{binary.name}: symbol {index} names byte {name_offset} of a "
                               f"{len(strings)}-byte string table")
            end = strings.find(b"\0", name_offset, name_offset + MAX_NAME_CHARS * 4 + 1)
            raw = strings[name_offset:end if end >= 0 else name_offset + MAX_NAME_CHARS * 4]
            name = raw.decode("utf-8", errors="replace")
            if name:
                found.append((name[:MAX_NAME_CHARS], int(symbol_size)))
        return found


def _escaped(name: str) -> str:
    """`name` with every non-printable character (control characters, line and bidi separators) written as a
    Python escape, so a symbol name can never start a new line or reorder text wherever it is shown."""
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in name)


def demangle(names: list[str]) -> list[str]:
    """Demangle in one `c++filt` process, then drop hashes; the names come from the candidate's binary.

    Only printable names (other than the separator) reach c++filt, each followed by a separator line, and
    its output is cut at the separators, so a name that makes c++filt print more (or fewer) lines cannot shift
    the others onto the wrong functions. A name with a non-printable character is not demangled: it is shown
    escaped. Should c++filt's output still not split into one piece per name, every name is shown escaped and
    undemangled (never a crash).
    """
    executable = shutil.which("c++filt")
    if executable is None:
        raise FileNotFoundError("c++filt (GNU binutils) is needed to demangle symbol names; install binutils")
    printable = [name for name in names if _demanglable(name)]
    completed = subprocess.run(
        [executable], input="".join(f"{name}\n{_SEPARATOR}\n" for name in printable), capture_output=True,
        text=True, encoding="utf-8", errors="replace", check=True,
    )
    pieces: list[str] = []
    current: list[str] = []
    for line in completed.stdout.split("\n"):
        if line == _SEPARATOR:
            pieces.append("\n".join(current))
            current = []
        else:
            current.append(line)
    if len(pieces) != len(printable):
        return [_stable_name(_escaped(name)) for name in names]
    readable = iter(pieces)
    return [_stable_name(_escaped(next(readable) if _demanglable(name) else name)) for name in names]


def _demanglable(name: str) -> bool:
    """Whether `name` may go to c++filt: printable (one line in, one line out) and not the separator itself."""
    return name.isprintable() and name != _SEPARATOR


def _stable_name(demangled: str) -> str:
    """One name per function across builds: no legacy hash, crate disambiguator or LLVM promotion suffix."""
    name = _LLVM_SUFFIX.sub("", demangled)
    if _LLVM_ANONYMOUS.match(name):
        return ANONYMOUS
    return _V0_DISAMBIGUATOR.sub("", _LEGACY_HASH.sub("", name))


def generic_name(name: str) -> str:
    """`a::f::<u8, Vec<u8>>` -> `a::f`; type arguments removed wherever they appear, impl paths kept readable."""
    out: list[str] = []
    depth = 0
    for char in name:
        if char == "<":
            depth += 1
            if depth == 1:
                out.append("<…>")
            continue
        if char == ">" and depth:
            depth -= 1
            continue
        if depth == 0:
            out.append(char)
    return "".join(out).replace("::<…>", "")


def _footprint(binary: Path) -> dict[str, tuple[int, int]] | None:
    """Demangled name -> (bytes, instances)."""
    raw = _raw_symbols(binary)
    if raw is None:
        return None
    names = demangle([name for name, _ in raw])
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name, (_, size) in zip(names, raw, strict=True):
        totals[name][0] += size
        totals[name][1] += 1
    return {name: (total[0], total[1]) for name, total in totals.items()}


def _groups(names: list[str], footprint: dict[str, tuple[int, int]]) -> list[SymbolGroup]:
    grouped: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name in names:
        size, instances = footprint[name]
        grouped[generic_name(name)][0] += size
        grouped[generic_name(name)][1] += instances
    ranked = sorted(grouped.items(), key=lambda item: (-item[1][0], item[0]))
    return [SymbolGroup(name=name, bytes=size, instances=count) for name, (size, count) in ranked[:TOP]]


def attribute_sizes(baseline: Path, candidate: Path) -> SizeAttribution:
    """Top growing and shrinking symbols, new and removed symbol groups, from the two binaries' symbol tables."""
    try:
        before, after = _footprint(baseline), _footprint(candidate)
    except ElfError as exc:
        return SizeAttribution(symbols_read=False, note=f"symbol tables not read: {exc}")
    if before is None or after is None:
        stripped = [arm for arm, table in (("baseline", before), ("candidate", after)) if table is None]
        return SizeAttribution(
            symbols_read=False,
            note=f"no symbol table in the {' and '.join(stripped)} binary (stripped); sizes cannot be attributed",
        )
    deltas = [
        SymbolDelta(
            name=name,
            baseline_bytes=before.get(name, (0, 0))[0],
            candidate_bytes=after.get(name, (0, 0))[0],
            baseline_instances=before.get(name, (0, 0))[1],
            candidate_instances=after.get(name, (0, 0))[1],
        )
        for name in sorted(before.keys() | after.keys())
    ]
    growing = sorted((d for d in deltas if d.delta > 0), key=lambda d: (-d.delta, d.name))
    shrinking = sorted((d for d in deltas if d.delta < 0), key=lambda d: (d.delta, d.name))
    baseline_total = sum(size for size, _ in before.values())
    candidate_total = sum(size for size, _ in after.values())
    return SizeAttribution(
        symbols_read=True,
        note=(
            f"sized function and data symbols: {baseline_total:,} -> {candidate_total:,} bytes "
            f"({candidate_total - baseline_total:+,}); names demangled, hashes removed, generics grouped"
        ),
        baseline_symbol_bytes=baseline_total,
        candidate_symbol_bytes=candidate_total,
        growing=growing[:TOP],
        shrinking=shrinking[:TOP],
        new_groups=_groups(sorted(after.keys() - before.keys()), after),
        removed_groups=_groups(sorted(before.keys() - after.keys()), before),
    )
