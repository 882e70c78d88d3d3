"""The acceptance rule: which FAILs an audited `/parity accept` covers, as a pure function of the report.

An acceptance is pinned to what was measured: it applies only to a campaign of the head SHA it names, only to a
gate that decided FAIL (performance per row, or the size gate), and only when the measured upper bound is at most
its `max`. A semantic FAIL is never covered (a semantic difference needs a verified exception record), nor is an
undecided gate (INCONCLUSIVE, BLOCKED, NOT_RUN: measure again instead), nor a FAIL without a measured bound (arms
built differently). `runners.schema.verdicts.campaign_verdicts` applies the outcome, so a campaign and `kv-parity verify`
conclude the same way from the report alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from runners.schema.report import (
    Acceptance,
    AcceptanceOutcome,
    CampaignReport,
    GateVerdict,
    PerfResult,
    PerfVerdict,
    RowReport,
)

SIZES = "sizes"
"""What `AcceptanceOutcome.covered` names for the size gate."""


def _largest_upper(perf: PerfResult) -> float | None:
    """The upper bound one gate of a row stands on: the batch bounds' largest when the dependence method decided,
    else the whole series' bound; None when the gate produced no bound."""
    if perf.dependence is not None and perf.dependence.batches:
        return max(batch.bounds.upper for batch in perf.dependence.batches)
    return perf.bounds.upper if perf.bounds is not None else None


def row_upper_bound(row: RowReport) -> float | None:
    """The largest upper bound of the candidate / baseline ratio any of the row's gates recorded (the reported
    series, every kernel clock, and the counted instructions where they corroborate the gate), so an acceptance
    covers the worst slowdown the evidence allows; None when the row has no measured bound (a FAIL because the arms
    were built differently)."""
    perf = row.performance
    if perf is None:
        return None
    bounds = [_largest_upper(perf)]
    for gate in perf.kernel_gates:
        if gate.dependence is not None and gate.dependence.batches:
            bounds.append(max(batch.bounds.upper for batch in gate.dependence.batches))
        else:
            bounds.append(gate.bounds.upper)
    counts = row.instructions
    if counts is not None and (perf.perf_config is None or perf.perf_config.instructions == "corroborate"):
        bounds.append(counts.lowest_ratio)
    found = [bound for bound in bounds if bound is not None]
    return max(found) if found else None


def size_growth(report: CampaignReport) -> float | None:
    """The larger of the binary and .text growth, or None without a size gate."""
    if report.sizes is None:
        return None
    return max(report.sizes.binary_growth, report.sizes.text_growth)


def _candidate_sha(report: CampaignReport) -> str | None:
    return next((revision.sha for revision in report.revisions if revision.arm == "candidate"), None)


def _performance(report: CampaignReport, acceptance: Acceptance) -> AcceptanceOutcome:
    covered: list[str] = []
    uncovered: list[str] = []
    named = set(acceptance.rows) if acceptance.rows is not None else None
    for row in report.rows:
        if row.perf_verdict != PerfVerdict.FAIL or (named is not None and row.row.id not in named):
            continue
        upper = row_upper_bound(row)
        if upper is None:
            uncovered.append(f"row {row.row.id}: its performance FAIL has no measured upper bound ({row.perf_reason})")
        elif upper <= acceptance.max:
            covered.append(row.row.id)
        else:
            uncovered.append(
                f"row {row.row.id}: upper bound {upper:.4f} is above the accepted max {acceptance.max_text()} by "
                f"{upper - acceptance.max:.4f} ({(upper / acceptance.max - 1) * 100:.1f}%)"
            )
    return AcceptanceOutcome(acceptance=acceptance, covered=covered, uncovered=uncovered)


def _sizes(report: CampaignReport, acceptance: Acceptance, build_differences: Sequence[str]) -> AcceptanceOutcome:
    sizes = report.sizes
    growth = size_growth(report)
    if sizes is None or sizes.verdict != GateVerdict.FAIL or growth is None:
        return AcceptanceOutcome(acceptance=acceptance, covered=[], uncovered=[])
    if build_differences:
        line = "the size gate FAILed because the arms were built differently, which no acceptance covers"
        return AcceptanceOutcome(acceptance=acceptance, covered=[], uncovered=[line])
    if growth <= acceptance.max:
        return AcceptanceOutcome(acceptance=acceptance, covered=[SIZES], uncovered=[])
    line = (
        f"size growth {growth * 100:.2f}% is above the accepted max {acceptance.max_text()} by "
        f"{(growth - acceptance.max) * 100:.2f} percentage points"
    )
    return AcceptanceOutcome(acceptance=acceptance, covered=[], uncovered=[line])


def judge_acceptances(report: CampaignReport, build_differences: Sequence[str]) -> list[AcceptanceOutcome]:
    """What each of the report's acceptances covers. An acceptance of another head, or on a profile (which never
    gates), covers nothing and says why; `build_differences` are the gated differences between the arms' builds."""
    outcomes = []
    head = _candidate_sha(report)
    for acceptance in report.acceptances:
        if report.mode != "campaign":
            why = "a profile decides no gate, so there is nothing to accept"
            outcomes.append(AcceptanceOutcome(acceptance=acceptance, covered=[], uncovered=[why]))
        elif acceptance.head_sha != head:
            why = f"it was written for head {acceptance.head_sha[:12]}, this campaign measured {str(head)[:12]}"
            outcomes.append(AcceptanceOutcome(acceptance=acceptance, covered=[], uncovered=[why]))
        elif acceptance.gate == "performance":
            outcomes.append(_performance(report, acceptance))
        else:
            outcomes.append(_sizes(report, acceptance, build_differences))
    return outcomes


def accepted_rows(outcomes: Sequence[AcceptanceOutcome]) -> set[str]:
    """Rows whose performance FAIL some acceptance covers."""
    return {row for outcome in outcomes if outcome.acceptance.gate == "performance" for row in outcome.covered}


def sizes_accepted(outcomes: Sequence[AcceptanceOutcome]) -> bool:
    return any(SIZES in outcome.covered for outcome in outcomes if outcome.acceptance.gate == "sizes")

