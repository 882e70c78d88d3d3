"""Campaign configuration: everything the protocol says to resolve and record before running anything.

The config is read from the *base* revision (never from the PR under test), validated here, and embedded
verbatim in the report so a verdict can be recomputed from the report alone.
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from runners.resources import package_dir

PROTOCOL_EXCLUSIONS: tuple[str, ...] = (
    "/summary/wall_time_ms",
    "/summary/processed_tokens_per_s",
    "/summary/processed_output_tokens_per_s",
)
"""The protocol's closed canonical-report exclusion list; adding to it requires a protocol review."""

DEFAULT_CONFIG_PATH = ".github/kv-parity.toml"
PROFILES_DIR = package_dir("runners", "profiles")

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]

CampaignMode = Literal["campaign", "profile"]
"""`profile` (`/parity profile`): rows check correctness and are profiled; no performance gate, no fixtures."""
CAMPAIGN_MODES: tuple[CampaignMode, ...] = get_args(CampaignMode)


def parse_rows(text: str | None) -> list[str] | None:
    """Row ids from their one text form (`--rows`, the workflow's `rows` input, a run title's `rows=`);
    None, meaning every row, for an empty or missing value."""
    names = [name.strip() for name in (text or "").split(",") if name.strip()]
    return names or None


def format_rows(rows: Collection[str] | None) -> str:
    """The text form `parse_rows` reads back: comma-separated ids, empty for every row."""
    return ",".join(rows) if rows else ""


class ConfigError(ValueError):
    """A campaign config that cannot be used; the message names the offending key and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BuildConfig(_Strict):
    """How to build the one release artifact per revision (Stage 1.4)."""

    command: list[str] = Field(min_length=1)
    package: str = "dynamo-bench"
    bench_target: str = "offline_replay_bench"
    features: list[str] = Field(min_length=1)
    no_default_features: bool = True
    workspace_dir: str = "."
    """Directory of the Cargo workspace, relative to the repository root."""
    allow_toolchain_difference: bool = False
    """Accept arms built with different toolchains, RUSTFLAGS, cargo configs or profiles (e.g. a PR that bumps
    rust-toolchain.toml); otherwise such a difference fails the size and performance gates."""

    @model_validator(mode="after")
    def _command_matches_features(self) -> BuildConfig:
        """The recorded feature list must be exactly what the command builds (no 'all features')."""
        if "--all-features" in self.command:
            raise ValueError("build.command must name explicit features, not --all-features")
        named: list[str] = []
        for index, word in enumerate(self.command):
            if word == "--features" and index + 1 < len(self.command):
                named.extend(f for f in self.command[index + 1].replace(",", " ").split() if f)
            elif word.startswith("--features="):
                named.extend(f for f in word.split("=", 1)[1].replace(",", " ").split() if f)
        if sorted(named) != sorted(self.features):
            raise ValueError(f"build.features {self.features} differ from the command's --features {named}")
        if self.no_default_features != ("--no-default-features" in self.command):
            raise ValueError("build.no_default_features must match --no-default-features in build.command")
        return self


class TraceConfig(_Strict):
    """The Mooncake trace and its deterministic contiguous slice (Stage 3)."""

    path: str
    sha256: Sha256
    offset: int = Field(ge=0)
    count: int = Field(gt=0)
    slice_sha256: Sha256 | None = None
    """Checksum of the contiguous window itself, when it was qualified before."""


class HarnessConfig(_Strict):
    """How to drive the harness and read its outputs."""

    timing_field: str = "replay_execution_ms"
    exclusions: list[str] = Field(default_factory=lambda: list(PROTOCOL_EXCLUSIONS))
    common_args: list[str] = Field(default_factory=list)
    patch: str | None = None
    """A `git apply` patch extending the harness (e.g. adding the protocol's timer while the merge base lacks
    it), read from the trusted revision like the config and applied identically to both revisions after the
    determinism patch; its checksum is in the report."""
    timed_function: str | None = Field(None, min_length=1, max_length=400)
    """The function whose call the timer brackets, as demangled without its hash
    (`dynamo_bench::sim::Prepared::run`; `*` matches any run of characters): the instruction counts after each
    row's performance stage count inside its calls. Unset: the whole process is counted, and labelled so."""

    @field_validator("exclusions")
    @classmethod
    def _closed_exclusions(cls, value: list[str]) -> list[str]:
        """The exclusion list is closed: anything beyond the protocol's three needs a protocol review."""
        extra = [pointer for pointer in value if pointer not in PROTOCOL_EXCLUSIONS]
        if extra:
            raise ValueError(
                f"{extra} not in the protocol's closed exclusion list {list(PROTOCOL_EXCLUSIONS)}; "
                "stop for review before adding an exclusion"
            )
        return value

    @field_validator("common_args")
    @classmethod
    def _no_output_flags(cls, value: list[str]) -> list[str]:
        return _reject_output_flags(value)


OUTPUT_FLAGS = ("--timings-jsonl", "--canonical-reports-jsonl", "--report-json", "--iterations")


def _reject_output_flags(args: list[str]) -> list[str]:
    """Output and iteration flags are owned by the runner; a config that sets them would corrupt a stage."""
    for arg in args:
        if arg.split("=", 1)[0] in OUTPUT_FLAGS:
            raise ValueError(f"{arg.split('=', 1)[0]} is set by the runner per stage; remove it from args")
    return args


Band = Annotated[int, Field(ge=0)] | tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]]
"""A drift detector's expected count: an exact value or an inclusive `[min, max]`."""


def band_limits(band: Band) -> tuple[int, int]:
    """The inclusive limits of an exact value or a band."""
    return (band, band) if isinstance(band, int) else band


class PoolPlacements(_Strict):
    """Route decisions one pool is expected to record, by outcome."""

    immediate: Band | None = None
    queued: Band | None = None


class ExpectedEvidence(_Strict):
    """The lifecycle evidence band a frozen row configuration must show (Stage 3), and its drift detectors.

    The drift detectors (`reused_requests`, `placements`, `active_workers`, `handoffs`) are optional: a signal
    left out is not checked. Pools are named as the harness names them in `routing_history[].pool`.
    """

    pressure: tuple[int, int] = Field(description="inclusive [min, max] preemptions/retractions")
    handoff: bool = False
    queued: int = 0
    completed_all: bool = True
    reused_requests: Band | None = None
    """Requests that reused cached KV (`reused_input_tokens` or `decode_reused_input_tokens` > 0)."""
    placements: dict[str, PoolPlacements] = Field(default_factory=dict)
    """Route decisions per pool, immediate and queued."""
    active_workers: dict[str, Band] = Field(default_factory=dict)
    """Distinct workers per pool that received at least one route decision."""
    handoffs: Band | None = None
    """Requests handed off from a prefill to a decode worker."""

    @field_validator("pressure")
    @classmethod
    def _band(cls, value: tuple[int, int]) -> tuple[int, int]:
        low, high = value
        if low < 1 or high < low:
            raise ValueError(f"pressure band {list(value)} must satisfy 1 <= min <= max (zero = edge not hit)")
        return value

    @model_validator(mode="after")
    def _ordered_bands(self) -> ExpectedEvidence:
        """Every drift band is `[min, max]` with min <= max; a reversed band could never be met."""
        bands: list[tuple[str, Band | None]] = [("reused_requests", self.reused_requests),
                                                ("handoffs", self.handoffs)]
        for pool, expected in self.placements.items():
            bands += [(f"placements.{pool}.immediate", expected.immediate),
                      (f"placements.{pool}.queued", expected.queued)]
        bands += [(f"active_workers.{pool}", band) for pool, band in self.active_workers.items()]
        for name, band in bands:
            if band is not None and band_limits(band)[0] > band_limits(band)[1]:
                raise ValueError(f"{name} band {list(band_limits(band))} must satisfy min <= max")
        return self


SLURM_WORD = r"^[A-Za-z0-9_.,:|&!()\[\]*-]{1,200}$"
"""What a Slurm partition, QoS, constraint expression or time limit is made of (no spaces, no `=`)."""


class SlurmRowConfig(_Strict):
    """Where the `slurm` backend runs one row, overriding the service's `[slurm]` settings for it."""

    partition: str | None = Field(None, pattern=SLURM_WORD)
    qos: str | None = Field(None, pattern=SLURM_WORD)
    constraint: str | None = Field(None, pattern=SLURM_WORD)
    time_limit: str | None = Field(None, pattern=SLURM_WORD)


class RowConfig(_Strict):
    """One engine/topology/frozen-configuration comparison row: the unit of node placement."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")
    args: list[str]
    runner_labels: list[str] = Field(default_factory=lambda: ["self-hosted"])
    expect: ExpectedEvidence
    slurm: SlurmRowConfig | None = None
    """`[rows.slurm]`: this row's partition, QoS, constraint or time limit on Slurm (the `slurm` backend only)."""

    @field_validator("args")
    @classmethod
    def _no_output_flags(cls, value: list[str]) -> list[str]:
        return _reject_output_flags(value)


class DeterminismConfig(_Strict):
    """Stage 1.3: a temporary determinism correction applied identically to both revisions."""

    patch: str | None = None
    """Path of a `git apply` patch inside the repository, read from the base revision like the config."""


class DiagnosticsThresholds(_Strict):
    """Serial-dependence thresholds, declared before sampling (Stage 7.4).

    Defaults keep the false-alarm rate of the whole diagnostic family near 0.5% under exchangeable data; on the
    fixture they gave A/A PASS 20/20 and a 10.9% slowdown FAIL 20/20 (benchmarks/README.md), where 0.4 / 0.005
    gave 8/10 and 8/10 through drift-sensitive trend and order tests.
    """

    max_abs_autocorr: float = Field(0.45, gt=0, le=1)
    autocorr_lags: list[int] = Field(default_factory=lambda: [1, 2, 3])
    min_trend_p: float = Field(0.001, gt=0, lt=1)
    min_order_effect_p: float = Field(0.001, gt=0, lt=1)
    min_telemetry_p: float = Field(0.001, gt=0, lt=1)


class InvalidationRules(_Strict):
    """The only environmental conditions that may invalidate a sample pair (Stage 7)."""

    max_interference_ms: float = Field(25.0, ge=0)
    """CPU time other processes may use on the pinned core during one sample."""
    max_reruns_per_pair: int = Field(3, ge=0)


class PerfConfig(_Strict):
    """The pinned, paired, randomized performance gate (Stage 7)."""

    warmups_per_arm: int = Field(5, ge=0)
    pairs: int = Field(60, ge=10)
    seed: int = 20261129
    threshold: float = Field(1.05, gt=1.0)
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    diagnostics: DiagnosticsThresholds = DiagnosticsThresholds()
    invalidation: InvalidationRules = InvalidationRules()
    bootstrap_resamples: int = Field(2000, ge=100)
    dependence_method: Literal["batch_iut", "none"] = "batch_iut"
    """Applied only when a dependence diagnostic breaches: `batch_iut` gates contiguous batches of pairs each
    by exact order statistics and combines them as an intersection-union test; `none` reports INCONCLUSIVE."""
    dependence_batches: int | None = Field(None, ge=2)
    """Contiguous batches (in run order, sizes differing by at most one) the batch IUT splits the pairs into;
    unset means max(2, pairs // 20), i.e. batches of at least 20 pairs: three for the protocol's 60."""
    instructions: Literal["corroborate", "show", "off"] = "corroborate"
    """What the instruction counts counted after the samples do: `corroborate` fails a row whose wall-time gate
    PASSes while the counted instructions grew by more than `instructions_threshold`; `show` only reports them;
    `off` counts nothing (a harness too slow under valgrind: the row then rests on the wall time and the kernel's
    clocks alone, and every surface says the instructions were not counted)."""
    instructions_threshold: float = Field(1.05, gt=1.0)
    """Candidate / baseline instruction count (in the timed region when `harness.timed_function` is set) above
    which `corroborate` fails a wall-time PASS."""

    @field_validator("pairs")
    @classmethod
    def _balanced(cls, value: int) -> int:
        if value % 2:
            raise ValueError("pairs must be even so the schedule is balanced between arm orders")
        return value

    def batch_count(self) -> int:
        """The declared number of batches, or the default derived from `pairs`."""
        return self.dependence_batches or max(2, self.pairs // 20)

    @model_validator(mode="after")
    def _batches_can_decide(self) -> PerfConfig:
        """The smallest batch must be large enough for an exact one-sided bound at `confidence`."""
        if self.dependence_method == "none":
            return self
        smallest = self.pairs // self.batch_count()
        if 0.5**smallest > 1 - self.confidence:
            raise ValueError(
                f"batches of {smallest} pairs cannot give a one-sided {self.confidence:.0%} order-statistic bound "
                f"(even the smallest ratio covers the median with probability only {1 - 0.5**smallest:.4f}); "
                "declare fewer dependence_batches or more pairs"
            )
        return self


class SizeConfig(_Strict):
    """Release binary and .text growth gate."""

    max_growth: float = Field(0.05, ge=0)


class ChecksConfig(_Strict):
    """How the check run concludes when the campaign reached no decision (performance INCONCLUSIVE or NOT_RUN,
    semantic or performance BLOCKED, a stopped fixture). GitHub counts `neutral` (and `skipped`) as passing a
    required check, so the default blocks it; a repository that does not require the check may prefer neutral."""

    undecided_conclusion: Literal["action_required", "neutral", "failure"] = "action_required"
    accept_permission: Literal["maintain", "admin", "write"] = "maintain"
    """Who may accept a performance or size FAIL with `/parity accept` (at least this repository permission):
    read from the base branch like every rule, so a pull request cannot lower it."""
    watched_paths: list[str] = []
    """Paths whose change needs a campaign, in `.gitignore` syntax (`lib/mocker/**`, `!*.md`). When set, every
    open pull request without the label gets the campaign check at its head at once: `skipped` (which passes a
    required check) when it changes none of them, `action_required` naming the paths when it does, until a
    maintainer adds the label. Empty (the default): unlabelled pull requests get no check run."""

    @field_validator("watched_paths")
    @classmethod
    def _patterns_parse(cls, patterns: list[str]) -> list[str]:
        if not patterns:
            return patterns
        from pathspec import GitIgnoreSpec  # the matcher where patterns are used (bot/core/watched.py)

        for pattern in patterns:
            if not pattern.strip() or pattern.lstrip().startswith("#"):
                raise ValueError(f"checks.watched_paths: {pattern!r} is not a path pattern (empty or a comment)")
            try:
                GitIgnoreSpec.from_lines([pattern])
            except ValueError as exc:
                raise ValueError(f"checks.watched_paths: {pattern!r} is not a .gitignore pattern: {exc}") from None
        return patterns


class MergeQueueConfig(_Strict):
    """What the bot does when GitHub's merge queue asks for checks on a merge group (`merge_group`).

    `carry` concludes the campaign check on the group's commit within seconds from the conclusions the group's
    pull requests already have (success only when every one has a successful kv-parity conclusion at its
    current head); `measure` runs a campaign of the group's commit against its base; `off` ignores the queue,
    so a repository that requires the check must not use it with a merge queue (the queue would wait for it)."""

    mode: Literal["carry", "measure", "off"] = "carry"


class MainConfig(_Strict):
    """`[main]`: main-branch tracking, read from the default branch itself (bot.core.tracking). Every push to the
    default branch is measured against its first parent with this same config, and every `every` pushes (or when
    `kv-parity track` runs on a schedule) its tip is measured against `reference`: the cumulative change since."""

    track: bool = False
    """Measure every push to the default branch against its first parent (check run `kv-parity / main`)."""
    queue: Literal["every", "newest"] = "every"
    """Pushes that arrive while one is measured: `every` queues each behind it; `newest` keeps only the latest
    waiting push (a queued one is superseded by the next)."""
    reference: str | None = Field(None, min_length=1, max_length=255, pattern=r"^[^\s~^:?*\[\\]+$")
    """A tag or commit SHA the tip is compared with (check run `kv-parity / reference`); None: no creep campaign."""
    every: int | None = Field(None, ge=1)
    """Run the reference campaign after this many tracked pushes (the service); None: only `kv-parity track`."""

    @model_validator(mode="after")
    def _every_needs_reference(self) -> MainConfig:
        if self.every is not None and (self.reference is None or not self.track):
            raise ValueError("main.every counts tracked pushes: it needs main.track = true and main.reference (the "
                             "revision the tip is compared with); without tracking, run `kv-parity track` on a "
                             "schedule")
        return self


class FixtureTraceSpec(_Strict):
    """A Stage 6 fixture's small deterministic trace: a named generator with parameters, or a file in the
    target repository (read from the trusted base revision), pinned by SHA-256 either way."""

    generator: Literal["demo"] | None = None
    """`demo`: runners/demo_trace.py's generator (Mooncake-shaped rows with shared prefixes), `rows` rows."""
    rows: int | None = Field(None, gt=0)
    path: str | None = None
    sha256: Sha256

    @model_validator(mode="after")
    def _one_source(self) -> FixtureTraceSpec:
        if (self.generator is None) == (self.path is None):
            raise ValueError("a fixture trace names exactly one of `generator` or `path`")
        if self.generator is not None and self.rows is None:
            raise ValueError(f"generator {self.generator!r} needs `rows`")
        return self

    def describe(self) -> str:
        return f"{self.generator} generator, {self.rows} rows" if self.generator else f"{self.path} (base revision)"


class LifecycleFixture(_Strict):
    """Stage 6: a forced rare lifecycle, run on both revisions (determinism, parity, assertions; no performance)."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")
    kind: Literal["router_queueing", "preemption_edge", "handoff_ordering", "scale_to_zero"]
    trace: FixtureTraceSpec
    args: list[str] = Field(default_factory=list)
    queue_threshold: float | None = Field(None, gt=0)
    """router_queueing: the explicit threshold; `args` must pass exactly this value."""
    pressure: tuple[int, int] = (1, 3)
    """preemption_edge: inclusive band of pressure events (the protocol: one to three, then completion)."""
    requires_flags: list[str] = Field(default_factory=list)
    """Controls the lifecycle needs beyond `args` (scale_to_zero: the harness's scaling flags); a harness
    without them reports the fixture UNSUPPORTED rather than running it with ignored flags."""

    @model_validator(mode="after")
    def _kind_parameters(self) -> LifecycleFixture:
        if self.kind == "router_queueing":
            if self.queue_threshold is None:
                raise ValueError("router_queueing needs queue_threshold (the protocol: an explicit threshold)")
            passed = [self.args[i + 1] for i, word in enumerate(self.args[:-1]) if word == "--router-queue-threshold"]
            if len(passed) != 1 or float(passed[0]) != self.queue_threshold:
                raise ValueError(f"args must pass --router-queue-threshold {self.queue_threshold:g} exactly once")
        lo, hi = self.pressure
        if not 0 < lo <= hi:
            raise ValueError(f"pressure band [{lo}, {hi}] must satisfy 0 < min <= max")
        return self


class CampaignConfig(_Strict):
    """The whole campaign contract, frozen before any process runs."""

    schema_version: Literal[1] = 1
    build: BuildConfig
    trace: TraceConfig
    harness: HarnessConfig = HarnessConfig()
    rows: list[RowConfig] = Field(min_length=1)
    determinism: DeterminismConfig = DeterminismConfig()
    perf: PerfConfig = PerfConfig()
    sizes: SizeConfig = SizeConfig()
    fixtures: list[LifecycleFixture] = Field(default_factory=list)
    """Stage 6 forced rare-lifecycle fixtures, each a row of its own in the report."""
    checks: ChecksConfig = ChecksConfig()
    main: MainConfig = MainConfig()
    """`[main]`: main-branch tracking and the creep reference (read only from the default branch)."""
    merge_queue: MergeQueueConfig = MergeQueueConfig()

    @field_validator("rows")
    @classmethod
    def _unique_rows(cls, value: list[RowConfig]) -> list[RowConfig]:
        ids = [row.id for row in value]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate row ids {duplicates}")
        return value

    def select_rows(self, wanted: list[str] | None) -> list[RowConfig]:
        """The rows named by a command (`rows=a,b`), in config order; unknown names are an error."""
        if not wanted:
            return list(self.rows)
        known = {row.id for row in self.rows}
        unknown = [name for name in wanted if name not in known]
        if unknown:
            raise ConfigError(f"unknown rows {unknown}; this config defines {sorted(known)}")
        return [row for row in self.rows if row.id in wanted]

    def flags_used(self, row: RowConfig) -> list[str]:
        """Every flag a row passes, so preflight can check each against both binaries' --help."""
        return sorted({a.split("=", 1)[0] for a in [*self.harness.common_args, *row.args] if a.startswith("--")})


def parse_config(text: str, source: str) -> CampaignConfig:
    """Parse TOML text; errors name the source, the key path and the reason."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    try:
        return CampaignConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            key = ".".join(str(part) for part in error["loc"]) or "(top level)"
            problems.append(f"{key}: {error['msg']}")
        raise ConfigError(f"{source}: invalid campaign config:\n  " + "\n  ".join(problems)) from exc


def load_config(path: Path) -> CampaignConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read campaign config {path}: {exc.strerror}") from exc
    return parse_config(text, str(path))


def load_profile(name: str) -> CampaignConfig:
    """A shipped profile: `dynamo` (the reference's four-row seed matrix) or `demo` (the fixture)."""
    path = PROFILES_DIR / f"{name}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in PROFILES_DIR.glob("*.toml"))
        raise ConfigError(f"unknown profile {name!r}; shipped profiles: {known}")
    return load_config(path)
