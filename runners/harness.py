"""How to drive the replay harness: argv for a row, `--help` flag preflight, one pinned process.

Exit status alone proves nothing (the real harness exits 0 with a skip message when given no trace), so
callers always check that the expected output exists and parses.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from runners.exec.sandbox import Sandbox
from runners.schema.config import CampaignConfig, RowConfig
from runners.schema.report import Arm, ProcessRecord

STDERR_TAIL_CHARS = 2000


class PreflightError(RuntimeError):
    """A configured flag one of the binaries does not accept: the protocol or config needs updating."""


def row_args(config: CampaignConfig, row: RowConfig, trace: Path) -> list[str]:
    """The argv after the binary for a row, identical for both arms and every stage."""
    return [str(trace), *config.harness.common_args, *row.args]


def help_text(binary: Path, sandbox: Sandbox) -> str:
    completed = sandbox.run(sandbox.harness_run([str(binary), "--help"]), timeout=60)
    if completed.returncode != 0:
        raise PreflightError(f"{binary.name} --help exited {completed.returncode}: {completed.stderr.strip()[-500:]}")
    return completed.stdout + completed.stderr


def missing_flags(help_output: str, flags: list[str]) -> list[str]:
    """Flags that do not appear as whole words in a binary's help."""
    return [flag for flag in flags if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_output)]


def preflight_flags(
    binaries: dict[Arm, Path], shas: dict[Arm, str], flags: list[str], sandbox: Sandbox
) -> dict[Arm, str]:
    """Every flag a row uses must be accepted by both revisions before anything runs; returns each binary's help
    so later stages (Stage 6 fixtures) check their own flags without starting the binaries again."""
    problems = []
    texts = {arm: help_text(binary, sandbox) for arm, binary in binaries.items()}
    for arm, text in texts.items():
        for flag in missing_flags(text, flags):
            problems.append(f"flag {flag} is not accepted by the {arm} revision {shas[arm][:12]}")
    if problems:
        raise PreflightError(
            "; ".join(problems) + ". Stop: the protocol or campaign config needs updating for this revision."
        )
    return texts


def run_pinned(
    binary: Path, args: list[str], cpu_set: list[int], *, arm: Arm, purpose: str, timeout_s: float = 3600,
    sandbox: Sandbox | None = None,
) -> tuple[ProcessRecord, subprocess.CompletedProcess[str]]:
    """One fresh sandboxed harness process pinned to `cpu_set` and contained there (everything it forks stays
    on those CPUs, runners/exec/containment.py); returns the record and the raw result.

    Sandbox rules (Sandbox.harness_run): existing absolute paths in `args` are read-only, the directory of an
    output path that does not exist yet is writable, so give every process its own output directory.
    A pinned binary is checked first (Sandbox.verify_pins; BinaryMismatch propagates: the row stops).
    """
    sandbox = sandbox or Sandbox.default()
    argv = [str(binary), *args]
    started = time.monotonic()
    try:
        completed = sandbox.run(sandbox.harness_run(argv, cpu_set=cpu_set), timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        record = ProcessRecord(
            arm=arm, purpose=purpose, argv=argv, cpu_set=cpu_set, exit_code=None,
            seconds=round(time.monotonic() - started, 3),
            stderr_tail=_tail(exc.stderr), error=f"timed out after {timeout_s:.0f} s",
        )
        return record, subprocess.CompletedProcess(argv, -1, "", _tail(exc.stderr))
    record = ProcessRecord(
        arm=arm, purpose=purpose, argv=argv, cpu_set=cpu_set, exit_code=completed.returncode,
        seconds=round(time.monotonic() - started, 3), stderr_tail=_tail(completed.stderr),
    )
    return record, completed


def _tail(text: str | bytes | None) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text[-STDERR_TAIL_CHARS:]
