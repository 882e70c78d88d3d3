"""The engine on the real harness's report shapes (the fixture's REAL_SHAPES knob): a whole campaign, the row's
lifecycle evidence and drift detectors, the Stage 6 fixtures, attribution's work counters, and a request left in
the router queue reported as stranded."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from runners.exec.harness import help_text
from runners.exec.sandbox import Sandbox
from runners.pipeline.campaign import CampaignRequest, run_campaign
from runners.schema.config import CampaignConfig, load_profile
from runners.schema.report import CampaignReport, FixtureStatus, PerfVerdict, SemanticVerdict
from runners.stages.attribution import compare_work, work_counters
from runners.stages.canonical import canonicalize
from runners.stages.coverage import check_evidence, count_evidence
from runners.stages.lifecycles import fixture_trace, run_fixture
from runners.stages.trace import prepare_trace

from runners.demo import REAL_HARNESS_SHAPES, commit_change, demo_config, init_fixture_repo
from runners.demo_trace import generate_demo_trace
from tests.conftest import HarnessBuilder

ROW = "vllm-agg"


@pytest.fixture(scope="module")
def real_shapes_campaign(tmp_path_factory: pytest.TempPathFactory, campaign_config: CampaignConfig,
                         demo_trace: Path) -> CampaignReport:
    """One campaign of a comment-only change on a base whose harness writes the real shapes: one row (short
    performance gate) and every Stage 6 fixture."""
    root = tmp_path_factory.mktemp("real-shapes")
    repo = root / "repo"
    init_fixture_repo(repo)
    commit_change(repo, "harness writes the real report shapes", knobs=REAL_HARNESS_SHAPES)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "feature"], check=True)
    head = commit_change(repo, "reword comments", touch_comment=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "main"], check=True)
    perf = campaign_config.perf.model_copy(update={"pairs": 10, "warmups_per_arm": 1})
    rows = [row for row in campaign_config.rows if row.id == ROW]
    config = campaign_config.model_copy(update={"perf": perf, "rows": rows})
    return run_campaign(CampaignRequest(repo=repo, base="main", head=head, config=config, config_source="test",
                                        out_dir=root / "out", trace_path=demo_trace))


def test_a_campaign_on_the_real_shapes_passes_correctness_with_every_lifecycle_counted(
    real_shapes_campaign: CampaignReport,
) -> None:
    report = real_shapes_campaign
    assert report.stopped is None, report.stopped
    row = report.rows[0]
    assert row.semantic == SemanticVerdict.PASS, row.semantic_reasons
    assert row.parity is not None and row.parity.identical
    assert row.coverage is not None and all(check.ok for check in row.coverage.checks), row.coverage.checks
    counts = row.coverage.counts["candidate"]
    assert (counts.immediate_by_pool, counts.queued_by_pool, counts.workers_by_pool) == (
        {"agg": 1000}, {}, {"agg": 4})
    drift = next(check for check in row.coverage.checks if check.name == "drift_detectors")
    assert "agg immediate placements 1000 (expected 1000)" in drift.detail
    assert row.perf_verdict != PerfVerdict.NOT_RUN


def test_matching_rows_keep_digests_never_full_reports(real_shapes_campaign: CampaignReport) -> None:
    """Stage 4: a matching row's report carries digests and section digests; no per-request record reaches it."""
    row = real_shapes_campaign.rows[0]
    assert row.parity is not None and row.parity.kept_reports == {}
    assert set(row.parity.section_digests["candidate"]) == {"coverage", "metadata", "per_request", "planner",
                                                            "summary"}
    dumped = real_shapes_campaign.model_dump_json()
    assert '"routing_history"' not in dumped and '"admission_history"' not in dumped


def test_the_harness_s_own_exclusions_are_already_absent_and_that_is_fine(
    real_shapes_campaign: CampaignReport,
) -> None:
    """The real harness strips the three /summary/* pointers itself and declares a fourth under a null planner."""
    declared = real_shapes_campaign.rows[0].declared_exclusions
    assert declared is not None and declared.problems == [] and declared.evidence_runs == []
    resolved = {item.pointer: item.canonical["candidate"] for item in declared.pointers}
    assert resolved == {
        "/summary/wall_time_ms": "absent", "/summary/processed_tokens_per_s": "absent",
        "/summary/processed_output_tokens_per_s": "absent", "/planner/html_report_path": "parent_null",
    }


def test_stage_6_fixtures_on_the_real_shapes(real_shapes_campaign: CampaignReport) -> None:
    statuses = {fixture.id: fixture.status for fixture in real_shapes_campaign.fixtures}
    assert statuses == {
        "router-queueing": FixtureStatus.PASS, "preemption-edge": FixtureStatus.PASS,
        "handoff-vllm": FixtureStatus.PASS, "handoff-sglang": FixtureStatus.PASS,
        "scale-to-zero": FixtureStatus.UNSUPPORTED,
    }
    queueing = next(f for f in real_shapes_campaign.fixtures if f.id == "router-queueing")
    evidence = {a.name: a.evidence for a in queueing.assertions["candidate"]}
    assert evidence["queued placements > 0"] == "38 queued placements; 38 requests routed through the queue"


def _queueing_report(binary: Path, trace: Path, out: Path) -> dict[str, Any]:
    """The canonical report of the demo's router-queueing fixture (threshold 0.5, one worker) on `binary`."""
    config = demo_config()
    fixture = next(f for f in config.fixtures if f.id == "router-queueing")
    subprocess.run([str(binary), str(trace), *config.harness.common_args, *fixture.args,
                    "--canonical-reports-jsonl", str(out)], check=True, capture_output=True)
    return canonicalize(out.read_bytes().splitlines()[0], config.harness.exclusions).data


@pytest.fixture(scope="module")
def queueing_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    fixture = next(f for f in demo_config().fixtures if f.id == "router-queueing")
    work = tmp_path_factory.mktemp("queueing-trace")
    return fixture_trace(fixture, work, "unused-for-generated-traces", work)


def test_a_request_left_in_the_router_queue_is_stranded_not_a_parse_error(
    harness: HarnessBuilder, queueing_trace: Path, tmp_path: Path
) -> None:
    stuck = harness.binary(BREAK_LIFECYCLE="queue_release", **REAL_HARNESS_SHAPES)
    data = _queueing_report(stuck, queueing_trace, tmp_path / "stuck.jsonl")
    route = next(r["routing_history"][0] for r in data["per_request"] if r["routing_history"][0]["outcome"] == "queued")
    assert (route["logical_worker_id"], route["released_at_ms"], route["queue_wait_ms"]) == (None, None, None)

    counts = count_evidence(data)
    config = demo_config()
    expect = config.rows[0].expect.model_copy(update={"queued": 38})
    checks = {c.name: c for c in check_evidence({"baseline": counts, "candidate": counts}, expect, False)}

    assert counts.stranded_in_queue == 38
    assert not checks["terminal_cleanup"].ok
    assert "22 of 60 completed, 0 rejected, 0 canceled, 0 failed, 0 other, 38 stranded (38 never left the router " \
        "queue)" in checks["terminal_cleanup"].detail


def test_work_counters_count_route_decisions_from_the_routing_history(
    harness: HarnessBuilder, queueing_trace: Path, tmp_path: Path
) -> None:
    real = _queueing_report(harness.binary(**REAL_HARNESS_SHAPES), queueing_trace, tmp_path / "real.jsonl")
    assert "router_placements" not in real["coverage"]
    counters = work_counters(real)
    assert (counters["route_decisions.agg.immediate"], counters["route_decisions.agg.queued"]) == (22, 38)

    stuck = harness.binary(BREAK_LIFECYCLE="queue_release", **REAL_HARNESS_SHAPES)
    different = compare_work(real, _queueing_report(stuck, queueing_trace, tmp_path / "stuck.jsonl"))
    assert not different.equivalent
    assert "summary.completed_requests 60 -> 22" in different.summary


def test_the_dynamo_profile_reports_scale_to_zero_unsupported_with_the_reason(
    harness: HarnessBuilder, tmp_path: Path
) -> None:
    """The real harness has no scaling control, so the fixture is UNSUPPORTED naming the missing flag, never run
    with ignored flags."""
    config = load_profile("dynamo")
    fixture = next(f for f in config.fixtures if f.kind == "scale_to_zero")
    binary = harness.binary(**REAL_HARNESS_SHAPES)
    report = run_fixture(
        fixture, config=config, binaries={"baseline": binary, "candidate": binary},
        help_texts={arm: help_text(binary, Sandbox.default()) for arm in ("baseline", "candidate")},
        trace=lambda f: pytest.fail("an unsupported fixture must not read its trace"),
        cpu_sets=[[0]], workdir=tmp_path / "work", evidence_dir=tmp_path / "evidence", sandbox=Sandbox.default(),
    )

    assert report.status == FixtureStatus.UNSUPPORTED
    assert report.reason == (
        "the harness has no scale-to-zero control (--planner-scale-to-zero); not emulated with ignored flags"
    )
    assert report.determinism is None


def test_the_real_size_window_is_a_pinned_5000_request_slice_of_the_generated_trace(tmp_path: Path) -> None:
    """demo-5000: rows 500..5,499 of the 5,500-row generated Mooncake-shape trace, both checksums recorded."""
    config = load_profile("demo-5000")
    full = tmp_path / config.trace.path
    digest = generate_demo_trace(full, rows=config.trace.offset + config.trace.count)
    evidence = prepare_trace(full, config.trace, tmp_path / "window.jsonl")

    assert (config.trace.offset, config.trace.count) == (500, 5000)
    assert digest == config.trace.sha256 == evidence.sha256
    assert evidence.slice_sha256 == config.trace.slice_sha256
    window = (tmp_path / "window.jsonl").read_bytes().splitlines()
    assert len(window) == 5000 and window == full.read_bytes().splitlines()[500:]
    assert all(row.expect.placements for row in config.rows), "every row counts its 5,000 placements per pool"
