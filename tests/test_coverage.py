"""Lifecycle evidence counts and checks, on reports built from tests/data/canonical_record.json's shape."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bot.publish import render
from bot.publish.views import Links
from runners.demo import REAL_HARNESS_SHAPES, Knob
from runners.schema.config import PROTOCOL_EXCLUSIONS, ExpectedEvidence, PoolPlacements, load_profile
from runners.schema.report import CoverageCheck, CoverageCounts, CoverageResult
from runners.stages.canonical import canonicalize
from runners.stages.coverage import CoverageError, check_evidence, count_evidence
from tests.conftest import HarnessBuilder
from tests.report_factory import make_report

EXAMPLE = Path(__file__).resolve().parent / "data" / "canonical_record.json"
DISAGG_EXPECT = ExpectedEvidence(pressure=(10, 20), handoff=True)
AGG_EXPECT = ExpectedEvidence(pressure=(1, 3))


def _report(
    requests: int = 20, *, disaggregated: bool = True, pressure: int = 14, readmitted: int | None = None
) -> dict[str, Any]:
    """A consistent report: every request completed and routed once per pool to one of two workers; every third
    one saw overlap."""
    example: dict[str, Any] = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    template = example["per_request"][0]
    pools = ["prefill", "decode"] if disaggregated else ["agg"]
    records = []
    for index in range(requests):
        record = copy.deepcopy(template)
        record["uuid"] = f"00000000-0000-0000-0000-{index:012x}"
        record["reused_input_tokens"] = 256 if index % 2 else 0
        record["routing_history"] = [
            {
                **template["routing_history"][0],
                "pool": pool,
                "logical_worker_id": index % 2,
                "reported_overlap_tokens": 512 if index % 3 == 0 else 0,
            }
            for pool in pools
        ]
        if not disaggregated:
            for key in (
                "prefill_worker_idx",
                "decode_worker_idx",
                "destination_activated_ms",
                "decode_reused_input_tokens",
            ):
                record[key] = None
        records.append(record)
    example["per_request"] = records
    example["summary"]["num_requests"] = requests
    example["summary"]["completed_requests"] = requests
    record_template = example["coverage"]["pressure"]["records"][0]
    readmitted = pressure if readmitted is None else readmitted
    example["coverage"]["pressure"] = {
        "records": [
            {
                **record_template,
                "pressure_ordinal": i,
                "readmitted_at_ms": 20533.1 + i if i < readmitted else None,
            }
            for i in range(pressure)
        ],
        "sglang_retractions_total": 0,
        "vllm_preemptions_total": pressure,
    }
    return example


def _checks(
    report: dict[str, Any], expect: ExpectedEvidence, disaggregated: bool = True
) -> dict[str, CoverageCheck]:
    counts = count_evidence(report)
    checks = check_evidence({"baseline": counts, "candidate": counts}, expect, disaggregated)
    half = len(checks) // 2
    assert [c.name for c in checks[:half]] == [c.name for c in checks[half:]]
    return {check.name: check for check in checks if check.detail.startswith("baseline:")}


def _failed(checks: dict[str, CoverageCheck]) -> list[str]:
    return [name for name, check in checks.items() if not check.ok]


def test_counts_of_a_disaggregated_report() -> None:
    counts = count_evidence(_report())

    assert counts == CoverageCounts(
        requests=20,
        completed=20,
        rejected=0,
        canceled=0,
        failed=0,
        other_terminal=0,
        overlap_routed=14,
        reused_requests=20,
        immediate_by_pool={"decode": 20, "prefill": 20},
        queued_by_pool={},
        pressure_events=14,
        readmitted_pressure_events=14,
        handoffs=20,
        kv_removed_events=29900,
        router_queue_threshold=None,
        workers_by_pool={"decode": 2, "prefill": 2},
    )


def test_counts_of_an_aggregated_report_read_null_handoff_fields_as_not_observed() -> None:
    counts = count_evidence(_report(disaggregated=False, pressure=1))

    assert (counts.handoffs, counts.reused_requests, counts.immediate_by_pool) == (0, 10, {"agg": 20})


def test_counts_work_on_canonical_data() -> None:
    line = json.dumps(_report()).encode()

    assert count_evidence(canonicalize(line, PROTOCOL_EXCLUSIONS).data) == count_evidence(_report())


def test_healthy_disaggregated_row_passes_every_check() -> None:
    checks = _checks(_report(), DISAGG_EXPECT)

    assert _failed(checks) == []
    assert list(checks) == ["kv_overlap_routing", "placement", "pressure", "handoff", "terminal_cleanup"]
    assert checks["pressure"].detail == "baseline: 14 pressure events (14 readmitted) within [10, 20]"
    assert "40 route decisions, 40 immediate and 0 queued" in checks["placement"].detail
    assert "20 prefill/decode handoffs for 20 completed requests" in checks["handoff"].detail


def test_healthy_aggregated_row_passes_every_check() -> None:
    checks = _checks(_report(disaggregated=False, pressure=1), AGG_EXPECT, disaggregated=False)

    assert _failed(checks) == []
    assert checks["handoff"].detail.endswith("expected 0 (aggregated, expect.handoff false)")


def test_both_arms_are_checked_separately() -> None:
    good, bad = count_evidence(_report()), count_evidence(_report(pressure=0))

    checks = check_evidence({"baseline": good, "candidate": bad}, DISAGG_EXPECT, disaggregated=True)

    assert [c.detail.split(":")[0] for c in checks if not c.ok] == ["candidate"]


def test_missing_arm_fails() -> None:
    checks = check_evidence({"baseline": count_evidence(_report())}, DISAGG_EXPECT, disaggregated=True)

    assert [(c.name, c.ok, c.detail) for c in checks if not c.ok] == [
        ("evidence", False, "candidate: no lifecycle evidence counted")
    ]


@pytest.mark.parametrize("overlap", [0, None])
def test_no_overlap_reported_fails_kv_overlap_routing(overlap: int | None) -> None:
    report = _report()
    for record in report["per_request"]:
        for route in record["routing_history"]:
            route["reported_overlap_tokens"] = overlap

    checks = _checks(report, DISAGG_EXPECT)

    assert _failed(checks) == ["kv_overlap_routing"]
    assert "0 route decisions reported KV overlap (expected > 0)" in checks["kv_overlap_routing"].detail


def _queue_one(report: dict[str, Any], threshold: float | None) -> None:
    report["per_request"][5]["routing_history"][1]["outcome"] = "queued"
    report["metadata"]["router"]["config"]["router_queue_threshold"] = threshold


def test_queued_without_threshold_is_never_accepted() -> None:
    report = _report()
    _queue_one(report, None)

    checks = _checks(report, ExpectedEvidence(pressure=(10, 20), handoff=True, queued=1))

    assert _failed(checks) == ["placement"]
    assert "scheduler waiting is never relabelled as queued" in checks["placement"].detail


def test_queued_with_explicit_threshold_and_expectation_passes() -> None:
    report = _report()
    _queue_one(report, 0.5)

    checks = _checks(report, ExpectedEvidence(pressure=(10, 20), handoff=True, queued=1))

    assert _failed(checks) == []
    assert "39 immediate and 1 queued (immediate/queued per pool: decode 19/1, prefill 20/0)" in (
        checks["placement"].detail
    )
    assert "router_queue_threshold 0.5" in checks["placement"].detail


def test_unexpected_queued_placements_fail_even_with_threshold() -> None:
    report = _report()
    _queue_one(report, 0.5)

    checks = _checks(report, DISAGG_EXPECT)

    assert _failed(checks) == ["placement"]
    assert "1 queued placements, expected 0" in checks["placement"].detail


def _strand_in_queue(report: dict[str, Any], index: int, status: str | None) -> None:
    """The request's decode route entered the router queue and never left it: the harness fills the record in
    only at release, so its worker and release fields stay null."""
    record = report["per_request"][index]
    record["routing_history"][1].update(
        outcome="queued", queue_entered_at_ms=598.0, released_at_ms=None, queue_wait_ms=None,
        logical_worker_id=None, scheduler_id=None, dp_rank=None, reported_overlap_tokens=None,
    )
    record["terminal_status"] = status
    report["metadata"]["router"]["config"]["router_queue_threshold"] = 0.5


@pytest.mark.parametrize("status", [None, "canceled"])
def test_a_route_still_queued_at_the_end_is_a_stranded_request_not_a_parse_error(status: str | None) -> None:
    report = _report()
    _strand_in_queue(report, 7, status)
    report["summary"]["completed_requests"] = 19

    checks = _checks(report, ExpectedEvidence(pressure=(10, 20), handoff=True, queued=1, completed_all=False))

    assert "terminal_cleanup" in _failed(checks)
    assert "19 of 20 completed, 0 rejected, 0 canceled, 0 failed, 0 other, 1 stranded (1 never left the router " \
        "queue)" in checks["terminal_cleanup"].detail
    counts = count_evidence(report)
    assert (counts.stranded_in_queue, counts.queued_by_pool, counts.workers_by_pool) == (
        1, {"decode": 1}, {"decode": 2, "prefill": 2})


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r["per_request"][7].update(terminal_status="completed"),
         "/per_request/7/terminal_status is completed but /per_request/7/routing_history/1 never left the router"),
        (lambda r: r["per_request"][7]["routing_history"][1].update(released_at_ms=612.4),
         "/per_request/7/routing_history/1 was released from the queue but names no logical_worker_id"),
        (lambda r: r["per_request"][7]["routing_history"].reverse(),
         "/per_request/7/routing_history/0 never left the router queue, yet the request was routed again"),
        (lambda r: r["per_request"][7]["routing_history"][1].update(outcome="immediate"),
         "/per_request/7/routing_history/1/logical_worker_id is None, not a count"),
    ],
)
def test_a_null_worker_outside_a_never_released_last_route_is_malformed(mutate: Any, message: str) -> None:
    report = _report()
    _strand_in_queue(report, 7, None)
    report["summary"]["completed_requests"] = 19
    mutate(report)

    with pytest.raises(CoverageError, match=message):
        count_evidence(report)


def test_only_the_kinds_and_pools_that_occurred_are_listed() -> None:
    """The harness writes `kind_counts`, `pool_counts` and `tier_counts` with only the keys that occurred."""
    report = _report(disaggregated=False, pressure=1)
    report["coverage"]["kv_ingest"].update(kind_counts={}, pool_counts={}, tier_counts={}, boundaries={})

    counts = count_evidence(report)

    assert counts.kv_removed_events == 0
    assert (counts.immediate_by_pool, counts.workers_by_pool) == ({"agg": 20}, {"agg": 2})


def test_no_route_decisions_fail_placement() -> None:
    report = _report()
    for record in report["per_request"]:
        record["routing_history"] = []

    assert "no route decisions were recorded" in _checks(report, DISAGG_EXPECT)["placement"].detail


def test_zero_pressure_means_edge_not_exercised() -> None:
    checks = _checks(_report(pressure=0), DISAGG_EXPECT)

    assert _failed(checks) == ["pressure"]
    assert checks["pressure"].detail == (
        "baseline: 0 pressure events (0 readmitted), expected [10, 20]: edge not exercised"
    )


def test_pressure_above_band_is_a_flood() -> None:
    checks = _checks(_report(pressure=21), DISAGG_EXPECT)

    assert _failed(checks) == ["pressure"]
    assert "21 pressure events (21 readmitted) above [10, 20]: pressure flood" in checks["pressure"].detail


def test_pressure_below_band_fails() -> None:
    checks = _checks(_report(pressure=4), DISAGG_EXPECT)

    assert checks["pressure"].detail == "baseline: 4 pressure events (4 readmitted) below [10, 20]"
    assert not checks["pressure"].ok


def test_pressure_not_readmitted_fails() -> None:
    checks = _checks(_report(pressure=14, readmitted=12), DISAGG_EXPECT)

    assert _failed(checks) == ["pressure"]
    assert "14 pressure events (12 readmitted) within [10, 20], but 2 were never readmitted" in (
        checks["pressure"].detail
    )


def test_retractions_count_as_pressure() -> None:
    report = _report(pressure=12)
    report["coverage"]["pressure"]["vllm_preemptions_total"] = 0
    report["coverage"]["pressure"]["sglang_retractions_total"] = 12

    assert _checks(report, DISAGG_EXPECT)["pressure"].ok


def test_missing_handoff_in_disaggregated_row_fails() -> None:
    report = _report()
    report["per_request"][7]["destination_activated_ms"] = None

    checks = _checks(report, DISAGG_EXPECT)

    assert _failed(checks) == ["handoff"]
    assert "19 prefill/decode handoffs for 20 completed requests" in checks["handoff"].detail


def test_disaggregated_row_must_expect_handoff() -> None:
    checks = _checks(_report(), ExpectedEvidence(pressure=(10, 20), handoff=False))

    assert _failed(checks) == ["handoff"]


def test_handoff_in_aggregated_row_fails() -> None:
    checks = _checks(_report(pressure=2), AGG_EXPECT, disaggregated=False)

    assert _failed(checks) == ["handoff"]
    assert "20 prefill/decode handoffs" in checks["handoff"].detail


def test_stranded_request_fails_terminal_cleanup() -> None:
    report = _report()
    report["per_request"][3]["terminal_status"] = None
    report["summary"]["completed_requests"] = 19

    checks = _checks(report, ExpectedEvidence(pressure=(10, 20), handoff=True, completed_all=False))

    assert _failed(checks) == ["handoff", "terminal_cleanup"]
    assert "19 of 20 completed, 0 rejected, 0 canceled, 0 failed, 0 other, 1 stranded" in (
        checks["terminal_cleanup"].detail
    )


def test_rejected_request_fails_only_when_all_must_complete() -> None:
    report = _report(disaggregated=False, pressure=1)
    report["per_request"][3]["terminal_status"] = "rejected"
    report["per_request"][4]["terminal_status"] = "evicted"
    report["summary"]["completed_requests"] = 18

    strict = _checks(report, AGG_EXPECT, disaggregated=False)
    lenient = _checks(report, ExpectedEvidence(pressure=(1, 3), completed_all=False), disaggregated=False)

    assert _failed(strict) == ["terminal_cleanup"]
    assert "18 of 20 completed, 1 rejected, 0 canceled, 0 failed, 1 other, 0 stranded" in (
        strict["terminal_cleanup"].detail
    )
    assert _failed(lenient) == []


@pytest.mark.parametrize(
    ("path", "pointer"),
    [
        (["per_request", 2, "terminal_status"], "/per_request/2/terminal_status is missing"),
        (
            ["per_request", 0, "routing_history", 1, "reported_overlap_tokens"],
            "/routing_history/1/reported_overlap",
        ),
        (
            ["per_request", 4, "routing_history", 0, "outcome"],
            "/per_request/4/routing_history/0/outcome is missing",
        ),
        (["per_request", 1, "routing_history"], "/per_request/1/routing_history is missing"),
        (
            ["per_request", 5, "routing_history", 0, "logical_worker_id"],
            "/per_request/5/routing_history/0/logical_worker_id is missing",
        ),
        (
            ["per_request", 6, "destination_activated_ms"],
            "/per_request/6/destination_activated_ms is missing",
        ),
        (["per_request", 6, "reused_input_tokens"], "/per_request/6/reused_input_tokens is missing"),
        (["coverage", "pressure", "records"], "/coverage/pressure/records is missing"),
        (
            ["coverage", "pressure", "vllm_preemptions_total"],
            "/coverage/pressure/vllm_preemptions_total is missing",
        ),
        (
            ["coverage", "pressure", "records", 3, "readmitted_at_ms"],
            "/coverage/pressure/records/3/readmitted_at_ms",
        ),
        (["coverage", "kv_ingest", "kind_counts"], "/coverage/kv_ingest/kind_counts is missing"),
        (["metadata", "router", "config"], "/metadata/router/config is missing"),
        (["summary", "num_requests"], "/summary/num_requests is missing"),
        (["summary", "completed_requests"], "/summary/completed_requests is missing"),
    ],
)
def test_missing_evidence_field_is_an_error_naming_it(path: list[str | int], pointer: str) -> None:
    report = _report()
    node: Any = report
    for step in path[:-1]:
        node = node[step]
    del node[path[-1]]

    with pytest.raises(CoverageError, match=pointer):
        count_evidence(report)


def test_handoff_fields_are_required_in_aggregated_rows_too() -> None:
    report = _report(disaggregated=False, pressure=1)
    del report["per_request"][2]["destination_activated_ms"]

    with pytest.raises(CoverageError, match="/per_request/2/destination_activated_ms is missing"):
        count_evidence(report)


def test_absent_removed_kind_counts_zero_and_absent_threshold_reads_unset() -> None:
    report = _report()
    del report["coverage"]["kv_ingest"]["kind_counts"]["removed"]
    del report["metadata"]["router"]["config"]["router_queue_threshold"]

    counts = count_evidence(report)

    assert (counts.kv_removed_events, counts.router_queue_threshold) == (0, None)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r["per_request"].pop(), "/per_request has 19 records but /summary/num_requests is 20"),
        (lambda r: r["summary"].update(completed_requests=19), "/summary/completed_requests is 19 but 20"),
        (
            lambda r: r["coverage"]["pressure"]["records"].pop(),
            "records has 13 records but the totals count 14",
        ),
        (
            lambda r: r["per_request"][0]["routing_history"][0].update(outcome="waiting"),
            "outcome is 'waiting'; every route decision is immediate or queued",
        ),
        (
            lambda r: r["per_request"][0].update(reused_input_tokens=-1),
            "reused_input_tokens is -1, not a count",
        ),
        (
            lambda r: r["metadata"]["router"]["config"].update(router_queue_threshold="high"),
            "router_queue_threshold is 'high', not a number",
        ),
    ],
)
def test_inconsistent_or_garbled_evidence_is_an_error(mutate: Any, message: str) -> None:
    report = _report()
    mutate(report)

    with pytest.raises(CoverageError, match=message):
        count_evidence(report)


SEED_DRIFT = ExpectedEvidence(
    pressure=(10, 20),
    handoff=True,
    reused_requests=20,
    placements={"prefill": PoolPlacements(immediate=20, queued=0), "decode": PoolPlacements(immediate=20, queued=0)},
    active_workers={"prefill": 2, "decode": 2},
    handoffs=20,
)


def test_drift_detectors_in_band_pass_and_show_every_signal() -> None:
    checks = _checks(_report(), SEED_DRIFT)

    assert _failed(checks) == []
    assert checks["drift_detectors"].detail == (
        "baseline: requests with reused KV 20 (expected 20); decode immediate placements 20 (expected 20); "
        "decode queued placements 0 (expected 0); prefill immediate placements 20 (expected 20); "
        "prefill queued placements 0 (expected 0); decode active workers 2 (expected 2); "
        "prefill active workers 2 (expected 2); handoffs 20 (expected 20)"
    )


def test_no_drift_detector_configured_adds_no_check() -> None:
    assert "drift_detectors" not in _checks(_report(), DISAGG_EXPECT)


@pytest.mark.parametrize(
    ("mutate", "expect", "drifted"),
    [
        (
            lambda r: r["per_request"][1].update(reused_input_tokens=0, decode_reused_input_tokens=0),
            {"reused_requests": (20, 25)},
            "requests with reused KV 19 (expected [20, 25])",
        ),
        (
            lambda r: r["per_request"][0]["routing_history"].pop(),
            {"placements": {"decode": PoolPlacements(immediate=20)}},
            "decode immediate placements 19 (expected 20)",
        ),
        (
            lambda r: [route.update(logical_worker_id=0) for route in r["per_request"][1]["routing_history"]]
            and [
                route.update(logical_worker_id=0)
                for record in r["per_request"][3::2]
                for route in record["routing_history"]
            ],
            {"active_workers": {"prefill": (2, 2)}},
            "prefill active workers 1 (expected 2)",
        ),
        (
            lambda r: r["per_request"][7].update(destination_activated_ms=None),
            {"handoffs": (15, 18)},
            "handoffs 19 (expected [15, 18])",
        ),
    ],
)
def test_out_of_band_drift_fails_naming_expected_and_observed(
    mutate: Any, expect: dict[str, Any], drifted: str
) -> None:
    report = _report()
    mutate(report)

    checks = _checks(report, ExpectedEvidence(pressure=(10, 20), handoff=True, **expect))

    assert not checks["drift_detectors"].ok
    assert checks["drift_detectors"].detail.endswith(
        f"; out of band: {drifted} (observed pools: decode, prefill)"
    )


def test_a_pool_the_harness_does_not_name_reads_zero_and_lists_the_observed_pools() -> None:
    checks = _checks(_report(), ExpectedEvidence(pressure=(10, 20), handoff=True, active_workers={"agg": 4}))

    assert checks["drift_detectors"].detail == (
        "baseline: agg active workers 0 (expected 4); out of band: agg active workers 0 (expected 4) "
        "(observed pools: decode, prefill)"
    )


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ({"reused_requests": [5, 3]}, "reused_requests band \\[5, 3\\] must satisfy min <= max"),
        ({"placements": {"decode": {"queued": [2, 1]}}}, "placements.decode.queued band"),
        ({"active_workers": {"decode": [4, 2]}}, "active_workers.decode band"),
        ({"handoffs": -1}, "greater than or equal to 0"),
        ({"placements": {"decode": {"waiting": 1}}}, "Extra inputs are not permitted"),
    ],
)
def test_drift_bands_are_validated(expect: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ExpectedEvidence.model_validate({"pressure": (1, 3), **expect})


def test_dynamo_profile_carries_the_reference_seed_drift_detectors() -> None:
    rows = {row.id: row.expect for row in load_profile("dynamo").rows}

    assert {row: expect.reused_requests for row, expect in rows.items()} == {
        "vllm-agg": 4918, "vllm-disagg": 4988, "sglang-agg": 4840, "sglang-disagg": 4990,
    }
    for row in ("vllm-disagg", "sglang-disagg"):
        seed = PoolPlacements(immediate=5000, queued=0)
        assert rows[row].placements == {"prefill": seed, "decode": seed}
        assert (rows[row].active_workers, rows[row].handoffs) == ({"prefill": 2, "decode": 2}, 5000)
    for row in ("vllm-agg", "sglang-agg"):
        assert rows[row].placements == {"agg": PoolPlacements(immediate=5000, queued=0)}
        assert (rows[row].active_workers, rows[row].handoffs) == ({"agg": 4}, 0)
    assert {row: expect.pressure for row, expect in rows.items()} == {
        "vllm-agg": (1, 3), "vllm-disagg": (10, 20), "sglang-agg": (1, 3), "sglang-disagg": (10, 20),
    }, "each band holds its seed: 1 / 14 / 1 / 14 pressure events"


@pytest.mark.parametrize("knobs", [{}, {"SEMANTIC_CHANGE": True}, REAL_HARNESS_SHAPES],
                         ids=["fixture", "semantic-change", "real-shapes"])
def test_demo_drift_detectors_hold_on_the_fixture_and_its_evidenced_change(
    harness: HarnessBuilder, demo_trace: Path, tmp_path: Path, knobs: dict[str, Knob]
) -> None:
    """The demo profile's values were measured with the fixture on the generated trace: every row's detectors
    pass there, and still pass on the intended semantic change the demo accepts with an exception."""
    config = load_profile("demo")
    binary = harness.binary(**knobs)
    details = []
    for row in config.rows:
        out = tmp_path / f"{row.id}.jsonl"
        subprocess.run(
            [str(binary), str(demo_trace), *config.harness.common_args, *row.args, "--iterations", "1",
             "--canonical-reports-jsonl", str(out)],
            check=True, capture_output=True,
        )
        counts = count_evidence(canonicalize(out.read_bytes(), config.harness.exclusions).data)
        checks = check_evidence({"baseline": counts, "candidate": counts}, row.expect,
                                disaggregated=row.expect.handoff)
        drift = [check for check in checks if check.name == "drift_detectors"]
        assert [check.ok for check in drift] == [True, True], drift[0].detail
        details.append(drift[0].detail)

    assert "requests with reused KV 901 (expected [883, 919])" in details[0]
    assert "agg immediate placements 1000 (expected 1000); agg queued placements 0 (expected 0); agg active " \
        "workers 4 (expected 4)" in details[0]
    assert "prefill immediate placements 1000 (expected 1000)" in details[1]


def test_drift_evidence_is_rendered_where_coverage_is() -> None:
    """A drifted row shows the check, both numbers and the failing signal in the report's coverage table."""
    report = make_report("pass")
    row = report.rows[0]
    counts = count_evidence(_report())
    expect = SEED_DRIFT.model_copy(update={"reused_requests": (25, 30)})
    row.coverage = CoverageResult(
        counts={"baseline": counts, "candidate": counts},
        checks=check_evidence({"baseline": counts, "candidate": counts}, expect, disaggregated=True),
    )

    markdown = render.report_markdown(report, Links())

    assert "| drift\\_detectors | ❌ | baseline: requests with reused KV 20 (expected \\[25, 30\\]);" in markdown
    assert "| drift\\_detectors | ❌ | candidate: requests with reused KV 20 (expected \\[25, 30\\]);" in markdown
    assert "out of band: requests with reused KV 20 (expected \\[25, 30\\])" in markdown
