"""The suite and the demo run from the repository alone: a fresh clone (and CI) has no `../shared` beside it.

Every test reads only what the repository holds (tests/data, the fixture harness) or generates (the demo trace).
The one exception is `test_project_fixtures_agree_with_the_shared_reference`, which cross-checks the project's
own fixtures against the reference material when a checkout happens to have it, and skips saying so otherwise.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from runners.canonical import canonicalize
from runners.config import PROTOCOL_EXCLUSIONS, TraceConfig
from runners.coverage import count_evidence
from runners.trace import prepare_trace

REPO = Path(__file__).resolve().parents[1]
OUTSIDE = REPO.parent / "shared"
CANONICAL_FIXTURE = REPO / "tests" / "data" / "canonical_record.json"

_NAMES_OUTSIDE = re.compile(
    r"""\.\./shared\b|/work/shared\b|/\s*["']shared["']|["']shared["']\s*/|join\([^)]*["']shared["']"""
)
_SKIPPED_DIRS = {
    ".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "target",
    "kv-parity-out",
}
_EXEMPT = {
    Path("tests/test_self_contained.py"): "this file: the guard below and the one optional cross-check",
    Path(".ci/run"): "the CI entry point that builds the copy without ../shared and asserts it is absent",
}


def _repository_files() -> list[Path]:
    """What a clone holds: everything under the root except VCS, virtualenv, caches and build output."""
    found: list[Path] = []
    for directory, subdirs, files in os.walk(REPO):
        subdirs[:] = [d for d in subdirs if d not in _SKIPPED_DIRS and not d.endswith(".egg-info")]
        found.extend(Path(directory, name).relative_to(REPO) for name in files)
    return sorted(found)


def test_no_file_outside_the_guarded_test_names_the_shared_directory() -> None:
    offenders = []
    for relative in _repository_files():
        if relative in _EXEMPT:
            continue
        try:
            text = (REPO / relative).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if _NAMES_OUTSIDE.search(line):
                offenders.append(f"{relative}:{number}: {line.strip()}")

    assert offenders == [], "files that would break a fresh clone:\n" + "\n".join(offenders)


def test_the_guard_recognises_the_ways_a_path_is_spelled() -> None:
    spelled = [
        'EXAMPLE = Path(__file__).resolve().parents[2] / "shared" / "reference"',
        "trace = '../shared/data/mooncake_trace_1000.jsonl'",
        'os.path.join(root, "shared", "data")',
        "cat /work/shared/seeds/protocol.txt",
    ]
    innocent = ["a shared VM", 'shared_prefix = "shared"', "the shared/ directory of a crate"]

    assert [bool(_NAMES_OUTSIDE.search(line)) for line in spelled] == [True] * len(spelled)
    assert [bool(_NAMES_OUTSIDE.search(line)) for line in innocent] == [False] * len(innocent)


def _keys(value: Any, prefix: str = "") -> set[str]:
    """Every object key path of a document; the reference's `"..."` placeholders are not fields."""
    if not isinstance(value, dict):
        return set()
    paths = set()
    for key, child in value.items():
        if key == "...":
            continue
        paths.add(f"{prefix}/{key}")
        if key != "per_request":
            paths |= _keys(child, f"{prefix}/{key}")
    return paths


@pytest.mark.skipif(
    not OUTSIDE.is_dir(),
    reason="the reference material beside the repository (../shared) is absent, as in a fresh clone; "
    "the project's own fixtures are used everywhere else",
)
def test_project_fixtures_agree_with_the_shared_reference(tmp_path: Path) -> None:
    """The optional cross-check: our canonical fixture has every field the reference example names, both
    canonicalize (the abbreviated reference cannot be counted: it keeps one of its 1,000 requests), and the
    preflight trace passes the trace stage with its published checksum."""
    reference_path = OUTSIDE / "reference" / "examples" / "canonical_record.reconstructed.abbreviated.json"
    reference = json.loads(reference_path.read_text(encoding="utf-8"))
    ours = json.loads(CANONICAL_FIXTURE.read_text(encoding="utf-8"))

    assert _keys(reference) - _keys(ours) == set()
    assert ours["metadata"]["result_exclusions"] == reference["metadata"]["result_exclusions"]
    assert canonicalize(reference_path.read_bytes(), PROTOCOL_EXCLUSIONS).replay_bench is True
    assert count_evidence(canonicalize(CANONICAL_FIXTURE.read_bytes(), PROTOCOL_EXCLUSIONS).data).requests == 1

    trace = OUTSIDE / "data" / "mooncake_trace_1000.jsonl"
    published = "e2bec9bccd21978f69a2ace7886ee2e5192a64839f7aa2c4dd5d8766fd392510"
    evidence = prepare_trace(
        trace, TraceConfig(path=str(trace), sha256=published, offset=0, count=1000), tmp_path / "w.jsonl"
    )
    assert (evidence.rows_total, trace.stat().st_size) == (1000, 187_043)
