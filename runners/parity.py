"""Stage 4: byte parity of the canonical reports of one row.

Matching full reports are not kept (their digests are); a mismatch keeps both full canonical reports and a
focused diff of the first differing JSON pointers, so review starts from evidence, not from "digest differs".
"""

from __future__ import annotations

import json
from pathlib import Path

from runners.schema.report import ParityResult
from runners.stages.canonical import Canonical, diff

FOCUSED_DIFF_LIMIT = 20


def compare(row_id: str, baseline: Canonical, candidate: Canonical, keep_dir: Path) -> ParityResult:
    identical = baseline.digest == candidate.digest  # SHA-256 of the canonical bytes, both computed here
    result = ParityResult(
        baseline_digest=baseline.digest,
        candidate_digest=candidate.digest,
        section_digests={"baseline": dict(baseline.section_digests), "candidate": dict(candidate.section_digests)},
        identical=identical,
        differing_sections=[],
        differences=[],
        differences_total=0,
        differing_pointers=[],
        harness_exclusions={"baseline": baseline.harness_exclusions, "candidate": candidate.harness_exclusions},
    )
    if identical:
        return result
    found = diff(baseline, candidate, limit=FOCUSED_DIFF_LIMIT)
    keep_dir.mkdir(parents=True, exist_ok=True)
    kept = {}
    for arm, canon in (("baseline", baseline), ("candidate", candidate)):
        path = keep_dir / f"{row_id}-{arm}.canonical.json"
        path.write_bytes(canon.encoded + b"\n")
        kept[arm] = path.name
    focused = keep_dir / f"{row_id}-focused-diff.json"
    focused.write_text(json.dumps([d.model_dump() for d in found.differences], indent=2) + "\n", encoding="utf-8")
    return result.model_copy(update={
        "differing_sections": found.differing_sections,
        "differences": found.differences,
        "differences_total": found.total,
        "differing_pointers": found.pointers,
        "kept_reports": kept,
    })
