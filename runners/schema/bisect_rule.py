"""The bisect's schema and rule: `bisect.json`'s models and the pure functions that decide a probe's state, the
next commit to probe and the result. `runners.pipeline.bisect` runs them; `runners.verify` replays them from a
bisect.json alone, so the rule lives here once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Final, Literal, get_args

from pydantic import BaseModel, ConfigDict

from runners.schema.config import CampaignConfig
from runners.schema.report import CampaignReport, GateVerdict, PerfVerdict, SemanticVerdict, Verdicts

BISECT_SCHEMA_VERSION: Final = "kv-parity.bisect.v1"
RERUNS: Final = 1
"""Predeclared: an undecided probe is run once more, then the search stops."""

Gate = Literal["semantic", "performance", "sizes"]
GATES: tuple[Gate, ...] = get_args(Gate)


class ProbeState(StrEnum):
    GOOD = "good"
    BAD = "bad"
    UNDECIDED = "undecided"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BisectRule(_Model):
    """What was declared before the first probe ran."""

    target: list[Gate]
    """The gates whose FAIL makes a probe bad (empty until the bad endpoint named them, when not requested)."""
    target_source: Literal["requested", "bad endpoint"]
    reruns: int = RERUNS
    statement: str


class ProbeAttempt(_Model):
    report: CampaignReport
    """The probe's whole campaign report: its verdicts are recomputed from it like any campaign's."""
    state: ProbeState
    directory: str
    """The campaign artifact's directory, relative to bisect.json."""


class Probe(_Model):
    commit: str
    position: int
    """1-based place of `commit` in `BisectReport.commits` (the bad endpoint is the last)."""
    attempts: list[ProbeAttempt]
    state: ProbeState
    """The last attempt's state: a second attempt exists only when the first was undecided."""


class BisectResult(_Model):
    outcome: Literal["culprit", "range", "not_bad"]
    """culprit: one commit; range: an undecided probe stopped the search; not_bad: `bad` does not FAIL."""
    culprit: str | None
    good: str
    """The last commit known good (the narrowest range's start)."""
    bad: str
    """The first commit known bad, or `bad` itself when nothing narrowed it."""
    reason: str

    @property
    def last_line(self) -> str:
        """What `kv-parity bisect` prints last: the culprit, or the range it could decide."""
        if self.outcome == "culprit" and self.culprit is not None:
            return f"culprit: {self.culprit}"
        return f"range: {self.good}..{self.bad}"


class BisectReport(_Model):
    schema_version: Literal["kv-parity.bisect.v1"] = BISECT_SCHEMA_VERSION
    bisect_id: str
    created_unix: float
    tool_version: str
    good: str
    bad: str
    requested: dict[str, str]
    """`good` and `bad` as asked for (a ref or SHA), before they were pinned."""
    commits: list[str]
    """The first-parent commits after `good` up to and including `bad`, oldest first."""
    config: CampaignConfig
    config_source: str
    rows: list[str] | None
    rule: BisectRule
    probes: list[Probe]
    result: BisectResult


# --- the rule: pure functions of recorded evidence -------------------------------------------------------


def failed_gates(verdicts: Verdicts) -> list[Gate]:
    """The gates a campaign decided against its candidate, in GATES order."""
    failed = {"semantic": verdicts.semantic == SemanticVerdict.FAIL,
              "performance": verdicts.performance == PerfVerdict.FAIL,
              "sizes": verdicts.sizes == GateVerdict.FAIL}
    return [gate for gate in GATES if failed[gate]]


def _passed(verdicts: Verdicts, gate: Gate) -> bool:
    if gate == "semantic":
        return verdicts.semantic in (SemanticVerdict.PASS, SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS)
    if gate == "performance":
        return verdicts.performance == PerfVerdict.PASS
    return verdicts.sizes == GateVerdict.PASS


def probe_state(verdicts: Verdicts, target: Sequence[Gate]) -> ProbeState:
    """BAD when a target gate FAILs, GOOD when every target gate PASSes, else UNDECIDED."""
    if set(failed_gates(verdicts)) & set(target):
        return ProbeState.BAD
    if all(_passed(verdicts, gate) for gate in target):
        return ProbeState.GOOD
    return ProbeState.UNDECIDED


def attempt_target(rule: BisectRule, probe_index: int) -> list[Gate]:
    """Which gates an attempt is judged on: every gate for the bad endpoint when the target was not requested
    (any FAIL makes it bad and names the target), else the rule's target."""
    if probe_index == 0 and rule.target_source == "bad endpoint":
        return list(GATES)
    return list(rule.target)


def bounds(n: int, probes: Sequence[Probe]) -> tuple[int, int]:
    """(last good position, first bad position) the decided search probes establish; 0 is `good` itself."""
    low, high = 0, n
    for probe in probes[1:]:
        if probe.state == ProbeState.BAD:
            high = min(high, probe.position)
        elif probe.state == ProbeState.GOOD:
            low = max(low, probe.position)
    return low, high


def next_position(n: int, probes: Sequence[Probe]) -> int | None:
    """The position the rule probes next given the probes so far, or None when the search is over: first the bad
    endpoint (position n), then the midpoint of the open range, until it is one commit wide or a probe stayed
    undecided after its rerun."""
    if not probes:
        return n
    if probes[0].state != ProbeState.BAD or any(p.state == ProbeState.UNDECIDED for p in probes):
        return None
    low, high = bounds(n, probes)
    if high - low <= 1:
        return None
    return (low + high) // 2


def conclude(good: str, commits: Sequence[str], probes: Sequence[Probe]) -> BisectResult:
    """The result the rule draws from a finished search."""
    n = len(commits)
    endpoint = probes[0]
    bad = commits[-1]
    if endpoint.state == ProbeState.GOOD:
        return BisectResult(outcome="not_bad", culprit=None, good=good, bad=bad,
                            reason=f"{bad[:12]} does not FAIL the target gates against {good[:12]}: nothing to bisect")
    if endpoint.state == ProbeState.UNDECIDED:
        return BisectResult(outcome="range", culprit=None, good=good, bad=bad,
                            reason=f"the bad endpoint {bad[:12]} stayed undecided after {RERUNS} rerun")
    low, high = bounds(n, probes)
    low_sha = good if low == 0 else commits[low - 1]
    high_sha = commits[high - 1]
    undecided = [p for p in probes if p.state == ProbeState.UNDECIDED]
    if undecided:
        stuck = undecided[0].commit[:12]
        return BisectResult(outcome="range", culprit=None, good=low_sha, bad=high_sha,
                            reason=f"probe {stuck} stayed undecided after {RERUNS} rerun; the first bad commit is "
                                   f"one of the {high - low} after {low_sha[:12]} up to {high_sha[:12]}")
    return BisectResult(outcome="culprit", culprit=high_sha, good=low_sha, bad=high_sha,
                        reason=f"{high_sha[:12]} is the first commit after {good[:12]} that FAILs the target "
                               f"gates; its first parent {low_sha[:12]} does not")


def rule_statement(target: Sequence[Gate], requested: bool) -> str:
    gates = f"one of {', '.join(target)}" if requested else "one of the gates the bad endpoint FAILs (the target)"
    return (f"each probe is a full campaign of one first-parent commit against good under the config's gates; "
            f"the bad endpoint is probed first; a probe is bad when it FAILs {gates}, good when it PASSes every "
            f"target gate, undecided otherwise; an undecided probe is run {RERUNS} more time as a fresh campaign "
            f"(attempts never pooled) and, still undecided, ends the search with the narrowest decided range")


Attempt = Callable[[int, str, int], tuple[CampaignReport, str]]
"""(probe number from 1, commit, rerun number from 0) -> that attempt's campaign report and its directory."""


def search(commits: Sequence[str], target: Sequence[Gate] | None, attempt: Attempt) -> tuple[BisectRule, list[Probe]]:
    """Probe by the rule until it concludes: the declared rule (its target named by the bad endpoint unless
    requested) and every probe with every attempt, in the order they ran."""
    requested = target is not None
    rule = BisectRule(target=list(target or []), target_source="requested" if requested else "bad endpoint",
                      statement=rule_statement(target or [], requested))
    probes: list[Probe] = []
    while (position := next_position(len(commits), probes)) is not None:
        commit = commits[position - 1]
        judged_on = attempt_target(rule, len(probes))
        attempts: list[ProbeAttempt] = []
        for rerun in range(1 + RERUNS):
            report, directory = attempt(len(probes) + 1, commit, rerun)
            attempts.append(ProbeAttempt(report=report, state=probe_state(report.concluded, judged_on),
                                         directory=directory))
            if attempts[-1].state != ProbeState.UNDECIDED:
                break
        probes.append(Probe(commit=commit, position=position, attempts=attempts, state=attempts[-1].state))
        if len(probes) == 1 and not requested and probes[0].state == ProbeState.BAD:
            rule = rule.model_copy(update={"target": failed_gates(probes[0].attempts[-1].report.concluded)})
    return rule, probes
