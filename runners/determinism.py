"""Stage 2: the entropy-leak check. Baseline twice and candidate twice, each a fresh process.

Repetitions run concurrently on disjoint CPU sets when the node has the cores, in waves otherwise; every
process gets its own output path. Each revision must yield exactly one canonical digest.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from runners.canonical import Canonical, CanonicalError, ReplayBenchNotActive, canonicalize, single_line
from runners.harness import run_pinned
from runners.progress import ProgressSink, emit
from runners.report import ARMS, Arm, DeterminismResult, ProcessRecord
from runners.sandbox import Sandbox

REPETITIONS = 2

_ONE_PARSE_AT_A_TIME = threading.Lock()
"""Repetitions run concurrently, but their canonical lines are parsed one at a time: orjson holds the GIL, so
concurrent parses save no time and only multiply the bot's peak memory (a parsed report is ~5x its line)."""


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

    kept: dict[Arm, tuple[int, Canonical]] = {}
    """Each arm's earliest valid repetition: the only parsed reports held, the other repetitions keep digests."""

    def one(index: int) -> tuple[ProcessRecord, str | None, str | None, bool]:
        arm, rep = jobs[index]
        own = workdir / f"{row_id}-{arm}-{rep}"
        own.mkdir()
        out = own / "canonical.jsonl"
        args = [*harness_args, "--iterations", "1", "--canonical-reports-jsonl", str(out)]
        record, _ = run_pinned(binaries[arm], args, cpu_sets[index % len(cpu_sets)], arm=arm,
                               purpose=f"determinism repetition {rep + 1}", sandbox=sandbox)
        with _ONE_PARSE_AT_A_TIME:
            canonical, problem, blocked = _read_canonical(record, out, exclusions)
            if canonical is not None and (arm not in kept or rep < kept[arm][0]):
                kept[arm] = (rep, canonical)
        digest = canonical.digest if canonical is not None else None
        if canonical is not None:
            record.canonical_digest = canonical.digest
            record.section_digests = dict(canonical.section_digests)
        del canonical
        record.error = problem
        emit(progress, "determinism", f"{arm} repetition {rep + 1}: "
             f"{digest[:12] if digest else problem}", row=row_id)
        return record, digest, problem, blocked

    with ThreadPoolExecutor(max_workers=max(1, len(cpu_sets))) as pool:
        outcomes = list(pool.map(one, range(len(jobs))))

    digests: dict[Arm, list[str]] = {arm: [] for arm in ARMS}
    canonical = {arm: kept[arm][1] for arm in ARMS if arm in kept}
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
    record: ProcessRecord, out: Path, exclusions: list[str]
) -> tuple[Canonical | None, str | None, bool]:
    """Never trust exit 0: the output file must exist and hold exactly one valid canonical line."""
    if record.error is not None:
        return None, f"{record.error}; stderr tail:\n{record.stderr_tail}", False
    if record.exit_code != 0:
        return None, f"harness exited {record.exit_code}; stderr tail:\n{record.stderr_tail}", False
    if not out.is_file():
        return None, f"harness exited 0 but wrote no canonical report at {out.name}", False
    line, count = single_line(out.read_bytes())
    if line is None:
        return None, f"expected 1 canonical line for --iterations 1, found {count}", False
    try:
        return canonicalize(line, exclusions), None, False
    except ReplayBenchNotActive as exc:
        return None, str(exc), True
    except CanonicalError as exc:
        return None, f"malformed canonical report: {exc}", False
