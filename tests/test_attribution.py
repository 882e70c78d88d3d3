"""Regression attribution: parsers on known text, and the real thing on fixture builds whose added work sits in
one named function (instruction counts make the attribution deterministic)."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from runners.exec.sandbox import Sandbox
from runners.stages.attribution import (
    attribute_regression,
    bare_launcher,
    callgrind_self_costs,
    compare_work,
    perf_script_stacks,
    sandbox_launcher,
    work_counters,
)
from runners.stages.flamegraph import differential_flame_svg, flame_svg

from runners.demo_trace import generate_demo_trace
from tests.conftest import HarnessBuilder

CALLGRIND = """\
# callgrind format
events: Ir
fn=(1) main
10 5
+1 7
cfn=(2) helper
calls=1 0
* 1000
fn=(2)
20 40
-3 2
fn=(3) other
1 3
cfn=(2)
calls=2 0
+1 80
"""


def test_callgrind_self_costs_skip_inclusive_call_costs_and_resolve_compressed_names() -> None:
    assert callgrind_self_costs(CALLGRIND) == {"main": 12, "helper": 42, "other": 3}


PERF_SCRIPT = """\
bench
\t    4a1 leaf_a
\t    3f0 middle
\t    100 main

other
\t    111 not_ours

bench
\t    4a2 leaf_b (inlined)
\t    100 main
"""


def test_perf_script_stacks_keep_only_the_harness_process_root_first() -> None:
    assert perf_script_stacks(PERF_SCRIPT, "bench") == Counter(
        {("main", "middle", "leaf_a"): 1, ("main", "leaf_b"): 1}
    )


def _canonical(requests: int, steps: int) -> dict[str, object]:
    return {
        "summary": {"num_requests": requests, "engine_steps": steps, "total_input_tokens": 10 * requests},
        "coverage": {"kv_ingest": {"events": 7}},
        "per_request": [{"routing_history": [{"pool": "agg", "outcome": "immediate", "logical_worker_id": 0}]}
                        for _ in range(requests)],
    }


def test_work_comparison_tells_more_work_from_the_same_work() -> None:
    counters = work_counters(_canonical(3, 9))
    assert counters["route_decisions.agg.immediate"] == 3
    assert counters["route_decisions.agg.queued"] == 0, "both outcomes of every routed pool are counted"
    same = compare_work(_canonical(3, 9), _canonical(3, 9))
    assert same.equivalent and "identical" in same.summary
    more = compare_work(_canonical(3, 9), _canonical(3, 12))
    assert not more.equivalent and "summary.engine_steps 9 -> 12" in more.summary


def test_flame_graphs_are_well_formed_svg_with_a_frame_per_path() -> None:
    base = Counter({("main", "a"): 60, ("main", "b"): 40})
    cand = Counter({("main", "a"): 60, ("main", "b"): 40, ("main", "hot"): 100})
    single = ET.fromstring(flame_svg(cand, "candidate <arm>"))
    titles = [t.text for t in single.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t and t.startswith("hot: 100 samples (50.0%)") for t in titles)
    diff = ET.fromstring(differential_flame_svg(base, cand, "diff"))
    svg = "{http://www.w3.org/2000/svg}"
    frames = {g.find(f"{svg}title").text.split(":")[0]: g for g in diff.iter(f"{svg}g")}
    assert frames["hot"].find(f"{svg}title").text.endswith("0.0% -> 50.0% of samples, self +50.0%")
    assert frames["a"].find(f"{svg}title").text.endswith("60.0% -> 30.0% of samples, self -30.0%")
    fill = {name: g.find(f"{svg}rect").get("fill") for name, g in frames.items()}
    assert fill["hot"] == "rgb(235,60,60)" and fill["a"] == "rgb(60,60,235)"
    assert fill["main"] == "rgb(235,235,235)", "a caller whose own time did not move stays neutral"


def _canonical_of(binary: Path, args: list[str], out: Path) -> dict[str, object]:
    subprocess.run([str(binary), *args, "--canonical-reports-jsonl", str(out)], check=True, capture_output=True)
    return dict(json.loads(out.read_text().splitlines()[0]))


def test_added_work_in_one_function_is_attributed_to_it(
    harness: HarnessBuilder, demo_row_args: list[str], tmp_path: Path
) -> None:
    binaries = {"baseline": harness.binary(), "candidate": harness.binary(HOT_SPOT_WORK=2.0)}
    canonical = {arm: _canonical_of(path, demo_row_args, tmp_path / f"{arm}.jsonl") for arm, path in binaries.items()}
    result = attribute_regression(
        binaries, demo_row_args, canonical, tmp_path / "attribution", scratch=tmp_path / "scratch",
        trigger="performance FAIL",
        launch=sandbox_launcher(Sandbox.default(), [0]), perf_runs=1,
    )
    assert result.work is not None and result.work.equivalent
    assert result.instructions is not None
    top = result.instructions.movers[0]
    assert top.name == "dynamo_bench::hotspot::hot_spot"
    assert top.delta > 0.2 * result.instructions.baseline_total
    assert result.findings[0].startswith("`dynamo_bench::hotspot::hot_spot`: +")
    assert result.samples is not None, result.skipped
    assert result.samples.movers[0].name == "dynamo_bench::hotspot::hot_spot"
    for name in ("baseline.flame.svg", "candidate.flame.svg", "differential.flame.svg", "candidate.callgrind.out"):
        assert name in result.files
        assert (tmp_path / "attribution" / name).stat().st_size > 0
    ET.parse(tmp_path / "attribution" / "differential.flame.svg")


def test_identical_binaries_have_no_instruction_movers(
    harness: HarnessBuilder, demo_row_args: list[str], tmp_path: Path
) -> None:
    binary = harness.binary()
    result = attribute_regression(
        {"baseline": binary, "candidate": binary}, demo_row_args, None, tmp_path / "a", scratch=tmp_path / "scratch",
        trigger="requested",
        launch=sandbox_launcher(Sandbox.default(), [0]), perf_runs=0,
    )
    assert result.instructions is not None
    # Randomly seeded hash maps move a few hundred thousand of ~220 M instructions between identical runs:
    # table rows, but below the findings floor.
    assert all(abs(row.delta) < 0.005 * result.instructions.baseline_total for row in result.instructions.movers)
    assert result.findings == []
    assert result.work is None and any("no canonical reports" in s for s in result.skipped)


@pytest.fixture(scope="module")
def short_row_args(tmp_path_factory: pytest.TempPathFactory, demo_row_args: list[str]) -> list[str]:
    """The demo row on a 60-row trace: whether a missing profiler is recorded does not depend on how long the
    other one profiles (the 1,000-row trace costs seconds per arm under callgrind)."""
    trace = tmp_path_factory.mktemp("short-trace") / "demo-trace-60.jsonl"
    generate_demo_trace(trace, rows=60)
    return [str(trace), *demo_row_args[1:]]


@pytest.mark.parametrize("missing", ["valgrind", "perf"])
def test_a_missing_profiler_is_recorded_not_fatal(
    missing: str, harness: HarnessBuilder, short_row_args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil as shutil_module

    real_which = shutil_module.which
    monkeypatch.setattr("runners.stages.attribution.shutil.which", lambda name: None if name == missing else real_which(name))
    binary = harness.binary()
    result = attribute_regression(
        {"baseline": binary, "candidate": binary}, short_row_args, None, tmp_path / "a",
        scratch=tmp_path / "scratch", trigger="requested", launch=bare_launcher, perf_runs=1,
    )
    assert any(missing in s and "not installed" in s for s in result.skipped)
    other = {"valgrind": result.samples, "perf": result.instructions}[missing]
    assert other is not None, f"the profiler that is installed still ran: {result.skipped}"
