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
import time
from collections.abc import Sequence
from pathlib import Path

from runners.exec import untrusted
from runners.exec.sandbox import FIXED_BINARY, BinaryMismatch, Sandbox
from runners.progress import ProgressSink, emit
from runners.schema.config import PerfConfig
from runners.schema.report import (
    ARMS,
    Arm,
    CountedRun,
    InstructionCounts,
    PerfResult,
)
from runners.stages.attribution import CallgrindProfile, callgrind_capture, parse_callgrind, sandbox_launcher
from runners.stages.symbols import demangle

COUNTED_RUNS = 2
"""Runs per arm: two show whether the count is exact; more would buy nothing for a deterministic replay."""


# --- the counting stage -------------------------------------------------------------------------------------


def should_count(perf: PerfResult, config: PerfConfig) -> bool:
    """Count once the performance stage completed its series (a gate decided on it), unless the config turned
    counting off; a row blocked or stopped by a product failure has nothing for the counts to corroborate."""
    return config.instructions != "off" and perf.reported_verdict is not None


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
