"""The versioned campaign report: the one contract between the runners and the bot.

Everything a verdict depends on is recorded here before the verdict is computed; the rules that compute
verdicts from it are in `runners.schema.verdicts`, shared by the campaign and `kv-parity verify`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from runners.schema.config import CampaignConfig, CampaignMode, PerfConfig, RowConfig

REPORT_SCHEMA_VERSION: Final = "kv-parity.report.v1"

Arm = Literal["baseline", "candidate"]
ARMS: tuple[Arm, Arm] = ("baseline", "candidate")


class SemanticVerdict(StrEnum):
    PASS = "PASS"
    PASS_WITH_SEMANTIC_EXCEPTIONS = "PASS_WITH_SEMANTIC_EXCEPTIONS"
    FAIL = "FAIL"
    BLOCKED = "BLOCKED"
    """No semantic evidence could be produced because the config or protocol must be fixed first."""


class PerfVerdict(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"
    BLOCKED = "BLOCKED"
    NOT_RUN = "NOT_RUN"


class GateVerdict(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_RUN = "NOT_RUN"


class CheckConclusion(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    NEUTRAL = "neutral"
    ACTION_REQUIRED = "action_required"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- Stage 1: revisions and artifacts -------------------------------------------------------------------


class Revision(_Model):
    arm: Arm
    sha: str
    requested: str
    """What the user asked for (a ref or SHA), kept for the record; the SHA is what ran."""


class Toolchain(_Model):
    rustc: str
    cargo: str
    rustflags: str
    profile: str = "release"
    host: str


class BuildSettings(_Model):
    """What applied to one arm's build, read inside that arm's worktree and sandbox (so its own
    rust-toolchain.toml and .cargo/config count). Arms whose settings differ fail the size and perf gates."""

    rustc: str
    """`rustc -vV`, run in the arm's workspace."""
    cargo: str
    """`cargo -vV`, run in the arm's workspace."""
    rustflags_env: str
    """RUSTFLAGS the bot passed (empty when unset); it overrides any config rustflags."""
    config_rustflags: dict[str, str] = Field(default_factory=dict)
    """`build.rustflags` per cargo config file that sets it, by path relative to the worktree."""
    cargo_config_sha256: dict[str, str] = Field(default_factory=dict)
    """SHA-256 of every `.cargo/config` / `.cargo/config.toml` cargo reads inside the worktree."""
    toolchain_file_sha256: dict[str, str] = Field(default_factory=dict)
    """SHA-256 of `rust-toolchain` / `rust-toolchain.toml` files cargo reads inside the worktree."""
    profile_sha256: str | None = None
    """SHA-256 of the workspace Cargo.toml's `[profile.*]` tables (canonical JSON); None without any."""


def build_setting_differences(baseline: BuildSettings | None, candidate: BuildSettings | None) -> list[str]:
    """One line per build setting that differs between the arms; empty when both built the same way."""
    if baseline is None or candidate is None:
        return []
    lines = []
    for name in ("rustc", "cargo", "rustflags_env", "config_rustflags", "cargo_config_sha256",
                 "toolchain_file_sha256", "profile_sha256"):
        base, cand = getattr(baseline, name), getattr(candidate, name)
        if base != cand:
            shown = (base.splitlines()[0], cand.splitlines()[0]) if name in ("rustc", "cargo") else (base, cand)
            lines.append(f"{name}: baseline {shown[0]!r}, candidate {shown[1]!r}")
    return lines


def build_difference_reason(differences: list[str]) -> str:
    """The one-line gate reason when the arms were built differently (the size and performance gates fail)."""
    return ("the arms were built with different toolchains or flags, so their sizes and speed are not "
            "comparable (set build.allow_toolchain_difference = true to accept): " + "; ".join(differences))


class BuildCacheRecord(_Model):
    """How the build cache (runners/exec/build_cache.py) served an arm (an entry serves only the arm that built it)."""

    key_sha256: str
    """Digest of everything that determines the build (tree, toolchain as it applied, command, features,
    patches, flags and config digests)."""
    reused_from: str | None = None
    """The campaign whose build of this key was reused: no compile ran for this arm here (nor a fetch, unless it
    waited for that campaign's compile)."""
    discarded: str | None = None
    """Why an entry for this key was refused and deleted (a binary that no longer matches its recorded
    SHA-256, a planted link) before the arm was built fresh."""
    not_stored: str | None = None
    """Why this build was not stored in the cache (a candidate whose size gate did not pass, an entry larger than
    its share of the cache's bound); None: stored (or reused)."""
    host: str | None = None
    """The build host the key holds (machine, CPU model, CPU flags digest): a build for `native`, or a cache
    shared across nodes; None: the key holds no host."""

    def summary(self) -> str:
        """One line for every surface that shows the build."""
        key = f"build cache key {self.key_sha256[:12]}" + (f", host {self.host}" if self.host else "")
        if self.reused_from is not None:
            return f"reused from campaign {self.reused_from} ({key}): not built again"
        refused = f"; a cache entry was refused and deleted: {self.discarded}" if self.discarded else ""
        if self.not_stored is not None:
            return f"built here, not stored ({key}): {self.not_stored}{refused}"
        return f"built here and stored ({key}){refused}"


class Artifact(_Model):
    """One release artifact per revision, reused for every row and stage."""

    arm: Arm
    sha: str
    features: list[str]
    """Exactly the features the build command names."""
    feature_closure: list[str]
    """Those features plus everything they enable, read from the package manifest."""
    no_default_features: bool
    build_command: list[str]
    binary_name: str
    binary_sha256: str
    binary_size: int
    text_size: int
    build_seconds: float
    settings: BuildSettings | None = None
    """The toolchain and flags that applied to this arm (None in reports from before they were recorded)."""
    build_cache: BuildCacheRecord | None = None
    """None: no cache was consulted (a campaign without a cache, reports from before it)."""


class TraceEvidence(_Model):
    source_path: str
    sha256: str
    rows_total: int
    offset: int
    count: int
    slice_sha256: str
    slice_rule: str = "contiguous rows [offset, offset+count) in file order"


# --- Stages 2-5: determinism, parity, coverage, exceptions ------------------------------------------------


class ProcessRecord(_Model):
    """One harness process: kept whether it succeeded or not."""

    arm: Arm
    purpose: str
    argv: list[str]
    cpu_set: list[int]
    exit_code: int | None
    seconds: float
    stderr_tail: str = ""
    canonical_digest: str | None = None
    section_digests: dict[str, str] = Field(default_factory=dict)
    error: str | None = None


class DeterminismResult(_Model):
    runs: list[ProcessRecord]
    digests: dict[Arm, list[str]]
    concurrent: bool
    unstable_arms: list[Arm]


class PointerDiff(_Model):
    pointer: str
    baseline: str
    candidate: str


class ParityResult(_Model):
    baseline_digest: str
    candidate_digest: str
    section_digests: dict[Arm, dict[str, str]]
    identical: bool
    differing_sections: list[str]
    differences: list[PointerDiff]
    """The first differing JSON pointers with both values (bounded list)."""
    differences_total: int
    differing_pointers: list[str]
    """Every differing pointer (used to check exception coverage)."""
    kept_reports: dict[Arm, str] = Field(default_factory=dict)
    harness_exclusions: dict[Arm, list[str]] = Field(default_factory=dict)


Resolution = Literal["present", "parent_null", "absent"]
"""What a JSON pointer names in a canonical line: a value, nothing because an ancestor is null, or nothing."""

_RESOLUTION_WORDS: dict[Resolution, str] = {
    "present": "present",
    "parent_null": "absent because its parent is null",
    "absent": "absent",
}


class DeclaredPointer(_Model):
    """One pointer of the campaign's closed list or of the harness's `metadata.result_exclusions`."""

    pointer: str
    campaign_drops: bool
    """In the campaign's closed exclusion list: dropped before comparison whatever the harness declares."""
    declared_by: list[Arm]
    """The arms whose harness declared it in `metadata.result_exclusions`."""
    canonical: dict[Arm, Resolution]
    """What it resolves to in each arm's canonical line as the harness wrote it."""
    full_report: dict[Arm, Resolution] = Field(default_factory=dict)
    """For a declared pointer absent from an arm's canonical line: what it resolves to in the `--report-json` of
    one invocation that wrote both outputs."""

    def withheld_by(self) -> list[Arm]:
        """Arms whose harness demonstrably withheld the value: declared, kept out of the canonical line, and
        present in the full report of the same invocation. The campaign's own three are dropped anyway."""
        if self.campaign_drops:
            return []
        return [
            arm for arm in self.declared_by
            if self.canonical.get(arm) == "absent" and self.full_report.get(arm) == "present"
        ]

    def describe(self, arm: Arm) -> str:
        """A reviewer's words for what the pointer resolves to in one arm."""
        resolution = self.canonical.get(arm)
        if resolution is None:
            return "no canonical line"
        words = _RESOLUTION_WORDS[resolution]
        if resolution == "present":
            return "present, dropped by the campaign" if self.campaign_drops else "present and compared"
        if arm in self.withheld_by():
            return f"{words}: withheld, --report-json has a value"
        if arm in self.full_report:
            return f"{words}; --report-json has none either"
        return words


class DeclaredExclusions(_Model):
    """The harness's declared exclusions next to the campaign's closed list: evidence, never what is dropped."""

    campaign: list[str]
    declared: dict[Arm, list[str]]
    pointers: list[DeclaredPointer]
    evidence_runs: list[ProcessRecord] = Field(default_factory=list)
    """Invocations that wrote `--canonical-reports-jsonl` and `--report-json` together, run only when a declared
    pointer was absent from a canonical line."""
    problems: list[str] = Field(default_factory=list)
    """Evidence invocations that failed or disagreed with the compared canonical line (product failures)."""


class CoverageCounts(_Model):
    """Lifecycle evidence counted from one canonical report, independently of its digest."""

    requests: int
    completed: int
    rejected: int
    canceled: int
    failed: int
    other_terminal: int
    overlap_routed: int
    """Route decisions that reported a non-zero KV overlap."""
    reused_requests: int
    immediate_by_pool: dict[str, int]
    queued_by_pool: dict[str, int]
    pressure_events: int
    readmitted_pressure_events: int
    handoffs: int
    kv_removed_events: int
    router_queue_threshold: float | None
    workers_by_pool: dict[str, int] = Field(default_factory=dict)
    """Distinct `logical_worker_id`s per pool that received a route decision."""
    stranded_in_queue: int = 0
    """Requests whose last route was queued and never released (`logical_worker_id` null for good)."""


class CoverageCheck(_Model):
    name: str
    ok: bool
    detail: str


class CoverageResult(_Model):
    counts: dict[Arm, CoverageCounts]
    checks: list[CoverageCheck]


class ExceptionRecord(_Model):
    """Stage 5: one proposed semantic exception, read from the candidate revision."""

    id: str
    pointers: list[str] = Field(min_length=1)
    """JSON pointers covered; `*` matches one path segment (an array index or key), a final `**` a subtree."""
    rows: list[str] = Field(default_factory=list)
    """Rows it applies to; empty means every row."""
    baseline_behavior: str = Field(min_length=1)
    candidate_behavior: str = Field(min_length=1)
    source_of_truth: str = Field(min_length=1)
    why_intended: str = Field(min_length=1)
    """Why the difference comes from the intended change rather than leaked entropy."""
    compatibility_impact: str = Field(min_length=1)
    disposition: str = Field(min_length=1)
    regression_test: list[str] = Field(min_length=1)
    """argv run from the candidate checkout; `{binary}` and `{trace}` are substituted."""


class RegressionRun(_Model):
    arm: Arm
    argv: list[str]
    exit_code: int | None
    stdout_tail: str
    stderr_tail: str


class ExceptionOutcome(_Model):
    record: ExceptionRecord
    runs: list[RegressionRun]
    verified: bool
    """True only when the test failed against the baseline binary and passed against the candidate."""
    reason: str


# --- Stage 7: performance -----------------------------------------------------------------------------------


class PairPlan(_Model):
    pair: int
    order: Literal["baseline_first", "candidate_first"]


ContainmentKind = Literal["cgroup2", "cgroup1", "seccomp", "none"]
"""cgroup v2 or v1 (cpuset + CPU accounting), the confined seccomp program, or nothing (`--sandbox none`)."""


SampleKind = Literal["probe", "warmup", "measured"]
"""`probe`: the one timer check per arm before any warmup (same argv as a sample); never a measurement."""


class Sample(_Model):
    """One attempted invocation; never dropped."""

    kind: SampleKind
    arm: Arm
    pair: int | None
    attempt: int
    position: int
    """0 for the first invocation of a pair, 1 for the second."""
    argv: list[str]
    started_unix: float
    ended_unix: float
    elapsed_s: float
    """Wall time of the whole process (end-to-end diagnostic, not the metric)."""
    exit_code: int | None
    timing_record: dict[str, object] | None
    metric_ms: float | None
    setup_ms: float | None = None
    status: Literal["ok", "product_failure", "invalidated"]
    failure: str | None = None
    stderr_tail: str = ""
    cpu_set: list[int]
    affinity_observed: list[int] | None
    """The CPUs the sample could run on once started: under a cgroup its cpuset (every task's), else the harness
    process's own affinity (None when it had ended before the bot could read it)."""
    affinity_at_exit: list[int] | None = None
    """Affinity read again when the process had exited but was not yet reaped (catches a move mid-run)."""
    affinity_ok: bool
    interference_ms: float | None
    telemetry: dict[str, float] = Field(default_factory=dict)
    kernel_cpu_ms: float | None = None
    """User + system CPU time of the whole process tree, the kernel's figure, not the harness's: from the sample's
    cgroup (every task, reaped by anyone) or, without one, `wait4` rusage (`PerfResult.containment` says which;
    None in reports from before the kernel-corroborated gate)."""
    counted: float | None = None
    """The sample's count of `PerfResult.counter` (user-space instructions), from `perf stat` attached by the bot
    before the harness ran, for the whole process tree; None where the node offers no counter."""


class Invalidation(_Model):
    pair: int
    attempt: int
    reason: str
    evidence: str


class Bounds(_Model):
    n: int
    confidence: float
    lower_index: int
    """1-based order-statistic index of the lower bound."""
    upper_index: int
    lower: float
    upper: float
    median: float
    coverage_lower: float
    """Exact P(X_(k) <= median) under the sampling assumption."""
    coverage_upper: float


class DiagnosticCheck(_Model):
    name: str
    statistic: float | None
    p_value: float | None
    threshold: str
    breached: bool
    detail: str


class Bootstrap(_Model):
    resamples: int
    seed: int
    median_ratio: float
    ci_low: float
    ci_high: float
    note: str = "secondary effect size of paired log ratios; never decides the gate"


class BatchBounds(_Model):
    """One contiguous batch of pairs (in run order) and its own exact order-statistic bounds."""

    batch: int
    first_pair: int
    last_pair: int
    bounds: Bounds
    verdict: PerfVerdict
    """This batch's gate alone: PASS upper <= threshold, FAIL lower > threshold, else INCONCLUSIVE."""


class DependenceResult(_Model):
    """The predeclared dependence-aware method, applied because a dependence diagnostic breached (Stage 7.5)."""

    method: Literal["batch_iut"]
    assumption: str
    """What the method's level rests on, as stated to reviewers."""
    batches: list[BatchBounds]
    verdict: PerfVerdict
    line: str
    """One line saying which method decided and why, for the comment and the check run."""


KernelClock = Literal["process_wall_ms", "process_cpu_ms"]
"""The kernel's accounting of one harness process: wall time from spawn to reap as the bot measured it
(`elapsed_s`), and user + system CPU time from `wait4` rusage (`kernel_cpu_ms`)."""

KERNEL_CLOCK_LABELS: Final[dict[str, str]] = {
    "process_wall_ms": "process wall time (spawn to reap)",
    "process_cpu_ms": "process CPU time (wait4 rusage)",
}


class KernelGate(_Model):
    """The reported figures' gate, repeated on one kernel clock: same pairs, schedule, threshold, confidence and
    dependence method. It corroborates and never rescues: only a FAIL here can change the row's verdict."""

    clock: KernelClock
    ratios: list[float]
    bounds: Bounds
    diagnostics: list[DiagnosticCheck]
    dependence: DependenceResult | None = None
    verdict: PerfVerdict
    reason: str


class HostFacts(_Model):
    hostname: str
    kernel: str
    cpu_model: str
    logical_cpus: int
    smt: str
    numa_nodes: int
    governor: str | None
    boost: str | None
    load_average: list[float]
    temperature_c: float | None
    frequency_mhz: float | None


class DoctorStatus(StrEnum):
    """How fit one aspect of a node is to measure; UNKNOWN when the machine does not expose it (never guessed)."""

    PASS = "PASS"
    WARN = "WARN"
    UNKNOWN = "UNKNOWN"
    FAIL = "FAIL"


class DoctorCheck(_Model):
    name: str
    status: DoctorStatus
    detail: str
    """What was read (or "cannot be read here: ..." and why)."""
    fix: str = ""
    """What to change on the node; empty when the check passed."""


class DoctorReport(_Model):
    """`kv-parity doctor` for the CPUs a row pins: the node's fitness, checked before it is trusted with samples."""

    hostname: str
    cpus: list[int]
    checks: list[DoctorCheck]
    status: DoctorStatus
    """The worst status of the checks (FAIL > WARN > UNKNOWN > PASS; exit status in runners/stages/doctor.py)."""
    seconds: float

    @property
    def summary(self) -> str:
        """One line for logs and the check run: the overall status and every check that did not pass."""
        failing = [f"{check.status.value} {check.name}" for check in self.checks if check.status != DoctorStatus.PASS]
        cpus = ",".join(str(cpu) for cpu in self.cpus)
        return f"{self.status.value} on {self.hostname} cpu {cpus}" + (f": {', '.join(failing)}" if failing else "")


class Placement(_Model):
    cpu_set: list[int]
    physical_core: str
    numa_node: int
    siblings_excluded: list[int]
    host: HostFacts


class PerfOutcome(_Model):
    """What Stage 7's gate concludes from a row's recorded evidence (runners/perf/gate.py): produced once, stored in
    the `PerfResult` it was computed from, and recomputed from that result by `kv-parity verify`."""

    verdict: PerfVerdict
    reason: str
    ratios: list[float]
    """r_i = candidate / baseline of the final valid attempt of each pair, in pair order."""
    bounds: Bounds | None
    diagnostics: list[DiagnosticCheck]
    bootstrap: Bootstrap | None
    dependence: DependenceResult | None = None
    """The dependence-aware method's result when the diagnostics breached and the config declared one."""
    kernel_gates: list[KernelGate] = Field(default_factory=list)
    """The corroborating gates, one per kernel clock, present once the reported series was complete."""
    reported_verdict: PerfVerdict | None = None
    """The reported figures' gate alone, before corroboration (None when the series never completed)."""


class PerfResult(PerfOutcome):
    """Stage 7's evidence for one row (schedule, every sample, invalidations) and the outcome the gate drew from it."""

    timing_field: str
    timing_scope: str
    placement: Placement
    schedule_seed: int
    schedule: list[PairPlan]
    schedule_path: str
    warmups: list[Sample]
    samples: list[Sample]
    invalidations: list[Invalidation]
    perf_config: PerfConfig | None = None
    """The thresholds, seed and rules declared before sampling, so the verdict is recomputable from the result
    alone; None means the campaign config's `perf` section applied."""
    interference_resolution_ms: float | None = None
    """Resolution of the competing-load measurement on the node (two /proc/stat clock ticks)."""
    sampling_assumption: str = ""
    """The assumption the conditional order-statistic bounds rest on, as stated to reviewers."""
    kernel_corroborated: bool = False
    """The kernel clocks were gated too (False: a report from before the corroborating gate, verified without)."""
    probes: list[Sample] = Field(default_factory=list)
    """One timing-mode invocation per arm before any warmup: a missing or non-numeric timer blocks here."""
    counter: str | None = None
    """The perf event every sandboxed sample counted (`instructions:u` where the node's PMU offers it; each count in
    `Sample.counted`); None where it offers none (a VM without a virtual PMU)."""
    containment: ContainmentKind | None = None
    """How every sample's whole process tree was kept on the row's CPUs and counted (runners/exec/containment.py):
    under a cgroup each sample's `kernel_cpu_ms` is the cgroup's CPU time of every task, else wait4's rusage;
    None in reports from before containment."""

    def with_outcome(self, outcome: PerfOutcome) -> PerfResult:
        """This evidence with `outcome` as its conclusion (every field of the outcome, none named here)."""
        return self.model_copy(update={name: getattr(outcome, name) for name in PerfOutcome.model_fields})

# --- Instruction counts (after a row's performance stage; runners/stages/instructions.py) ----------------------------

InstructionScope = Literal["region", "process"]
"""What a count covers: the calls of `harness.timed_function` (the timed region), or the whole process."""


class CountedRun(_Model):
    """One run of one arm's sample invocation under callgrind, in the sandbox, after every sample of the row."""

    arm: Arm
    run: int
    argv: list[str]
    """What the sandbox started (valgrind, its options, the binary at the path both arms share, the row's args)."""
    seconds: float
    process_ir: int | None = None
    """Instructions of the whole process, from the capture's header (checked against its totals and functions)."""
    region_ir: int | None = None
    """Instructions inside the calls of the timed function (None: no timed function configured)."""
    region_calls: int = 0
    """Calls of the timed function from outside it (0: never entered: inlined, renamed or absent)."""
    failure: str | None = None
    """Why this run has no count (the process failed under valgrind, an unreadable or inconsistent capture)."""


class InstructionCounts(_Model):
    """Each arm's instruction count, twice: a figure the bot measures, exact for a deterministic replay."""

    tool: str
    """The counting tool as it named itself (`valgrind-3.19.0 callgrind`)."""
    timed_function: str | None
    """`harness.timed_function` as configured when the counts were taken."""
    runs: list[CountedRun] = Field(default_factory=list)
    problem: str | None = None
    """Why there is no figure to compare (valgrind missing, a run that failed); the counts then decide nothing."""

    def counted(self, arm: Arm) -> list[CountedRun]:
        return [run for run in self.runs if run.arm == arm]

    @property
    def scope(self) -> InstructionScope:
        """`region` when a timed function is configured and every run entered it, else `process`."""
        entered = self.runs and all(run.region_ir is not None and run.region_calls > 0 for run in self.runs)
        return "region" if self.timed_function and entered else "process"

    @property
    def scope_label(self) -> str:
        """What the compared figures count, in words: the label every surface shows next to them."""
        if self.scope == "region":
            return f"timed region (`{self.timed_function}`)"
        if not self.timed_function:
            return "whole process (no `harness.timed_function` configured)"
        missing = sorted({run.arm for run in self.runs if run.region_calls == 0})
        return (f"whole process (`{self.timed_function}` was never entered by {' and '.join(missing)}: "
                "inlined, renamed or absent)")

    def figures(self, arm: Arm) -> list[int]:
        """The arm's compared figure from each run that produced one."""
        values = [run.region_ir if self.scope == "region" else run.process_ir for run in self.counted(arm)]
        return [value for value in values if value is not None]

    def complete(self) -> bool:
        """Both arms counted twice with no failure: only then do the counts compare the arms."""
        return self.problem is None and all(
            len(self.figures(arm)) == len(self.counted(arm)) >= 2 for arm in ARMS)

    def agree(self, arm: Arm) -> bool:
        """The arm's runs counted the same instructions exactly (a difference is nondeterministic work)."""
        return len(set(self.figures(arm))) <= 1

    def process_agree(self, arm: Arm) -> bool:
        values = {run.process_ir for run in self.counted(arm)}
        return len(values) <= 1

    def mean(self, arm: Arm) -> float | None:
        values = self.figures(arm)
        return sum(values) / len(values) if values else None

    @property
    def ratio(self) -> float | None:
        """Candidate / baseline of the arms' mean figures; None without complete counts."""
        base, cand = self.mean("baseline"), self.mean("candidate")
        return cand / base if self.complete() and base and cand is not None else None

    @property
    def lowest_ratio(self) -> float | None:
        """The smallest ratio the runs allow (the candidate's least over the baseline's most): the gate's figure,
        equal to `ratio` when each arm's runs agree."""
        if not self.complete() or not min(self.figures("baseline")):
            return None
        return min(self.figures("candidate")) / max(self.figures("baseline"))

    @property
    def delta(self) -> int | None:
        """Candidate minus baseline instructions (mean figures, rounded); None without complete counts."""
        base, cand = self.mean("baseline"), self.mean("candidate")
        return round(cand - base) if self.complete() and base is not None and cand is not None else None


# --- Sizes, rows, campaign ----------------------------------------------------------------------------------


# --- Size attribution and regression attribution (evidence; they never decide a gate) -----------------

class SymbolDelta(_Model):
    """One demangled name's footprint in both binaries (all its instances added up)."""

    name: str
    baseline_bytes: int
    candidate_bytes: int
    baseline_instances: int
    candidate_instances: int

    @property
    def delta(self) -> int:
        return self.candidate_bytes - self.baseline_bytes


class SymbolGroup(_Model):
    """Symbols present in only one binary, grouped by generic name (new or removed monomorphizations)."""

    name: str
    instances: int
    bytes: int


class SizeAttribution(_Model):
    """Where the size difference between the two binaries sits, by symbol."""

    symbols_read: bool
    note: str
    baseline_symbol_bytes: int = 0
    candidate_symbol_bytes: int = 0
    growing: list[SymbolDelta] = []
    shrinking: list[SymbolDelta] = []
    new_groups: list[SymbolGroup] = []
    removed_groups: list[SymbolGroup] = []


class WorkCounter(_Model):
    name: str
    baseline: int
    candidate: int


class WorkComparison(_Model):
    """Stage "equivalent semantic work": did the candidate do more work, or the same work more slowly?"""

    counters: list[WorkCounter]
    equivalent: bool
    summary: str


class FunctionDelta(_Model):
    """One function's (or generic's) self cost in both arms."""

    name: str
    baseline: int
    candidate: int
    instances: int = 1
    """Distinct functions folded into this row (monomorphizations of one generic)."""

    @property
    def delta(self) -> int:
        return self.candidate - self.baseline


class CostTable(_Model):
    """A differential table of self cost by function, largest movers first."""

    metric: str
    baseline_total: int
    candidate_total: int
    movers: list[FunctionDelta]
    new_functions: list[FunctionDelta]
    generic_movers: list[FunctionDelta]
    """The same costs grouped by generic name, where grouping folded two or more instantiations."""


class RegressionAttribution(_Model):
    """What a reviewer needs to act on a performance FAIL: where the added time went, with the evidence files."""

    trigger: str
    work: WorkComparison | None
    instructions: CostTable | None
    samples: CostTable | None
    findings: list[str]
    files: list[str]
    """Artifact file names (flame graphs, raw captures), relative to the attribution directory."""
    skipped: list[str]


class SizeGate(_Model):
    max_growth: float
    binary_growth: float
    text_growth: float
    verdict: GateVerdict
    reason: str
    attribution: SizeAttribution | None = None
    """Where the size difference sits, by symbol (always recorded when both binaries were at hand)."""


class ScheduledOn(_Model):
    """Where a cluster scheduler ran the row, from the scheduler's own record of the job (node name, job id),
    with the CPU model the row's node reported; absent for rows that no scheduler placed."""

    scheduler: str = "slurm"
    job_id: str = ""
    node_name: str = ""
    cpu_model: str = ""


class RowReport(_Model):
    row: RowConfig
    harness_args: list[str]
    """The row's argv after the binary, identical for both arms."""
    placement_cpus: list[int]
    host: str
    node: HostFacts | None = None
    """The node's characteristics when the row ran (every stage of a row runs on one node)."""
    doctor: DoctorReport | None = None
    """`kv-parity doctor` for the row's performance CPUs, run before the row's first process (None: older report)."""
    determinism: DeterminismResult | None = None
    parity: ParityResult | None = None
    coverage: CoverageResult | None = None
    declared_exclusions: DeclaredExclusions | None = None
    """The harness's declared exclusions resolved in both arms, next to the campaign's closed list."""
    exceptions: list[ExceptionOutcome] = Field(default_factory=list)
    semantic: SemanticVerdict
    semantic_reasons: list[str]
    performance: PerfResult | None = None
    perf_verdict: PerfVerdict = PerfVerdict.NOT_RUN
    perf_reason: str = "performance gate not run"
    attribution: RegressionAttribution | None = None
    """The protocol's investigation of a performance FAIL (or a requested profile), run after the gate decided."""
    instructions: InstructionCounts | None = None
    """Both arms' instruction counts, taken after the performance stage (None: the stage did not complete, or a
    report from before the counts); under `perf.instructions = "corroborate"` they can fail a wall-time PASS."""
    scheduled: ScheduledOn | None = None
    """The Slurm job that ran this row and its node (the `slurm` backend only)."""


class StopRecord(_Model):
    """Why a campaign stopped before producing every verdict."""

    stage: str
    reason: str
    blocking: bool
    """True when maintainers must fix config or protocol (action required), False for a product failure."""
    output_tail: str = ""
    """Raw output of pull-request code behind the stop (build stderr, panic text): artifact only, never
    published; `reason` is the one line a comment may show."""


class SandboxRecord(_Model):
    """How pull-request code ran on the node that wrote this record."""

    kind: Literal["bwrap", "none"]
    uid: int
    """The uid pull-request code ran as (65534 under a privileged bwrap)."""
    user_switch: bool
    network: bool
    read_only: list[str]
    writable: list[str]
    environment: list[str]
    """The only environment variable names that reach pull-request code."""
    note: str
    process_limit: int | None = None
    """RLIMIT_NPROC of every sandboxed start (processes and threads of the sandbox uid); None: unbounded."""
    memory_limit_bytes: int | None = None
    """RLIMIT_AS of every sandboxed process; None: unbounded."""
    user_namespaces: bool = True
    """Whether sandboxed code could create user namespaces (False: a seccomp filter refuses them)."""
    inherited_fds: bool = True
    """Whether sandboxed code could inherit descriptors beyond stdin/stdout/stderr (False: closed before exec)."""
    fetch_network: str = ""
    """What the dependency fetch's network could reach."""
    keyrings: bool = True
    """Whether sandboxed code could reach the kernel keyrings, which outlive a process (False: seccomp refuses
    add_key, keyctl and request_key)."""
    containment_kind: ContainmentKind | None = None
    """How a pinned harness start was kept on its CPUs with its every task counted (runners/exec/containment.py); None
    in reports from before containment."""
    containment: str = ""
    """That mechanism in words: where its cgroups were, or why only the seccomp program was available."""


AcceptedGate = Literal["performance", "sizes"]


class Acceptance(_Model):
    """An audited acceptance of an intended performance or size FAIL (`/parity accept`), pinned to the head SHA
    that was current when its comment was written. It covers only FAILs of its gate whose measured upper bound
    is at most `max`; a semantic FAIL or an undecided gate is never covered (`runners.schema.acceptance`)."""

    gate: AcceptedGate
    login: str
    """Who accepted (their GitHub login)."""
    permission: str
    """Their repository permission when the comment was handled (at least `[checks] accept_permission`)."""
    comment_id: int
    comment_url: str
    reason: str
    rows: list[str] | None = None
    """performance: the rows named (`rows=`); None covers every row that FAILed on performance."""
    max: float
    """performance: the largest upper bound of the candidate / baseline ratio accepted (1.10); sizes: the
    largest binary or .text growth accepted, as a fraction (0.08 for `max=8%`)."""
    head_sha: str
    written_unix: float
    """When the comment was written."""
    recorded_unix: float
    """When the bot recorded it."""

    def max_text(self) -> str:
        """`1.10` for a ratio, `8%` for a growth: the bound as a person wrote it."""
        if self.gate == "sizes":
            return f"{self.max * 100:g}%"
        return f"{self.max:.2f}" if round(self.max, 2) == self.max else f"{self.max:g}"

    def line(self) -> str:
        """`performance FAIL accepted by @who (max 1.10): reason`, the words every surface uses."""
        gate = "performance" if self.gate == "performance" else "size"
        return f"{gate} FAIL accepted by @{self.login} (max {self.max_text()}): {self.reason}"


class AcceptanceOutcome(_Model):
    """What one acceptance did to one campaign: the FAILs it covers and the ones it names but cannot cover."""

    acceptance: Acceptance
    covered: list[str]
    """Row ids whose performance FAIL it covers, or `sizes` for the size gate."""
    uncovered: list[str]
    """One line per FAIL of its gate it does not cover and why (an upper bound above `max` says by how much)."""


class Verdicts(_Model):
    semantic: SemanticVerdict
    performance: PerfVerdict
    sizes: GateVerdict
    conclusion: CheckConclusion
    summary: str
    acceptances: list[AcceptanceOutcome] = Field(default_factory=list)
    """The report's acceptances and what each covered (empty: none)."""
    accepted_performance: PerfVerdict | None = None
    """The performance verdict once the FAILs acceptances cover count as passes (None: no acceptance applies);
    `performance` stays the gate's own verdict."""
    accepted_sizes: GateVerdict | None = None
    """The size verdict once an acceptance covers its FAIL (None: no acceptance applies)."""

    @property
    def failed(self) -> bool:
        """A gate decided against the candidate, and no acceptance covers it."""
        return (
            self.semantic == SemanticVerdict.FAIL
            or (self.accepted_performance or self.performance) == PerfVerdict.FAIL
            or (self.accepted_sizes or self.sizes) == GateVerdict.FAIL
        )

    @property
    def accepted(self) -> bool:
        """Some FAIL counts as passing because an acceptance covers it."""
        return (self.performance == PerfVerdict.FAIL and self.accepted_performance not in (None, PerfVerdict.FAIL)) or (
            self.sizes == GateVerdict.FAIL and self.accepted_sizes not in (None, GateVerdict.FAIL)
        )

    @property
    def undecided(self) -> Literal["blocked", "inconclusive"] | None:
        """Why the gates reached no decision, or None when they did (a FAIL anywhere, or every gate passed):
        `blocked` when maintainers must act (semantic or performance BLOCKED), else `inconclusive`
        (performance INCONCLUSIVE or NOT_RUN, sizes NOT_RUN). Accepted FAILs count as passes."""
        if self.failed:
            return None
        performance = self.accepted_performance or self.performance
        if self.semantic == SemanticVerdict.BLOCKED or performance == PerfVerdict.BLOCKED:
            return "blocked"
        if performance != PerfVerdict.PASS or (self.accepted_sizes or self.sizes) != GateVerdict.PASS:
            return "inconclusive"
        return None


class FixtureStatus(StrEnum):
    PASS = "PASS"
    PASS_WITH_SEMANTIC_EXCEPTIONS = "PASS_WITH_SEMANTIC_EXCEPTIONS"
    """Every canonical difference is covered by a verified exception record and every assertion holds."""
    FAIL = "FAIL"
    STOPPED = "STOPPED"
    """Could not run: a flag a revision lacks, or a trace that does not match its checksum (maintainers act)."""
    UNSUPPORTED = "UNSUPPORTED"
    """The harness has no control for this lifecycle; listed as skipped coverage, never emulated."""


class FixtureAssertion(_Model):
    name: str
    passed: bool
    evidence: str


class FixtureReport(_Model):
    """Stage 6: one forced rare-lifecycle fixture, a row of its own (no performance)."""

    id: str
    kind: str
    args: list[str]
    trace: str
    trace_sha256: str
    status: FixtureStatus
    reason: str
    determinism: DeterminismResult | None = None
    parity: ParityResult | None = None
    assertions: dict[Arm, list[FixtureAssertion]] = Field(default_factory=dict)
    exceptions: list[ExceptionOutcome] = Field(default_factory=list)
    """The campaign's Stage 5 records, which may cover a fixture's differences like a row's."""


class CampaignReport(_Model):
    schema_version: Literal["kv-parity.report.v1"] = REPORT_SCHEMA_VERSION
    campaign_id: str
    created_unix: float
    tool_version: str
    config: CampaignConfig
    config_source: str
    revisions: list[Revision]
    relationship: str
    merge_base: str | None
    determinism_patch_sha256: str | None
    harness_patch_sha256: str | None = None
    """SHA-256 of `harness.patch` as applied to both revisions (None: no harness patch)."""
    toolchain: Toolchain | None = None
    artifacts: list[Artifact] = Field(default_factory=list)
    trace: TraceEvidence | None = None
    exclusions: list[str]
    exception_records: list[ExceptionRecord] = Field(default_factory=list)
    rows: list[RowReport] = Field(default_factory=list)
    fixtures: list[FixtureReport] = Field(default_factory=list)
    """Stage 6 forced rare-lifecycle fixtures; a failed one fails semantic parity."""
    mode: CampaignMode = "campaign"
    """`profile`: requested attribution; rows check correctness and are profiled, no performance gate runs."""
    sizes: SizeGate | None = None
    skipped: list[str] = Field(default_factory=list)
    stopped: StopRecord | None = None
    verdicts: Verdicts | None = None
    sandbox: SandboxRecord | None = None
    acceptances: list[Acceptance] = Field(default_factory=list)
    """Acceptances of an intended performance or size FAIL of this head (`/parity accept`), added when the bot
    publishes; `kv-parity verify` recomputes the conclusion with them (`runners.schema.acceptance`)."""

    def artifact(self, arm: Arm) -> Artifact:
        return next(a for a in self.artifacts if a.arm == arm)

    @property
    def concluded(self) -> Verdicts:
        """The verdicts of a finished report: set by the run that finished it, or by
        `runners.schema.verdicts.with_verdicts` where one was loaded. Missing here is a bug upstream, refused rather
        than recomputed in a second place."""
        if self.verdicts is None:
            raise ValueError(f"campaign {self.campaign_id}: report has no verdicts; load it with "
                             "runners.schema.verdicts.with_verdicts")
        return self.verdicts

    @property
    def perf_threshold(self) -> float:
        """The ratio every row's performance was gated against: the campaign config's, declared before sampling (a
        row's stored `perf_config` must equal it, which `kv-parity verify` checks). Read through here alone on the
        bot's side, so which threshold applies to a report is written once."""
        return self.config.perf.threshold
