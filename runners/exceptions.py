"""Stage 5: semantic exception records, read from the candidate revision and verified by running them.

A record only counts when the runner itself has seen its regression test fail against the baseline binary and
pass against the candidate binary. The test runs from the candidate checkout with `{binary}` and `{trace}`
substituted, so a test the PR adds is exercised against the old behaviour instead of being absent there; under
the sandbox both arms' binaries are bound at the same fixed path, so the test cannot tell the arms apart by it.
The records are read from git objects at the candidate's pinned SHA (a committed symlink is never followed), and
a record whose pointers cover the whole report is refused: it would excuse every difference.
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

from pydantic import ValidationError

from runners.exec.sandbox import FIXED_BINARY, Run, Sandbox
from runners.schema.report import ARMS, Arm, ExceptionOutcome, ExceptionRecord, RegressionRun
from runners.stages.revisions import RevisionError, revision_file

EXCEPTIONS_PATH = ".kv-parity/exceptions.toml"
TAIL_CHARS = 1500


class ExceptionFileError(ValueError):
    """An exceptions file that cannot be read; the message names the record and key."""


def load_records(repo: Path, sha: str) -> list[ExceptionRecord]:
    """The candidate's records at `sha`, from git objects (`repo`: the repository or any of its worktrees)."""
    try:
        raw_file = revision_file(repo, sha, EXCEPTIONS_PATH)
    except RevisionError as exc:
        raise ExceptionFileError(f"{EXCEPTIONS_PATH}: cannot be read at {sha[:12]}: {exc}") from exc
    if raw_file is None:
        return []
    try:
        data = tomllib.loads(raw_file.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ExceptionFileError(f"{EXCEPTIONS_PATH}: not UTF-8 (byte {exc.start})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ExceptionFileError(f"{EXCEPTIONS_PATH}: not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - {"exception"})
    if unknown:
        raise ExceptionFileError(f"{EXCEPTIONS_PATH}: unknown top-level keys {unknown}; use [[exception]] tables")
    records = []
    for index, raw in enumerate(data.get("exception", [])):
        try:
            records.append(ExceptionRecord.model_validate(raw))
        except ValidationError as exc:
            where = ", ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ExceptionFileError(f"{EXCEPTIONS_PATH}: exception #{index + 1}: {where}") from exc
    ids = [r.id for r in records]
    if len(ids) != len(set(ids)):
        raise ExceptionFileError(f"{EXCEPTIONS_PATH}: duplicate exception ids {ids}")
    for record in records:
        for pointer in record.pointers:
            if covers_everything(pointer):
                raise ExceptionFileError(
                    f"{EXCEPTIONS_PATH}: exception {record.id!r}: pointer {pointer!r} covers the whole report; "
                    "name the fields the exception excuses")
    return records


def covers_everything(pointer: str) -> bool:
    """`""`, `/`, or a wildcard as the first segment (`/*`, `/**`, `/**/x`): every top-level field matches."""
    segments = pointer.split("/")
    return pointer in ("", "/") or (len(segments) > 1 and segments[1] in ("", "*", "**"))


def verify_records(
    records: list[ExceptionRecord], candidate_tree: Path, binaries: dict[Arm, Path], trace: Path,
    timeout_s: float = 900, sandbox: Sandbox | None = None,
) -> list[ExceptionOutcome]:
    """Run each record's regression test against both binaries; verified = fails on baseline, passes on candidate.

    Each run is a fresh sandbox: the candidate checkout, the binary and the trace read-only, only a private /tmp
    writable, no network; the binary is checked first when pinned (Sandbox.verify_pins).
    """
    sandbox = sandbox or Sandbox.default()
    outcomes = []
    for record in records:
        runs = [_run(record, arm, candidate_tree, binaries[arm], trace, timeout_s, sandbox) for arm in ARMS]
        base, cand = runs
        if base.exit_code == 0:
            verified, reason = False, "regression test also passes on the baseline: it does not pin the old behaviour"
        elif cand.exit_code != 0:
            verified, reason = False, f"regression test fails on the candidate (exit {cand.exit_code})"
        else:
            verified, reason = True, f"fails on baseline (exit {base.exit_code}), passes on candidate"
        outcomes.append(ExceptionOutcome(record=record, runs=runs, verified=verified, reason=reason))
    return outcomes


def _run(record: ExceptionRecord, arm: Arm, tree: Path, binary: Path, trace: Path, timeout_s: float,
         sandbox: Sandbox) -> RegressionRun:
    seen_as = binary if sandbox.kind == "none" else FIXED_BINARY
    argv = [word.replace("{binary}", str(seen_as)).replace("{trace}", str(trace)) for word in record.regression_test]
    run = Run(argv=argv, cwd=tree, read_only=(tree, trace), mounts=((binary, FIXED_BINARY),), proc=True)
    try:
        completed = sandbox.run(run, timeout=timeout_s)
    except FileNotFoundError as exc:
        return RegressionRun(arm=arm, argv=argv, exit_code=None, stdout_tail="", stderr_tail=str(exc))
    except subprocess.TimeoutExpired:
        return RegressionRun(arm=arm, argv=argv, exit_code=None, stdout_tail="",
                             stderr_tail=f"timed out after {timeout_s:.0f} s")
    return RegressionRun(arm=arm, argv=argv, exit_code=completed.returncode,
                         stdout_tail=completed.stdout[-TAIL_CHARS:], stderr_tail=completed.stderr[-TAIL_CHARS:])
