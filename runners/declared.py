"""Harness-declared exclusions are evidence, not a verdict (Stage 2's closed list).

The campaign drops exactly the protocol's three pointers and compares everything else, whatever a harness
writes in `metadata.result_exclusions`. A declaration is still worth reading: it is the harness saying what it
may have withheld. So every declared pointer is resolved in both arms' canonical lines (present and compared,
absent because its parent is null, or absent), and a row stops for review only where withholding is
demonstrated: the pointer is declared, missing from the canonical line, and the same invocation's full
`--report-json` has a value there. That needs one extra invocation per such arm writing both outputs; its
canonical line must match the compared one, or the evidence describes some other run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from runners.exec import untrusted
from runners.exec.harness import run_pinned
from runners.exec.sandbox import Sandbox
from runners.progress import ProgressSink, emit
from runners.schema.report import ARMS, Arm, DeclaredExclusions, DeclaredPointer, ProcessRecord
from runners.stages.canonical import Canonical, CanonicalError, canonicalize, resolve, single_line


def _pointers(canonical: Mapping[Arm, Canonical], campaign: Sequence[str]) -> list[DeclaredPointer]:
    """The campaign's list first, then every pointer either harness declared, in declaration order."""
    declared = [pointer for arm in ARMS if arm in canonical for pointer in canonical[arm].harness_exclusions]
    ordered = dict.fromkeys([*campaign, *declared])
    return [
        DeclaredPointer(
            pointer=pointer,
            campaign_drops=pointer in campaign,
            declared_by=[arm for arm in ARMS if arm in canonical and pointer in canonical[arm].harness_exclusions],
            canonical={arm: canonical[arm].resolutions[pointer] for arm in ARMS if arm in canonical},
        )
        for pointer in ordered
    ]


def _suspects(pointers: list[DeclaredPointer]) -> dict[Arm, list[str]]:
    """Declared pointers beyond the campaign's list that an arm's canonical line lacks outright."""
    found: dict[Arm, list[str]] = {}
    for item in pointers:
        if item.campaign_drops:
            continue
        for arm in item.declared_by:
            if item.canonical.get(arm) == "absent":
                found.setdefault(arm, []).append(item.pointer)
    return found


def _full_report(
    arm: Arm,
    binary: Path,
    harness_args: list[str],
    compared: Canonical,
    exclusions: Sequence[str],
    cpu_set: list[int],
    workdir: Path,
    sandbox: Sandbox | None,
) -> tuple[ProcessRecord, dict[str, object] | None, str | None]:
    """One invocation writing the canonical line and `--report-json`; the report, or why it is unusable."""
    own = workdir / arm
    own.mkdir(parents=True)
    canonical_out = own / "evidence.canonical.jsonl"
    report_out = own / "evidence.report.json"
    args = [*harness_args, "--iterations", "1", "--canonical-reports-jsonl", str(canonical_out),
            "--report-json", str(report_out)]
    record, _ = run_pinned(binary, args, cpu_set, arm=arm, purpose="declared-exclusion evidence", sandbox=sandbox)
    where = f"{arm} declared-exclusion evidence invocation"
    if record.error is not None or record.exit_code != 0:
        failure = record.error or f"exited {record.exit_code}"
        return record, None, f"{where} {failure}; stderr tail:\n{record.stderr_tail}"
    try:
        written = {path: untrusted.read_bytes(path, root=workdir) for path in (canonical_out, report_out)}
    except FileNotFoundError:
        return record, None, f"{where} exited 0 but did not write both --canonical-reports-jsonl and --report-json"
    except untrusted.UntrustedFileError as exc:
        return record, None, f"{where} wrote unusable output: {exc}"
    try:
        line, count = single_line(written[canonical_out])
        if line is None:
            return record, None, f"{where} wrote {count} canonical lines for --iterations 1"
        canonical = canonicalize(line, exclusions)
        report = json.loads(written[report_out])
    except (CanonicalError, ValueError) as exc:
        return record, None, f"{where} wrote malformed output: {exc}"
    record.canonical_digest = canonical.digest
    if canonical.digest != compared.digest:
        return record, None, (
            f"{where}: canonical digest {canonical.digest[:12]} differs from the compared line's "
            f"{compared.digest[:12]}; its --report-json does not describe the compared run"
        )
    if not isinstance(report, dict):
        return record, None, f"{where}: --report-json holds a JSON {type(report).__name__}, not an object"
    return record, report, None


def check_declared_exclusions(
    *,
    row_id: str,
    binaries: Mapping[Arm, Path],
    harness_args: list[str],
    canonical: Mapping[Arm, Canonical],
    exclusions: Sequence[str],
    cpu_set: list[int],
    workdir: Path,
    progress: ProgressSink | None = None,
    sandbox: Sandbox | None = None,
) -> DeclaredExclusions:
    """Resolve every declared pointer in both arms; run the evidence invocation only for an arm that needs it,
    in the campaign's sandbox with its own output directory like every other harness process."""
    pointers = _pointers(canonical, exclusions)
    result = DeclaredExclusions(
        campaign=list(exclusions),
        declared={arm: list(canonical[arm].harness_exclusions) for arm in ARMS if arm in canonical},
        pointers=pointers,
    )
    suspects = _suspects(pointers)
    if not suspects:
        return result
    workdir.mkdir(parents=True, exist_ok=True)
    by_pointer = {item.pointer: item for item in pointers}
    for arm, missing in suspects.items():
        emit(progress, "exclusions", f"{arm}: declared {missing} absent from the canonical line; "
             "reading the same invocation's --report-json", row=row_id)
        record, report, problem = _full_report(
            arm, binaries[arm], harness_args, canonical[arm], exclusions, cpu_set, workdir, sandbox
        )
        result.evidence_runs.append(record)
        if problem is not None:
            result.problems.append(problem)
            continue
        for pointer in missing:
            found, value = resolve(report, pointer)
            # A null there is the harness saying it had nothing: nothing was withheld.
            by_pointer[pointer].full_report[arm] = "absent" if found == "present" and value is None else found
    return result
