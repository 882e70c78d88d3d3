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
import subprocess
from collections import defaultdict
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from runners.report import SizeAttribution, SymbolDelta, SymbolGroup

TOP = 10

_LEGACY_HASH = re.compile(r"::h[0-9a-f]{16}$")
_V0_DISAMBIGUATOR = re.compile(r"\[[0-9a-f]{1,16}\]")
_LLVM_SUFFIX = re.compile(r"\.llvm\.\d+$")
_LLVM_ANONYMOUS = re.compile(r"^anon\.[0-9a-f]+\.\d+$")
ANONYMOUS = "<LLVM anonymous constants>"


def _raw_symbols(binary: Path) -> list[tuple[str, int]] | None:
    """(mangled name, size) of every sized function and data object; None when the binary has no symbol table."""
    try:
        with binary.open("rb") as handle:
            table = ELFFile(handle).get_section_by_name(".symtab")
            if not isinstance(table, SymbolTableSection):
                return None
            return [
                (symbol.name, int(symbol["st_size"]))
                for symbol in table.iter_symbols()
                if symbol.name
                and symbol["st_size"] > 0
                and symbol["st_info"]["type"] in ("STT_FUNC", "STT_OBJECT")
                and symbol["st_shndx"] != "SHN_UNDEF"
            ]
    except ELFError as exc:
        raise ValueError(f"{binary} is not an ELF file: {exc}") from exc


def demangle(names: list[str]) -> list[str]:
    """Demangle in one `c++filt` process (names in, one per line, same order out), then drop hashes."""
    executable = shutil.which("c++filt")
    if executable is None:
        raise FileNotFoundError("c++filt (GNU binutils) is needed to demangle symbol names; install binutils")
    completed = subprocess.run(
        [executable], input="\n".join(names) + "\n", capture_output=True, text=True, check=True
    )
    demangled = completed.stdout.splitlines()
    if len(demangled) != len(names):
        raise RuntimeError(f"c++filt returned {len(demangled)} names for {len(names)}")
    return [_stable_name(name) for name in demangled]


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
    before, after = _footprint(baseline), _footprint(candidate)
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
