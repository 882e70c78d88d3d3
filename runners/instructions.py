"""Instruction counts: an exact second signal per row that the bot measures, not the candidate.

After a row's performance stage (never beside its samples: the protocol forbids profilers next to measurement),
each arm runs the row's sample invocation twice under valgrind's callgrind, in the sandbox and pinned like a
sample (`runners.stages.attribution` runs callgrind the same way; this module reuses its launcher, capture and parser).
For a deterministic replay the count is exact: two runs give the same number, so any difference between the
arms is a difference in the work done, and a difference between an arm's two runs is nondeterministic work
(evidence for Stage 2). `harness.timed_function` names the function whose call the timer brackets; the count
inside its calls is the region's, read from the capture's call arcs (the inclusive cost of every call into the
function from outside it), so one full run gives both the region's and the whole process's figure. Without a
timed function (or when an arm never entered it) the whole process is compared, and labelled so.

The capture is written by the sandboxed tool that runs the candidate: it is copied out and read as untrusted
(`runners.exec.untrusted`), and its header total must equal its totals line and the sum of its functions' costs. Both
arms' counted runs see the binary at one fixed path and write into directories of one name length, since a count
moves by a few instructions with the length of a path the harness is given.

Where the hardware offers `instructions:u` to perf_event_open (bare metal, or a VM exposing its PMU), a sample
can count its own instructions through `perf stat` at no extra run: `parse_perf_stat` reads what perf prints,
and `check_hardware_counter` is the doctor's answer to whether this node offers the counter.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from runners.exec import untrusted
from runners.exec.sandbox import FIXED_BINARY, BinaryMismatch, Sandbox
from runners.progress import ProgressSink, emit
from runners.schema.report import (
    ARMS,
    Arm,
    CountedRun,
    DoctorCheck,
    DoctorStatus,
    InstructionCounts,
    PerfResult,
)
from runners.stages.attribution import CallgrindProfile, callgrind_capture, parse_callgrind, sandbox_launcher
from runners.stages.symbols import demangle

COUNTED_RUNS = 2
"""Runs per arm: two show whether the count is exact; more would buy nothing for a deterministic replay."""
PERF_STAT_EVENT = "instructions:u"
_COUNTED_EVENT = re.compile(r"(?:[\w.-]+/)?instructions:u/?")
"""`instructions:u`, or one PMU's share of it on a hybrid CPU (`cpu_core/instructions:u/`)."""


# --- the counting stage -------------------------------------------------------------------------------------


def should_count(perf: PerfResult) -> bool:
    """Count once the performance stage completed its series (a gate decided on it); a row blocked or stopped
    by a product failure has nothing for the counts to corroborate."""
    return perf.reported_verdict is not None


def _pattern(timed_function: str) -> re.Pattern[str]:
    """`timed_function` as a whole-name match; `*` is the only special character (Rust names hold `<`, `[`)."""
    return re.compile(".*".join(re.escape(part) for part in timed_function.split("*")))


def region_of(profile: CallgrindProfile, timed_function: str) -> tuple[int, int]:
    """(instructions inside calls of the timed function, number of those calls): every call arc into a function
    whose demangled name matches, from a caller that does not (a call from inside the region is counted already)."""
    names = sorted({name for arc in profile.calls for name in arc})
    readable = dict(zip(names, demangle(names) if names else [], strict=True))
    pattern = _pattern(timed_function)
    inside, calls = 0, 0
    for (caller, callee), (made, cost) in profile.calls.items():
        if pattern.fullmatch(readable[callee]) and not pattern.fullmatch(readable[caller]):
            inside += cost
            calls += made
    return inside, calls


def _checked(profile: CallgrindProfile, what: str) -> int:
    """The whole process's count, once the capture agrees with itself (header, totals line, functions)."""
    if profile.summary is None:
        raise untrusted.UntrustedFileError(f"{what}: the capture has no `summary:` header line")
    functions = sum(profile.self_costs.values())
    if profile.totals != profile.summary or functions != profile.summary:
        raise untrusted.UntrustedFileError(
            f"{what}: the capture contradicts itself (summary {profile.summary:,}, totals "
            f"{'none' if profile.totals is None else f'{profile.totals:,}'}, functions {functions:,})")
    return profile.summary


def tool_version() -> str:
    """`valgrind --version` (the tool the counts depend on), or why it is unavailable."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return "callgrind (valgrind not installed)"
    done = subprocess.run([valgrind, "--version"], capture_output=True, text=True, check=False, timeout=60)
    return f"{done.stdout.strip() or 'valgrind'} callgrind"


def _label(arm: Arm, run: int) -> str:
    """The counted run's directory and timings-file name: one length for both arms."""
    return f"ir-{arm[0]}{run}"


def count_run(binary: Path, args: list[str], arm: Arm, run: int, *, timed_function: str | None, sandbox: Sandbox,
              cpu_set: list[int], scratch: Path, out_dir: Path) -> CountedRun:
    """One counted run of one arm; its capture is kept as `<arm>.<run>.callgrind.out` in `out_dir`."""
    label = _label(arm, run)
    started: list[str] = []

    def launch(argv: list[str], writable: list[Path], readable: Sequence[Path] = (),
               mounts: Sequence[tuple[Path, Path]] = ()) -> tuple[list[str], dict[str, str] | None]:
        started.extend(argv)  # what the sandbox starts, as the process sees it
        return sandbox_launcher(sandbox, cpu_set)(argv, writable, readable, mounts)

    began = time.monotonic()
    try:
        text = callgrind_capture(binary, args, scratch, label, out_dir / f"{arm}.{run}.callgrind.out", launch,
                                 seen_as=None if sandbox.kind == "none" else FIXED_BINARY)
        profile = parse_callgrind(text)
        process = _checked(profile, f"{arm} run {run}")
        region, calls = region_of(profile, timed_function) if timed_function else (None, 0)
    except BinaryMismatch:
        raise
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return CountedRun(arm=arm, run=run, argv=started, seconds=round(time.monotonic() - began, 3),
                          failure=str(exc))
    return CountedRun(arm=arm, run=run, argv=started, seconds=round(time.monotonic() - began, 3),
                      process_ir=process, region_ir=region, region_calls=calls)


def count_instructions(*, row_id: str, binaries: dict[Arm, Path], args: list[str], timed_function: str | None,
                       sandbox: Sandbox, cpu_set: list[int], scratch: Path, out_dir: Path,
                       progress: ProgressSink | None = None) -> InstructionCounts:
    """Both arms counted `COUNTED_RUNS` times, alternating arms; the first failed run ends the stage, recorded."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if out_dir.resolve().is_relative_to(scratch.resolve()):
        raise ValueError(f"instruction counts' output {out_dir} lies inside the sandbox's scratch directory {scratch}")
    counts = InstructionCounts(tool=tool_version(), timed_function=timed_function)
    if shutil.which("valgrind") is None:
        counts.problem = "valgrind is not installed: no instruction counts (install valgrind; see kv-parity doctor)"
        return counts
    for run in range(COUNTED_RUNS):
        for arm in ARMS:
            counted = count_run(binaries[arm], args, arm, run, timed_function=timed_function, sandbox=sandbox,
                                cpu_set=cpu_set, scratch=scratch, out_dir=out_dir)
            counts.runs.append(counted)
            if counted.failure is not None:
                counts.problem = f"{arm} run {run} was not counted: {counted.failure}"
                emit(progress, "instructions", counts.problem, row=row_id)
                return counts
            figure = counted.region_ir if counted.region_ir is not None else counted.process_ir
            emit(progress, "instructions", f"{arm} run {run}: {figure:,} instructions", row=row_id,
                 done=len(counts.runs), total=COUNTED_RUNS * len(ARMS))
    return counts


# --- hardware counters: perf stat around a sample -------------------------------------------------------------


def counted_command(perf: str, output: Path, command: list[str]) -> list[str]:
    """`command` under `perf stat`, counting the user-space instructions of it and everything it starts into
    `output`. For trusted commands only: perf's output stream is inherited by what it starts."""
    return [perf, "stat", "-x,", "-e", PERF_STAT_EVENT, "-o", str(output), "--", *command]


def parse_perf_stat(text: str) -> int | None:
    """User-space instructions from `perf stat -x, -e instructions:u` output; None when perf did not count them
    exactly (`<not supported>` on a VM without a PMU, `<not counted>`, or a count scaled from part of the run).

    CSV fields: value, unit, event, (with `-G`, the cgroup,) run time, percentage of the run counted, then
    optional metric columns. A hybrid CPU reports one line per core type; their counts add up."""
    total: int | None = None
    for line in text.splitlines():
        fields = line.split(",")
        if line.startswith("#") or len(fields) < 5 or not _COUNTED_EVENT.fullmatch(fields[2].strip()):
            continue
        cgroup = fields[3].startswith("/") and len(fields) > 5
        value, share = fields[0].strip(), fields[5 if cgroup else 4].strip()
        if not value.isdigit():
            continue
        try:
            if float(share) != 100.0:
                return None  # multiplexed: perf scaled an estimate, not a count
        except ValueError:
            return None
        total = (total or 0) + int(value)
    return total


def hardware_counter_check(perf: str | None, output: str | None, count: int | None) -> DoctorCheck:
    """The doctor's answer from what `perf stat` printed for a trivial command (or that perf is missing)."""
    name = "hardware instruction counter"
    if perf is None:
        return DoctorCheck(name=name, status=DoctorStatus.WARN, detail="perf missing: samples count no instructions",
                           fix="install perf (linux-perf or linux-tools): on a node with a PMU every measured sample "
                               "then records its instruction count")
    if count is not None:
        return DoctorCheck(name=name, status=DoctorStatus.PASS,
                           detail=f"perf_event_open offers {PERF_STAT_EVENT} ({count:,} for `true`): every measured "
                                  "sample records its instruction count")
    shown = next((line.strip() for line in (output or "").splitlines()
                  if line.strip() and not line.startswith("#")), "no output")
    return DoctorCheck(name=name, status=DoctorStatus.WARN,
                       detail=f"perf_event_open does not offer {PERF_STAT_EVENT} here (perf stat: {shown}): samples "
                              "record no instruction count; the counts after each row's samples (valgrind) remain",
                       fix="a VM without a virtual PMU cannot count: bare metal, or a hypervisor exposing the PMU "
                           "(KVM `-cpu host`, a cloud instance type with PMU access); as non-root, "
                           "kernel.perf_event_paranoid <= 2")


def probe_hardware_counter(search_path: str | None = None) -> tuple[str | None, str | None, int | None]:
    """(perf, what it printed, the count) for `perf stat` around `true`: the node's own answer, not a guess."""
    perf = shutil.which("perf", path=search_path)
    true = shutil.which("true")
    if perf is None or true is None:
        return perf, None, None
    with tempfile.TemporaryDirectory(prefix="kv-parity-perf-stat-") as scratch:
        output = Path(scratch) / "stat.csv"
        try:
            subprocess.run(counted_command(perf, output, [true]), capture_output=True, check=False, timeout=60)
            text = output.read_text(encoding="utf-8", errors="replace") if output.is_file() else None
        except (OSError, subprocess.SubprocessError) as exc:
            return perf, f"perf stat failed: {exc}", None
    return perf, text, parse_perf_stat(text or "")


def check_hardware_counter(search_path: str | None = None) -> DoctorCheck:
    """`kv-parity doctor`: does this node give each measured sample its instruction count?"""
    return hardware_counter_check(*probe_hardware_counter(search_path))
