"""`kv-parity verify`: recompute every verdict from a report file alone and list where the report disagrees.

Nothing is trusted that can be rederived: sample statuses are reclassified from exit codes and timing
records, invalidations from the recorded affinity and interference evidence, ratios from the stored metrics,
the schedule from its seed, and every verdict and number from the same rules the campaign used. Prose
(reasons) is not compared: its wording may change between tool versions, the numbers in it may not.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from runners.perf.gate import breaches, classify, evaluate, process_wall_ms
from runners.perf.schedule import make_schedule, schedule_seed
from runners.schema.bisect_rule import (
    RERUNS,
    BisectReport,
    Gate,
    ProbeState,
    attempt_target,
    conclude,
    failed_gates,
    next_position,
    probe_state,
)
from runners.schema.config import PerfConfig
from runners.schema.report import (
    CampaignReport,
    PerfOutcome,
    PerfResult,
    PerfVerdict,
    RowReport,
    Sample,
    SemanticVerdict,
    Verdicts,
)
from runners.schema.verdicts import (
    campaign_verdicts,
    declared_exclusion_verdict,
    fixture_status,
    gated_build_differences,
    row_performance,
    row_semantic_verdict,
    size_gate,
)


def _same(left: object, right: object) -> bool:
    """Structural equality that tolerates float rounding from a JSON round trip."""
    if isinstance(left, BaseModel) and isinstance(right, BaseModel):
        return _same(left.model_dump(), right.model_dump())
    if isinstance(left, float | int) and isinstance(right, float | int) and not isinstance(left, bool):
        return math.isclose(left, right, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    return left == right


def _sample_name(sample: Sample) -> str:
    if sample.kind == "probe":
        return f"{sample.arm} timer probe"
    if sample.kind == "warmup":
        return f"{sample.arm} warmup {sample.position}"
    return f"{sample.arm} pair {sample.pair} attempt {sample.attempt} position {sample.position}"


def _audit_sample(sample: Sample, timing_field: str) -> list[str]:
    """The stored status, failure and metric must follow from the process status and timing record."""
    where = _sample_name(sample)
    problems = []
    meaning = classify(sample.exit_code, sample.timing_record, sample.failure, timing_field, process_wall_ms(sample),
                       probe=sample.kind == "probe")
    expected_status: str = meaning.status
    if sample.status == "invalidated" and meaning.status == "ok":
        expected_status = "invalidated"
    if sample.status != expected_status:
        problems.append(f"{where}: status {sample.status!r}, but its evidence says {expected_status!r}")
    if meaning.status == "ok" and not _same(sample.metric_ms, meaning.metric_ms):
        problems.append(
            f"{where}: metric_ms {sample.metric_ms} differs from the timing record's `{timing_field}` "
            f"{meaning.metric_ms}"
        )
    observed_ok = sample.affinity_observed == sample.cpu_set and sample.affinity_at_exit in (
        None,
        sample.cpu_set,
    )
    if sample.affinity_ok != observed_ok:
        problems.append(f"{where}: affinity_ok={sample.affinity_ok} contradicts the observed affinity")
    return problems


def _audit_invalidations(perf: PerfResult, config: PerfConfig) -> list[str]:
    """Exactly the pairs that hit a predeclared environmental condition are invalidated, both members."""
    problems = []
    attempts: dict[tuple[int, int], list[Sample]] = {}
    for sample in perf.samples:
        if sample.kind == "measured" and sample.pair is not None:
            attempts.setdefault((sample.pair, sample.attempt), []).append(sample)
    recorded = {(i.pair, i.attempt) for i in perf.invalidations}
    orders = {plan.pair: plan.order for plan in perf.schedule}
    for (pair, attempt), members in sorted(attempts.items()):
        arms = [m.arm for m in sorted(members, key=lambda m: m.position)]
        first = "baseline" if orders.get(pair) == "baseline_first" else "candidate"
        if arms[0] != first:
            problems.append(
                f"pair {pair} attempt {attempt}: ran {arms}, not the scheduled {orders.get(pair)}"
            )
        if any(m.status == "product_failure" for m in members):
            continue
        hit = any(breaches(m, config.invalidation) for m in members)
        invalidated = [m.status == "invalidated" for m in members]
        where = f"pair {pair} attempt {attempt}"
        if hit and (not all(invalidated) or (pair, attempt) not in recorded):
            problems.append(f"{where}: breached an invalidation rule but was not invalidated and recorded")
        if not hit and (any(invalidated) or (pair, attempt) in recorded):
            problems.append(f"{where}: invalidated without a predeclared condition")
    return problems


def verify_performance(perf: PerfResult, config: PerfConfig, row_id: str) -> list[str]:
    """Disagreements between a stored PerfResult and its recomputation."""
    problems = []
    seed = schedule_seed(config.seed, row_id)
    if perf.schedule_seed != seed:
        problems.append(
            f"schedule seed {perf.schedule_seed} is not the one derived from seed {config.seed}: {seed}"
        )
    if perf.schedule != make_schedule(perf.schedule_seed, config.pairs):
        problems.append("stored schedule is not the one its seed generates")
    for sample in [*perf.probes, *perf.warmups, *perf.samples]:
        problems.extend(_audit_sample(sample, perf.timing_field))
    problems.extend(_audit_invalidations(perf, config))
    if not perf.kernel_corroborated and any(s.kernel_cpu_ms is not None for s in perf.samples):
        problems.append("samples carry the kernel's CPU time but the corroborating kernel gate is switched off")
    outcome = evaluate(perf, config)
    if outcome.verdict != perf.verdict:
        problems.append(f"performance verdict {perf.verdict.value}, recomputed {outcome.verdict.value}")
    for name in PerfOutcome.model_fields:  # every number of the outcome; its reason is prose
        if name not in ("verdict", "reason") and not _same(getattr(perf, name), getattr(outcome, name)):
            problems.append(f"performance {name} differ from their recomputation")
    return problems


def _verify_row(report: CampaignReport, row: RowReport) -> list[str]:
    problems = []
    where = f"row {row.row.id}"
    semantic, _ = row_semantic_verdict(row.row.id, row.determinism, row.parity, row.coverage, row.exceptions)
    semantic, _ = declared_exclusion_verdict(semantic, [], row.declared_exclusions)
    blocked_before_parity = row.parity is None and row.semantic == SemanticVerdict.BLOCKED
    if semantic != row.semantic and not blocked_before_parity:
        problems.append(f"{where}: semantic verdict {row.semantic.value}, recomputed {semantic.value}")
    perf = row.performance
    differences = gated_build_differences(report)
    correct = row.semantic in (SemanticVerdict.PASS, SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS)
    if differences and correct and (perf is not None or row.perf_verdict != PerfVerdict.FAIL):
        problems.append(f"{where}: the arms were built differently ({'; '.join(differences)}), so performance "
                        f"must FAIL without samples; the row says {row.perf_verdict.value}")
    if perf is None:
        allowed = (PerfVerdict.NOT_RUN, PerfVerdict.BLOCKED, *((PerfVerdict.FAIL,) if differences else ()))
        if row.perf_verdict not in allowed:
            problems.append(f"{where}: performance {row.perf_verdict.value} without any performance evidence")
        return problems
    if row.semantic not in (SemanticVerdict.PASS, SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS):
        problems.append(f"{where}: performance was measured although correctness was not established "
                        f"({row.semantic.value}); the protocol stops the row first")
    config = perf.perf_config or report.config.perf
    if perf.perf_config is not None and perf.perf_config != report.config.perf:
        problems.append(f"{where}: performance ran with thresholds that differ from the campaign config")
    problems.extend(f"{where}: {p}" for p in verify_performance(perf, config, row.row.id))
    expected, _ = row_performance(perf, row.instructions, config)
    if row.perf_verdict != expected:
        counted = "" if expected == perf.verdict else " with the instruction counts"
        problems.append(
            f"{where}: row performance verdict {row.perf_verdict.value}, its evidence{counted} says "
            f"{expected.value}"
        )
    problems.extend(f"{where}: {p}" for p in _audit_instructions(row))
    return problems


def _audit_instructions(row: RowReport) -> list[str]:
    """A run without a count must say why, and the stage must then record that it decided nothing."""
    counts = row.instructions
    if counts is None:
        return []
    failed = [run for run in counts.runs if run.failure is not None or run.process_ir is None]
    if failed and counts.problem is None:
        return [f"instruction counts: {failed[0].arm} run {failed[0].run} has no count, but the counts record no "
                "problem and would compare the arms"]
    return []


def _verify_sizes(report: CampaignReport) -> list[str]:
    if report.sizes is None:
        return []
    arms = {a.arm for a in report.artifacts}
    if arms != {"baseline", "candidate"}:
        return [f"size gate stored but artifacts recorded for {sorted(arms)}"]
    expected = size_gate(
        report.artifact("baseline"), report.artifact("candidate"), report.config.sizes.max_growth,
        gated_build_differences(report),
    )
    evidence = {"reason", "attribution"}  # prose and symbol evidence; the gate is recomputed from the sizes
    if not _same(report.sizes.model_dump(exclude=evidence), expected.model_dump(exclude=evidence)):
        return [
            f"size gate {report.sizes.verdict.value} ({report.sizes.reason}), recomputed "
            f"{expected.verdict.value} ({expected.reason})"
        ]
    return []


def _verify_acceptances(stored: Verdicts, expected: Verdicts) -> list[str]:
    """What each acceptance covers must follow from the evidence and its `max` (the verdicts it leaves are compared
    with every other campaign verdict)."""
    problems = []
    covered = [(o.acceptance.comment_id, sorted(o.covered)) for o in stored.acceptances]
    recomputed = [(o.acceptance.comment_id, sorted(o.covered)) for o in expected.acceptances]
    if covered != recomputed:
        problems.append(f"acceptances cover {covered} (comment id, covered), recomputed {recomputed}")
    return problems


def verify_report(report: CampaignReport) -> list[str]:
    """Every disagreement between the report and its recomputation; empty means consistent."""
    problems = [p for row in report.rows for p in _verify_row(report, row)]
    problems.extend(_verify_sizes(report))
    problems.extend(
        f"fixture {fixture.id}: stored {fixture.status.value}, recomputed {fixture_status(fixture).value} "
        "from its determinism, parity and lifecycle assertions"
        for fixture in report.fixtures
        if fixture_status(fixture) != fixture.status
    )
    expected = campaign_verdicts(report)
    if report.verdicts is None:
        problems.append(f"report has no campaign verdicts; recomputed: {expected.summary}")
    else:
        for name in [field for field in Verdicts.model_fields if field != "acceptances"]:  # a new one included
            stored, recomputed = getattr(report.verdicts, name), getattr(expected, name)
            if stored != recomputed:
                problems.append(f"campaign {name}: stored {stored}, recomputed {recomputed}")
        problems.extend(_verify_acceptances(report.verdicts, expected))
    return problems


class UnverifiedReport(ValueError):
    """A report assembled from other jobs' parts whose verdicts do not follow from its evidence."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        super().__init__(f"the merged report does not verify ({len(problems)} problems): {shown}")


def accept_merged_report(report: CampaignReport) -> CampaignReport:
    """A report whose rows, fixtures or stop were put together from other jobs (`kv-parity merge`, the Actions
    backend's retry, the Slurm backend): every campaign verdict recomputed from that evidence, then verified,
    refused with UnverifiedReport on any disagreement. One rule for every backend."""
    merged = report.model_copy(update={"verdicts": campaign_verdicts(report)})
    problems = verify_report(merged)
    if problems:
        raise UnverifiedReport(problems)
    return merged


def verify_bisect(bisect: BisectReport) -> list[str]:
    """Every disagreement between a bisect.json and its recomputation: each probe's campaign report as
    `verify_report` judges it, each attempt's state from its recomputed verdicts, the target, the order the rule
    probes in, and the result; empty means consistent."""
    problems: list[str] = []
    rule = bisect.rule
    if rule.reruns != RERUNS:
        problems.append(f"rule declares {rule.reruns} rerun(s); the bisect rule is {RERUNS}")
    if not bisect.commits or bisect.commits[-1] != bisect.bad:
        problems.append(f"the commit list does not end at bad {bisect.bad}")
        return problems
    endpoint_fails: list[Gate] = []
    for index, probe in enumerate(bisect.probes):
        where = f"probe {index + 1} ({probe.commit[:12]})"
        expected = next_position(len(bisect.commits), bisect.probes[:index])
        if expected is None:
            problems.append(f"{where}: the rule had concluded before this probe")
        elif probe.position != expected or probe.commit != bisect.commits[expected - 1]:
            problems.append(f"{where}: the rule probes commit {expected} ({bisect.commits[expected - 1][:12]}) here, "
                            f"not {probe.position}")
        if not 1 <= len(probe.attempts) <= 1 + RERUNS:
            problems.append(f"{where}: {len(probe.attempts)} attempts; the rule allows 1 to {1 + RERUNS}")
        judged_on = attempt_target(rule, index)
        state = ProbeState.UNDECIDED
        for number, attempt in enumerate(probe.attempts, 1):
            at = f"{where} attempt {number}"
            report = attempt.report
            problems.extend(f"{at}: {problem}" for problem in verify_report(report))
            arms = {revision.arm: revision.sha for revision in report.revisions}
            if arms != {"baseline": bisect.good, "candidate": probe.commit}:
                problems.append(f"{at}: the campaign compared {arms}, not {probe.commit[:12]} against good")
            if report.config != bisect.config or report.mode != "campaign":
                problems.append(f"{at}: the campaign ran another config or mode than the bisect declared")
            recomputed = campaign_verdicts(report)
            state = probe_state(recomputed, judged_on)
            if index == 0:
                endpoint_fails = failed_gates(recomputed)
            if attempt.state != state:
                problems.append(f"{at}: state {attempt.state.value}, recomputed {state.value}")
            if number < len(probe.attempts) and state != ProbeState.UNDECIDED:
                problems.append(f"{at}: rerun although this attempt decided ({state.value})")
        if probe.attempts and state == ProbeState.UNDECIDED and len(probe.attempts) < 1 + RERUNS:
            problems.append(f"{where}: undecided after {len(probe.attempts)} attempt(s) but never rerun; the rule "
                            f"reruns an undecided probe {RERUNS} time")
        if probe.attempts and probe.state != probe.attempts[-1].state:
            problems.append(f"{where}: state {probe.state.value}, but its last attempt says "
                            f"{probe.attempts[-1].state.value}")
    if not bisect.probes or next_position(len(bisect.commits), bisect.probes) is not None:
        problems.append("the rule had not concluded when the bisect stopped")
        return problems
    endpoint = bisect.probes[0]
    if rule.target_source == "bad endpoint":
        target = endpoint_fails if endpoint.state == ProbeState.BAD else []
        if rule.target != target:
            problems.append(f"target {rule.target}, but the bad endpoint FAILs {target}")
    expected_result = conclude(bisect.good, bisect.commits, bisect.probes)
    prose = {"reason"}
    if bisect.result.model_dump(exclude=prose) != expected_result.model_dump(exclude=prose):
        problems.append(f"result {bisect.result.last_line}, recomputed {expected_result.last_line}")
    return problems
