"""Stage 2: the entropy-leak check. Baseline twice and candidate twice, each a fresh process.

Repetitions run concurrently on disjoint CPU sets when the node has the cores, in waves otherwise; every
process gets its own output path. Each revision must yield exactly one canonical digest.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from runners.exec import untrusted
from runners.exec.harness import run_pinned
from runners.exec.sandbox import Sandbox
from runners.progress import ProgressSink, emit
from runners.schema.report import ARMS, Arm, DeterminismResult, ProcessRecord
from runners.stages.canonical import Canonical, CanonicalError, ReplayBenchNotActive, canonicalize, single_line

REPETITIONS = 2


@dataclass
class DeterminismOutcome:
    result: DeterminismResult
    canonical: dict[Arm, Canonical]
    """The first valid canonical report of each arm, for parity and coverage."""
    failures: list[str] = field(default_factory=list)
    """Product failures: crashes and missing or malformed output."""
    blocked: list[str] = field(default_factory=list)
    """Reports that did not assert replay_bench: the seeded routing contract was not active."""


def run_determinism(
    *,
    row_id: str,
    binaries: dict[Arm, Path],
    harness_args: list[str],
    exclusions: list[str],
    cpu_sets: list[list[int]],
    workdir: Path,
    progress: ProgressSink | None = None,
    sandbox: Sandbox | None = None,
) -> DeterminismOutcome:
    jobs: list[tuple[Arm, int]] = [(arm, rep) for rep in range(REPETITIONS) for arm in ARMS]
    workdir.mkdir(parents=True, exist_ok=True)

    def run(index: int) -> tuple[ProcessRecord, Path]:
        arm, rep = jobs[index]
        own = workdir / f"{row_id}-{arm}-{rep}"
        own.mkdir()
        out = own / "canonical.jsonl"
        args = [*harness_args, "--iterations", "1", "--canonical-reports-jsonl", str(out)]
        record, _ = run_pinned(binaries[arm], args, cpu_sets[index % len(cpu_sets)], arm=arm,
                               purpose=f"determinism repetition {rep + 1}", sandbox=sandbox)
        return record, out

    # The processes run on worker threads; their lines are canonicalised here, on this one thread, in job order
    # as each process ends: a parse on each worker thread would grow a malloc arena per thread (the bot's peak
    # memory adds up across them), and orjson holds the GIL, so parsing on the workers would save no time.
    # Each arm's earliest valid repetition is kept, in a file of the bot's own beside the processes' directories
    # (never inside one), for parity and coverage to read back; every later one is digested without keeping its
    # encoding. So the bot holds one harness line at a time, never a canonical report.
    kept: dict[Arm, Canonical] = {}
    outcomes: list[tuple[ProcessRecord, str | None, str | None, bool]] = []
    with ThreadPoolExecutor(max_workers=max(1, len(cpu_sets))) as pool:
        futures = [pool.submit(run, index) for index in range(len(jobs))]
        for (arm, rep), future in zip(jobs, futures, strict=True):
            record, out = future.result()
            keep: Path | bool = workdir / f"{row_id}-{arm}.canonical.json" if arm not in kept else False
            parsed, problem, is_blocked = _read_canonical(record, out, exclusions, keep)
            digest = None
            if parsed is not None:
                digest = record.canonical_digest = parsed.digest
                record.section_digests = dict(parsed.section_digests)
                if arm not in kept:
                    kept[arm] = parsed
            record.error = problem
            emit(progress, "determinism", f"{arm} repetition {rep + 1}: {digest[:12] if digest else problem}",
                 row=row_id)
            outcomes.append((record, digest, problem, is_blocked))

    digests: dict[Arm, list[str]] = {arm: [] for arm in ARMS}
    canonical = {arm: kept[arm] for arm in ARMS if arm in kept}
    failures: list[str] = []
    blocked: list[str] = []
    for (arm, rep), (_record, digest, problem, is_blocked) in zip(jobs, outcomes, strict=True):
        if digest is not None:
            digests[arm].append(digest)
        elif problem is not None:
            (blocked if is_blocked else failures).append(f"{arm} repetition {rep + 1}: {problem}")
    unstable = [arm for arm in ARMS if len(set(digests[arm])) > 1]
    result = DeterminismResult(
        runs=[outcome[0] for outcome in outcomes],
        digests=digests,
        concurrent=len(cpu_sets) > 1,
        unstable_arms=unstable,
    )
    return DeterminismOutcome(result=result, canonical=canonical, failures=failures, blocked=blocked)


def _read_canonical(
    record: ProcessRecord, out: Path, exclusions: list[str], keep: Path | bool = True
) -> tuple[Canonical | None, str | None, bool]:
    """Never trust exit 0: the output file must exist and hold exactly one valid canonical line. It lies in the
    process's own sandbox-writable directory, so it is read through `runners.exec.untrusted` (a link, FIFO or
    oversize file is a product failure naming it). `keep`: where the canonical bytes go (`canonicalize`)."""
    if record.error is not None:
        return None, f"{record.error}; stderr tail:\n{record.stderr_tail}", False
    if record.exit_code != 0:
        return None, f"harness exited {record.exit_code}; stderr tail:\n{record.stderr_tail}", False
    try:
        written = untrusted.read_bytes(out, root=out.parent.parent)
    except FileNotFoundError:
        return None, f"harness exited 0 but wrote no canonical report at {out.name}", False
    except untrusted.UntrustedFileError as exc:
        return None, f"unusable canonical report: {exc}", False
    line, count = single_line(written)
    if line is None:
        return None, f"expected 1 canonical line for --iterations 1, found {count}", False
    try:
        return canonicalize(line, exclusions, keep=keep), None, False
    except ReplayBenchNotActive as exc:
        return None, str(exc), True
    except CanonicalError as exc:
        return None, f"malformed canonical report: {exc}", False
