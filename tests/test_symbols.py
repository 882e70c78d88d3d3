"""Size attribution on real fixture builds: the text-bloat variant's growth is found in its one generic function."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from runners.stages.sizes import ElfError, text_size
from runners.stages.symbols import ANONYMOUS, attribute_sizes, demangle, generic_name

from tests.conftest import HarnessBuilder


def test_demangles_to_names_that_are_stable_across_builds() -> None:
    assert demangle([
        "_ZN12dynamo_bench3sim8Prepared3run17he2df2eb5c8846d1bE",
        "_RNvCs15kBYyAo9fc_7mycrate3foo",
        "_ZN4core3fmt5write17h1234567890abcdefE.llvm.13109078017361774100",
        "anon.0356f706cd4e71815f300fea8d113a0a.11.llvm.13109078017361774100",
    ]) == ["dynamo_bench::sim::Prepared::run", "mycrate::foo", "core::fmt::write", ANONYMOUS]


@pytest.mark.parametrize(
    ("name", "generic"),
    [
        ("a::f::<u8, alloc::vec::Vec<u8>>", "a::f"),
        ("<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop", "<…>::drop"),
        ("plain::name", "plain::name"),
    ],
)
def test_generic_name_drops_type_arguments(name: str, generic: str) -> None:
    assert generic_name(name) == generic


def test_text_bloat_is_attributed_to_its_kernel(harness: HarnessBuilder) -> None:
    base, bloated = harness.binary(), harness.binary(TEXT_BLOAT=True)
    attribution = attribute_sizes(base, bloated)
    assert attribution.symbols_read
    top = attribution.growing[0]
    assert top.name == "dynamo_bench::bloat::bloat_kernel"
    assert (top.baseline_instances, top.candidate_instances) == (0, 64)
    assert top.baseline_bytes == 0 and top.candidate_bytes > 0
    assert attribution.new_groups[0].name == "dynamo_bench::bloat::bloat_kernel"
    assert attribution.new_groups[0].instances == 64
    assert all("bloat" not in group.name for group in attribution.removed_groups)
    assert attribution.candidate_symbol_bytes - attribution.baseline_symbol_bytes >= top.candidate_bytes // 2


def test_identical_binaries_attribute_nothing(harness: HarnessBuilder) -> None:
    attribution = attribute_sizes(harness.binary(), harness.binary())
    assert attribution.symbols_read
    assert (attribution.growing, attribution.shrinking, attribution.new_groups, attribution.removed_groups) == (
        [], [], [], []
    )


def test_a_stripped_binary_says_so_instead_of_guessing(harness: HarnessBuilder, tmp_path: Path) -> None:
    strip = shutil.which("strip")
    assert strip, "binutils' strip ships with the toolchain the fixture builds need"
    stripped = tmp_path / "stripped"
    shutil.copy2(harness.binary(), stripped)
    subprocess.run([strip, "--strip-all", str(stripped)], check=True)
    attribution = attribute_sizes(harness.binary(), stripped)
    assert not attribution.symbols_read
    assert "candidate" in attribution.note and "stripped" in attribution.note
    assert attribution.growing == []


def test_a_non_elf_file_is_a_clear_error(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(ElfError, match="script.sh is not an ELF file, or a malformed one"):
        text_size(script)
    attribution = attribute_sizes(script, script)
    assert not attribution.symbols_read
    assert "script.sh is not an ELF file, or a malformed one" in attribution.note
