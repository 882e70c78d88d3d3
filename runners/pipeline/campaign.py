"""The campaign, top down, in the protocol's order: pin -> trace -> build -> preflight -> sizes -> per row
(determinism -> parity + coverage + exceptions -> performance) -> verdicts -> clean up.

`prepare` (everything before the rows) and `run_row` are separate so one build can feed rows on other nodes.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from runners import build_info
from runners.exec.build_cache import UNSANDBOXED_NO_CACHE, BuildCacheError, CampaignCache, configured_dir
from runners.exec.containment import MeasurementFault
from runners.exec.counter import SampleCounter
from runners.exec.harness import PreflightError, preflight_flags, row_args
from runners.exec.placement import correctness_cpu_sets, host_facts, kept_off, perf_placement
from runners.exec.sandbox import BinaryMismatch, Sandbox, SandboxUnavailable
from runners.perf.sampler import SampleHooks, run_performance
from runners.progress import ProgressSink, emit
from runners.schema.config import CampaignConfig, LifecycleFixture, RowConfig
from runners.schema.report import (
    ARMS,
    Arm,
    Artifact,
    CampaignReport,
    CoverageCheck,
    CoverageResult,
    ExceptionOutcome,
    FixtureReport,
    FixtureStatus,
    PerfVerdict,
    Revision,
    RowReport,
    SemanticVerdict,
    StopRecord,
    build_difference_reason,
)
from runners.schema.verdicts import (
    campaign_verdicts,
    declared_exclusion_verdict,
    gated_build_differences,
    row_performance,
    row_semantic_verdict,
    size_gate,
)
from runners.stages.attribution import attribute_regression, sandbox_launcher
from runners.stages.build import (
    BuildError,
    ProtocolMismatch,
    StartedBuild,
    finish_build,
    start_build,
    store_candidate,
    toolchain,
)
from runners.stages.coverage import CoverageError, check_evidence, count_evidence
from runners.stages.declared import check_declared_exclusions
from runners.stages.determinism import run_determinism
from runners.stages.doctor import LoadWindow, open_load_window, row_cpus, run_doctor
from runners.stages.exceptions import ExceptionFileError, load_records, verify_records
from runners.stages.instructions import count_instructions, should_count
from runners.stages.lifecycles import fixture_trace, run_fixture
from runners.stages.parity import compare
from runners.stages.revisions import (
    RevisionError,
    apply_patch,
    relationship,
    resolve_sha,
    show_file,
    worktree,
    worktree_head,
)
from runners.stages.sizes import ElfError
from runners.stages.symbols import attribute_sizes
from runners.stages.trace import TraceError, prepare_trace

STANDING_SKIPS = (
    "round-robin routing: excluded from this campaign by the protocol",
    "production-routing timing: needs a separate build without replay-bench; not requested",
)


class CampaignStop(Exception):
    """Stops the campaign before every verdict exists; recorded in the report, never swallowed."""

    def __init__(self, stage: str, reason: str, blocking: bool, output_tail: str = "") -> None:
        super().__init__(reason)
        self.record = StopRecord(stage=stage, reason=reason, blocking=blocking, output_tail=output_tail)


@dataclass
class CampaignRequest:
    repo: Path
    base: str
    head: str
    config: CampaignConfig
    config_source: str
    out_dir: Path
    rows: list[str] | None = None
    campaign_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    trace_path: Path | None = None
    determinism_patch: Path | None = None
    config_ref: str | None = None
    """Trusted revision the config's determinism patch is read at (the bot: its base branch's tip); None = base."""
    keep_work: bool = False
    perf_hooks: SampleHooks | None = None
    sandbox: Sandbox = field(default_factory=Sandbox.default)
    """Where pull-request code runs; also holds the binaries' pinned SHA-256 once they are built."""
    profile_only: bool = False
    """`kv-parity profile` / `/parity profile`: correctness, then regression attribution instead of sampling."""
    build_cache: Path | None = field(default_factory=configured_dir)
    """Build cache directory each arm may be reused from and is stored in, as that arm (runners/exec/build_cache.py);
    default $KV_PARITY_BUILD_CACHE, None: build both arms."""
    attribute_failures: bool = True
    """Profile a row whose performance gate FAILed (evidence, never a verdict); a bisect's probes skip it (about
    the row's sampling time again per FAIL) and say so in `skipped` (runners/pipeline/bisect.py)."""

    def __post_init__(self) -> None:
        """Absolute paths: git runs in other directories (worktrees), where a relative path means another place."""
        self.repo = self.repo.resolve()
        self.build_cache = self.build_cache.absolute() if self.build_cache else None  # a link stays one (refused)
        self.out_dir = self.out_dir.resolve()
        self.trace_path = self.trace_path.resolve() if self.trace_path else None
        self.determinism_patch = self.determinism_patch.resolve() if self.determinism_patch else None


@dataclass
class Prepared:
    """What every row reuses: one artifact per revision, the verified trace slice, verified exceptions."""

    binaries: dict[Arm, Path]
    shas: dict[Arm, str]
    trace: Path
    exceptions: list[ExceptionOutcome]
    build_differences: list[str] = field(default_factory=list)
    """Build settings that differ between the arms and are not allowed by the config: the perf gate fails."""
    help_texts: dict[Arm, str] = field(default_factory=dict)
    """Each binary's `--help`, read once at preflight."""
    load_window: LoadWindow | None = None
    """The doctor's load window, opened when the builds ended (preflight and sizes ran inside it, kept off its
    CPUs): the first row's doctor closes it."""


def new_report(request: CampaignRequest) -> CampaignReport:
    """The report before any stage ran; the single-machine campaign and `kv-parity build` start from it."""
    config = request.config
    return CampaignReport(
        campaign_id=request.campaign_id,
        created_unix=round(time.time(), 3),
        tool_version=build_info.describe(),
        config=config,
        config_source=request.config_source,
        revisions=[],
        relationship="unknown",
        merge_base=None,
        determinism_patch_sha256=None,
        exclusions=list(config.harness.exclusions),
        skipped=list(STANDING_SKIPS),
        sandbox=request.sandbox.record(),
        mode="profile" if request.profile_only else "campaign",
    )


def selected_rows(request: CampaignRequest, report: CampaignReport) -> list[RowConfig]:
    """The rows this campaign runs; the ones left out are recorded as skipped coverage."""
    rows = request.config.select_rows(request.rows)
    unselected = [row.id for row in request.config.rows if row not in rows]
    if unselected:
        report.skipped.append(f"rows not selected for this campaign: {', '.join(unselected)}")
    return rows


def run_campaign(request: CampaignRequest, progress: ProgressSink | None = None) -> CampaignReport:
    report = new_report(request)
    work = request.out_dir / "work"
    request.out_dir.mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    try:
        rows = selected_rows(request, report)
        prepared = prepare(request, report, work, progress)
        for place, row in enumerate(rows):
            try:
                window = prepared.load_window if place == 0 else None  # a later row's window starts afresh
                report.rows.append(run_row(request, prepared, row, work, progress, window))
            except BinaryMismatch as exc:
                raise CampaignStop(f"row {row.id}", str(exc), blocking=False) from exc
            except MeasurementFault as exc:
                raise CampaignStop(f"row {row.id}", str(exc), blocking=True) from exc
        report.fixtures = run_fixtures(request, prepared, report, work, progress)
    except CampaignStop as stop:
        report.stopped = stop.record
        emit(progress, "stopped", f"{stop.record.stage}: {stop.record.reason}")
    finally:
        if not request.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    report.verdicts = campaign_verdicts(report)
    emit(progress, "done", report.verdicts.summary)
    return report


def fixtures_not_run(config: CampaignConfig, profile_only: bool, rows: list[str] | None) -> str | None:
    """Why Stage 6 does not run in this campaign (its `skipped` line), None when it does. One rule for the
    single-machine campaign and the Actions plan: fixtures belong to full campaigns only."""
    if profile_only:
        return "Stage 6 fixtures not run: a profile was requested"
    if not config.fixtures:
        return "Stage 6 forced rare-lifecycle fixtures: none configured"
    if rows:
        return f"Stage 6 fixtures not run: only rows {', '.join(rows)} were requested"
    return None


def unsupported_fixture_lines(results: list[FixtureReport]) -> list[str]:
    """An UNSUPPORTED fixture is skipped coverage, listed with its reason."""
    return [f"Stage 6 fixture {r.id}: UNSUPPORTED, {r.reason}"
            for r in results if r.status == FixtureStatus.UNSUPPORTED]


def run_fixture_set(config: CampaignConfig, *, binaries: dict[Arm, Path], help_texts: dict[Arm, str],
                    exceptions: list[ExceptionOutcome], trace: Callable[[LifecycleFixture], Path], work: Path,
                    evidence_dir: Path, sandbox: Sandbox, progress: ProgressSink | None) -> list[FixtureReport]:
    """Stage 6 on two pinned binaries, every configured fixture in config order; shared by the campaign and the
    Actions fixtures job, which differ only in where a fixture's trace comes from. A re-hash mismatch stops."""
    results = []
    for fixture in config.fixtures:
        emit(progress, "fixtures", f"{fixture.kind}: determinism, parity, lifecycle assertions", row=fixture.id)
        try:
            result = run_fixture(
                fixture, config=config, binaries=binaries, help_texts=help_texts, trace=trace,
                cpu_sets=correctness_cpu_sets(4), workdir=work / f"fixture-{fixture.id}",
                evidence_dir=evidence_dir, sandbox=sandbox, exceptions=exceptions,
            )
        except BinaryMismatch as exc:
            raise CampaignStop(f"fixture {fixture.id}", str(exc), blocking=False) from exc
        except MeasurementFault as exc:
            raise CampaignStop(f"fixture {fixture.id}", str(exc), blocking=True) from exc
        emit(progress, "fixtures", f"{result.status.value}: {result.reason}", row=fixture.id)
        results.append(result)
    return results


def run_fixtures(request: CampaignRequest, prepared: Prepared, report: CampaignReport, work: Path,
                 progress: ProgressSink | None) -> list[FixtureReport]:
    """Stage 6 after the rows: each configured fixture on both revisions (full campaigns only)."""
    reason = fixtures_not_run(request.config, request.profile_only, request.rows)
    if reason is not None:
        report.skipped.append(reason)
        return []
    trusted = request.config_ref or prepared.shas["baseline"]
    results = run_fixture_set(
        request.config, binaries=prepared.binaries, help_texts=prepared.help_texts, exceptions=prepared.exceptions,
        trace=lambda f: fixture_trace(f, request.repo, trusted, work / "fixture-traces"), work=work,
        evidence_dir=request.out_dir / "evidence", sandbox=request.sandbox, progress=progress,
    )
    report.skipped.extend(unsupported_fixture_lines(results))
    return results


def prepare(request: CampaignRequest, report: CampaignReport, work: Path,
            progress: ProgressSink | None) -> Prepared:
    """Stage 1 and preflight: pinned SHAs, the verified trace slice, one build per revision, flag checks."""
    config = request.config
    emit(progress, "pin", f"resolving {request.base} and {request.head}")
    try:
        shas: dict[Arm, str] = {"baseline": resolve_sha(request.repo, request.base),
                                "candidate": resolve_sha(request.repo, request.head)}
        report.relationship, report.merge_base = relationship(request.repo, shas["baseline"], shas["candidate"])
    except RevisionError as exc:
        raise CampaignStop("pin", str(exc), blocking=True) from exc
    report.revisions = [
        Revision(arm="baseline", sha=shas["baseline"], requested=request.base),
        Revision(arm="candidate", sha=shas["candidate"], requested=request.head),
    ]
    emit(progress, "pin", f"baseline {shas['baseline'][:12]} is {report.relationship} of candidate "
         f"{shas['candidate'][:12]}")

    trace_source = request.trace_path or Path(config.trace.path)
    trace = work / "trace-slice.jsonl"
    try:
        report.trace = prepare_trace(trace_source, config.trace, trace)
        trace.chmod(0o444)  # read by the sandboxed harness as an unprivileged user, written by nobody
    except TraceError as exc:
        raise CampaignStop("trace", str(exc), blocking=True) from exc
    emit(progress, "trace", f"{report.trace.count} rows from offset {report.trace.offset}, "
         f"slice {report.trace.slice_sha256[:12]}")

    try:
        report.toolchain = toolchain()
    except BuildError as exc:
        raise CampaignStop("build", str(exc), blocking=True) from exc
    trusted = request.config_ref or shas["baseline"]
    patches = {"determinism": request.determinism_patch or _base_patch(request, config.determinism.patch,
                                                                       "determinism", trusted, work),
               "harness": _base_patch(request, config.harness.patch, "harness", trusted, work)}
    cache = _campaign_cache(request, progress)
    with ExitStack() as off_the_pinned_cpus:
        with ExitStack() as trees_open:
            trees: dict[Arm, Path] = {}
            applied: dict[Arm, dict[str, str]] = {}
            for arm in ARMS:
                emit(progress, "build", f"{arm} {shas[arm][:12]}")
                with _build_stops():
                    trees[arm] = trees_open.enter_context(worktree(request.repo, shas[arm], work / f"tree-{arm}"))
                    applied[arm] = _apply_patches(report, trees[arm], patches)
            binaries, candidate = _build_arms(request, report, shas, trees, applied, cache, work, progress)
            # The first row's doctor window opens now; what the bot does until that row starts stays off its CPUs.
            load_window = open_load_window(row_cpus())
            off_the_pinned_cpus.enter_context(kept_off(list(load_window.cpus)))
            exceptions = _exceptions(report, trees["candidate"], binaries, trace, progress, request.sandbox,
                                     request.repo)
        help_texts, differences = _preflight_and_sizes(request, report, binaries, shas, progress)
        if isinstance(candidate, StartedBuild):
            with _build_stops():
                store_candidate(candidate.cache, candidate.key, report.artifact("candidate"), candidate.target,
                                report.sizes)
        if (record := report.artifact("candidate").build_cache) is not None and record.reused_from is None:
            emit(progress, "build", f"candidate: {record.summary()}")
    return Prepared(binaries=binaries, shas=shas, trace=trace, exceptions=exceptions,
                    build_differences=differences, help_texts=help_texts, load_window=load_window)


def _preflight_and_sizes(request: CampaignRequest, report: CampaignReport, binaries: dict[Arm, Path],
                         shas: dict[Arm, str], progress: ProgressSink | None) -> tuple[dict[Arm, str], list[str]]:
    """Every configured flag checked against both binaries, then the size gate; each binary's `--help` and the
    build differences the config does not allow."""
    config = request.config
    emit(progress, "preflight", "checking every configured flag against both binaries")
    flags = sorted({flag for row in config.rows for flag in config.flags_used(row)})
    try:
        help_texts = preflight_flags(binaries, shas, flags, request.sandbox)
    except PreflightError as exc:
        raise CampaignStop("preflight", str(exc), blocking=True) from exc
    except BinaryMismatch as exc:
        raise CampaignStop("preflight", str(exc), blocking=False) from exc
    differences = gated_build_differences(report)
    report.sizes = size_gate(report.artifact("baseline"), report.artifact("candidate"), config.sizes.max_growth,
                             differences)
    report.sizes.attribution = attribute_sizes(binaries["baseline"], binaries["candidate"])
    emit(progress, "sizes", report.sizes.reason)
    return help_texts, differences


def _apply_patches(report: CampaignReport, tree: Path, patches: dict[str, Path | None]) -> dict[str, str]:
    """The base's determinism and harness patches, applied the same way to each arm; their SHA-256s by purpose."""
    applied: dict[str, str] = {}
    if (determinism := patches["determinism"]) is not None:
        report.determinism_patch_sha256 = applied["determinism"] = apply_patch(tree, determinism)
    if (harness := patches["harness"]) is not None:
        report.harness_patch_sha256 = applied["harness"] = apply_patch(tree, harness, "harness patch")
    return applied


def _build_arms(request: CampaignRequest, report: CampaignReport, shas: dict[Arm, str], trees: dict[Arm, Path],
                applied: dict[Arm, dict[str, str]], cache: CampaignCache | None, work: Path,
                progress: ProgressSink | None) -> tuple[dict[Arm, Path], StartedBuild | Artifact]:
    """One build per revision; the binaries, pinned, and the candidate's start (stored in the cache only once its
    size gate passed). Both arms' sandbox starts before the compiles (cargo metadata, versions, the cache lookup,
    the fetch) run side by side; the compiles then run one at a time, so each one's seconds are its own."""
    with _build_stops(), ThreadPoolExecutor(max_workers=len(ARMS)) as pool:
        starting = {arm: pool.submit(start_build, trees[arm], arm, shas[arm], request.config.build, work / "bin",
                                     sandbox=request.sandbox, cache=cache and replace(cache, patches=applied[arm]))
                    for arm in ARMS}
        started = {arm: future.result() for arm, future in starting.items()}
    binaries: dict[Arm, Path] = {}
    for arm in ARMS:
        with _build_stops():
            artifact = finish_build(started[arm])
            moved = worktree_head(request.repo, trees[arm])
        if artifact.build_cache is not None and (arm == "baseline" or artifact.build_cache.reused_from):
            emit(progress, "build", f"{arm}: {artifact.build_cache.summary()}")
        if moved != shas[arm]:
            raise CampaignStop("build", f"{arm} checkout moved off {shas[arm]} to {moved} during its build; "
                               "refusing its binary", blocking=False)
        report.artifacts.append(artifact)
        binaries[arm] = work / "bin" / artifact.binary_name
        request.sandbox.pin(binaries[arm], arm, artifact.binary_sha256)
    return binaries, started["candidate"]


@contextmanager
def _build_stops() -> Iterator[None]:
    """What a failed checkout, patch or build means for the campaign: a protocol mismatch or an unusable machine
    blocks it; the revision's own build failing fails it."""
    try:
        yield
    except ProtocolMismatch as exc:
        raise CampaignStop("build", str(exc), blocking=True, output_tail=exc.output_tail) from exc
    except BuildError as exc:
        raise CampaignStop("build", str(exc), blocking=False, output_tail=exc.output_tail) from exc
    except ElfError as exc:
        raise CampaignStop("sizes", str(exc), blocking=False) from exc
    except (SandboxUnavailable, RevisionError, BuildCacheError) as exc:
        raise CampaignStop("build", str(exc), blocking=True) from exc


def _campaign_cache(request: CampaignRequest, progress: ProgressSink | None) -> CampaignCache | None:
    """The campaign's build cache, if it has one it may use; an unusable directory stops the campaign."""
    try:
        cache = CampaignCache.for_campaign(request.build_cache, request.campaign_id, request.sandbox.kind)
    except BuildCacheError as exc:
        raise CampaignStop("build", str(exc), blocking=True) from exc
    if request.build_cache is not None and cache is None:
        emit(progress, "build", UNSANDBOXED_NO_CACHE)
    return cache


def _base_patch(request: CampaignRequest, relative: str | None, purpose: str, trusted_ref: str,
                work: Path) -> Path | None:
    """A configured patch (determinism or harness), read at the trusted revision the config itself came from."""
    if relative is None:
        return None
    try:
        data = show_file(request.repo, resolve_sha(request.repo, trusted_ref), relative)
    except RevisionError as exc:
        raise CampaignStop("build", f"{purpose} patch: {exc}", blocking=True) from exc
    path = work / f"{purpose}.patch"
    path.write_bytes(data)
    return path


def _exceptions(report: CampaignReport, tree: Path, binaries: dict[Arm, Path], trace: Path,
                progress: ProgressSink | None, sandbox: Sandbox, repo: Path) -> list[ExceptionOutcome]:
    """Stage 5 records come from the candidate revision's git objects and are verified from its checkout."""
    try:
        records = load_records(repo, report.artifact("candidate").sha)
    except ExceptionFileError as exc:
        raise CampaignStop("exceptions", str(exc), blocking=False) from exc
    report.exception_records = records
    if not records:
        return []
    emit(progress, "exceptions", f"running {len(records)} regression test(s) against both binaries")
    try:
        return verify_records(records, tree, binaries, trace, sandbox=sandbox)
    except BinaryMismatch as exc:
        raise CampaignStop("exceptions", str(exc), blocking=False) from exc


def run_row(request: CampaignRequest, prepared: Prepared, row: RowConfig, work: Path,
            progress: ProgressSink | None, load_window: LoadWindow | None = None) -> RowReport:
    """One comparison row on this node: correctness first; performance only once correctness holds."""
    config = request.config
    args = row_args(config, row, prepared.trace)
    # Before the row's first process, so the load it sees is other work's (`load_window`: opened earlier).
    doctor = run_doctor(row_cpus(), sandbox=request.sandbox.kind, window=load_window)
    emit(progress, "doctor", doctor.summary, row=row.id)
    cpu_sets = correctness_cpu_sets(4)
    emit(progress, "determinism", f"2 + 2 fresh processes on CPU sets {cpu_sets}", row=row.id)
    outcome = run_determinism(row_id=row.id, binaries=prepared.binaries, harness_args=args,
                              exclusions=config.harness.exclusions, cpu_sets=cpu_sets,
                              workdir=work / f"det-{row.id}", progress=progress, sandbox=request.sandbox)
    node = host_facts()
    report = RowReport(row=row, harness_args=args[1:], placement_cpus=sorted({c for s in cpu_sets for c in s}),
                       host=node.hostname, node=node, doctor=doctor, determinism=outcome.result,
                       semantic=SemanticVerdict.FAIL, semantic_reasons=[])
    if outcome.blocked:
        report.semantic = SemanticVerdict.BLOCKED
        report.semantic_reasons = outcome.blocked
        report.perf_reason = "the row is blocked"
        return report
    if outcome.failures or set(outcome.canonical) != set(ARMS):
        report.semantic_reasons = [f"product failure: {failure}" for failure in outcome.failures]
        report.perf_reason = "correctness not established (product failure)"
        return report

    baseline, candidate = outcome.canonical["baseline"], outcome.canonical["candidate"]
    report.parity = compare(row.id, baseline, candidate, request.out_dir / "evidence")
    report.declared_exclusions = check_declared_exclusions(
        row_id=row.id, binaries=prepared.binaries, harness_args=args, canonical=outcome.canonical,
        exclusions=config.harness.exclusions, cpu_set=cpu_sets[0], workdir=work / f"declared-{row.id}",
        progress=progress, sandbox=request.sandbox)
    try:
        # Counted once per distinct canonical encoding: equal SHA-256 digests (both the bot's) are equal bytes.
        by_digest = {canonical.digest: canonical for canonical in outcome.canonical.values()}
        counted = {digest: count_evidence(canonical.streamed()) for digest, canonical in by_digest.items()}
        counts = {arm: counted[outcome.canonical[arm].digest].model_copy() for arm in ARMS}
        disaggregated = baseline.section("metadata")["execution"].get("topology") == "disaggregated"
        report.coverage = CoverageResult(counts=counts, checks=check_evidence(counts, row.expect, disaggregated))
    except CoverageError as exc:
        report.coverage = CoverageResult(counts={}, checks=[
            CoverageCheck(name="evidence present", ok=False, detail=str(exc))])
    report.exceptions = prepared.exceptions
    verdict, reasons = row_semantic_verdict(row.id, report.determinism, report.parity, report.coverage,
                                            prepared.exceptions)
    verdict, reasons = declared_exclusion_verdict(verdict, reasons, report.declared_exclusions)
    report.semantic, report.semantic_reasons = verdict, reasons
    emit(progress, "parity", f"{verdict.value}: {reasons[0] if reasons else ''}", row=row.id)
    if verdict not in (SemanticVerdict.PASS, SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS):
        report.perf_reason = f"correctness not established ({verdict.value})"
        return report

    if request.profile_only:
        report.perf_reason = "performance not measured: a profile was requested"
        emit(progress, "attribution", "profiling both arms on the row's CPU (requested)", row=row.id)
        report.attribution = attribute_regression(
            prepared.binaries, args, {arm: outcome.canonical[arm].streamed() for arm in ARMS},
            request.out_dir / "attribution" / row.id, scratch=work / f"attribution-{row.id}",
            trigger="requested",
            launch=sandbox_launcher(request.sandbox, perf_placement().cpu_set),
        )
        return report
    if prepared.build_differences:
        report.perf_verdict = PerfVerdict.FAIL
        report.perf_reason = build_difference_reason(prepared.build_differences)
        return report
    placement = perf_placement()
    perf = run_performance(row_id=row.id, harness_args=args, binaries=prepared.binaries, perf=config.perf,
                           timing_field=config.harness.timing_field, placement=placement,
                           workdir=work / f"perf-{row.id}", progress=progress, hooks=request.perf_hooks,
                           sandbox=request.sandbox, counter=SampleCounter.offered())
    schedule = Path(perf.schedule_path)
    if schedule.is_file():
        kept = request.out_dir / schedule.name
        shutil.copy2(schedule, kept)
        perf = perf.model_copy(update={"schedule_path": kept.name})
    report.performance, report.perf_verdict, report.perf_reason = perf, perf.verdict, perf.reason
    report.placement_cpus = placement.cpu_set
    if should_count(perf, config.perf):  # after every sample of the row, never beside one
        emit(progress, "instructions", "counting both arms twice under callgrind", row=row.id)
        report.instructions = count_instructions(
            row_id=row.id, binaries=prepared.binaries, args=args, timed_function=config.harness.timed_function,
            sandbox=request.sandbox, cpu_set=placement.cpu_set, scratch=work / f"instructions-{row.id}",
            out_dir=request.out_dir / "instructions" / row.id, progress=progress)
        report.perf_verdict, report.perf_reason = row_performance(perf, report.instructions, config.perf)
    if report.perf_verdict == PerfVerdict.FAIL and request.attribute_failures:
        emit(progress, "attribution", "profiling both arms on the row's CPU (after the gate decided)", row=row.id)
        report.attribution = attribute_regression(
            prepared.binaries, args, {arm: outcome.canonical[arm].streamed() for arm in ARMS},
            request.out_dir / "attribution" / row.id, scratch=work / f"attribution-{row.id}",
            trigger="performance FAIL",
            launch=sandbox_launcher(request.sandbox, placement.cpu_set),
        )
    return report
