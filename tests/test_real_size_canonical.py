"""Canonicalisation at the protocol's real size, on real harness output: the fixture harness built with the real
report shapes, run on the demo-5000 profile's 5,000-request window (a 7.7 MB line), and determinism's way of
keeping one canonical report per arm in a file while every later repetition is only digested."""

from __future__ import annotations

from pathlib import Path

import pytest
from runners.exec.harness import row_args
from runners.exec.placement import correctness_cpu_sets
from runners.schema.config import CampaignConfig, load_profile
from runners.schema.report import ARMS
from runners.stages.canonical import Canonical, canonicalize
from runners.stages.determinism import DeterminismOutcome, run_determinism
from runners.stages.trace import prepare_trace

from runners.demo import REAL_HARNESS_SHAPES
from runners.demo_trace import generate_demo_trace
from tests.conftest import HarnessBuilder

PROFILE = "demo-5000"
ROW = "vllm-disagg"


@pytest.fixture(scope="module")
def real_size(harness: HarnessBuilder, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The real-shapes binary and the demo-5000 disaggregated row's argv (its verified 5,000-row slice)."""
    config = load_profile(PROFILE)
    work = tmp_path_factory.mktemp("real-size")
    source = work / "trace.jsonl"
    generate_demo_trace(source, rows=config.trace.offset + config.trace.count)
    trace = work / "slice.jsonl"
    prepare_trace(source, config.trace, trace)
    trace.chmod(0o444)
    row = next(row for row in config.rows if row.id == ROW)
    return harness.binary(**REAL_HARNESS_SHAPES), row_args(config, row, trace)


@pytest.fixture(scope="module")
def determinism(real_size: tuple[Path, list[str]], tmp_path_factory: pytest.TempPathFactory) -> tuple[
        DeterminismOutcome, Path, CampaignConfig]:
    binary, args = real_size
    config = load_profile(PROFILE)
    workdir = tmp_path_factory.mktemp("determinism") / "det"
    outcome = run_determinism(row_id=ROW, binaries=dict.fromkeys(ARMS, binary), harness_args=args,
                              exclusions=config.harness.exclusions, cpu_sets=correctness_cpu_sets(4),
                              workdir=workdir)
    return outcome, workdir, config


def _line(workdir: Path, arm: str, rep: int) -> bytes:
    return (workdir / f"{ROW}-{arm}-{rep}" / "canonical.jsonl").read_bytes()


def test_the_5000_request_line_canonicalised_a_run_at_a_time_is_the_whole_parse(
        determinism: tuple[DeterminismOutcome, Path, CampaignConfig], tmp_path: Path) -> None:
    """Every way of keeping the bytes gives the whole parse's bytes and digests, and the records read back a run
    at a time are the whole parse's records."""
    _, workdir, config = determinism
    line = _line(workdir, "baseline", 0)
    assert len(line) > 5_000_000
    exclusions = config.harness.exclusions
    whole = canonicalize(line, exclusions, record_by_record=False)
    in_memory = canonicalize(line, exclusions)
    in_file = canonicalize(line, exclusions, keep=tmp_path / "kept.canonical.json")
    digests_only = canonicalize(line, exclusions, keep=False)
    for streamed in (in_memory, in_file, digests_only):
        assert (streamed.digest, streamed.section_digests) == (whole.digest, whole.section_digests)
        assert streamed.section_spans == whole.section_spans and streamed.resolutions == whole.resolutions
    assert in_memory.encoded == in_file.encoded == whole.encoded
    assert in_file.kept == tmp_path / "kept.canonical.json"
    with pytest.raises(RuntimeError, match="only the digests"):
        digests_only.streamed()

    runs = in_file.record_runs
    assert runs is not None and len(runs) > 1 and sum(count for *_, count in runs) == 5000
    records = whole.data["per_request"]
    for canon in (in_memory, in_file):
        streamed = canon.streamed()
        assert list(streamed["per_request"]) == records
        assert streamed["per_request"][4999] == records[-1] and streamed["per_request"][-5000] == records[0]
        assert {key: value for key, value in streamed.items() if key != "per_request"} == {
            key: value for key, value in whole.data.items() if key != "per_request"}


def test_determinism_keeps_each_arm_s_first_repetition_in_a_file_and_digests_the_later_ones(
        determinism: tuple[DeterminismOutcome, Path, CampaignConfig]) -> None:
    outcome, workdir, config = determinism
    assert not outcome.failures and not outcome.blocked and not outcome.result.unstable_arms
    for arm in ARMS:
        kept: Canonical = outcome.canonical[arm]
        assert kept.kept == workdir / f"{ROW}-{arm}.canonical.json", "kept beside, never inside, a process dir"
        first = canonicalize(_line(workdir, arm, 0), config.harness.exclusions)
        assert kept.encoded == first.encoded and kept.digest == first.digest
    assert sorted(path.name for path in workdir.glob("*.canonical.json")) == [
        f"{ROW}-{arm}.canonical.json" for arm in sorted(ARMS)]
    for run in outcome.result.runs:
        assert run.canonical_digest == outcome.canonical["baseline"].digest
        assert run.section_digests == outcome.canonical["baseline"].section_digests


def test_a_later_repetition_that_differs_is_named_with_its_differing_sections(
        harness: HarnessBuilder, demo_row_args: list[str], campaign_config: CampaignConfig, tmp_path: Path) -> None:
    """A digest-only repetition still carries its section digests, so instability names where it lies."""
    binaries = {"baseline": harness.binary(), "candidate": harness.binary(ENTROPY_LEAK=True)}
    outcome = run_determinism(row_id="leak", binaries=binaries, harness_args=demo_row_args,
                              exclusions=campaign_config.harness.exclusions, cpu_sets=correctness_cpu_sets(4),
                              workdir=tmp_path / "det")
    assert outcome.result.unstable_arms == ["candidate"]
    first, later = (run for run in outcome.result.runs if run.arm == "candidate")
    assert outcome.canonical["candidate"].digest == first.canonical_digest != later.canonical_digest
    differing = {name for name in first.section_digests if first.section_digests[name] != later.section_digests[name]}
    assert differing and differing <= {"per_request", "summary", "coverage"}
