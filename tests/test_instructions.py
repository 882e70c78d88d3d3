"""Instruction counts on fixture builds: exact for identical revisions, the added work counted to the instruction,
work outside the timed region left out of it, and a candidate that lies about its timer failed by the count.

The fixture's timed call is `dynamo_bench::sim::Prepared::run` (the demo profile's `harness.timed_function`): the
simulation (about 104 M instructions on the 1,000-row demo trace) and the busy work `WORK_SCALE` scales (11
instructions a unit, 6,250 units a request). The busy loop is the slow part (a dependent multiply chain), so
`WORK_SCALE` moves the replay's time by more than its instruction count: 1.1 adds a tenth of the busy work's
instructions, ×1.04 of the region, while the replay takes about 6 % longer.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from runners.exec.placement import perf_placement
from runners.exec.sandbox import Sandbox, sha256_of
from runners.perf.sampler import run_performance
from runners.pipeline.campaign import CampaignRequest, run_campaign
from runners.schema.config import PerfConfig
from runners.schema.report import ARMS, Arm, InstructionCounts, PerfVerdict
from runners.schema.verdicts import row_performance
from runners.stages.attribution import parse_callgrind
from runners.stages.instructions import count_instructions, count_run, region_of

from runners.demo import commit_change, demo_config, init_fixture_repo
from runners.verify import verify_performance
from tests.configs import quick
from tests.conftest import HarnessBuilder
from tests.test_perf import DIAGNOSTICS, QUIET_ENOUGH

TIMED = "dynamo_bench::sim::Prepared::run"


def _staged(tmp: Path, baseline: Path, candidate: Path) -> tuple[dict[Arm, Path], Sandbox]:
    """Both binaries under names of different lengths, as a campaign builds them, pinned in a real sandbox."""
    binaries: dict[Arm, Path] = {"baseline": tmp / "bin" / "baseline-0123-offline_replay_bench",
                                 "candidate": tmp / "bin" / "candidate-0123-offline_replay_bench"}
    sandbox = Sandbox.default()
    for arm, source in (("baseline", baseline), ("candidate", candidate)):
        binaries[arm].parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, binaries[arm])
        sandbox.pin(binaries[arm], arm, sha256_of(binaries[arm]))
    return binaries, sandbox


def _count(tmp: Path, baseline: Path, candidate: Path, args: list[str]) -> InstructionCounts:
    binaries, sandbox = _staged(tmp, baseline, candidate)
    return count_instructions(row_id="vllm-agg", binaries=binaries, args=args, timed_function=TIMED, sandbox=sandbox,
                              cpu_set=perf_placement().cpu_set, scratch=tmp / "scratch", out_dir=tmp / "out")


def _regions(counts: InstructionCounts) -> list[int | None]:
    return [run.region_ir for run in counts.runs]


def test_identical_revisions_give_identical_counts(
    harness: HarnessBuilder, demo_row_args: list[str], tmp_path: Path
) -> None:
    """Two campaigns' counting stages (work directories of one length) on one revision: every run of every arm
    counts the same instructions in the timed region, and the kept captures say so too."""
    binary = harness.binary()
    first = _count(tmp_path / "a", binary, binary, demo_row_args)
    second = _count(tmp_path / "b", binary, binary, demo_row_args)
    for counts in (first, second):
        assert counts.problem is None and counts.complete(), counts.problem
        assert counts.scope == "region" and all(run.region_calls == 1 for run in counts.runs)
        assert all(counts.agree(arm) for arm in ARMS)
        assert counts.ratio == 1.0 and counts.delta == 0
        assert counts.tool.startswith("valgrind-") and counts.tool.endswith(" callgrind")
        assert {run.argv[run.argv.index("--tool=callgrind") + 3] for run in counts.runs} == {"/opt/kv-parity/binary"}
    assert len(set(_regions(first) + _regions(second))) == 1, (_regions(first), _regions(second))
    region = first.runs[0].region_ir
    assert region is not None and 100_000_000 < region < first.runs[0].process_ir  # type: ignore[operator]
    for run in first.runs:
        kept = tmp_path / "a" / "out" / f"{run.arm}.{run.run}.callgrind.out"
        assert region_of(parse_callgrind(kept.read_text()), TIMED) == (run.region_ir, 1)


def test_more_replay_work_is_counted_to_the_instruction(
    harness: HarnessBuilder, demo_row_args: list[str], tmp_path: Path
) -> None:
    """WORK_SCALE 1.1 adds exactly a tenth of the busy work's instructions to the region (±1 unit's 11 for the
    rounding of the unit count), measured against a build without busy work."""
    binaries, sandbox = _staged(tmp_path / "none", harness.binary(), harness.binary(WORK_SCALE=0.0))
    idle = count_run(binaries["candidate"], demo_row_args, "candidate", 0, timed_function=TIMED, sandbox=sandbox,
                     cpu_set=perf_placement().cpu_set, scratch=tmp_path / "none" / "scratch",
                     out_dir=tmp_path / "none")
    more = _count(tmp_path / "more", harness.binary(), harness.binary(WORK_SCALE=1.1), demo_row_args)
    assert more.complete() and all(more.agree(arm) for arm in ARMS), more.problem
    base = more.figures("baseline")[0]
    assert idle.region_ir is not None
    busy = base - idle.region_ir
    assert busy == pytest.approx(11 * 6_250 * 1_000, rel=0.01), "the busy loop is 11 instructions a unit"
    assert more.delta == pytest.approx(busy / 10, abs=11)
    assert more.ratio == pytest.approx(1 + busy / 10 / base, abs=1e-7)
    assert 1.03 < (more.ratio or 0) < 1.05, more.ratio


def test_work_outside_the_timed_region_leaves_the_region_count_unchanged(
    harness: HarnessBuilder, demo_row_args: list[str], tmp_path: Path
) -> None:
    counts = _count(tmp_path, harness.binary(), harness.binary(OUTSIDE_WORK=1.0), demo_row_args)
    assert counts.complete() and counts.scope == "region", counts.problem
    assert counts.delta == 0 and counts.ratio == 1.0
    process = {arm: [run.process_ir or 0 for run in counts.counted(arm)] for arm in ARMS}
    assert min(process["candidate"]) - max(process["baseline"]) > 0.9 * 11 * 6_250 * 1_000, process


def test_a_candidate_reporting_its_timer_times_0_8_fails_by_the_instruction_count(
    harness: HarnessBuilder, demo_row_args: list[str], tmp_path: Path
) -> None:
    """20 % more replay work, every reported replay time × 0.8, at the fixture's default size: the reported ratio
    is about 0.91, the kernel's clocks are diluted by the process's setup (INCONCLUSIVE, benchmarks/README.md),
    and the counted work of the timed region grew by ×1.079, above the 1.05 the config declares."""
    honest, liar = harness.binary(), harness.binary(WORK_SCALE=1.2, REPORTED_TIME_SCALE=0.8)
    binaries, sandbox = _staged(tmp_path, honest, liar)
    config = PerfConfig(pairs=60, warmups_per_arm=5, diagnostics=DIAGNOSTICS, invalidation=QUIET_ENOUGH)
    placement = perf_placement()
    perf = run_performance(row_id="vllm-agg", harness_args=demo_row_args, binaries=binaries, perf=config,
                           timing_field="replay_execution_ms", placement=placement, workdir=tmp_path / "work",
                           sandbox=sandbox)
    assert perf.reported_verdict == PerfVerdict.PASS, f"the reported figures alone pass: {perf.reason}"
    counts = count_instructions(row_id="vllm-agg", binaries=binaries, args=demo_row_args, timed_function=TIMED,
                                sandbox=sandbox, cpu_set=placement.cpu_set, scratch=tmp_path / "scratch",
                                out_dir=tmp_path / "out")
    assert counts.lowest_ratio is not None and counts.lowest_ratio > 1.07, counts
    verdict, reason = row_performance(perf, counts, config)
    assert verdict == PerfVerdict.FAIL, reason
    on_its_word = perf.model_copy(update={"verdict": perf.reported_verdict})
    assert row_performance(on_its_word, counts, config)[0] == PerfVerdict.FAIL, "the count alone fails the lie"
    if not any(gate.verdict == PerfVerdict.FAIL for gate in perf.kernel_gates):
        assert reason.startswith("wall-time PASS contradicted by the instruction count"), reason
        assert "while `replay_execution_ms` PASSes (median 0.9" in reason and "in the timed region" in reason
    assert verify_performance(perf, config, "vllm-agg") == []


def test_a_campaign_counts_each_row_after_its_samples_and_keeps_the_captures(
    tmp_path: Path, demo_trace: Path
) -> None:
    """Through the campaign: the counting stage runs once the row's series completed (the quick gate never
    invalidates a pair, so load cannot block it), its figures feed the row's verdict, and the captures are kept."""
    repo = tmp_path / "repo"
    init_fixture_repo(repo)
    head = commit_change(repo, "reword comments", touch_comment=True)
    report = run_campaign(CampaignRequest(repo=repo, base="HEAD~1", head=head, config=quick(demo_config()),
                                          config_source="test", out_dir=tmp_path / "out", rows=["vllm-agg"],
                                          trace_path=demo_trace))
    [row] = report.rows
    assert row.performance is not None and row.performance.reported_verdict is not None, row.perf_reason
    counts = row.instructions
    assert counts is not None and counts.complete(), counts
    assert counts.scope == "region" and counts.timed_function == TIMED
    assert counts.delta == 0, "a comment-only change executes the same instructions"
    assert (row.perf_verdict, row.perf_reason) == row_performance(row.performance, counts, report.config.perf)
    assert sorted(p.name for p in (tmp_path / "out" / "instructions" / "vllm-agg").iterdir()) == [
        f"{arm}.{run}.callgrind.out" for arm in ARMS for run in (0, 1)]
