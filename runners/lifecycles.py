"""Stage 6: force rare lifecycles with small deterministic fixtures the long corpus cannot reliably trigger.

Each fixture runs on both revisions like a row's correctness stages — determinism (2 + 2 fresh processes) and
byte parity — and then asserts its lifecycle from the canonical report's evidence, never from completion alone:
- router queueing: an explicit queue threshold, queued placements, every queued request released and completed;
- preemption edge: one to three (or the declared band) pressure events, each re-admitted, virtual time advancing;
- handoff ordering: per request, prefill done -> KV transfer -> decode activated, in that order;
- scale-to-zero: reported UNSUPPORTED with the reason when the harness has no such control (never emulated).
No performance is measured on fixtures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from runners.demo_trace import generate_demo_trace
from runners.exec.harness import missing_flags
from runners.exec.sandbox import Sandbox
from runners.schema.config import CampaignConfig, LifecycleFixture
from runners.schema.report import ARMS, Arm, ExceptionOutcome, FixtureAssertion, FixtureReport, FixtureStatus
from runners.schema.verdicts import fixture_status, uncovered_pointers
from runners.stages.canonical import Canonical
from runners.stages.determinism import run_determinism
from runners.stages.parity import compare
from runners.stages.revisions import show_file
from runners.stages.trace import sha256_file

EPSILON_MS = 1e-6
ROUNDING_MS = 0.0015
"""Canonical times are rounded to the microsecond, so a sum of two of them may exceed a third by this much."""


class FixtureTraceError(ValueError):
    """A fixture trace that cannot be produced or does not match its declared checksum."""


# --- Assertions (pure) ------------------------------------------------------------------------------------

def _requests(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    records = data.get("per_request")
    return records if isinstance(records, list) else []


def _all_completed(data: Mapping[str, Any]) -> FixtureAssertion:
    records = _requests(data)
    unfinished = [r.get("uuid", "?") for r in records if r.get("terminal_status") != "completed"]
    return FixtureAssertion(
        name="every request completed",
        passed=bool(records) and not unfinished,
        evidence=(f"{len(records)} requests, all completed" if records and not unfinished
                  else f"{len(unfinished)} of {len(records)} requests not completed (first: {unfinished[:3]})"),
    )


def assert_router_queueing(data: Mapping[str, Any], threshold: float) -> list[FixtureAssertion]:
    router_config = ((data.get("metadata") or {}).get("router") or {}).get("config") or {}
    recorded = router_config.get("router_queue_threshold")
    # Placements live in the routing history only: the real harness writes no placement counter under coverage.
    queued = [r for r in _requests(data) if any(h.get("outcome") == "queued" for h in r.get("routing_history", []))]
    queued_total = sum(h.get("outcome") == "queued" for r in queued for h in r.get("routing_history", []))
    unreleased = []
    for record in queued:
        for entry in record.get("routing_history", []):
            if entry.get("outcome") != "queued":
                continue
            entered, wait = entry.get("queue_entered_at_ms"), entry.get("queue_wait_ms")
            admitted = [a.get("at_ms") for a in record.get("admission_history", [])
                        if a.get("pool") == entry.get("pool")]
            # A route still queued at the end keeps a null worker (and a null release time, where recorded).
            never_left = entry.get("logical_worker_id") is None or (
                "released_at_ms" in entry and entry["released_at_ms"] is None)
            if (never_left or entered is None or wait is None or not admitted
                    or min(admitted) + EPSILON_MS < entered + wait):
                unreleased.append(record.get("uuid", "?"))
                break
    return [
        FixtureAssertion(
            name=f"explicit queue threshold {threshold:g}",
            passed=recorded is not None and abs(float(recorded) - threshold) < 1e-12,
            evidence=f"/metadata/router/config/router_queue_threshold = {recorded!r}",
        ),
        FixtureAssertion(
            name="queued placements > 0",
            passed=queued_total > 0,
            evidence=f"{queued_total} queued placements; {len(queued)} requests routed through the queue",
        ),
        FixtureAssertion(
            name="every queued request released",
            passed=bool(queued) and not unreleased,
            evidence=(f"all {len(queued)} queued requests left the queue and were admitted after their wait"
                      if not unreleased else
                      f"{len(unreleased)} queued requests never released (first: {unreleased[:3]})"),
        ),
        _all_completed(data),
    ]


def assert_preemption_edge(data: Mapping[str, Any], band: tuple[int, int]) -> list[FixtureAssertion]:
    pressure = (data.get("coverage") or {}).get("pressure") or {}
    total = sum(int(v) for k, v in pressure.items() if k.endswith("_total"))
    records = sorted(pressure.get("records") or [], key=lambda p: p.get("pressure_ordinal", 0))
    not_readmitted = [p.get("pressure_ordinal") for p in records if p.get("readmitted_at_ms") is None]
    times = [p.get("at_ms") for p in records]
    ordered = all(a is not None and b is not None and a <= b for a, b in zip(times, times[1:], strict=False))
    end = (data.get("summary") or {}).get("duration_ms")
    last = max((p["readmitted_at_ms"] for p in records if p.get("readmitted_at_ms") is not None), default=None)
    advancing = ordered and end is not None and (last is None or end > last)
    lo, hi = band
    return [
        FixtureAssertion(
            name=f"bounded pressure: {lo}-{hi} events",
            passed=lo <= total <= hi and len(records) == total,
            evidence=f"{total} pressure events ({len(records)} records)",
        ),
        FixtureAssertion(
            name="every preempted request re-admitted",
            passed=bool(records) and not not_readmitted,
            evidence=("all re-admitted" if records and not not_readmitted
                      else f"pressure ordinals never re-admitted: {not_readmitted[:5]}" if records
                      else "no pressure records"),
        ),
        FixtureAssertion(
            name="virtual time keeps advancing",
            passed=advancing,
            evidence=f"pressure times {'ordered' if ordered else 'out of order'}; last re-admission {last} ms, "
                     f"run ends at {end} ms",
        ),
        _all_completed(data),
    ]


_HANDOFF_ORDER = (
    ("prefill_admit_ms", "source_held_ms", "prefill admitted before its KV is held (prefill done)"),
    ("source_held_ms", "destination_reserved_ms", "prefill done before the decode side reserves"),
    ("destination_activated_ms", "decode_admit_ms", "decode activated no later than its admission"),
    ("destination_activated_ms", "source_released_ms", "source released only after decode activated"),
)


def assert_handoff_ordering(data: Mapping[str, Any]) -> list[FixtureAssertion]:
    records = _requests(data)
    violations: list[str] = []
    for record in records:
        uuid = record.get("uuid", "?")
        for earlier, later, meaning in _HANDOFF_ORDER:
            a, b = record.get(earlier), record.get(later)
            if a is None or b is None or a > b + EPSILON_MS:
                violations.append(f"{uuid}: {earlier}={a} > {later}={b} ({meaning})")
        reserved, transfer, activated = (record.get(k) for k in
                                         ("destination_reserved_ms", "kv_transfer_ms", "destination_activated_ms"))
        # `kv_transfer_ms` is not in the reference's handoff evidence: without it, the transfer is the span from
        # reservation to activation, and only its order can be checked.
        if reserved is None or activated is None or reserved + (transfer or 0.0) > activated + ROUNDING_MS:
            violations.append(f"{uuid}: reserved {reserved} + transfer {transfer} > activated {activated} "
                              "(decode activated before its KV transfer finished)")
    return [
        FixtureAssertion(
            name="prefill done -> transfer -> decode activated, per request",
            passed=bool(records) and not violations,
            evidence=(f"ordered for all {len(records)} requests" if records and not violations
                      else f"{len(violations)} violations; first: {violations[:2]}" if records
                      else "no per-request records"),
        ),
        _all_completed(data),
    ]


def lifecycle_assertions(fixture: LifecycleFixture, data: Mapping[str, Any]) -> list[FixtureAssertion]:
    if fixture.kind == "router_queueing":
        assert fixture.queue_threshold is not None  # enforced by the config model
        return assert_router_queueing(data, fixture.queue_threshold)
    if fixture.kind == "preemption_edge":
        return assert_preemption_edge(data, fixture.pressure)
    if fixture.kind == "handoff_ordering":
        return assert_handoff_ordering(data)
    raise ValueError(f"fixture kind {fixture.kind!r} has no automated assertions")


# --- Running a fixture ------------------------------------------------------------------------------------

def fixture_trace(fixture: LifecycleFixture, repo: Path, base_sha: str, work: Path) -> Path:
    """Produce the fixture's trace (named generator, or a file read from the trusted base) and check its SHA-256."""
    work.mkdir(parents=True, exist_ok=True)
    target = work / f"{fixture.id}.trace.jsonl"
    spec = fixture.trace
    if spec.generator == "demo":
        generate_demo_trace(target, rows=spec.rows or 0)
    elif spec.path is not None:
        target.write_bytes(show_file(repo, base_sha, spec.path))
    digest = sha256_file(target)
    if digest != spec.sha256:
        raise FixtureTraceError(
            f"fixture {fixture.id}: trace {spec.describe()} has SHA-256 {digest}, the config declares {spec.sha256}"
        )
    return target


def run_fixture(
    fixture: LifecycleFixture,
    *,
    config: CampaignConfig,
    binaries: dict[Arm, Path],
    help_texts: Mapping[Arm, str],
    trace: Callable[[LifecycleFixture], Path],
    cpu_sets: list[list[int]],
    workdir: Path,
    evidence_dir: Path,
    sandbox: Sandbox | None,
    exceptions: list[ExceptionOutcome] | None = None,
) -> FixtureReport:
    """Determinism, parity, then the lifecycle assertions on both arms' canonical reports; mismatching full
    reports and a focused diff are kept in `evidence_dir` like a row's."""
    exceptions = exceptions or []
    base = FixtureReport(id=fixture.id, kind=fixture.kind, args=list(fixture.args), status=FixtureStatus.FAIL,
                         reason="", trace=fixture.trace.describe(), trace_sha256=fixture.trace.sha256)
    flags = [word for word in [*fixture.args, *fixture.requires_flags] if word.startswith("--")]
    missing = {arm: missing_flags(help_texts[arm], flags) for arm in ARMS}
    if fixture.kind == "scale_to_zero":
        absent = sorted({flag for flags_missing in missing.values() for flag in flags_missing})
        if absent or not fixture.requires_flags:
            control = ", ".join(absent) if absent else "no scale control declared"
            return base.model_copy(update={
                "status": FixtureStatus.UNSUPPORTED,
                "reason": f"the harness has no scale-to-zero control ({control}); not emulated with ignored flags",
            })
        return base.model_copy(update={
            "status": FixtureStatus.UNSUPPORTED,
            "reason": "scale-to-zero controls exist but no automated lifecycle assertion is defined for them yet",
        })
    problems = [f"flag {flag} is not accepted by the {arm} revision" for arm in ARMS for flag in missing[arm]]
    if problems:
        return base.model_copy(update={"status": FixtureStatus.STOPPED, "reason": "; ".join(problems)})
    try:
        trace_path = trace(fixture)
    except (FixtureTraceError, OSError, ValueError) as exc:
        return base.model_copy(update={"status": FixtureStatus.STOPPED, "reason": str(exc)})
    args = [str(trace_path), *config.harness.common_args, *fixture.args]
    outcome = run_determinism(row_id=fixture.id, binaries=binaries, harness_args=args,
                              exclusions=list(config.harness.exclusions), cpu_sets=cpu_sets,
                              workdir=workdir / "determinism", sandbox=sandbox)
    report = base.model_copy(update={"determinism": outcome.result})
    failures = outcome.failures + outcome.blocked
    if failures:
        return report.model_copy(update={"reason": failures[0].splitlines()[0]})
    if outcome.result.unstable_arms:
        return report.model_copy(update={"reason": f"unstable revision: {', '.join(outcome.result.unstable_arms)}"})
    canonical: dict[Arm, Canonical] = outcome.canonical
    parity = compare(fixture.id, canonical["baseline"], canonical["candidate"], evidence_dir)
    assertions = {arm: lifecycle_assertions(fixture, canonical[arm].data) for arm in ARMS}
    failed = [f"{arm}: {a.name} ({a.evidence})" for arm in ARMS for a in assertions[arm] if not a.passed]
    uncovered = uncovered_pointers(fixture.id, parity.differing_pointers, exceptions)
    if uncovered:
        reason = f"canonical reports differ at {', '.join(uncovered[:3])} (not covered by a verified exception)"
    elif failed:
        reason = "lifecycle assertion failed: " + failed[0]
    elif not parity.identical:
        reason = (f"differences covered by verified exceptions; {len(assertions['candidate'])} lifecycle "
                  "assertions hold")
    else:
        reason = f"identical on both revisions; {len(assertions['candidate'])} lifecycle assertions hold"
    decided = report.model_copy(update={"parity": parity, "assertions": assertions, "exceptions": exceptions,
                                        "reason": reason})
    return decided.model_copy(update={"status": fixture_status(decided)})
