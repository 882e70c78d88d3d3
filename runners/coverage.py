"""Lifecycle evidence counted from a canonical report, independently of its digest (Stage 3, Stage 4.3).

Matching digests prove two revisions did the same thing, not that the row exercised the paths the
protocol requires, so every row also needs these counts. Evidence that is absent is never read as zero:
a missing field raises CoverageError naming its JSON pointer, and the campaign fails the row with
"missing lifecycle evidence". Fields the harness reports as `null` for a topology (the handoff fields in
an aggregated row, a route without an overlap report) are present evidence and count as "not observed".

Decisions:
- An overlap-routed decision is a `routing_history` entry whose `reported_overlap_tokens` > 0. The
  per-request `prefill_route_overlap_tokens`/`decode_route_overlap_tokens` are the harness's copies of the
  same placement's report (clamped to the input length), so adding them would double count one decision.
- A reused request has `reused_input_tokens` > 0 or `decode_reused_input_tokens` > 0.
- A handoff is a request with both worker indices and `destination_activated_ms` set.
- An active worker is a distinct `logical_worker_id` among a pool's route decisions.
- Placements are counted from `per_request[].routing_history[].outcome`, the one place the harness records
  them (the real coverage object has no placement counter). A queued route is one record, filled in at
  release; a route still queued at the end keeps `logical_worker_id: null` for good. That request is
  stranded: it fails terminal cleanup by name, whatever status it was closed with, never as a parse error.
  A null worker on an immediate or released route is malformed.
- Drift detectors (`expect.reused_requests`, `.placements`, `.active_workers`, `.handoffs`) are checked only
  when configured, each against an exact value or an inclusive band; a failure names expected and observed.
- `coverage.kv_ingest.kind_counts` lists the kinds it observed, so an absent `removed` kind counts 0;
  the map itself is required.
- A revision whose router config has no `router_queue_threshold` key predates the flag and had no router
  queue: it reads as unset, which can only make the queued-placement check stricter.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from runners.schema.config import Band, ExpectedEvidence, band_limits
from runners.schema.report import ARMS, Arm, CoverageCheck, CoverageCounts

TERMINAL_STATUSES = ("completed", "rejected", "canceled", "failed")


class CoverageError(ValueError):
    """A report lacks (or garbles) a lifecycle evidence field; the message names its JSON pointer."""


def _field(node: Any, key: str, path: str) -> Any:
    if not isinstance(node, dict):
        raise CoverageError(f"{path or '/'} is not an object")
    if key not in node:
        raise CoverageError(f"{path}/{key} is missing")
    return node[key]


def _count(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CoverageError(f"{path} is {value!r}, not a count")
    return value


def _optional_count(value: Any, path: str) -> int:
    """A nullable counter: `null` is the harness saying the signal does not apply here."""
    return 0 if value is None else _count(value, path)


def _list(value: Any, path: str) -> Sequence[Any]:
    """An array: a list, or the per-request records of `Canonical.streamed()`, parsed one at a time."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise CoverageError(f"{path} is {type(value).__name__}, not an array")
    return value


class _Tally:
    """Per-request counts accumulated in one pass over `per_request`."""

    def __init__(self) -> None:
        self.statuses: Counter[str] = Counter()
        self.overlap_routed = 0
        self.reused = 0
        self.handoffs = 0
        self.immediate: Counter[str] = Counter()
        self.queued: Counter[str] = Counter()
        self.workers: defaultdict[str, set[int]] = defaultdict(set)
        self.stranded_in_queue = 0

    def add(self, record: Any, path: str) -> None:
        status = _field(record, "terminal_status", path)
        if status is not None and not isinstance(status, str):
            raise CoverageError(f"{path}/terminal_status is {status!r}, not a status")
        history_path = f"{path}/routing_history"
        routes = _list(_field(record, "routing_history", path), history_path)
        still_queued = [self._add_route(route, f"{history_path}/{index}") for index, route in enumerate(routes)]
        if any(still_queued[:-1]):
            first = still_queued.index(True)
            raise CoverageError(
                f"{history_path}/{first} never left the router queue, yet the request was routed again after it"
            )
        if still_queued and still_queued[-1]:
            if status == "completed":
                raise CoverageError(
                    f"{path}/terminal_status is completed but {history_path}/{len(routes) - 1} never left "
                    "the router queue"
                )
            self.stranded_in_queue += 1
        elif status is not None:
            self.statuses[status if status in TERMINAL_STATUSES else "other"] += 1
        reused = _count(_field(record, "reused_input_tokens", path), f"{path}/reused_input_tokens")
        decode_reused = _optional_count(
            _field(record, "decode_reused_input_tokens", path), f"{path}/decode_reused_input_tokens"
        )
        self.reused += reused > 0 or decode_reused > 0
        handoff = [
            _field(record, key, path)
            for key in ("prefill_worker_idx", "decode_worker_idx", "destination_activated_ms")
        ]
        self.handoffs += all(value is not None for value in handoff)

    def _add_route(self, route: Any, path: str) -> bool:
        """Count one route decision; True when it is a queued route that never left the queue."""
        overlap = _field(route, "reported_overlap_tokens", path)
        self.overlap_routed += _optional_count(overlap, f"{path}/reported_overlap_tokens") > 0
        pool = _field(route, "pool", path)
        if not isinstance(pool, str):
            raise CoverageError(f"{path}/pool is {pool!r}, not a pool name")
        outcome = _field(route, "outcome", path)
        if outcome == "immediate":
            self.immediate[pool] += 1
        elif outcome == "queued":
            self.queued[pool] += 1
        else:
            raise CoverageError(f"{path}/outcome is {outcome!r}; every route decision is immediate or queued")
        worker = _field(route, "logical_worker_id", path)
        if worker is None and outcome == "queued":
            if route.get("released_at_ms") is not None:
                raise CoverageError(f"{path} was released from the queue but names no logical_worker_id")
            return True
        self.workers[pool].add(_count(worker, f"{path}/logical_worker_id"))
        return False


def _pressure(coverage: Any) -> tuple[int, int]:
    """Total pressure events and how many of their records were readmitted; the two must agree in size."""
    pressure = _field(coverage, "pressure", "/coverage")
    path = "/coverage/pressure"
    required = ("vllm_preemptions_total", "sglang_retractions_total")
    others = sorted(k for k in pressure if k.endswith("_total") and k not in required) if isinstance(
        pressure, dict) else []
    # The reference names the vLLM and SGLang totals; any other engine's `*_total` (e.g. TensorRT-LLM smoke
    # coverage) counts too, so the records always add up, as Stage 6's preemption check counts them.
    total = sum(_count(_field(pressure, key, path), f"{path}/{key}") for key in (*required, *others))
    records = _list(_field(pressure, "records", path), f"{path}/records")
    if len(records) != total:
        raise CoverageError(
            f"{path}/records has {len(records)} records but the totals count {total} pressure events"
        )
    readmitted = sum(
        _field(record, "readmitted_at_ms", f"{path}/records/{index}") is not None
        for index, record in enumerate(records)
    )
    return total, readmitted


def _queue_threshold(metadata: Any) -> float | None:
    config = _field(_field(metadata, "router", "/metadata"), "config", "/metadata/router")
    if not isinstance(config, dict):
        raise CoverageError("/metadata/router/config is not an object")
    threshold = config.get("router_queue_threshold")
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise CoverageError(f"/metadata/router/config/router_queue_threshold is {threshold!r}, not a number")
    return float(threshold)


def count_evidence(data: dict[str, Any]) -> CoverageCounts:
    """Count the protocol's lifecycle evidence in one canonical report (its `Canonical.data`)."""
    summary = _field(data, "summary", "")
    requests = _count(_field(summary, "num_requests", "/summary"), "/summary/num_requests")
    summary_completed = _count(
        _field(summary, "completed_requests", "/summary"), "/summary/completed_requests"
    )
    records = _list(_field(data, "per_request", ""), "/per_request")
    if len(records) != requests:
        raise CoverageError(
            f"/per_request has {len(records)} records but /summary/num_requests is {requests}: "
            "per-request evidence is incomplete"
        )
    tally = _Tally()
    for index, record in enumerate(records):
        tally.add(record, f"/per_request/{index}")
    if tally.statuses["completed"] != summary_completed:
        raise CoverageError(
            f"/summary/completed_requests is {summary_completed} but {tally.statuses['completed']} "
            "per-request records have terminal_status completed"
        )
    coverage = _field(data, "coverage", "")
    pressure_events, readmitted = _pressure(coverage)
    kind_counts = _field(_field(coverage, "kv_ingest", "/coverage"), "kind_counts", "/coverage/kv_ingest")
    if not isinstance(kind_counts, dict):
        raise CoverageError("/coverage/kv_ingest/kind_counts is not an object")
    removed = _count(kind_counts.get("removed", 0), "/coverage/kv_ingest/kind_counts/removed")
    return CoverageCounts(
        requests=requests,
        completed=tally.statuses["completed"],
        rejected=tally.statuses["rejected"],
        canceled=tally.statuses["canceled"],
        failed=tally.statuses["failed"],
        other_terminal=tally.statuses["other"],
        overlap_routed=tally.overlap_routed,
        reused_requests=tally.reused,
        immediate_by_pool=dict(sorted(tally.immediate.items())),
        queued_by_pool=dict(sorted(tally.queued.items())),
        pressure_events=pressure_events,
        readmitted_pressure_events=readmitted,
        handoffs=tally.handoffs,
        kv_removed_events=removed,
        router_queue_threshold=_queue_threshold(_field(data, "metadata", "")),
        workers_by_pool={pool: len(ids) for pool, ids in sorted(tally.workers.items())},
        stranded_in_queue=tally.stranded_in_queue,
    )


def _overlap_check(arm: Arm, counts: CoverageCounts) -> CoverageCheck:
    return CoverageCheck(
        name="kv_overlap_routing",
        ok=counts.overlap_routed > 0,
        detail=(
            f"{arm}: {counts.overlap_routed} route decisions reported KV overlap (expected > 0); "
            f"{counts.reused_requests} of {counts.requests} requests reused cached KV"
        ),
    )


def _placement_check(arm: Arm, counts: CoverageCounts, expect: ExpectedEvidence) -> CoverageCheck:
    immediate = sum(counts.immediate_by_pool.values())
    queued = sum(counts.queued_by_pool.values())
    pools = sorted(counts.immediate_by_pool.keys() | counts.queued_by_pool.keys())
    per_pool = ", ".join(
        f"{pool} {counts.immediate_by_pool.get(pool, 0)}/{counts.queued_by_pool.get(pool, 0)}"
        for pool in pools
    )
    threshold = "unset" if counts.router_queue_threshold is None else f"{counts.router_queue_threshold:g}"
    detail = (
        f"{arm}: {immediate + queued} route decisions, {immediate} immediate and {queued} queued "
        f"(immediate/queued per pool: {per_pool or 'none'}); expected {expect.queued} queued "
        f"and the rest immediate; router_queue_threshold {threshold}"
    )
    problems = []
    if immediate + queued == 0:
        problems.append("no route decisions were recorded")
    if queued and counts.router_queue_threshold is None:
        problems.append(
            "queued placements without a router_queue_threshold: "
            "scheduler waiting is never relabelled as queued"
        )
    if queued != expect.queued:
        problems.append(f"{queued} queued placements, expected {expect.queued}")
    return CoverageCheck(name="placement", ok=not problems, detail="; ".join([detail, *problems]))


def _pressure_check(arm: Arm, counts: CoverageCounts, expect: ExpectedEvidence) -> CoverageCheck:
    low, high = expect.pressure
    events, readmitted = counts.pressure_events, counts.readmitted_pressure_events
    detail = f"{arm}: {events} pressure events ({readmitted} readmitted)"
    if events == 0:
        return CoverageCheck(
            name="pressure", ok=False, detail=f"{detail}, expected [{low}, {high}]: edge not exercised"
        )
    if events > high:
        return CoverageCheck(
            name="pressure",
            ok=False,
            detail=f"{detail} above [{low}, {high}]: pressure flood; back off capacity or concurrency "
            "identically for both revisions",
        )
    if events < low:
        return CoverageCheck(name="pressure", ok=False, detail=f"{detail} below [{low}, {high}]")
    if readmitted != events:
        return CoverageCheck(
            name="pressure",
            ok=False,
            detail=f"{detail} within [{low}, {high}], but {events - readmitted} were never readmitted "
            "(every pressure event must be readmitted)",
        )
    return CoverageCheck(name="pressure", ok=True, detail=f"{detail} within [{low}, {high}]")


def _handoff_check(
    arm: Arm, counts: CoverageCounts, expect: ExpectedEvidence, disaggregated: bool
) -> CoverageCheck:
    topology = "disaggregated" if disaggregated else "aggregated"
    detail = f"{arm}: {counts.handoffs} prefill/decode handoffs for {counts.completed} completed requests"
    if disaggregated:
        wanted = f"expected every completed request to hand off ({topology}, expect.handoff true)"
        ok = expect.handoff and counts.completed > 0 and counts.handoffs == counts.completed
    else:
        wanted = f"expected 0 ({topology}, expect.handoff false)"
        ok = not expect.handoff and counts.handoffs == 0
    return CoverageCheck(name="handoff", ok=ok, detail=f"{detail}; {wanted}")


def _terminal_check(arm: Arm, counts: CoverageCounts, expect: ExpectedEvidence) -> CoverageCheck:
    terminal = counts.completed + counts.rejected + counts.canceled + counts.failed + counts.other_terminal
    stranded = counts.requests - terminal
    in_queue = f" ({counts.stranded_in_queue} never left the router queue)" if counts.stranded_in_queue else ""
    ok = (
        counts.requests > 0
        and stranded == 0
        and (not expect.completed_all or counts.completed == counts.requests)
    )
    wanted = "all completed" if expect.completed_all else "every request terminal"
    return CoverageCheck(
        name="terminal_cleanup",
        ok=ok,
        detail=(
            f"{arm}: {counts.completed} of {counts.requests} completed, {counts.rejected} rejected, "
            f"{counts.canceled} canceled, {counts.failed} failed, {counts.other_terminal} other, "
            f"{stranded} stranded{in_queue}; {counts.kv_removed_events} KV removal events; "
            f"expected {wanted}, none stranded"
        ),
    )


def _in_band(name: str, observed: int, band: Band) -> tuple[str, bool]:
    low, high = band_limits(band)
    expected = str(low) if low == high else f"[{low}, {high}]"
    return f"{name} {observed} (expected {expected})", low <= observed <= high


def _drift_check(arm: Arm, counts: CoverageCounts, expect: ExpectedEvidence) -> CoverageCheck | None:
    """The configured drift detectors of a row's frozen configuration; None when it configures none."""
    pools = sorted(counts.immediate_by_pool.keys() | counts.queued_by_pool.keys())
    signals: list[tuple[str, bool]] = []
    if expect.reused_requests is not None:
        signals.append(_in_band("requests with reused KV", counts.reused_requests, expect.reused_requests))
    for pool, placements in sorted(expect.placements.items()):
        for outcome, band, observed in (("immediate", placements.immediate, counts.immediate_by_pool),
                                        ("queued", placements.queued, counts.queued_by_pool)):
            if band is not None:
                signals.append(_in_band(f"{pool} {outcome} placements", observed.get(pool, 0), band))
    for pool, band in sorted(expect.active_workers.items()):
        signals.append(_in_band(f"{pool} active workers", counts.workers_by_pool.get(pool, 0), band))
    if expect.handoffs is not None:
        signals.append(_in_band("handoffs", counts.handoffs, expect.handoffs))
    if not signals:
        return None
    drifted = [text for text, ok in signals if not ok]
    detail = f"{arm}: " + "; ".join(text for text, _ in signals)
    if drifted:
        detail += f"; out of band: {'; '.join(drifted)} (observed pools: {', '.join(pools) or 'none'})"
    return CoverageCheck(name="drift_detectors", ok=not drifted, detail=detail)


def check_evidence(
    counts: Mapping[Arm, CoverageCounts], expect: ExpectedEvidence, disaggregated: bool
) -> list[CoverageCheck]:
    """Every required lifecycle path, checked separately for each arm against the row's expected band."""
    checks: list[CoverageCheck] = []
    for arm in ARMS:
        arm_counts = counts.get(arm)
        if arm_counts is None:
            missing = CoverageCheck(name="evidence", ok=False, detail=f"{arm}: no lifecycle evidence counted")
            checks.append(missing)
            continue
        checks.extend(
            [
                _overlap_check(arm, arm_counts),
                _placement_check(arm, arm_counts, expect),
                _pressure_check(arm, arm_counts, expect),
                _handoff_check(arm, arm_counts, expect, disaggregated),
                _terminal_check(arm, arm_counts, expect),
            ]
        )
        drift = _drift_check(arm, arm_counts, expect)
        if drift is not None:
            checks.append(drift)
    return checks
