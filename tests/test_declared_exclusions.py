"""Harness-declared exclusions are evidence, not a verdict: real fixture variants in temporary git repositories.

The campaign drops exactly the protocol's three pointers whatever `metadata.result_exclusions` says; a row stops
for review only when the harness demonstrably withheld a value (declared, missing from the canonical line, present
in the same invocation's --report-json).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bot.publish import render
from bot.publish.views import Links
from runners.demo import commit_change
from runners.schema.config import PROTOCOL_EXCLUSIONS, CampaignConfig
from runners.schema.report import DeclaredExclusions, DeclaredPointer, SemanticVerdict
from runners.schema.verdicts import declared_exclusion_verdict
from runners.stages.canonical import CanonicalError, canonicalize, resolve
from runners.verify import verify_report
from tests.report_factory import make_report
from tests.test_campaign import AGG_ROW, back_to_main, branch, campaign, quick

RECORD = Path(__file__).resolve().parent / "data" / "canonical_record.json"
THREE = ",".join(PROTOCOL_EXCLUSIONS)
PLANNER = "/planner/html_report_path"
STRIPPED = "/summary/mean_ttft_ms"


def _record() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RECORD.read_text(encoding="utf-8"))
    return data


def test_resolve_tells_a_null_parent_from_an_absent_field() -> None:
    record = _record()

    assert resolve(record, PLANNER) == ("parent_null", None)
    assert resolve(record, "/summary/wall_time_ms") == ("present", 1843.271)
    assert resolve(record, "/summary/no_such_field") == ("absent", None)
    assert resolve(record, "/per_request/0/routing_history/1/pool") == ("present", "decode")
    assert resolve(record, "/per_request/3/uuid") == ("absent", None)
    assert resolve(record, "/summary/wall_time_ms/deeper") == ("absent", None)


def test_canonical_records_resolutions_before_the_campaign_drops_its_three() -> None:
    canon = canonicalize(RECORD.read_bytes(), PROTOCOL_EXCLUSIONS)

    assert canon.harness_exclusions == [*PROTOCOL_EXCLUSIONS, PLANNER]
    assert canon.resolutions == {**dict.fromkeys(PROTOCOL_EXCLUSIONS, "present"), PLANNER: "parent_null"}
    assert "wall_time_ms" not in canon.data["summary"]


def test_a_declared_pointer_that_is_not_a_pointer_is_malformed_output() -> None:
    record = _record()
    record["metadata"]["result_exclusions"] = ["summary/wall_time_ms"]

    with pytest.raises(CanonicalError, match="metadata.result_exclusions: exclusion 'summary/wall_time_ms'"):
        canonicalize(json.dumps(record).encode(), PROTOCOL_EXCLUSIONS)


def _pointer(**fields: Any) -> DeclaredPointer:
    base: dict[str, Any] = {
        "pointer": STRIPPED, "campaign_drops": False, "declared_by": ["baseline", "candidate"],
        "canonical": {"baseline": "absent", "candidate": "absent"},
    }
    return DeclaredPointer.model_validate({**base, **fields})


def _declared(*pointers: DeclaredPointer, problems: list[str] | None = None) -> DeclaredExclusions:
    return DeclaredExclusions(campaign=list(PROTOCOL_EXCLUSIONS), declared={}, pointers=list(pointers),
                              problems=problems or [])


def test_withholding_needs_the_full_report_to_hold_a_value() -> None:
    withheld = _pointer(full_report={"baseline": "present", "candidate": "present"})
    not_shown = _pointer(full_report={"baseline": "absent", "candidate": "absent"})
    dropped = _pointer(pointer="/summary/wall_time_ms", campaign_drops=True,
                       full_report={"baseline": "present", "candidate": "present"})

    assert withheld.withheld_by() == ["baseline", "candidate"]
    assert withheld.describe("baseline") == "absent: withheld, --report-json has a value"
    assert not_shown.withheld_by() == [] and not_shown.describe("candidate") == "absent; --report-json has none either"
    assert dropped.withheld_by() == []
    assert _pointer(canonical={"baseline": "parent_null"}).describe("baseline") == "absent because its parent is null"
    assert _pointer(canonical={"baseline": "present"}).describe("baseline") == "present and compared"


@pytest.mark.parametrize(
    ("verdict", "expected"),
    [
        (SemanticVerdict.PASS, SemanticVerdict.BLOCKED),
        (SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS, SemanticVerdict.BLOCKED),
        (SemanticVerdict.FAIL, SemanticVerdict.FAIL),
    ],
)
def test_withheld_data_stops_the_row_for_review(verdict: SemanticVerdict, expected: SemanticVerdict) -> None:
    declared = _declared(_pointer(full_report={"candidate": "present"}))

    result, reasons = declared_exclusion_verdict(verdict, ["earlier reason"], declared)

    assert result == expected
    assert reasons[0].startswith(f"candidate harness withheld {STRIPPED}: declared in metadata.result_exclusions")
    assert reasons[0].endswith("stop for review") and reasons[-1] == "earlier reason"


def test_declarations_alone_never_change_a_verdict() -> None:
    declared = _declared(_pointer(pointer=PLANNER, canonical={"baseline": "parent_null", "candidate": "parent_null"}),
                         _pointer(full_report={"baseline": "absent", "candidate": "absent"}))

    assert declared_exclusion_verdict(SemanticVerdict.PASS, [], declared) == (SemanticVerdict.PASS, [])
    assert [p.pointer for p in declared.pointers if p.withheld_by()] == []


def test_a_failed_evidence_invocation_is_a_product_failure() -> None:
    declared = _declared(problems=["candidate declared-exclusion evidence invocation exited 3"])

    verdict, reasons = declared_exclusion_verdict(SemanticVerdict.PASS, [], declared)

    assert (verdict, reasons) == (SemanticVerdict.FAIL,
                                  ["product failure: candidate declared-exclusion evidence invocation exited 3"])


def _harness_declaring(repo: Path, message: str, **knobs: str) -> str:
    """Both revisions carry the harness behaviour (committed to main); the head only rewords a comment."""
    commit_change(repo, message, knobs=dict(knobs))
    branch(repo, "feature")
    head = commit_change(repo, "reword comments", touch_comment=True)
    back_to_main(repo)
    return head


def _by_pointer(declared: DeclaredExclusions | None) -> dict[str, DeclaredPointer]:
    assert declared is not None
    return {item.pointer: item for item in declared.pointers}


def test_a_fourth_declared_pointer_under_a_null_parent_passes_and_is_listed(
        fixture_repo: Path, campaign_config: CampaignConfig, demo_trace: Path, tmp_path: Path) -> None:
    head = _harness_declaring(fixture_repo, "declare the planner's report path like the real harness",
                              DECLARED_EXCLUSIONS=f"{THREE},{PLANNER}")

    report = campaign(fixture_repo, head, quick(campaign_config), demo_trace, tmp_path / "out", [AGG_ROW])

    row = report.rows[0]
    assert row.semantic == SemanticVerdict.PASS, row.semantic_reasons
    assert row.performance is not None, "a PASS row still reaches the performance gate (quick: 10 pairs)"
    assert report.exclusions == list(PROTOCOL_EXCLUSIONS)
    declared = row.declared_exclusions
    assert declared is not None and declared.declared["candidate"] == [*PROTOCOL_EXCLUSIONS, PLANNER]
    planner = _by_pointer(declared)[PLANNER]
    assert (planner.campaign_drops, planner.declared_by) == (False, ["baseline", "candidate"])
    assert planner.describe("baseline") == planner.describe("candidate") == "absent because its parent is null"
    assert declared.evidence_runs == [], "a null parent holds nothing to withhold: no extra invocation"
    assert verify_report(report) == []


def test_a_value_the_harness_really_strips_stops_the_row_naming_it(
        fixture_repo: Path, campaign_config: CampaignConfig, demo_trace: Path, tmp_path: Path) -> None:
    head = _harness_declaring(fixture_repo, "declare and strip the mean TTFT",
                              DECLARED_EXCLUSIONS=f"{THREE},{STRIPPED}", STRIP_FROM_CANONICAL=STRIPPED)

    report = campaign(fixture_repo, head, quick(campaign_config), demo_trace, tmp_path / "out", [AGG_ROW])

    row = report.rows[0]
    assert row.parity is not None and row.parity.identical, "both arms strip it: the digests alone would pass"
    assert row.semantic == SemanticVerdict.BLOCKED
    assert row.semantic_reasons[0].startswith(f"baseline harness withheld {STRIPPED}: ")
    assert row.semantic_reasons[1].startswith(f"candidate harness withheld {STRIPPED}: ")
    assert row.performance is None and "correctness not established (BLOCKED)" in row.perf_reason
    declared = row.declared_exclusions
    assert declared is not None and [p.pointer for p in declared.pointers if p.withheld_by()] == [STRIPPED]
    assert [run.purpose for run in declared.evidence_runs] == ["declared-exclusion evidence"] * 2
    assert {run.canonical_digest for run in declared.evidence_runs} == {row.parity.candidate_digest}
    assert _by_pointer(declared)[STRIPPED].describe("candidate") == "absent: withheld, --report-json has a value"
    assert verify_report(report) == []


def test_declaring_fewer_than_the_three_still_drops_exactly_the_three(
        fixture_repo: Path, campaign_config: CampaignConfig, demo_trace: Path, tmp_path: Path) -> None:
    head = _harness_declaring(fixture_repo, "declare only the wall time", DECLARED_EXCLUSIONS="/summary/wall_time_ms")

    report = campaign(fixture_repo, head, quick(campaign_config), demo_trace, tmp_path / "out", [AGG_ROW])

    row = report.rows[0]
    assert row.semantic == SemanticVerdict.PASS, row.semantic_reasons
    assert row.performance is not None, "a PASS row still reaches the performance gate"
    assert row.determinism is not None and row.determinism.unstable_arms == [], (
        "the host-speed rates the harness did not declare were still dropped, or every digest would differ")
    pointers = _by_pointer(row.declared_exclusions)
    assert list(pointers) == list(PROTOCOL_EXCLUSIONS)
    assert [pointers[p].declared_by for p in PROTOCOL_EXCLUSIONS] == [["baseline", "candidate"], [], []]
    assert {pointers[p].describe("candidate") for p in PROTOCOL_EXCLUSIONS} == {"present, dropped by the campaign"}
    assert verify_report(report) == []


def test_verify_recomputes_the_stop_from_the_stored_resolutions() -> None:
    """A report whose row claims PASS while its stored evidence shows a withheld value is caught by verify."""
    report = make_report("pass")
    row = report.rows[0]
    row.declared_exclusions = _declared(_pointer(full_report={"baseline": "present", "candidate": "present"}))
    problems = verify_report(copy.deepcopy(report))

    assert any("semantic verdict PASS, recomputed BLOCKED" in problem for problem in problems)


def test_the_report_lists_declared_pointers_next_to_the_campaign_list() -> None:
    report = make_report("pass")
    report.rows[0].declared_exclusions = DeclaredExclusions(
        campaign=list(PROTOCOL_EXCLUSIONS),
        declared={"baseline": [PROTOCOL_EXCLUSIONS[0], PLANNER], "candidate": [PROTOCOL_EXCLUSIONS[0], STRIPPED]},
        pointers=[
            _pointer(pointer=PROTOCOL_EXCLUSIONS[0], campaign_drops=True,
                     canonical={"baseline": "present", "candidate": "present"}),
            _pointer(pointer=PLANNER, declared_by=["baseline"],
                     canonical={"baseline": "parent_null", "candidate": "parent_null"}),
            _pointer(declared_by=["candidate"], canonical={"baseline": "present", "candidate": "absent"},
                     full_report={"candidate": "present"}),
        ],
    )

    markdown = render.report_markdown(report, Links())

    assert "| Pointer | Campaign | Declared by | Baseline | Candidate |" in markdown
    assert (f"| `{PROTOCOL_EXCLUSIONS[0]}` | dropped | baseline, candidate | present, dropped by the campaign "
            "| present, dropped by the campaign |") in markdown
    assert (f"| `{PLANNER}` | compared | baseline | absent because its parent is null "
            "| absent because its parent is null |") in markdown
    assert (f"| `{STRIPPED}` | compared | candidate | present and compared "
            "| absent: withheld, --report-json has a value |") in markdown
