"""Instruction counts without running anything: the capture's call arcs, the corroborating rule, `kv-parity verify`,
the config, and what `perf stat` printed (recorded here, and on bare metal as perf documents its CSV output)."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import pytest

from bot.pages.details import instruction_points
from bot.publish.html_report import report_html
from bot.publish.render import check_run_content
from bot.publish.views import Links
from bot.store.campaigns import Store
from runners.exec.counter import (
    check_hardware_counter,
    hardware_counter_check,
    parse_perf_stat,
    probe_hardware_counter,
)
from runners.exec.untrusted import UntrustedFileError
from runners.schema.config import ConfigError, PerfConfig, parse_config
from runners.schema.report import CountedRun, DoctorStatus, InstructionCounts, PerfResult, PerfVerdict
from runners.schema.verdicts import campaign_verdicts, instruction_change, instruction_contradiction, row_performance
from runners.stages.attribution import parse_callgrind
from runners.stages.instructions import _checked, region_of, should_count
from runners.verify import verify_report
from tests.report_factory import make_report, synthetic_perf
from tests.test_render_golden import campaign

RUN = "_ZN12dynamo_bench3sim8Prepared3run17he2df2eb5c8846d1bE"
HOT = "_ZN12dynamo_bench7hotspot8hot_spot17h0123456789abcdefE"
CLI = "_ZN12dynamo_bench3cli3run17hfedcba9876543210E"

CAPTURE = f"""\
# callgrind format
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir
summary: 1500

fn=(1) main
0 100
cfn=(2) {CLI}
calls=1 0
0 1400
fn=(2)
0 200
cfn=(3) {RUN}
calls=1 0
0 1000
cfn=(4) {HOT}
calls=2 0
0 200
fn=(3)
0 700
cfn=(3)
calls=3 0
0 150
cfn=(4)
calls=1 0
0 150
fn=(4)
0 500
totals: 1500
"""
"""main -> cli::run (200 own) -> Prepared::run (1,000 inside, recursing into itself) and hot_spot twice outside
the region; Prepared::run calls hot_spot once (150 of hot_spot's 500 are inside the region)."""


def test_the_region_is_every_call_into_the_timed_function_from_outside_it() -> None:
    profile = parse_callgrind(CAPTURE)
    assert profile.summary == profile.totals == sum(profile.self_costs.values()) == 1500
    assert region_of(profile, "dynamo_bench::sim::Prepared::run") == (1000, 1), "its own recursion counted once"
    assert region_of(profile, "dynamo_bench::hotspot::hot_spot") == (350, 3)
    assert region_of(profile, "dynamo_bench::*::run") == (1400, 1), "a glob: cli::run's call holds the other's"
    assert region_of(profile, "dynamo_bench::sim::Prepared::ru") == (0, 0), "a whole-name match, never a prefix"


def test_a_capture_that_contradicts_itself_is_refused() -> None:
    assert _checked(parse_callgrind(CAPTURE), "baseline run 0") == 1500
    forged = CAPTURE.replace("fn=(4)\n0 500", "fn=(4)\n0 5")
    contradiction = r"contradicts itself \(summary 1,500, totals 1,500, functions 1,005\)"
    with pytest.raises(UntrustedFileError, match=contradiction):
        _checked(parse_callgrind(forged), "baseline run 0")
    named_late = CAPTURE.replace("summary: 1500\n", "") + "summary: 1500\n"
    with pytest.raises(UntrustedFileError, match="no `summary:` header line"):
        _checked(parse_callgrind(named_late), "candidate run 1")


# --- the counts and the corroborating rule ------------------------------------------------------------------


def counts(baseline: list[int], candidate: list[int], *, timed: str | None = "dynamo_bench::sim::Prepared::run",
           calls: int = 1, problem: str | None = None) -> InstructionCounts:
    runs = [
        CountedRun(arm=arm, run=run, argv=["valgrind"], seconds=1.0, process_ir=value + 60_000_000,
                   region_ir=value if timed else None, region_calls=calls if timed else 0)
        for arm, values in (("baseline", baseline), ("candidate", candidate)) for run, value in enumerate(values)
    ]
    return InstructionCounts(tool="valgrind-3.19.0 callgrind", timed_function=timed, runs=runs, problem=problem)


def test_exact_counts_give_the_ratio_and_delta_and_disagreeing_runs_are_nondeterministic_work() -> None:
    same = counts([173_358_165, 173_358_165], [190_693_981, 190_693_981])
    assert same.scope == "region" and same.complete() and same.agree("baseline") and same.agree("candidate")
    assert same.ratio == same.lowest_ratio == pytest.approx(1.1)
    assert same.delta == 17_335_816
    assert instruction_change(same) == ("×1.1000 (+17,335,816 instructions) in the timed region "
                                        "(`dynamo_bench::sim::Prepared::run`)")
    jitter = counts([1_000_000, 1_010_000], [1_100_000, 1_100_000])
    assert not jitter.agree("baseline") and jitter.agree("candidate")
    assert jitter.lowest_ratio == pytest.approx(1_100_000 / 1_010_000)
    assert "(+95,000 instructions, at least ×1.0891 across runs)" in (instruction_change(jitter) or "")


def test_without_a_timed_function_or_a_call_into_it_the_whole_process_is_compared_and_labelled() -> None:
    unset = counts([100, 100], [110, 110], timed=None)
    assert unset.scope == "process" and unset.figures("baseline") == [60_000_100, 60_000_100]
    assert unset.scope_label == "whole process (no `harness.timed_function` configured)"
    inlined = counts([100, 100], [110, 110], calls=0)
    assert inlined.scope == "process"
    assert "was never entered by baseline and candidate: inlined, renamed or absent" in inlined.scope_label


def test_counts_missing_a_run_compare_nothing() -> None:
    failed = counts([100], [110], problem="candidate run 1 was not counted: callgrind exited 1")
    assert not failed.complete() and failed.ratio is None and failed.delta is None
    assert instruction_change(failed) is None


def _passing_perf() -> PerfResult:
    perf = synthetic_perf("vllm-agg", make_report("pass").rows[0].performance.placement,  # type: ignore[union-attr]
                          centre=0.96, spread=0.01)
    assert perf.verdict == PerfVerdict.PASS, perf.reason
    return perf


def test_a_wall_time_pass_whose_counted_work_grew_fails_naming_both_figures() -> None:
    perf = _passing_perf()
    verdict, reason = row_performance(perf, counts([1_000_000] * 2, [1_190_000] * 2), PerfConfig())
    assert verdict == PerfVerdict.FAIL
    assert reason.startswith("wall-time PASS contradicted by the instruction count: the candidate executes ×1.1900 "
                             "the baseline's instructions (+190,000) > 1.05 while `replay_execution_ms` PASSes "
                             "(median 0.96")
    assert reason.endswith("in the timed region (`dynamo_bench::sim::Prepared::run`); a verdict never rests on the "
                           "candidate's own figures alone")
    contradiction = instruction_contradiction(perf, counts([1_000_000] * 2, [1_190_000] * 2))
    assert contradiction is not None and contradiction.startswith(
        "contradiction: the reported `replay_execution_ms` fell (median ratio 0.96")
    assert instruction_contradiction(perf, counts([1_000_000] * 2, [1_004_000] * 2)) is None, "below 0.5 % more"
    slower = _passing_perf().model_copy(update={"bounds": perf.bounds.model_copy(update={"upper": 1.01})})  # type: ignore[union-attr]
    assert instruction_contradiction(slower, counts([1_000_000] * 2, [1_190_000] * 2)) is None, "time did not fall"


@pytest.mark.parametrize(("config", "grown", "why"), [
    (PerfConfig(instructions="show"), 1_190_000, "`show` reports and never decides"),
    (PerfConfig(), 1_050_000, "at the threshold is not above it"),
    (PerfConfig(instructions_threshold=1.25), 1_190_000, "the declared threshold applies"),
])
def test_the_counts_do_not_fail_a_pass_they_do_not_contradict(config: PerfConfig, grown: int, why: str) -> None:
    perf = _passing_perf()
    assert row_performance(perf, counts([1_000_000] * 2, [grown] * 2), config) == (perf.verdict, perf.reason), why


def test_the_counts_never_rescue_or_decide_alone() -> None:
    perf = _passing_perf()
    failing = perf.model_copy(update={"verdict": PerfVerdict.FAIL, "reason": "lower bound above"})
    assert row_performance(failing, counts([1_000_000] * 2, [900_000] * 2), PerfConfig())[0] == PerfVerdict.FAIL
    unsure = perf.model_copy(update={"verdict": PerfVerdict.INCONCLUSIVE})
    doubled = counts([1_000_000] * 2, [2_000_000] * 2)
    assert row_performance(unsure, doubled, PerfConfig())[0] == PerfVerdict.INCONCLUSIVE
    assert row_performance(perf, None, PerfConfig())[0] == PerfVerdict.PASS
    incomplete = counts([1_000_000], [2_000_000], problem="baseline run 1 was not counted")
    assert row_performance(perf, incomplete, PerfConfig())[0] == PerfVerdict.PASS
    jitter = counts([1_000_000, 1_000_000], [1_050_000, 1_060_000])
    assert jitter.ratio is not None and jitter.ratio > 1.05
    assert row_performance(perf, jitter, PerfConfig())[0] == PerfVerdict.PASS, "the lowest ratio the runs allow"


def test_verify_recomputes_the_instruction_gate() -> None:
    report = make_report("pass")
    row = report.rows[0]
    assert row.performance is not None and row.performance.verdict == PerfVerdict.PASS
    grown = counts([1_000_000] * 2, [1_190_000] * 2)
    verdict, reason = row_performance(row.performance, grown, report.config.perf)
    failed = row.model_copy(update={"instructions": grown, "perf_verdict": verdict, "perf_reason": reason})
    consistent = report.model_copy(update={"rows": [failed, *report.rows[1:]]})
    consistent = consistent.model_copy(update={"verdicts": campaign_verdicts(consistent)})
    assert verify_report(consistent) == []
    tampered = consistent.model_copy(update={"rows": [failed.model_copy(update={"perf_verdict": PerfVerdict.PASS}),
                                                      *report.rows[1:]]})
    problems = verify_report(tampered)
    assert any("row performance verdict PASS, its evidence with the instruction counts says FAIL" in p
               for p in problems), problems
    silent = counts([1_000_000, 1_000_000], [1_000_000], problem=None)
    quiet = report.model_copy(update={"rows": [row.model_copy(update={"instructions": silent}), *report.rows[1:]]})
    assert not any("has no count" in p for p in verify_report(quiet)), "a missing run is not a contradiction"
    assert verify_report(quiet) == []
    broken = silent.model_copy(update={"runs": [*silent.runs, CountedRun(
        arm="candidate", run=1, argv=[], seconds=0.1, failure="callgrind exited 1")]})
    unexplained = report.model_copy(update={"rows": [row.model_copy(update={"instructions": broken}),
                                                     *report.rows[1:]]})
    assert any("candidate run 1 has no count, but the counts record no problem" in p
               for p in verify_report(unexplained))
    assert verify_report(unexplained) == [
        f"row {row.row.id}: instruction counts: candidate run 1 has no count, but the counts record no problem and"
        " would compare the arms"]


# --- the config ---------------------------------------------------------------------------------------------


def _config(perf: str = "", harness_table: str = "") -> str:
    return f"""
[build]
command = ["cargo", "build", "--release", "--features", "replay-bench"]
features = ["replay-bench"]
no_default_features = false
[trace]
path = "t.jsonl"
sha256 = "{'0' * 64}"
offset = 0
count = 10
[harness]
{harness_table}
[[rows]]
id = "a"
args = []
[rows.expect]
pressure = [1, 3]
[perf]
{perf}
"""


def test_the_instruction_settings_are_predeclared_with_defaults() -> None:
    config = parse_config(_config(), "t")
    assert config.perf.instructions == "corroborate" and config.perf.instructions_threshold == 1.05
    assert config.harness.timed_function is None
    chosen = parse_config(_config('instructions = "show"\ninstructions_threshold = 1.2',
                                  harness_table='timed_function = "crate::*::run"'), "t")
    assert chosen.perf.instructions == "show" and chosen.perf.instructions_threshold == 1.2
    assert chosen.harness.timed_function == "crate::*::run"
    assert parse_config(_config('instructions = "off"'), "t").perf.instructions == "off"
    with pytest.raises(ConfigError, match="perf.instructions: Input should be 'corroborate', 'show' or 'off'"):
        parse_config(_config('instructions = "never"'), "t")
    with pytest.raises(ConfigError, match="perf.instructions_threshold: Input should be greater than 1"):
        parse_config(_config("instructions_threshold = 0.95"), "t")
    with pytest.raises(ConfigError, match="harness.timed_function: String should have at least 1 character"):
        parse_config(_config(harness_table='timed_function = ""'), "t")


# --- perf stat and the doctor -------------------------------------------------------------------------------

THIS_VM = "# started on Sat Dec  6 02:14:07 2025\n\n<not supported>,,instructions:u,0,100.00,,\n"
"""What perf 6.1 printed here (`perf stat -x, -e instructions:u -o FILE -- true`): a VM without a virtual PMU."""
BARE_METAL = "# started on Mon Jan  5 10:00:00 2026\n\n130379,,instructions:u,249770,100.00,,\n"
"""perf's CSV format (tools/perf/Documentation/perf-stat.txt, CSV FORMAT: value, unit, event, run time, share of
the run counted, metric), as it prints a counted event; this VM cannot produce it."""


@pytest.mark.parametrize(("text", "expected"), [
    (THIS_VM, None),
    (BARE_METAL, 130379),
    ("16934571004,,instructions:u,1795310712,100.00,1.95,insn per cycle\n", 16934571004),
    ("8693016215,,cycles:u,1795310712,100.00,4.842,GHz\n", None),
    ("<not counted>,,instructions:u,0,0.00,,\n", None),
    ("2114632,,instructions:u,1032845,49.87,,\n", None),
    ("1000,,cpu_core/instructions:u/,2000,100.00,,\n234,,cpu_atom/instructions:u/,2000,100.00,,\n", 1234),
    ("<not supported>,,instructions:u,/,0,100.00,,\n", None),
    ("5120,,instructions:u,/kv-parity/sample-7,812345,100.00,,\n", 5120),
    ("5120,,instructions:u,/kv-parity/sample-7,812345,62.50,,\n", None),
    ("", None),
])
def test_perf_stat_output_gives_an_exact_count_or_none(text: str, expected: int | None) -> None:
    assert parse_perf_stat(text) == expected


def test_the_doctor_says_whether_the_node_counts_instructions() -> None:
    offered = hardware_counter_check("/usr/bin/perf", BARE_METAL, parse_perf_stat(BARE_METAL))
    assert offered.status == DoctorStatus.PASS and "130,379 for `true`" in offered.detail
    refused = hardware_counter_check("/usr/bin/perf", THIS_VM, parse_perf_stat(THIS_VM))
    assert refused.status == DoctorStatus.WARN and refused.fix
    assert "does not offer instructions:u here (perf stat: <not supported>,,instructions:u,0,100.00,,)" in \
        refused.detail
    missing = hardware_counter_check(None, None, None)
    assert missing.status == DoctorStatus.WARN and missing.detail.startswith("perf missing")


def test_the_doctors_answer_on_this_node_follows_what_perf_printed(tmp_path: Path) -> None:
    without_perf = check_hardware_counter(search_path=str(tmp_path))  # a PATH with nothing on it
    assert without_perf.status == DoctorStatus.WARN
    assert without_perf.detail.startswith("perf missing: samples count no instructions"), without_perf.detail
    perf, printed, count = probe_hardware_counter()
    check = check_hardware_counter()
    assert (check.status == DoctorStatus.PASS) == (count is not None)
    if perf is None:
        assert check.detail.startswith("perf missing: samples count no instructions"), check.detail
    elif count is not None:
        assert f"offers instructions:u ({count:,.0f} for `true`)" in check.detail, check.detail
    elif printed is not None:
        assert "does not offer instructions:u here" in check.detail
        shown = next((line.strip() for line in printed.splitlines() if line.strip() and not line.startswith("#")),
                     "no output")
        assert f"does not offer instructions:u here (perf stat: {shown})" in check.detail, check.detail
    else:
        assert "does not offer instructions:u here (perf stat: no output)" in check.detail, check.detail


# --- where people look --------------------------------------------------------------------------------------


def test_counting_off_runs_no_stage_and_every_row_says_so() -> None:
    """`[perf] instructions = "off"`: the stage never runs (should_count), and the row table says the counts were
    not taken rather than leaving the cell blank."""
    report = make_report("pass")
    perf = report.rows[0].performance
    assert perf is not None and perf.reported_verdict is not None
    off = report.config.perf.model_copy(update={"instructions": "off"})
    assert should_count(perf, report.config.perf) and not should_count(perf, off)
    stripped = report.model_copy(update={
        "config": report.config.model_copy(update={"perf": off}),
        "rows": [row.model_copy(update={"instructions": None}) for row in report.rows]})
    assert "| off: not counted |" in check_run_content(stripped, Links()).summary


def test_a_count_that_fails_a_pass_is_shown_next_to_the_time_it_contradicts() -> None:
    report = make_report("instruction_contradiction")
    content = check_run_content(report, Links())
    assert "| ❌ ×1.0793 (+3,320,553,175) timed region · ⚠️ time fell, work rose |" in content.summary
    assert "instructions above ×1.05 under a wall-time PASS on sglang-disagg" in content.summary
    assert "| baseline | 1 | 41,873,306,121 |" in content.text
    assert "- ⚠️ contradiction: the reported `replay_execution_ms` fell (median ratio 0.9544)" in content.text
    html = report_html(report)
    figures = [ElementTree.fromstring(chart) for chart in
               (html[start:html.index("</svg>", start) + 6] for start in _all(html, '<svg class="chart"'))
               if "instructions in the timed region" in chart]
    assert len(figures) == 2, "one figure per counted row"
    failing = figures[1]
    labels = [text.text for text in failing.iter("{http://www.w3.org/2000/svg}text")]
    assert {"baseline run 1", "candidate run 2", "baseline ×1.05 (corroborate) 43,967"} <= set(labels)


def _all(text: str, needle: str) -> list[int]:
    found, start = [], text.find(needle)
    while start >= 0:
        found.append(start)
        start = text.find(needle, start + 1)
    return found


def test_the_merge_base_count_of_each_counted_row_is_kept_for_the_history_page(tmp_path: Path) -> None:
    report = make_report("pass")
    points = instruction_points(campaign(), report)
    assert [(p.row_id, p.instructions, p.exact) for p in points] == [
        ("vllm-disagg", 41_872_306_118, True), ("sglang-disagg", 41_873_306_140, False)]
    assert points[0].counted == report.rows[0].instructions.scope_label  # type: ignore[union-attr]
    store = Store(tmp_path / "bot.sqlite3")
    store.record_instruction_points(points)
    store.record_instruction_points(points)
    assert store.instruction_history(campaign().repo, "sglang-disagg") == [points[1]], "a re-publish adds none"
    assert instruction_points(campaign(), make_report("parity_fail")) == [], "no counts, no point"
