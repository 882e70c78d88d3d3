"""Stage 6 forced rare lifecycles on real fixture builds: each fixture passes on identical revisions and fails,
naming the assertion, on a variant that breaks that lifecycle; a missing control is UNSUPPORTED, a missing flag
stops the fixture naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from runners.exec.harness import help_text
from runners.exec.sandbox import Sandbox
from runners.schema.config import CampaignConfig, LifecycleFixture
from runners.schema.report import FixtureStatus
from runners.schema.verdicts import fixture_status
from runners.stages.lifecycles import fixture_trace, run_fixture

from runners.demo import REAL_HARNESS_SHAPES, Knob, demo_config
from tests.conftest import HarnessBuilder


def _demo_fixture(fixture_id: str) -> LifecycleFixture:
    return next(f for f in demo_config().fixtures if f.id == fixture_id)


def _run(harness: HarnessBuilder, fixture: LifecycleFixture, tmp_path: Path,
         baseline_knobs: dict[str, Knob] | None = None, **candidate_knobs: Knob):
    config: CampaignConfig = demo_config()
    binaries = {"baseline": harness.binary(**(baseline_knobs or {})), "candidate": harness.binary(**candidate_knobs)}
    return run_fixture(
        fixture,
        config=config,
        binaries=binaries,
        help_texts={arm: help_text(path, Sandbox.default()) for arm, path in binaries.items()},
        trace=lambda f: fixture_trace(f, tmp_path, "unused-for-generated-traces", tmp_path / "traces"),
        cpu_sets=[[0]],
        workdir=tmp_path / "work",
        evidence_dir=tmp_path / "evidence",
        sandbox=Sandbox.default(),
    )


def test_the_demo_profile_carries_the_four_fixtures() -> None:
    kinds = sorted(f.kind for f in demo_config().fixtures)
    assert kinds == ["handoff_ordering", "handoff_ordering", "preemption_edge", "router_queueing", "scale_to_zero"]


@pytest.mark.parametrize(
    ("fixture_id", "break_knob", "failed_assertion"),
    [
        ("router-queueing", "queue_release", "every queued request released"),
        ("preemption-edge", "preemption_readmit", "every preempted request re-admitted"),
        ("handoff-vllm", "handoff_order", "prefill done -> transfer -> decode activated"),
        ("handoff-sglang", "handoff_order", "prefill done -> transfer -> decode activated"),
    ],
)
def test_each_fixture_passes_on_identical_revisions_and_fails_when_its_lifecycle_breaks(
    harness: HarnessBuilder, tmp_path: Path, fixture_id: str, break_knob: str, failed_assertion: str
) -> None:
    fixture = _demo_fixture(fixture_id)
    same = _run(harness, fixture, tmp_path / "same")
    assert same.status == FixtureStatus.PASS, same.reason
    assert fixture_status(same) == FixtureStatus.PASS
    assert same.parity is not None and same.parity.identical
    assert all(a.passed for arm in ("baseline", "candidate") for a in same.assertions[arm])

    broken = _run(harness, fixture, tmp_path / "broken", BREAK_LIFECYCLE=break_knob)
    assert broken.status == FixtureStatus.FAIL
    assert fixture_status(broken) == FixtureStatus.FAIL
    failing = [a for a in broken.assertions["candidate"] if not a.passed]
    assert failing and failing[0].name.startswith(failed_assertion), broken.reason
    assert all(a.passed for a in broken.assertions["baseline"])


def test_preemption_edge_counts_are_bounded(harness: HarnessBuilder, tmp_path: Path) -> None:
    report = _run(harness, _demo_fixture("preemption-edge"), tmp_path)
    bounded = report.assertions["baseline"][0]
    assert bounded.passed and bounded.name == "bounded pressure: 1-3 events"


def test_scale_to_zero_is_unsupported_with_its_reason_never_emulated(harness: HarnessBuilder, tmp_path: Path) -> None:
    report = _run(harness, _demo_fixture("scale-to-zero"), tmp_path)
    assert report.status == FixtureStatus.UNSUPPORTED
    assert "no scale-to-zero control" in report.reason and report.determinism is None


def test_a_flag_the_candidate_lacks_stops_the_fixture_naming_it(harness: HarnessBuilder, tmp_path: Path) -> None:
    report = _run(harness, _demo_fixture("router-queueing"), tmp_path, DROP_FLAG="--router-queue-threshold")
    assert report.status == FixtureStatus.STOPPED
    assert "--router-queue-threshold is not accepted by the candidate" in report.reason
    assert report.determinism is None


def test_a_trace_that_does_not_match_its_checksum_stops_the_fixture(harness: HarnessBuilder, tmp_path: Path) -> None:
    fixture = _demo_fixture("handoff-vllm")
    wrong = fixture.model_copy(update={"trace": fixture.trace.model_copy(update={"sha256": "0" * 64})})
    report = _run(harness, wrong, tmp_path)
    assert report.status == FixtureStatus.STOPPED and "the config declares " + "0" * 64 in report.reason


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"kind": "router_queueing", "args": []}, "needs queue_threshold"),
        ({"kind": "router_queueing", "queue_threshold": 0.5, "args": ["--router-queue-threshold", "0.4"]},
         "must pass --router-queue-threshold 0.5"),
        ({"kind": "preemption_edge", "pressure": (3, 1)}, "pressure band"),
    ],
)
def test_fixture_config_errors_name_the_problem(update: dict[str, object], message: str) -> None:
    raw = {"id": "f", "kind": "preemption_edge", "trace": {"generator": "demo", "rows": 10, "sha256": "a" * 64}}
    with pytest.raises(ValueError, match=message):
        LifecycleFixture.model_validate({**raw, **update})


@pytest.mark.parametrize("fixture_id", ["router-queueing", "preemption-edge", "handoff-vllm"])
def test_fixtures_pass_on_the_real_harness_shapes(harness: HarnessBuilder, tmp_path: Path, fixture_id: str) -> None:
    """Placements only in routing_history, `agg` pools, immediate routes with queue_wait_ms 0.0 and queued ones
    filled in at release: the same lifecycles hold as on the fixture's own shapes."""
    report = _run(harness, _demo_fixture(fixture_id), tmp_path, REAL_HARNESS_SHAPES, **REAL_HARNESS_SHAPES)

    assert report.status == FixtureStatus.PASS, report.reason
    assert report.parity is not None and report.parity.identical
    if fixture_id == "router-queueing":
        evidence = {a.name: a.evidence for a in report.assertions["candidate"]}
        assert evidence["queued placements > 0"] == "38 queued placements; 38 requests routed through the queue"


def test_a_request_left_in_the_router_queue_fails_queueing_on_the_real_shapes(
    harness: HarnessBuilder, tmp_path: Path
) -> None:
    """The real collector never fills in a queued record whose request stays queued: null worker and release."""
    broken = _run(harness, _demo_fixture("router-queueing"), tmp_path, REAL_HARNESS_SHAPES,
                  BREAK_LIFECYCLE="queue_release", **REAL_HARNESS_SHAPES)

    assert broken.status == FixtureStatus.FAIL
    failing = {a.name: a.evidence for a in broken.assertions["candidate"] if not a.passed}
    assert failing["every queued request released"].startswith("38 queued requests never released")
    assert failing["every request completed"].startswith("38 of 60 requests not completed")
    assert all(a.passed for a in broken.assertions["baseline"])
