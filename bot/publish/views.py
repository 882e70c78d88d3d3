"""View models: a report's rows and gates as pre-formatted cells, where a campaign is, and what a check run shows,
so every surface (check run, comments, report.md, report.html, the pages) says the same words for the same
evidence."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bot.publish.markdown import code, count, icon, md, pct, ratio
from bot.publish.public import one_line
from runners.progress import ProgressEvent
from runners.schema.config import PerfConfig
from runners.schema.report import (
    ARMS,
    KERNEL_CLOCK_LABELS,
    CampaignReport,
    FixtureStatus,
    PerfResult,
    PerfVerdict,
    RowReport,
    SemanticVerdict,
)
from runners.schema.verdicts import instruction_contradiction


@dataclass(frozen=True)
class CheckRunContent:
    """What a check run shows: a one-line title, a glanceable summary and the complete text."""

    title: str
    summary: str
    text: str


@dataclass(frozen=True)
class Links:
    """Where the full evidence lives; every field may be unknown (then no link is rendered)."""

    artifact_url: str | None = None
    check_run_url: str | None = None
    result_url: str | None = None
    details_url: str | None = None
    """The campaign's details page (or its Actions run): shown as "Details" when known."""


@dataclass(frozen=True)
class Chart:
    title: str
    y_min: float
    y_max: float
    ratios: list[float]
    lower: float
    upper: float
    threshold: float

    @property
    def values(self) -> str:
        return ", ".join(f"{r:.4f}" for r in self.ratios)

    def flat(self, value: float) -> str:
        return ", ".join([f"{value:.4f}"] * len(self.ratios))


@dataclass(frozen=True)
class RowView:
    """One row's cells, pre-formatted so every surface shows the same words for the same evidence."""

    id: str
    report: RowReport | None
    semantic: str
    digests: str
    coverage: str
    performance: str
    diagnostics: str
    placement: str
    perf_verdict: str
    reasons: list[str] = field(default_factory=list)
    chart: Chart | None = None
    instructions: str = "—"
    """The instruction counts' cell: candidate / baseline and the difference, what they count, and whether they
    contradict the reported time."""


def _digest_cell(row: RowReport) -> str:
    parity = row.parity
    if parity is None:
        return "no parity evidence"
    if parity.identical:
        return f"✅ match {code(parity.candidate_digest[:12])}"
    shown = ", ".join(code(d.pointer) for d in parity.differences[:3]) or ", ".join(
        code(p) for p in parity.differing_pointers[:3]
    )
    more = parity.differences_total - min(3, max(len(parity.differences), len(parity.differing_pointers[:3])))
    tail = f" (+{count(more)} more)" if more > 0 else ""
    verified = [o.record.id for o in row.exceptions if o.verified]
    if row.semantic == SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS:
        covered_by = ", ".join(code(v) for v in verified)
        return f"☑️ {count(parity.differences_total)} differ, all covered by {covered_by}"
    return f"❌ differ at {shown}{tail}"


def _coverage_cell(row: RowReport) -> str:
    coverage = row.coverage
    if coverage is None:
        return "no coverage evidence"
    low, high = row.row.expect.pressure
    counts = coverage.counts.get("candidate") or next(iter(coverage.counts.values()))
    failed = [check.name for check in coverage.checks if not check.ok]
    status = (
        f"✅ {len(coverage.checks)}/{len(coverage.checks)}"
        if not failed
        else (
            f"❌ {len(coverage.checks) - len(failed)}/{len(coverage.checks)} ({', '.join(map(md, failed))})"
        )
    )
    pressure = counts.readmitted_pressure_events
    band = "∈" if low <= pressure <= high else "∉"
    queued = sum(counts.queued_by_pool.values())
    return (
        f"{status} · pressure {pressure} {band} [{low}, {high}] · handoffs {count(counts.handoffs)}"
        f" · queued {queued}"
    )


def diagnostics_breached(perf: PerfResult | None) -> bool:
    return perf is not None and any(check.breached for check in perf.diagnostics)


def _perf_cell(row: RowReport, threshold: float) -> str:
    perf = row.performance
    verdict = row.perf_verdict
    if verdict in (PerfVerdict.BLOCKED, PerfVerdict.NOT_RUN) or perf is None or perf.bounds is None:
        return f"{icon(verdict)} {verdict.value}: not measured (see why)"
    bounds = perf.bounds
    numbers = f"{ratio(bounds.median)} [{ratio(bounds.lower)}, {ratio(bounds.upper)}]"
    if perf.dependence is not None:
        return f"{icon(verdict)} {md(perf.dependence.line)}"
    if diagnostics_breached(perf):
        return f"{icon(verdict)} {verdict.value}: diagnostics breached, bounds not applied"
    relation = {PerfVerdict.PASS: "≤", PerfVerdict.FAIL: ">"}.get(perf.reported_verdict or verdict, "straddle")
    cell = f"{icon(verdict)} {numbers} {relation} {threshold:g} ({pct(bounds.median - 1)})"
    failing = [gate for gate in perf.kernel_gates if gate.verdict == PerfVerdict.FAIL]
    if verdict == PerfVerdict.FAIL and perf.reported_verdict == PerfVerdict.PASS and failing:
        kernel = failing[0].bounds
        cell += (f" as reported; kernel {md(KERNEL_CLOCK_LABELS[failing[0].clock])} {ratio(kernel.median)} "
                 f"[{ratio(kernel.lower)}, {ratio(kernel.upper)}] > {threshold:g}")
    elif verdict == PerfVerdict.FAIL and perf.verdict == PerfVerdict.PASS and row.instructions is not None:
        cell += " as reported; the instruction count fails it"
    return cell


def _instructions_cell(row: RowReport, perf: PerfConfig) -> str:
    """`✅ ×1.0002 (+41,273) timed region`: ❌ above the threshold when the counts corroborate (⚠️ when they are
    only shown); runs of one arm that differ and a reported time that fell while the work rose are flagged."""
    counts = row.instructions
    if counts is None:
        return "off: not counted" if perf.instructions == "off" and row.performance is not None else "—"
    if counts.problem is not None or counts.ratio is None or counts.delta is None:
        return f"⚠️ not counted: {md(one_line(counts.problem or 'incomplete counts', ''))}"
    above = (counts.lowest_ratio or 0.0) > perf.instructions_threshold
    mark = ("❌" if perf.instructions == "corroborate" else "⚠️") if above else "✅"
    scope = "timed region" if counts.scope == "region" else "whole process"
    cell = f"{mark} ×{counts.ratio:.4f} ({counts.delta:+,}) {scope}"
    if not all(counts.agree(arm) for arm in ARMS):
        cell += " · ⚠️ runs differ"
    if instruction_contradiction(row.performance, counts) is not None:
        cell += " · ⚠️ time fell, work rose"
    return cell


def _diagnostics_cell(perf: PerfResult | None) -> str:
    if perf is None or not perf.diagnostics:
        return "—"
    breached = [check for check in perf.diagnostics if check.breached]
    if not breached:
        return f"✅ {len(perf.diagnostics)}/{len(perf.diagnostics)} ok"
    return "⚠️ " + "; ".join(
        f"{md(check.detail)} (needs {md(check.threshold)})" for check in breached
    )


def _placement_cell(row: RowReport) -> str:
    perf = row.performance
    cpus = ",".join(str(c) for c in row.placement_cpus)
    text = f"{md(row.host)} · CPUs {cpus}"
    if perf is not None:
        place = perf.placement
        text += f" · perf CPU {','.join(str(c) for c in place.cpu_set)} (NUMA {place.numa_node})"
    return text


def _chart(row: RowReport, threshold: float) -> Chart | None:
    perf = row.performance
    if perf is None or perf.bounds is None or not perf.ratios:
        return None
    values = [*perf.ratios, perf.bounds.lower, perf.bounds.upper, threshold]
    margin = max(0.005, (max(values) - min(values)) * 0.1)
    return Chart(
        title=f"{row.row.id}: candidate / baseline per pair",
        y_min=math.floor((min(values) - margin) * 100) / 100,
        y_max=math.ceil((max(values) + margin) * 100) / 100,
        ratios=perf.ratios,
        lower=perf.bounds.lower,
        upper=perf.bounds.upper,
        threshold=threshold,
    )


def row_views(report: CampaignReport) -> list[RowView]:
    """Every configured row, including the ones that never ran (shown as not run, never silently dropped)."""
    threshold = report.perf_threshold
    ran = {row.row.id: row for row in report.rows}
    views: list[RowView] = []
    for row in report.rows:
        reasons = [] if row.semantic == SemanticVerdict.PASS else list(row.semantic_reasons)
        if row.perf_verdict != PerfVerdict.PASS:
            reasons.append(f"performance {row.perf_verdict.value}: {row.perf_reason}")
        contradiction = instruction_contradiction(row.performance, row.instructions)
        if contradiction is not None and row.perf_verdict != PerfVerdict.FAIL:
            reasons.append(contradiction)
        views.append(
            RowView(
                id=row.row.id,
                report=row,
                semantic=f"{icon(row.semantic)} {row.semantic.value}",
                digests=_digest_cell(row),
                coverage=_coverage_cell(row),
                performance=_perf_cell(row, threshold),
                diagnostics=_diagnostics_cell(row.performance),
                placement=_placement_cell(row),
                perf_verdict=row.perf_verdict.value,
                reasons=reasons,
                chart=_chart(row, threshold),
                instructions=_instructions_cell(row, report.config.perf),
            )
        )
    for config_row in report.config.rows:
        if config_row.id not in ran and report.stopped is not None:
            views.append(
                RowView(
                    id=config_row.id,
                    report=None,
                    semantic="➖ not run",
                    digests="—",
                    coverage="—",
                    performance="➖ not run",
                    diagnostics="—",
                    placement="—",
                    perf_verdict="NOT_RUN",
                )
            )
    return views


def gate_lines(report: CampaignReport) -> list[tuple[str, str, str]]:
    """(gate, verdict cell, why) for the three independent gates."""
    verdicts = report.concluded
    threshold = report.perf_threshold
    rows = report.rows
    fixtures_held = [f.id for f in report.fixtures
                     if f.status in (FixtureStatus.PASS, FixtureStatus.PASS_WITH_SEMANTIC_EXCEPTIONS)]
    fixtures_note = f"; {len(fixtures_held)} lifecycle fixtures hold" if fixtures_held else ""
    if verdicts.semantic == SemanticVerdict.PASS:
        semantic_why = f"canonical digests match on {len(rows)}/{len(rows)} rows{fixtures_note}"
    elif verdicts.semantic == SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS:
        ids = sorted({o.record.id for r in rows for o in r.exceptions if o.verified})
        semantic_why = f"every difference is covered by a verified exception ({', '.join(ids)})"
    elif report.stopped is not None:
        semantic_why = f"stopped at {report.stopped.stage} before any verdict"
    else:
        failed = [r.row.id for r in rows if r.semantic == SemanticVerdict.FAIL]
        parts = [f"{len(failed)} of {len(rows)} rows failed: {', '.join(failed)}"] if failed else []
        for status, word in ((FixtureStatus.FAIL, "failed"), (FixtureStatus.STOPPED, "stopped")):
            ids = [f.id for f in report.fixtures if f.status == status]
            if ids:
                parts.append(f"lifecycle fixture{'s' if len(ids) > 1 else ''} {word}: {', '.join(ids)}")
        semantic_why = "; ".join(parts) or "no row ran"
    perf_rows = {v: [r.row.id for r in rows if r.perf_verdict == v] for v in PerfVerdict}
    counted = [r.row.id for r in rows if r.perf_verdict == PerfVerdict.FAIL and r.performance is not None
               and r.performance.verdict == PerfVerdict.PASS]
    timed = [row_id for row_id in perf_rows[PerfVerdict.FAIL] if row_id not in counted]
    fail_why = "; ".join(
        [f"lower bound > {threshold:g} on {', '.join(timed)}"] * bool(timed)
        + [f"instructions above ×{report.config.perf.instructions_threshold:g} under a wall-time PASS on "
           f"{', '.join(counted)}"] * bool(counted))
    perf_why = {
        PerfVerdict.PASS: f"upper bound ≤ {threshold:g} on every row",
        PerfVerdict.FAIL: fail_why,
        PerfVerdict.INCONCLUSIVE: f"no decision on {', '.join(perf_rows[PerfVerdict.INCONCLUSIVE])}",
        PerfVerdict.BLOCKED: f"could not measure {', '.join(perf_rows[PerfVerdict.BLOCKED])}",
        PerfVerdict.NOT_RUN: f"not run: stopped at {report.stopped.stage}"
        if report.stopped
        else "not measured: a profile was requested (see where the time goes below)"
        if report.mode == "profile"
        else f"not run on {', '.join(perf_rows[PerfVerdict.NOT_RUN]) or 'any row'}",
    }[verdicts.performance]
    sizes_why = report.sizes.reason if report.sizes else "not measured"
    accepted_rows = sorted(
        {row for o in verdicts.acceptances if o.acceptance.gate == "performance" for row in o.covered}
    )
    if accepted_rows:
        perf_why += f"; accepted on {', '.join(accepted_rows)} (see Accepted)"
    if any(o.covered for o in verdicts.acceptances if o.acceptance.gate == "sizes"):
        sizes_why += "; accepted (see Accepted)"
    return [
        ("Semantic parity", f"{icon(verdicts.semantic)} {verdicts.semantic.value}", semantic_why),
        ("Performance", f"{icon(verdicts.performance)} {verdicts.performance.value}", perf_why),
        ("Binary and .text size", f"{icon(verdicts.sizes)} {verdicts.sizes.value}", sizes_why),
    ]


@dataclass(frozen=True)
class ProgressView:
    """Where a running campaign is, for the in-progress check run and the status comment."""

    stage: str
    row: str | None
    detail: str
    done: int | None
    total: int | None
    eta_seconds: float | None

    @classmethod
    def of(cls, event: ProgressEvent, eta_seconds: float | None) -> ProgressView:
        """Stage, row and detail come from the campaign process (a stop's detail carries its reason), so
        each is cut to one line like every other published reason."""
        return cls(
            stage=one_line(event.stage, "…"),
            row=one_line(event.row, "…") if event.row is not None else None,
            detail=one_line(event.detail),
            done=event.done,
            total=event.total,
            eta_seconds=eta_seconds,
        )

    @property
    def step(self) -> str:
        if self.done is None or not self.total:
            return "—"
        unit = "pair" if self.stage.startswith("perf") else "step"
        return f"{unit} {self.done}/{self.total}"
