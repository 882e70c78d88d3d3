"""The verdict rules: pure functions of a report's recorded evidence, shared by the campaign and `kv-parity verify`.

`runners.schema.report` is the schema; this module decides. `with_verdicts` is where a loaded report gets its campaign
verdicts, so every reader after it takes them from the report instead of recomputing them.
"""

from __future__ import annotations

from collections.abc import Sequence

from runners.schema.acceptance import accepted_rows, judge_acceptances, sizes_accepted
from runners.schema.config import PerfConfig
from runners.schema.report import (
    ARMS,
    Acceptance,
    CampaignReport,
    CheckConclusion,
    CoverageResult,
    DeclaredExclusions,
    DeterminismResult,
    ExceptionOutcome,
    FixtureReport,
    FixtureStatus,
    GateVerdict,
    InstructionCounts,
    ParityResult,
    PerfResult,
    PerfVerdict,
    SemanticVerdict,
    Verdicts,
    build_setting_differences,
)


def declared_exclusion_verdict(
    verdict: SemanticVerdict, reasons: list[str], declared: DeclaredExclusions | None
) -> tuple[SemanticVerdict, list[str]]:
    """A row whose harness demonstrably withheld compared data stops for review (BLOCKED) instead of passing;
    a failed evidence invocation is a product failure. Declarations alone never change a verdict."""
    if declared is None:
        return verdict, reasons
    extra = [f"product failure: {problem}" for problem in declared.problems]
    for item in declared.pointers:
        for arm in item.withheld_by():
            extra.append(
                f"{arm} harness withheld {item.pointer}: declared in metadata.result_exclusions and missing from "
                "its canonical line while the same invocation's --report-json has a value there; the campaign "
                "cannot compare it; stop for review"
            )
    if not extra:
        return verdict, reasons
    if declared.problems or verdict == SemanticVerdict.FAIL:
        return SemanticVerdict.FAIL, [*extra, *reasons]
    return SemanticVerdict.BLOCKED, [*extra, *reasons]



def fixture_status(fixture: FixtureReport) -> FixtureStatus:
    """PASS when both arms are stable, byte-identical and every lifecycle assertion holds on both;
    PASS_WITH_SEMANTIC_EXCEPTIONS when the only differences are covered by verified exception records."""
    if fixture.status in (FixtureStatus.STOPPED, FixtureStatus.UNSUPPORTED):
        return fixture.status
    parity = fixture.parity
    evidence_ok = (
        fixture.determinism is not None
        and not fixture.determinism.unstable_arms
        and parity is not None
        and (parity.identical or not uncovered_pointers(fixture.id, parity.differing_pointers, fixture.exceptions))
        and set(fixture.assertions) == set(ARMS)
        and all(a.passed for arm in ARMS for a in fixture.assertions[arm])
    )
    if not evidence_ok or parity is None:
        return FixtureStatus.FAIL
    return FixtureStatus.PASS if parity.identical else FixtureStatus.PASS_WITH_SEMANTIC_EXCEPTIONS


_FIXTURE_SEMANTICS = {
    FixtureStatus.PASS: SemanticVerdict.PASS,
    FixtureStatus.PASS_WITH_SEMANTIC_EXCEPTIONS: SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS,
    FixtureStatus.FAIL: SemanticVerdict.FAIL,
    FixtureStatus.STOPPED: SemanticVerdict.BLOCKED,
}



def gated_build_differences(report: CampaignReport) -> list[str]:
    """Build-setting differences between the arms that the config does not allow; they fail size and perf."""
    if report.config.build.allow_toolchain_difference:
        return []
    settings = {artifact.arm: artifact.settings for artifact in report.artifacts}
    return build_setting_differences(settings.get("baseline"), settings.get("candidate"))


def pointer_matches(pattern: str, pointer: str) -> bool:
    """JSON-pointer match: a `*` segment stands for exactly one segment, a final `**` for any subtree below."""
    pattern_parts = pattern.split("/")
    pointer_parts = pointer.split("/")
    if pattern_parts[-1] == "**":
        pattern_parts = pattern_parts[:-1]
        if len(pointer_parts) <= len(pattern_parts):
            return False
        pointer_parts = pointer_parts[: len(pattern_parts)]
    return len(pattern_parts) == len(pointer_parts) and all(
        p == "*" or p == q for p, q in zip(pattern_parts, pointer_parts, strict=True)
    )


def uncovered_pointers(row_id: str, pointers: list[str], exceptions: list[ExceptionOutcome]) -> list[str]:
    """Differing pointers that no *verified* exception for this row covers."""
    patterns = [
        pattern
        for outcome in exceptions
        if outcome.verified and (not outcome.record.rows or row_id in outcome.record.rows)
        for pattern in outcome.record.pointers
    ]
    return [p for p in pointers if not any(pointer_matches(pattern, p) for pattern in patterns)]


def row_semantic_verdict(
    row_id: str,
    determinism: DeterminismResult | None,
    parity: ParityResult | None,
    coverage: CoverageResult | None,
    exceptions: list[ExceptionOutcome],
) -> tuple[SemanticVerdict, list[str]]:
    """Stage 8's semantic rule for one row, with the reasons a reviewer needs."""
    reasons: list[str] = []
    if determinism is None or parity is None or coverage is None:
        return SemanticVerdict.FAIL, ["row did not produce determinism, parity and coverage evidence"]
    for arm in determinism.unstable_arms:
        reasons.append(f"unstable revision: {arm} produced digests {sorted(set(determinism.digests[arm]))}")
    reasons.extend(
        f"missing lifecycle evidence: {check.name}: {check.detail}" for check in coverage.checks if not check.ok
    )
    if parity.identical:
        return (SemanticVerdict.FAIL, reasons) if reasons else (SemanticVerdict.PASS, ["canonical digests match"])
    uncovered = uncovered_pointers(row_id, parity.differing_pointers, exceptions)
    if uncovered:
        shown = ", ".join(uncovered[:5]) + (f" and {len(uncovered) - 5} more" if len(uncovered) > 5 else "")
        reasons.append(f"{len(uncovered)} differing pointers not covered by a verified exception: {shown}")
    if reasons:
        return SemanticVerdict.FAIL, reasons
    used = sorted({o.record.id for o in exceptions if o.verified})
    return SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS, [
        f"all {parity.differences_total} differing pointers covered by verified exceptions {used}"
    ]


def instruction_change(counts: InstructionCounts, scope: bool = True) -> str | None:
    """The counted change in words, `×1.1000 (+17,335,700 instructions) in the timed region (...)` (without what
    was counted when `scope` is false: a page that says it already); None without complete counts. The one
    wording of the figure on every surface."""
    ratio, delta = counts.ratio, counts.delta
    if ratio is None or delta is None:
        return None
    spread = "" if all(counts.agree(arm) for arm in ARMS) else f", at least ×{counts.lowest_ratio:.4f} across runs"
    return f"×{ratio:.4f} ({delta:+,} instructions{spread})" + (f" in the {counts.scope_label}" if scope else "")


CONTRADICTION_RISE = 1.005
"""Counted work at least this much above the baseline's contradicts a faster reported time: 0.5 %, the smallest
change regression attribution calls a finding (`runners.stages.attribution.FINDING_FLOOR`)."""


def instruction_contradiction(perf: PerfResult | None, counts: InstructionCounts | None) -> str | None:
    """A reported time that fell while the counted work rose: shown whatever the verdict. Fell: the reported
    figures' upper bound is below 1 (faster by the candidate's own account); rose: every run of the candidate
    counted at least `CONTRADICTION_RISE` times every run of the baseline."""
    if perf is None or perf.bounds is None or counts is None or counts.lowest_ratio is None:
        return None
    if perf.bounds.upper >= 1.0 or counts.lowest_ratio < CONTRADICTION_RISE:
        return None
    return (f"contradiction: the reported `{perf.timing_field}` fell (median ratio {perf.bounds.median:.4f}) while "
            f"the counted work rose, {instruction_change(counts)}")


def row_performance(perf: PerfResult, counts: InstructionCounts | None, config: PerfConfig) -> tuple[PerfVerdict, str]:
    """A row's performance verdict: the wall-time gate's, unless `perf.instructions = "corroborate"` and the gate
    PASSes while the counted instructions grew above `instructions_threshold` (a contradiction, FAIL naming both
    figures). The counts only corroborate, as the kernel clocks do: they never rescue a FAIL or decide alone."""
    threshold = config.instructions_threshold
    lowest = counts.lowest_ratio if counts is not None else None
    if (config.instructions != "corroborate" or perf.verdict != PerfVerdict.PASS or counts is None
            or lowest is None or lowest <= threshold):
        return perf.verdict, perf.reason
    bounds = perf.bounds
    wall = (f"median {bounds.median:.4f}, upper X({bounds.upper_index})={bounds.upper:.4f} <= {config.threshold:g}"
            if bounds is not None else "its gate")
    spread = "" if all(counts.agree(arm) for arm in ARMS) else f", at least ×{lowest:.4f} across runs"
    return (
        PerfVerdict.FAIL,
        f"wall-time PASS contradicted by the instruction count: the candidate executes ×{counts.ratio:.4f} the "
        f"baseline's instructions ({counts.delta:+,}{spread}) > {threshold:g} while `{perf.timing_field}` PASSes "
        f"({wall}); counted by valgrind in both arms, in the {counts.scope_label}; a verdict never rests on the "
        "candidate's own figures alone",
    )


_PERF_PRECEDENCE = (
    PerfVerdict.FAIL,
    PerfVerdict.BLOCKED,
    PerfVerdict.INCONCLUSIVE,
    PerfVerdict.NOT_RUN,
    PerfVerdict.PASS,
)


def campaign_verdicts(report: CampaignReport) -> Verdicts:
    """Combine row verdicts, the size gate and any stop into the campaign's verdicts and check conclusion."""
    stopped = report.stopped
    row_semantics = [row.semantic for row in report.rows] + [
        _FIXTURE_SEMANTICS[f.status] for f in report.fixtures if f.status in _FIXTURE_SEMANTICS
    ]
    if stopped is not None and stopped.blocking:
        semantic = SemanticVerdict.BLOCKED
    elif stopped is not None or SemanticVerdict.FAIL in row_semantics or not row_semantics:
        semantic = SemanticVerdict.FAIL
    elif SemanticVerdict.BLOCKED in row_semantics:
        semantic = SemanticVerdict.BLOCKED
    elif SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS in row_semantics:
        semantic = SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS
    else:
        semantic = SemanticVerdict.PASS
    row_perf = {row.perf_verdict for row in report.rows} or {PerfVerdict.NOT_RUN}
    performance = next(v for v in _PERF_PRECEDENCE if v in row_perf)
    sizes = report.sizes.verdict if report.sizes else GateVerdict.NOT_RUN
    summary = f"semantic {semantic.value} · performance {performance.value} · sizes {sizes.value}"
    if stopped is not None:
        summary += f" · stopped at {stopped.stage}: {stopped.reason.splitlines()[0]}"
    verdicts = Verdicts(
        semantic=semantic, performance=performance, sizes=sizes, conclusion=CheckConclusion.SUCCESS, summary=summary
    )
    outcomes = judge_acceptances(report, gated_build_differences(report)) if report.acceptances else []
    if outcomes:
        covered = accepted_rows(outcomes)
        effective = {PerfVerdict.PASS if row.row.id in covered else row.perf_verdict for row in report.rows}
        verdicts.acceptances = outcomes
        verdicts.accepted_performance = next(v for v in _PERF_PRECEDENCE if v in (effective or {PerfVerdict.NOT_RUN}))
        verdicts.accepted_sizes = GateVerdict.PASS if sizes_accepted(outcomes) else sizes
        for outcome in outcomes:
            verdicts.summary += " · " + outcome.acceptance.line().splitlines()[0]
            if not outcome.covered:
                verdicts.summary += " (covers nothing here)"
    if verdicts.failed:
        verdicts.conclusion = CheckConclusion.FAILURE
    elif verdicts.undecided is not None:
        # Not a decision. GitHub counts neutral as passing a required check, so the repository's choice applies
        # (blocking by default); a profile never gates and has a check name of its own, so it stays neutral.
        undecided = report.config.checks.undecided_conclusion
        verdicts.conclusion = CheckConclusion.NEUTRAL if report.mode == "profile" else CheckConclusion(undecided)
    return verdicts


def with_verdicts(report: CampaignReport) -> CampaignReport:
    """The report with campaign verdicts: its own when it carries them (`kv-parity verify` judges those), else
    computed from its evidence; called once where a report is loaded or finished."""
    if report.verdicts is not None:
        return report
    return report.model_copy(update={"verdicts": campaign_verdicts(report)})


def with_acceptances(report: CampaignReport, acceptances: Sequence[Acceptance]) -> CampaignReport:
    """The report judged with exactly these acceptances (replacing any it carried), its verdicts recomputed by
    the one rule; a report without acceptances before or after is returned unchanged."""
    if not acceptances and not report.acceptances:
        return report
    judged = report.model_copy(update={"acceptances": list(acceptances)})
    return judged.model_copy(update={"verdicts": campaign_verdicts(judged)})
