"""Stage 7's verdict from the recorded evidence alone: what each sample means, which pairs a predeclared
environmental condition invalidates, and the gate over the valid pairs with its kernel-clock corroboration.

Pure: it reads a `PerfResult` and the declared `PerfConfig` and starts nothing, so the sampler that recorded the
evidence and `kv-parity verify`, which recomputes it from a report, decide by the same code.
"""

from __future__ import annotations

import json
import math
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from runners.perf.stats import Decision, decide, observations
from runners.schema.config import InvalidationRules, PerfConfig
from runners.schema.report import (
    KERNEL_CLOCK_LABELS,
    Bounds,
    DependenceResult,
    KernelClock,
    KernelGate,
    PerfOutcome,
    PerfResult,
    PerfVerdict,
    Sample,
)

SETUP_FIELD = "setup_ms"
"""Optional timing-record field kept as the setup-time diagnostic when the harness reports it."""
TIMER_BOUNDARY = (
    "protocol boundary: start right before the prepared run call, stop right after it returns, before collector "
    "finalization (extend the harness, or set `harness.patch` to add it to both revisions)"
)


def process_wall_ms(sample: Sample) -> float:
    """The process's own wall time as the bot measured it, the ceiling of any replay time it reports."""
    return sample.elapsed_s * 1000.0


KERNEL_CLOCKS: dict[KernelClock, Callable[[Sample], float | None]] = {
    "process_wall_ms": process_wall_ms,
    "process_cpu_ms": lambda sample: sample.kernel_cpu_ms,
}
"""The kernel's figures for one sample, which the candidate cannot report: the corroborating gate's inputs."""


@dataclass(frozen=True)
class Classification:
    """What one process's evidence means for the row."""

    status: Literal["ok", "product_failure"]
    failure: str | None
    blocking: bool
    """True when the row is BLOCKED (timing contract not met) rather than FAILED (the product broke)."""
    metric_ms: float | None
    setup_ms: float | None


# --- what a sample means ------------------------------------------------------------------------------------


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"process exited with status {code}"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def classify(
    exit_code: int | None,
    record: dict[str, object] | None,
    read_problem: str | None,
    timing_field: str,
    process_wall_ms: float | None = None,
    probe: bool = False,
) -> Classification:
    """Product failure or usable sample, from the process status, its timing record and its own wall time.

    A replay that reports taking longer than the whole process it ran in, as the bot timed that process, is a
    malformed record (the figure is not a time of this run), so a product failure, never a sample. In the
    timer `probe` a non-numeric timing field means the harness has no usable timer: it blocks like a missing one.
    """

    def failed(text: str, blocking: bool = False) -> Classification:
        return Classification("product_failure", text, blocking, None, None)

    if exit_code is None or exit_code != 0:
        return failed(_exit_text(exit_code) if exit_code is not None else "process status unknown")
    if record is None:
        return failed(read_problem or "no timing record")
    problems = []
    if record.get("replay_bench") is not True:
        problems.append(
            f"timing record reports replay_bench={json.dumps(record.get('replay_bench'))}, not true: "
            "the seeded matched-routing contract was not active"
        )
    if timing_field not in record:
        problems.append(
            f"timing record lacks the timing field `{timing_field}`; fields present: "
            f"{', '.join(sorted(record))}; {TIMER_BOUNDARY}"
        )
    if problems:
        return failed("; ".join(problems), blocking=True)
    metric = _number(record[timing_field])
    if metric is None or metric <= 0:
        return failed(
            f"malformed timing record: `{timing_field}` is {json.dumps(record[timing_field])}, "
            "not a positive number of milliseconds"
            + (f"; fields present: {', '.join(sorted(record))}; {TIMER_BOUNDARY}" if probe else ""),
            blocking=probe,
        )
    if process_wall_ms is not None and metric > process_wall_ms:
        return failed(
            f"malformed timing record: `{timing_field}` reports {metric:g} ms, more than the "
            f"{process_wall_ms:.3f} ms the whole harness process took as the bot timed it (spawn to reap)"
        )
    return Classification("ok", None, False, metric, _number(record.get(SETUP_FIELD)))


def breaches(sample: Sample, rules: InvalidationRules) -> list[tuple[str, str]]:
    """The predeclared environmental conditions this sample hit, as (reason, evidence)."""
    found = []
    if not sample.affinity_ok:
        found.append(
            (
                "affinity violation",
                f"{sample.arm}: pinned to {sample.cpu_set}, observed {sample.affinity_observed} after start "
                f"and {sample.affinity_at_exit} at exit",
            )
        )
    if sample.interference_ms is not None and sample.interference_ms > rules.max_interference_ms:
        found.append(
            (
                "competing load",
                f"{sample.arm}: {sample.interference_ms:.1f} ms of CPU time on cpus {sample.cpu_set} not "
                f"used by the sample's own process (limit {rules.max_interference_ms:g} ms)",
            )
        )
    return found


def _describe(sample: Sample) -> str:
    if sample.kind == "probe":
        return f"the {sample.arm} timer probe (before any warmup)"
    if sample.kind == "warmup":
        return f"{sample.arm} warmup {sample.position + 1}"
    return f"{sample.arm} in measured pair {sample.pair} attempt {sample.attempt}"


# --- verdict from the evidence ------------------------------------------------------------------------------


def unmeasurable_rule(perf: PerfConfig, resolution_ms: float | None) -> str | None:
    """A competing-load limit finer than /proc/stat can measure would invalidate pairs at random."""
    limit = perf.invalidation.max_interference_ms
    if resolution_ms is None or limit >= resolution_ms:
        return None
    return (
        f"invalidation rule max_interference_ms={limit:g} is below the /proc/stat measurement resolution "
        f"on this node ({resolution_ms:g} ms: two clock ticks), so quantization alone would invalidate "
        "pairs; declare a threshold at or above it before sampling"
    )


def _undecided(verdict: PerfVerdict, reason: str, ratios: list[float]) -> PerfOutcome:
    """An outcome without a gate: the series stopped or could not be measured, so no bounds or diagnostics."""
    return PerfOutcome(verdict=verdict, reason=reason, ratios=ratios, bounds=None, diagnostics=[], bootstrap=None)


def evaluate(evidence: PerfResult, perf: PerfConfig) -> PerfOutcome:
    """The row's verdict recomputed from the recorded samples and schedule under the declared `perf` rules."""
    pairs = observations(evidence.schedule, evidence.samples)
    ratios = [p.ratio for p in pairs]
    unmeasurable = unmeasurable_rule(perf, evidence.interference_resolution_ms)
    if unmeasurable is not None:
        return _undecided(PerfVerdict.BLOCKED, unmeasurable, ratios)
    for sample in sorted([*evidence.probes, *evidence.warmups, *evidence.samples], key=lambda s: s.started_unix):
        if sample.status != "product_failure":
            continue
        meaning = classify(
            sample.exit_code,
            sample.timing_record,
            sample.failure,
            evidence.timing_field,
            process_wall_ms(sample),
            probe=sample.kind == "probe",
        )
        stop = (
            "; no warmup or sample ran"
            if sample.kind == "probe"
            else "; sampling stopped at the first product failure (sample kept, never retried)"
        )
        if meaning.blocking:
            return _undecided(PerfVerdict.BLOCKED,
                              f"blocked by the timing contract in {_describe(sample)}: {meaning.failure}{stop}", ratios)
        return _undecided(PerfVerdict.FAIL, f"product failure in {_describe(sample)}: {meaning.failure}{stop}", ratios)
    done = {p.pair for p in pairs}
    for plan in evidence.schedule:
        if plan.pair in done:
            continue
        spent = [i for i in evidence.invalidations if i.pair == plan.pair]
        if len(spent) > perf.invalidation.max_reruns_per_pair:
            why = "; ".join(f"attempt {i.attempt}: {i.reason}" for i in spent)
            return _undecided(
                PerfVerdict.BLOCKED,
                f"pair {plan.pair} was invalidated {len(spent)} times ({why}), exhausting "
                f"max_reruns_per_pair={perf.invalidation.max_reruns_per_pair}; the node is not "
                "quiet enough for performance sampling",
                ratios,
            )
        return _undecided(PerfVerdict.BLOCKED, f"only {len(pairs)} of {len(evidence.schedule)} scheduled pairs "
                          "completed", ratios)
    decision = decide(pairs, perf, evidence.schedule_seed)
    gates = kernel_gates(evidence, perf) if evidence.kernel_corroborated else []
    verdict, reason = corroborated(decision, gates)
    return PerfOutcome(
        verdict=verdict,
        reason=reason,
        ratios=ratios,
        bounds=decision.bounds,
        diagnostics=decision.diagnostics,
        bootstrap=decision.bootstrap,
        dependence=decision.dependence,
        kernel_gates=gates,
        reported_verdict=decision.verdict if evidence.kernel_corroborated else None,
    )


def kernel_gates(evidence: PerfResult, perf: PerfConfig) -> list[KernelGate]:
    """The reported gate repeated on each kernel clock: same valid attempts, schedule, threshold, confidence and
    dependence method. A clock some pair lacks is left out (it cannot cover the same pairs)."""
    reported = observations(evidence.schedule, evidence.samples)
    gates = []
    for clock, measure in KERNEL_CLOCKS.items():
        pairs = observations(evidence.schedule, evidence.samples, measure)
        if [p.pair for p in pairs] != [p.pair for p in reported]:
            continue
        decision = decide(pairs, perf, evidence.schedule_seed)
        gates.append(
            KernelGate(
                clock=clock,
                ratios=[p.ratio for p in pairs],
                bounds=decision.bounds,
                diagnostics=decision.diagnostics,
                dependence=decision.dependence,
                verdict=decision.verdict,
                reason=decision.reason,
            )
        )
    return gates


def corroborated(decision: Decision, gates: list[KernelGate]) -> tuple[PerfVerdict, str]:
    """The row's verdict: the reported figures' unless they PASS while a kernel clock FAILs (a contradiction)."""
    threshold = decision.threshold
    contradicting = [gate for gate in gates if gate.verdict == PerfVerdict.FAIL]
    if decision.verdict != PerfVerdict.PASS or not contradicting:
        return decision.verdict, decision.reason

    def claim(label: str, bounds: Bounds, dependence: DependenceResult | None, passed: bool) -> str:
        if dependence is not None:
            return f"{label} by the batch IUT ({dependence.line})"
        if passed:
            return f"{label} upper X({bounds.upper_index})={bounds.upper:.4f} <= {threshold:g}"
        return f"{label} lower X({bounds.lower_index})={bounds.lower:.4f} > {threshold:g}"

    kernel = " and ".join(
        claim(KERNEL_CLOCK_LABELS[gate.clock], gate.bounds, gate.dependence, False) for gate in contradicting
    )
    reported = claim("the reported figures", decision.bounds, decision.dependence, True)
    return (
        PerfVerdict.FAIL,
        f"reported PASS contradicted by the kernel's FAIL: {reported}, while {kernel}; a verdict never rests "
        "on the candidate's own figures alone",
    )


def finalize(evidence: PerfResult, perf: PerfConfig) -> PerfResult:
    """The recorded evidence with the gate's outcome attached."""
    return evidence.with_outcome(evaluate(evidence, perf))
