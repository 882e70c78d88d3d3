"""Release binary and .text growth gate: fail growth above the limit until the footprint is explained."""

from __future__ import annotations

from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from runners.report import Artifact, GateVerdict, SizeGate, build_difference_reason


def text_size(binary: Path) -> int:
    """Size in bytes of the ELF `.text` section (code only, unlike the file size that includes symbols)."""
    try:
        with binary.open("rb") as handle:
            section = ELFFile(handle).get_section_by_name(".text")
            if section is None:
                raise ValueError(f"{binary} has no .text section")
            return int(section["sh_size"])
    except ELFError as exc:
        raise ValueError(f"{binary} is not an ELF file: {exc}") from exc


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
