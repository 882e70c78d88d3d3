"""Investigate unacceptable overhead: attribute a row's performance regression to specific code.

The protocol's steps, in order, after the gate has decided and never while samples are collected:
1. equivalent semantic work — the arms' work counters from their canonical reports (requests, tokens, engine
   steps, KV events, route decisions), so an intended correction that adds work is told apart from overhead;
2. an exact, noise-free instruction count per function for both arms (valgrind's callgrind: the same binary,
   inputs and environment give the same count whatever else the machine does);
3. sampled self time and call stacks for both arms (`perf record` with the cpu-clock event and DWARF unwinding,
   several alternating runs on the row's pinned CPU), as flame graphs per arm and a differential flame graph.
Function names are demangled and made stable across builds by `runners.stages.symbols`, generic instantiations grouped.
Raw captures are kept as files speedscope and the Firefox Profiler open (callgrind output, `perf script` text).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from runners.exec import untrusted
from runners.exec.placement import pinned_argv
from runners.exec.sandbox import Sandbox
from runners.schema.report import (
    ARMS,
    Arm,
    CostTable,
    FunctionDelta,
    RegressionAttribution,
    WorkComparison,
    WorkCounter,
)
from runners.stages.flamegraph import Stacks, differential_flame_svg, flame_svg
from runners.stages.symbols import demangle, generic_name

TOP_MOVERS = 10
FINDINGS = 3
FINDING_FLOOR = 0.005
"""Movers below this share of the baseline total are not findings: randomly seeded hash maps and address-space
layout move a binary's own instruction count by about 0.1% between identical runs."""
PERF_FREQUENCY_HZ = 1999
CAPTURE_MAX_BYTES = 1 << 30
"""Bound on a profiler's output the bot takes from the sandbox (callgrind output, `perf script` text: a few MB
on the fixture); a larger one is refused, recorded in `skipped`."""


Mount = tuple[Path, Path]
"""(host file, the path the sandboxed process sees it at): a binary at one fixed path for both arms."""


class Launcher(Protocol):
    """(argv, directories it must write, files it must read, files bound at fixed paths) -> (argv, environment)
    that start it: the sandbox and CPU pinning. Absolute paths in argv are readable already; `readable` names
    files argv does not; argv names a mounted file by its inside path."""

    def __call__(self, argv: list[str], writable: list[Path], readable: Sequence[Path] = (),
                 mounts: Sequence[Mount] = ()) -> tuple[list[str], dict[str, str] | None]: ...


def bare_launcher(argv: list[str], writable: list[Path], readable: Sequence[Path] = (),
                  mounts: Sequence[Mount] = ()) -> tuple[list[str], dict[str, str] | None]:
    """No wrapping: for tools whose absence is being tested; pull-request code always goes through the sandbox.
    Without a sandbox nothing is mounted: argv names each file by its host path."""
    inside = {str(target): str(host) for host, target in mounts}
    return [inside.get(word, word) for word in argv], None


def sandbox_launcher(sandbox: Sandbox, cpu_set: list[int]) -> Launcher:
    """Start each profiled process like a performance sample: in the sandbox, pinned to the row's CPU set, with
    its own /proc (valgrind reads it) and the process's own capture directory writable. The profiler (valgrind,
    `perf record`) is the command the sandbox starts, so it writes its capture as the sandbox user."""

    def launch(argv: list[str], writable: list[Path], readable: Sequence[Path] = (),
               mounts: Sequence[Mount] = ()) -> tuple[list[str], dict[str, str] | None]:
        if sandbox.kind == "none":
            argv, mounts = bare_launcher(argv, writable, readable, mounts)[0], ()
        targets = {str(target) for _, target in mounts}
        run = sandbox.harness_run([word for word in argv if word not in targets])  # a mount is not an output
        sandbox.hand_over(*writable)
        run = replace(run, argv=argv, writable=tuple(dict.fromkeys([*run.writable, *writable])),
                      read_only=tuple(dict.fromkeys([*run.read_only, *readable])),
                      mounts=tuple(dict.fromkeys([*run.mounts, *mounts])), proc=True)
        command, env = sandbox.command(run)
        return pinned_argv(cpu_set, command), env

    return launch


# --- 1. Equivalent semantic work --------------------------------------------------------------------------

_SUMMARY_COUNTERS = (
    "num_requests", "completed_requests", "total_input_tokens", "total_output_tokens", "processed_tokens",
    "engine_steps", "requests_with_reuse",
)


def work_counters(canonical: Mapping[str, Any]) -> dict[str, int]:
    """The work a canonical report says was done: request and token totals, engine steps, KV events, routes
    (counted from each request's routing history, where the harness records placements)."""
    counters: dict[str, int] = {}
    summary = canonical.get("summary") or {}
    for key in _SUMMARY_COUNTERS:
        if isinstance(summary.get(key), int):
            counters[f"summary.{key}"] = summary[key]
    coverage = canonical.get("coverage") or {}
    ingest = coverage.get("kv_ingest") or {}
    for key in ("events", "blocks", "batches"):
        if isinstance(ingest.get(key), int):
            counters[f"kv_ingest.{key}"] = ingest[key]
    routes: Counter[tuple[str, str]] = Counter()
    for record in canonical.get("per_request") or []:
        for route in (record.get("routing_history") or []) if isinstance(record, dict) else []:
            if isinstance(route, dict) and route.get("outcome") in ("immediate", "queued"):
                routes[str(route.get("pool")), route["outcome"]] += 1
    for pool in sorted({pool for pool, _ in routes}):
        for outcome in ("immediate", "queued"):
            counters[f"route_decisions.{pool}.{outcome}"] = routes[pool, outcome]
    if isinstance(coverage.get("per_request_records"), int):
        counters["per_request_records"] = coverage["per_request_records"]
    return counters


def compare_work(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> WorkComparison:
    before, after = work_counters(baseline), work_counters(candidate)
    rows = [
        WorkCounter(name=name, baseline=before.get(name, 0), candidate=after.get(name, 0))
        for name in sorted(before.keys() | after.keys())
    ]
    more = [row for row in rows if row.candidate > row.baseline]
    less = [row for row in rows if row.candidate < row.baseline]
    if not more and not less:
        summary = f"equivalent semantic work: all {len(rows)} work counters identical, so the added time is overhead"
    else:
        changed = more + less
        summary = "candidate did different work: " + ", ".join(
            f"{row.name} {row.baseline:,} -> {row.candidate:,}" for row in changed[:5]
        ) + ("" if len(changed) <= 5 else f" (+{len(changed) - 5} more)")
    return WorkComparison(counters=rows, equivalent=not more and not less, summary=summary)


# --- 2. Instruction counts (callgrind) --------------------------------------------------------------------

_NAMED = re.compile(r"^(c?fn)=\((\d+)\)(?: (.*))?$")
_HEADER_NUMBER = re.compile(r"^(summary|totals): (\d+)$")


@dataclass(frozen=True)
class CallgrindProfile:
    """What one callgrind capture (`--dump-instr=no`, the one event Ir) says, by mangled function name."""

    self_costs: dict[str, int]
    """Each function's own instructions."""
    calls: dict[tuple[str, str], tuple[int, int]]
    """(caller, callee) -> (calls, instructions inside those calls, the callee's callees included)."""
    summary: int | None
    """The header's `summary:` line, written before any function name (so no name can forge it)."""
    totals: int | None
    """The last `totals:` line."""


def parse_callgrind(text: str) -> CallgrindProfile:
    """Self costs, call arcs with their inclusive costs, and the totals of a callgrind output file.

    Cost lines under `fn=` are the function's own cost; the cost line right after `calls=` is the inclusive cost
    of a call and belongs to the arc from the current `fn` to the last `cfn`, not to either function's own cost.
    Compressed names `fn=(id)` refer to an earlier `fn=(id) name` or `cfn=(id) name` definition. Names are the
    candidate's own (one holding a newline puts text of its choosing at the start of a line), which is why the
    header's `summary:` counts only before the first name and callers cross-check it against `totals:` and the
    sum of the self costs.
    """
    names: dict[str, str] = {}
    costs: Counter[str] = Counter()
    calls: dict[tuple[str, str], tuple[int, int]] = {}
    current: str | None = None
    callee: str | None = None
    pending_calls: int | None = None
    summary: int | None = None
    totals: int | None = None
    named_yet = False
    for line in text.splitlines():
        named = _NAMED.match(line)
        if named:
            named_yet = True
            kind, ident, name = named.groups()
            if name is not None:
                names[ident] = name
            if kind == "fn":
                current = names.get(ident, f"fn({ident})")
            else:
                callee = names.get(ident, f"fn({ident})")
            continue
        if line.startswith("calls="):
            count = line[len("calls="):].split(maxsplit=1)[:1]
            pending_calls = int(count[0]) if count and count[0].isdigit() else 0
            continue
        header = _HEADER_NUMBER.match(line)
        if header:
            if header.group(1) == "summary" and not named_yet and summary is None:
                summary = int(header.group(2))
            elif header.group(1) == "totals":
                totals = int(header.group(2))
            continue
        if line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            cost = int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
            if pending_calls is not None:
                if current is not None and callee is not None and cost is not None:
                    made, inside = calls.get((current, callee), (0, 0))
                    calls[current, callee] = (made + pending_calls, inside + cost)
                pending_calls = None
                continue
            if current is not None and cost is not None:
                costs[current] += cost
    return CallgrindProfile(self_costs=dict(costs), calls=calls, summary=summary, totals=totals)


def callgrind_self_costs(text: str) -> dict[str, int]:
    """Self instruction count per (mangled) function from a callgrind output file (`parse_callgrind`)."""
    return parse_callgrind(text).self_costs


# --- 3. Sampled stacks (perf) -----------------------------------------------------------------------------

def perf_script_stacks(text: str, comm: str) -> Stacks:
    """Folded stacks (root first) of the samples of process `comm` from `perf script -F comm,ip,sym` text."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for block in re.split(r"\n\s*\n", text):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines or lines[0].strip() != comm:
            continue
        frames = []
        for line in lines[1:]:
            parts = line.strip().split(maxsplit=1)
            symbol = parts[1] if len(parts) == 2 else "[unknown]"
            frames.append(symbol.removesuffix(" (inlined)"))
        if frames:
            stacks[tuple(reversed(frames))] += 1
    return stacks


# --- Differential tables ----------------------------------------------------------------------------------

def readable_costs(costs: Mapping[str, int]) -> dict[str, int]:
    """Mangled -> demangled, stable names, costs of names that collapse together added up."""
    names = list(costs)
    readable: Counter[str] = Counter()
    for mangled, name in zip(names, demangle(names) if names else [], strict=True):
        readable[name] += costs[mangled]
    return dict(readable)


def cost_table(metric: str, before: Mapping[str, int], after: Mapping[str, int]) -> CostTable:
    """Costs keyed by readable names (`readable_costs`, or stacks already demangled) -> the differential table."""
    rows = [
        FunctionDelta(name=name, baseline=before.get(name, 0), candidate=after.get(name, 0))
        for name in sorted(before.keys() | after.keys())
    ]
    movers = sorted((row for row in rows if row.delta), key=lambda row: (-abs(row.delta), row.name))
    new = sorted((row for row in rows if row.baseline == 0 and row.candidate > 0), key=lambda r: (-r.candidate, r.name))
    grouped: dict[str, list[int]] = {}
    for row in rows:
        entry = grouped.setdefault(generic_name(row.name), [0, 0, 0])
        entry[0] += row.baseline
        entry[1] += row.candidate
        entry[2] += 1
    generic = sorted(
        (FunctionDelta(name=name, baseline=b, candidate=c, instances=n) for name, (b, c, n) in grouped.items()
         if n > 1 and c != b),
        key=lambda row: (-abs(row.delta), row.name),
    )
    return CostTable(
        metric=metric,
        baseline_total=sum(before.values()),
        candidate_total=sum(after.values()),
        movers=movers[:TOP_MOVERS],
        new_functions=new[:TOP_MOVERS],
        generic_movers=generic[:TOP_MOVERS],
    )


def findings(table: CostTable) -> list[str]:
    """The top movers, one line each, in the table's unit and as a share of the baseline total."""
    lines = []
    for row in table.movers[:FINDINGS]:
        share = row.delta / table.baseline_total if table.baseline_total else 0.0
        if abs(share) < FINDING_FLOOR:
            break
        novelty = " (new in candidate)" if row.baseline == 0 else ""
        lines.append(f"`{row.name}`: {row.delta:+,} {table.metric} ({share:+.1%} of the baseline total){novelty}")
    return lines


# --- Orchestration ----------------------------------------------------------------------------------------

def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(argv, capture_output=True, text=True, encoding="utf-8", errors="replace",
                               check=False, timeout=3600, env=env)
    if completed.returncode != 0:
        raise RuntimeError(f"{what} exited {completed.returncode}: {completed.stderr.strip()[-300:]}")
    return completed


def _timed_args(args: list[str], own: Path, label: str) -> list[str]:
    """The row's argv as in a performance sample: one iteration, its own timings file (each start writes anew)."""
    return [*args, "--iterations", "1", "--timings-jsonl", str(own / f"{label}.timings.jsonl")]


def _own_dir(scratch: Path, label: str) -> Path:
    """A fresh directory for one profiled process: the only place it (and the profiler inside the sandbox with
    it) may write. The bot never writes there and reads back only through `runners.exec.untrusted`."""
    scratch.mkdir(parents=True, exist_ok=True)
    own = scratch / label
    own.mkdir()
    return own


def callgrind_capture(binary: Path, args: list[str], scratch: Path, label: str, kept: Path, launch: Launcher,
                      *, seen_as: Path | None = None) -> str:
    """One run of the row's sample invocation under callgrind (inside the sandbox, writing its capture into its
    own directory `scratch/label`); the capture is copied to `kept`, in a directory of the bot's, and read from
    that copy. `seen_as` is the path the process sees the binary at (a fixed path both arms share), default its
    own. The timings file is named after `label`, so labels of one length give arms argv of one length."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise FileNotFoundError("valgrind is not installed")
    own = _own_dir(scratch, label)
    capture = own / "callgrind.out"
    shown = seen_as or binary
    argv, env = launch([valgrind, "--tool=callgrind", "--demangle=no", f"--callgrind-out-file={capture}",
                        str(shown), *_timed_args(args, own, label)], [own],
                       mounts=[(binary, shown)] if seen_as else [])
    _run(argv, f"callgrind of {binary.name}", env)
    untrusted.copy_out(capture, kept, max_bytes=CAPTURE_MAX_BYTES, root=scratch)
    return kept.read_text(encoding="utf-8", errors="replace")


def count_instructions(binary: Path, args: list[str], scratch: Path, out_dir: Path, arm: str,
                       launch: Launcher) -> dict[str, int]:
    """One run under callgrind; the self instruction count per mangled function, kept as `<arm>.callgrind.out`."""
    text = callgrind_capture(binary, args, scratch, f"{arm}.callgrind", out_dir / f"{arm}.callgrind.out", launch)
    return callgrind_self_costs(text)


def sample_stacks(binary: Path, args: list[str], scratch: Path, out_dir: Path, label: str,
                  launch: Launcher) -> Stacks:
    """One run under `perf record` (cpu-clock, user space, DWARF unwinding); folded stacks of the harness.

    Both perf steps run inside the sandbox, as the sandbox user: `perf record` with the harness, writing perf.data
    into the process's own directory, then `perf script` on it (with the binary readable for its symbols), so
    no trusted process opens or parses a perf.data the harness could have rewritten. The bot keeps only the
    `perf script` text it read from the pipe (which speedscope and the Firefox Profiler open) in `out_dir`."""
    perf = shutil.which("perf")
    if perf is None:
        raise FileNotFoundError("perf (linux-perf) is not installed")
    own = _own_dir(scratch, f"{label}.perf")
    capture = own / "perf.data"
    argv, env = launch([perf, "record", "-q", "--all-user", "-e", "cpu-clock", "-F", str(PERF_FREQUENCY_HZ),
                        "--call-graph", "dwarf,16384", "-o", str(capture), "--", str(binary),
                        *_timed_args(args, own, f"{label}.perf")], [own])
    _run(argv, f"perf record of {binary.name} (needs kernel.perf_event_paranoid <= 2 for the sandbox user)", env)
    # `--input=` rather than `-i PATH`: an absolute path word in argv would be bound read-only by its host path,
    # and the harness may have replaced perf.data with a link to a host file.
    argv, env = launch([perf, "script", f"--input={capture}", "-F", "comm,ip,sym", "--no-demangle"], [own],
                       [binary])
    script = _run(argv, "perf script", env).stdout
    if len(script) > CAPTURE_MAX_BYTES:
        raise RuntimeError(f"perf script of {label} printed {len(script):,} characters, over the "
                           f"{CAPTURE_MAX_BYTES:,} bound")
    _write_new(out_dir / f"{label}.perf-script.txt", script)
    return perf_script_stacks(script, binary.name[:15])


def _write_new(path: Path, text: str) -> None:
    """Create a file of the bot's own in a trusted directory: never through a link, never over an existing file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def attribute_regression(
    binaries: Mapping[Arm, Path],
    args: list[str],
    canonical: Mapping[Arm, Mapping[str, Any]] | None,
    out_dir: Path,
    *,
    scratch: Path,
    trigger: str,
    launch: Launcher,
    perf_runs: int = 3,
) -> RegressionAttribution:
    """Run the protocol's investigation for one row; every kept capture lands in `out_dir`.

    `binaries` maps "baseline"/"candidate" to the campaign's verified executables; `args` is the row's argv
    after the binary (one iteration and a fresh timings file are added per start); `canonical` holds both
    arms' canonical reports when the caller kept them. Each profiled process gets its own fresh directory
    under `scratch`, the only directories handed to the sandbox; `out_dir` is the bot's alone (never bound
    into a sandbox) and must lie outside `scratch`. A missing profiler is recorded in `skipped`, never fatal.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    if out_dir.resolve().is_relative_to(scratch.resolve()):
        raise ValueError(f"attribution output {out_dir} lies inside the sandbox's scratch directory {scratch}")
    skipped: list[str] = []
    files: list[str] = []
    work = compare_work(canonical["baseline"], canonical["candidate"]) if canonical else None
    if work is None:
        skipped.append("equivalent-work check: no canonical reports were kept for this row")

    instructions: CostTable | None = None
    try:
        counted = {
            arm: count_instructions(binaries[arm], args, scratch, out_dir, arm, launch)
            for arm in ARMS
        }
        instructions = cost_table("instructions", *(readable_costs(counted[arm]) for arm in ARMS))
        files += ["baseline.callgrind.out", "candidate.callgrind.out"]
    except (FileNotFoundError, RuntimeError) as exc:
        skipped.append(f"instruction counts: {exc}")

    samples: CostTable | None = None
    try:
        stacks: dict[str, Counter[tuple[str, ...]]] = {"baseline": Counter(), "candidate": Counter()}
        for run in range(perf_runs):
            for arm in ("baseline", "candidate") if run % 2 == 0 else ("candidate", "baseline"):
                stacks[arm].update(sample_stacks(binaries[arm], args, scratch, out_dir, f"{arm}.{run}", launch))
                files.append(f"{arm}.{run}.perf-script.txt")
        readable = {arm: _demangle_stacks(stacks[arm]) for arm in stacks}
        leaf_costs = {arm: _leaf_costs(readable[arm]) for arm in readable}
        samples = cost_table("cpu-clock samples", leaf_costs["baseline"], leaf_costs["candidate"])
        for arm in ("baseline", "candidate"):
            _write_new(out_dir / f"{arm}.flame.svg", flame_svg(readable[arm], f"{arm}: cpu-clock samples"))
            files.append(f"{arm}.flame.svg")
        _write_new(out_dir / "differential.flame.svg", differential_flame_svg(
            readable["baseline"], readable["candidate"],
            "candidate vs baseline (red: larger share in candidate, blue: smaller)"))
        files.append("differential.flame.svg")
    except (FileNotFoundError, RuntimeError) as exc:
        skipped.append(f"sampled profile: {exc}")

    decided = instructions or samples
    return RegressionAttribution(
        trigger=trigger,
        work=work,
        instructions=instructions,
        samples=samples,
        findings=findings(decided) if decided else [],
        files=sorted(files),
        skipped=skipped,
    )


def _demangle_stacks(stacks: Counter[tuple[str, ...]]) -> Stacks:
    frames = sorted({frame for stack in stacks for frame in stack})
    readable = dict(zip(frames, demangle(frames) if frames else [], strict=True))
    out: Counter[tuple[str, ...]] = Counter()
    for stack, count in stacks.items():
        out[tuple(readable[frame] for frame in stack)] += count
    return out


def _leaf_costs(stacks: Stacks) -> dict[str, int]:
    costs: Counter[str] = Counter()
    for stack, count in stacks.items():
        costs[stack[-1]] += count
    return dict(costs)
