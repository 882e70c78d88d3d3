"""Stage 7 sampling: warmups, a persisted seeded balanced schedule, pinned adjacent pairs, reruns.

One fresh pinned process per sample, one at a time, the orchestrator itself kept off the measured core. Every
attempted sample is kept. A product failure (crash, malformed or missing timing output, broken timing
contract) stops the row at once and decides it; only the predeclared environmental conditions (affinity
violation, competing load on the pinned CPU) invalidate a pair, which is then rerun whole in the same order.
The verdict is `runners.perf.gate`'s, from the recorded evidence alone, which `kv-parity verify` reuses.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext, suppress
from dataclasses import dataclass, replace
from pathlib import Path

from runners.exec import untrusted
from runners.exec.counter import AttachedCount, SampleCounter
from runners.exec.placement import cpu_busy_ms, cpu_telemetry, kept_off, pinned_argv, read_affinity, stat_tick_ms
from runners.exec.sandbox import Sandbox
from runners.perf.gate import breaches, classify, finalize, unmeasurable_rule
from runners.perf.schedule import arm_order, make_schedule, persist_schedule, schedule_seed
from runners.perf.stats import SAMPLING_ASSUMPTION
from runners.progress import ProgressSink, emit
from runners.schema.config import OUTPUT_FLAGS, InvalidationRules, PerfConfig
from runners.schema.report import (
    ARMS,
    Arm,
    Invalidation,
    PairPlan,
    PerfResult,
    PerfVerdict,
    Placement,
    Sample,
    SampleKind,
)

STDERR_TAIL_CHARS = 2000
TIMING_FILE_MAX_BYTES = 1 << 20
"""One --iterations 1 record is a few hundred bytes; anything near this bound is not a timing record."""


@dataclass(frozen=True)
class SampleHooks:
    """Test seams around one sample; production passes None.

    `after_start(pair, attempt, position, pid)` runs once the harness binary itself is executing (after
    taskset pinned it) and before its affinity is read; `around_sample(pair, attempt, position)` wraps the
    whole sample including the CPU-time readings. `pair` is None for timer probes and warmups; their position is
    the run index.
    """

    after_start: Callable[[int | None, int, int, int], None] | None = None
    around_sample: Callable[[int | None, int, int], AbstractContextManager[object]] | None = None
    disclosed_name: Callable[[SampleKind, Arm, int | None, int, int], str] | None = None
    """Names a sample's own directory (in its `--timings-jsonl` path) and logs from (kind, arm, pair, attempt,
    position) instead of an opaque random token: the fixture's noise study reads its campaign position there.
    Production never discloses it, so a harness cannot tell a probe, a warmup or a measured pair apart."""


def read_timing_file(path: Path, root: Path) -> tuple[dict[str, object] | None, str | None]:
    """The single timing record of an --iterations 1 run, or why there is none.

    The harness wrote the file in its own sandbox-writable directory under the trusted `root`: it is read
    without following links, as a regular file, up to TIMING_FILE_MAX_BYTES (runners/exec/untrusted.py)."""
    try:
        text = untrusted.read_text(path, max_bytes=TIMING_FILE_MAX_BYTES, root=root)
    except FileNotFoundError:
        return None, f"no timing record: {path} was not written"
    except (OSError, UnicodeDecodeError, untrusted.UntrustedFileError) as exc:
        return None, f"timing file {path} unreadable: {exc}"
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None, f"timing file {path} is empty"
    if len(lines) != 1:
        return (
            None,
            f"malformed timing file: expected one record for --iterations 1, found {len(lines)} lines",
        )
    try:
        record = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        return None, f"malformed timing file: line 1 is not JSON ({exc})"
    if not isinstance(record, dict):
        return None, f"malformed timing file: line 1 is a JSON {type(record).__name__}, not an object"
    return record, None


def _pair_ratio(pair_samples: list[Sample]) -> float | None:
    """Candidate / baseline metric of the pair's valid attempt, for live progress only (never decides)."""
    valid = {sample.arm: sample.metric_ms for sample in pair_samples if sample.status == "ok"}
    baseline, candidate = valid.get("baseline"), valid.get("candidate")
    return candidate / baseline if baseline and candidate is not None else None


# --- running samples ----------------------------------------------------------------------------------------


def _check_harness_args(harness_args: list[str]) -> None:
    for arg in harness_args:
        if arg.split("=", 1)[0] in OUTPUT_FLAGS:
            raise ValueError(
                f"{arg} must not be in harness_args: the performance stage owns output and "
                "iteration flags and never passes canonical or report outputs"
            )


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(path.stat().st_size - STDERR_TAIL_CHARS, 0))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _affinity(pid: int) -> list[int] | None:
    try:
        return read_affinity(pid)
    except (OSError, RuntimeError):
        return None


EXEC_POLL_S = 0.0002
"""How often the orchestrator looks whether a start has become the harness. The start takes 1-10 ms (bwrap's
mounts, setpriv, prlimit); spinning on sched_yield through it cost 5.5 ms of CPU per sample beside the other
rows' work, sleeping between looks 0.9 ms, and the harness runs meanwhile either way."""


def _reported_child(info: int) -> int | None:
    """The outer pid of the sandboxed process that becomes the harness, as bwrap reports it on its info pipe (it
    closes the pipe then); None if bwrap ended first."""
    data = b""
    try:
        while chunk := os.read(info, 4096):
            data += chunk
    finally:
        os.close(info)
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None


def _await_binary(child: int, binary: str) -> int | None:
    """`child` once it is the harness (pinned and running: affinity is inherited from taskset through bwrap and
    setpriv, and read from this process, the one that actually runs); None if it is gone."""
    target = os.path.realpath(binary)
    while True:
        try:
            if os.readlink(f"/proc/{child}/exe") == target:
                return child
        except OSError:
            return None
        time.sleep(EXEC_POLL_S)


def disclosing_name(row_id: str) -> Callable[[SampleKind, Arm, int | None, int, int], str]:
    """For `SampleHooks.disclosed_name`: `<row>-<kind>-<arm>-p<pair>-a<attempt>-<position>`, the name the fixture's
    position-dependent knobs read (the NOISE_* study, CRASH_MODE "measured_only"); tests and benchmarks only."""

    def name(kind: SampleKind, arm: Arm, pair: int | None, attempt: int, position: int) -> str:
        return f"{row_id}-{kind}-{arm}-p{pair}-a{attempt}-{position}"

    return name


def _opaque_name(kind: SampleKind, arm: Arm, pair: int | None, attempt: int, position: int) -> str:
    """A sample's directory and log name: random and of one length, so the path a harness is handed says nothing
    of what the sample is (the bot keeps the mapping in the Sample it records)."""
    return secrets.token_hex(8)


def _open_descriptors() -> list[int]:
    """Every descriptor of this process beyond stdio. The sample's child closes them all before exec (bar the
    bwrap info pipe and `Sandbox.passed_fds`): posix_spawn would otherwise hand pull-request code whatever the
    orchestrator left inheritable. The listing's own directory descriptor is among them; closing it in the child
    is a no-op."""
    return sorted(fd for fd in map(int, os.listdir("/proc/self/fd")) if fd > 2)


def _await_exec(pid: int, launcher: str) -> None:
    """Return once the child has left the taskset launcher (it is then pinned and running) or has exited.

    posix_spawn returns after the launcher's exec; taskset then sets the affinity and executes the harness,
    which takes about a millisecond.
    """
    while True:
        try:
            if os.readlink(f"/proc/{pid}/exe") != launcher:
                return
        except OSError:
            return
        time.sleep(EXEC_POLL_S)


class _Sampler:
    """Runs one pinned harness process and records everything about it."""

    def __init__(
        self,
        *,
        row_id: str,
        harness_args: list[str],
        binaries: dict[Arm, Path],
        timing_field: str,
        placement: Placement,
        workdir: Path,
        hooks: SampleHooks | None,
        sandbox: Sandbox,
        counter: SampleCounter | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.counter = counter
        self.row_id = row_id
        self.harness_args = harness_args
        self.binaries = binaries
        self.timing_field = timing_field
        self.cpu_set = placement.cpu_set
        self.hooks = hooks or SampleHooks()
        self.timings = workdir / "timings"
        self.logs = workdir / "logs"
        self.timings.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)

    def run(
        self, kind: SampleKind, arm: Arm, pair: int | None, attempt: int, position: int
    ) -> Sample:
        name = (self.hooks.disclosed_name or _opaque_name)(kind, arm, pair, attempt, position)
        own = self.timings / name
        shutil.rmtree(own, ignore_errors=True)
        own.mkdir()
        timing_path = own / "timing.jsonl"
        stdout_path, stderr_path = self.logs / f"{name}.out", self.logs / f"{name}.err"
        harness = [str(self.binaries[arm]), *self.harness_args, "--iterations", "1", "--timings-jsonl",
                   str(timing_path)]
        argv = pinned_argv(self.cpu_set, harness)
        sandboxed = self.sandbox.kind != "none"
        containment = self.sandbox.containment
        counter = self.counter if sandboxed else None
        run = self.sandbox.harness_run(harness, as_pid_1=True, info_fd=INFO_FD if sandboxed else None)
        if counter is not None:  # bwrap waits before the command until perf is attached and counting
            run = replace(run, block_fd=BLOCK_FD)
        command, env = self.sandbox.command(run)
        pinned = pinned_argv(self.cpu_set, command)
        around = (
            self.hooks.around_sample(pair, attempt, position) if self.hooks.around_sample else nullcontext()
        )
        cgroup_scope = containment.cgroup(self.cpu_set) if containment.uses_cgroup else nullcontext(None)
        with around, cgroup_scope as cgroup, _Pipes(sandboxed, counter is not None) as pipes, ExitStack() as counted:
            spawn_argv = [*cgroup.launcher(), *pinned] if cgroup is not None else pinned
            passed = {*pipes.mapped, *self.sandbox.passed_fds(run)}
            busy_before = sum(cpu_busy_ms(cpu) for cpu in self.cpu_set)
            started_unix, started = time.time(), time.monotonic()
            pid = os.posix_spawn(
                spawn_argv[0],
                spawn_argv,
                env,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 1, str(stdout_path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
                    (os.POSIX_SPAWN_OPEN, 2, str(stderr_path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
                    *pipes.spawn_actions(),
                    *[(os.POSIX_SPAWN_CLOSE, fd) for fd in _open_descriptors() if fd not in passed],
                ],
            )
            reaped = False
            count: AttachedCount | None = None
            try:
                harness_pid: int | None = pid
                if sandboxed:
                    child = pipes.reported_child()
                    if counter is not None and child is not None:
                        # bwrap holds the harness while perf attaches: that wait is not the sample's (the wall
                        # clock is a kernel gate's evidence, and only nodes with a PMU would pay it)
                        attaching = time.monotonic()
                        count = counted.enter_context(counter.attached(child, self.logs / f"{name}.perf-stat"))
                        started += time.monotonic() - attaching
                    pipes.release()
                    harness_pid = None if child is None else _await_binary(child, str(self.binaries[arm]))
                else:
                    _await_exec(pid, os.path.realpath(spawn_argv[0]))
                if self.hooks.after_start is not None:
                    self.hooks.after_start(pair, attempt, position, harness_pid or pid)
                # Under a cgroup, the cpuset every task of the sample is confined to (no task can leave it, and a
                # harness that ends before the bot looks cannot read as a violation); else the harness's own.
                at_start: list[int] | None
                if cgroup is not None:
                    at_start = cgroup.effective_cpus()
                else:
                    at_start = _affinity(harness_pid) if harness_pid is not None else None
                os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
                # Under bwrap the harness is reaped by bwrap before this point: its exit affinity is unknowable.
                at_exit = None if sandboxed else _affinity(pid)
                _, status, usage = os.wait4(pid, 0)
                reaped = True
            finally:
                if not reaped:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            elapsed = time.monotonic() - started
            ended_unix = time.time()
            exit_code = os.waitstatus_to_exitcode(status)
            if cgroup is not None:
                cgroup.drain()
                cgroup.check_joined(exit_code)
                own_cpu_ms = cgroup.cpu_ms()
            else:
                own_cpu_ms = (usage.ru_utime + usage.ru_stime) * 1000.0
            busy_after = sum(cpu_busy_ms(cpu) for cpu in self.cpu_set)
            counted.close()  # perf ended with the harness: its count is written
        record, problem = read_timing_file(timing_path, self.timings)
        printed = _tail(stdout_path).strip().splitlines()
        if record is None and exit_code == 0 and printed:
            problem = f"{problem}; stdout: {printed[-1][:200]}"
        meaning = classify(exit_code, record, problem, self.timing_field, elapsed * 1000.0, probe=kind == "probe")
        expected = sorted(self.cpu_set)
        return Sample(
            kind=kind,
            arm=arm,
            pair=pair,
            attempt=attempt,
            position=position,
            argv=argv,
            started_unix=started_unix,
            ended_unix=ended_unix,
            elapsed_s=elapsed,
            exit_code=exit_code,
            timing_record=record,
            metric_ms=meaning.metric_ms,
            setup_ms=meaning.setup_ms,
            status=meaning.status,
            failure=meaning.failure,
            stderr_tail=_tail(stderr_path),
            cpu_set=expected,
            affinity_observed=at_start,
            affinity_at_exit=at_exit,
            affinity_ok=at_start == expected and at_exit in (None, expected),
            interference_ms=(busy_after - busy_before) - own_cpu_ms,
            telemetry=cpu_telemetry(self.cpu_set[0]),
            kernel_cpu_ms=own_cpu_ms,
            counted=count.value if count is not None else None,
        )


INFO_FD, BLOCK_FD = 3, 4
"""Where a sandboxed sample's child sees bwrap's info pipe and, when perf counts the sample, its block pipe."""


class _Pipes:
    """A sample's pipes to bwrap: the info pipe it reports its child on and, when perf counts the sample, the block
    pipe it waits on before the command runs (so the bot can attach perf to the child first). Every end is closed
    on exit, whatever happened; closing the block pipe unblocks bwrap, which then runs or exits."""

    def __init__(self, sandboxed: bool, blocked: bool) -> None:
        self._open: list[int] = []
        self.info = self._pipe() if sandboxed else None
        self.block = self._pipe() if blocked else None
        self.mapped = ({INFO_FD} if sandboxed else set()) | ({BLOCK_FD} if blocked else set())

    def _pipe(self) -> tuple[int, int]:
        ends = os.pipe()
        self._open.extend(ends)
        return ends

    def __enter__(self) -> _Pipes:
        return self

    def __exit__(self, *_: object) -> None:
        for fd in self._open:
            self._close(fd)

    def _close(self, fd: int) -> None:
        if fd in self._open:
            self._open.remove(fd)
            os.close(fd)

    def spawn_actions(self) -> list[tuple[int, ...]]:
        actions: list[tuple[int, ...]] = []
        if self.info is not None:
            actions.append((os.POSIX_SPAWN_DUP2, self.info[1], INFO_FD))
        if self.block is not None:
            actions.append((os.POSIX_SPAWN_DUP2, self.block[0], BLOCK_FD))
        return actions

    def reported_child(self) -> int | None:
        """After the spawn: the bot's copies of the child's ends go, then bwrap's report is read."""
        assert self.info is not None
        self._close(self.info[1])
        if self.block is not None:
            self._close(self.block[0])
        self._open.remove(self.info[0])
        return _reported_child(self.info[0])

    def release(self) -> None:
        if self.block is not None:
            with suppress(BrokenPipeError):  # bwrap already ended: the sample records how
                os.write(self.block[1], b"1")
            self._close(self.block[1])


def _invalidate(members: list[Sample], rules: InvalidationRules) -> tuple[list[Sample], Invalidation | None]:
    """Mark both members invalidated when either hit a predeclared environmental condition."""
    found = [hit for member in members for hit in breaches(member, rules)]
    if not found:
        return members, None
    first = members[0]
    assert first.pair is not None
    record = Invalidation(
        pair=first.pair,
        attempt=first.attempt,
        reason="; ".join(sorted({reason for reason, _ in found})),
        evidence="; ".join(evidence for _, evidence in found),
    )
    return [m.model_copy(update={"status": "invalidated"}) for m in members], record


def _sample_pair(
    sampler: _Sampler, pair: PairPlan, rules: InvalidationRules
) -> tuple[list[Sample], list[Invalidation], bool]:
    """Every attempt of one pair in its scheduled order: (samples, invalidations, ended with a valid attempt).

    Not completed means a product failure (sampling stops there) or reruns exhausted (the row is blocked).
    """
    samples: list[Sample] = []
    invalidations: list[Invalidation] = []
    for attempt in range(rules.max_reruns_per_pair + 1):
        members: list[Sample] = []
        for position, arm in enumerate(arm_order(pair)):
            members.append(sampler.run("measured", arm, pair.pair, attempt, position))
            if members[-1].status == "product_failure":
                return [*samples, *members], invalidations, False
        members, invalidation = _invalidate(members, rules)
        samples.extend(members)
        if invalidation is None:
            return samples, invalidations, True
        invalidations.append(invalidation)
    return samples, invalidations, False


def _warm_and_sample(
    sampler: _Sampler, plan: list[PairPlan], perf: PerfConfig, row_id: str, progress: ProgressSink | None
) -> tuple[list[Sample], list[Sample], list[Invalidation]]:
    """Warmups, then every scheduled pair in order; stops at the first product failure or exhausted pair."""
    warmups: list[Sample] = []
    samples: list[Sample] = []
    invalidations: list[Invalidation] = []
    for index in range(2 * perf.warmups_per_arm):
        warmups.append(sampler.run("warmup", ARMS[index % 2], None, 0, index))
        if warmups[-1].status == "product_failure":
            return warmups, samples, invalidations
    emit(progress, "performance", f"{len(warmups)} warmups done", row=row_id, done=0, total=perf.pairs)
    for done, pair in enumerate(plan, start=1):
        pair_samples, pair_invalidations, complete = _sample_pair(sampler, pair, perf.invalidation)
        samples.extend(pair_samples)
        invalidations.extend(pair_invalidations)
        for invalidation in pair_invalidations:
            emit(
                progress,
                "performance",
                f"pair {pair.pair} attempt {invalidation.attempt} invalidated: {invalidation.reason}",
                row=row_id,
                done=done - 1,
                total=perf.pairs,
            )
        if not complete:
            break
        emit(
            progress,
            "performance",
            f"pair {pair.pair} ({pair.order})",
            row=row_id,
            done=done,
            total=perf.pairs,
            ratio=_pair_ratio(pair_samples),
        )
    return warmups, samples, invalidations


def run_performance(
    *,
    row_id: str,
    harness_args: list[str],
    binaries: dict[Arm, Path],
    perf: PerfConfig,
    timing_field: str,
    placement: Placement,
    workdir: Path,
    progress: ProgressSink | None = None,
    hooks: SampleHooks | None = None,
    sandbox: Sandbox | None = None,
    counter: SampleCounter | None = None,
) -> PerfResult:
    """Stage 7 for one row on this node: warmups, the persisted schedule, pinned pairs, then the verdict. With a
    `counter` (the node's PMU offers one, runners/exec/counter.py) every sandboxed sample also records its count."""
    _check_harness_args(harness_args)
    for arm in ("baseline", "candidate"):
        if not os.access(binaries[arm], os.X_OK):
            raise FileNotFoundError(f"{arm} binary {binaries[arm]} is missing or not executable")
    workdir.mkdir(parents=True, exist_ok=True)
    sandbox = sandbox or Sandbox.default()
    seed = schedule_seed(perf.seed, row_id)
    plan = make_schedule(seed, perf.pairs)
    schedule_path = persist_schedule(workdir, row_id, perf.seed, seed, plan)
    evidence = PerfResult(
        timing_field=timing_field,
        timing_scope=f"`{timing_field}` from the harness timing record of one fresh pinned process per "
        "sample (--iterations 1, an opaque --timings-jsonl of its own, no canonical or report output); process "
        "wall time is kept per sample as elapsed_s and the CPU time of its whole process tree as kernel_cpu_ms "
        "(from the sample's cgroup, else wait4 rusage), both gated as corroboration; setup time is kept as "
        "setup_ms when reported",
        placement=placement,
        schedule_seed=seed,
        schedule=plan,
        schedule_path=str(schedule_path),
        warmups=[],
        samples=[],
        invalidations=[],
        ratios=[],
        bounds=None,
        diagnostics=[],
        bootstrap=None,
        verdict=PerfVerdict.NOT_RUN,
        reason="",
        perf_config=perf,
        interference_resolution_ms=2 * stat_tick_ms(),
        sampling_assumption=SAMPLING_ASSUMPTION,
        kernel_corroborated=True,
        containment=sandbox.containment.kind,
        counter=counter.event if counter is not None and sandbox.kind != "none" else None,
    )
    if unmeasurable_rule(perf, evidence.interference_resolution_ms) is not None:
        return finalize(evidence, perf)
    sampler = _Sampler(
        row_id=row_id,
        harness_args=harness_args,
        binaries=binaries,
        timing_field=timing_field,
        placement=placement,
        workdir=workdir,
        hooks=hooks,
        sandbox=sandbox,
        counter=counter,
    )
    probes: list[Sample] = []
    series: tuple[list[Sample], list[Sample], list[Invalidation]] = ([], [], [])
    with kept_off([*placement.cpu_set, *placement.siblings_excluded]):
        for index, arm in enumerate(ARMS):
            probes.append(sampler.run("probe", arm, None, 0, index))
        if all(probe.status == "ok" for probe in probes):
            series = _warm_and_sample(sampler, plan, perf, row_id, progress)
    warmups, samples, invalidations = series
    return finalize(
        evidence.model_copy(
            update={"probes": probes, "warmups": warmups, "samples": samples, "invalidations": invalidations}
        ),
        perf,
    )
