"""The fixture's knob overrides (variant.rs `OVERRIDES`, tests/conftest.py `with_knob_overrides`).

Most harness variants the tests need differ only in knobs the harness reads at run time, so HarnessBuilder
writes them into a copy of one release build instead of compiling a tree per variant. A variant that silently
ran as the default would prove nothing, so every override the harness cannot apply must stop it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import HarnessBuilder, with_knob_overrides


def _run(binary: Path, args: list[str], timings: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), *args, "--iterations", "1", "--timings-jsonl", str(timings)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_an_override_changes_what_the_build_does(
    harness: HarnessBuilder, demo_row_args: list[str], tmp_path: Path
) -> None:
    default, slower = harness.binary(), harness.binary(WORK_SCALE=2.0, EMIT_TIMING_FIELD=False)
    built, patched = default.read_bytes(), slower.read_bytes()
    assert patched != built and len(patched) == len(built)
    records = {}
    for name, binary in (("default", default), ("slower", slower)):
        completed = _run(binary, demo_row_args, tmp_path / f"{name}.jsonl")
        assert completed.returncode == 0, completed.stderr
        records[name] = json.loads((tmp_path / f"{name}.jsonl").read_text(encoding="utf-8"))
    assert records["slower"]["busy_units"] == pytest.approx(2 * records["default"]["busy_units"], abs=1)
    assert "replay_execution_ms" in records["default"] and "replay_execution_ms" not in records["slower"]


@pytest.mark.parametrize(("knobs", "message"), [
    ({"WORK_SCAEL": 1.2}, "WORK_SCAEL is not a knob that can be overridden"),
    ({"TEXT_BLOAT": True}, "TEXT_BLOAT is not a knob that can be overridden"),
    ({"WORK_SCALE": "fast"}, "WORK_SCALE takes a f64"),
    ({"ENTROPY_LEAK": 1.0}, "ENTROPY_LEAK takes a bool"),
])
def test_an_override_the_harness_cannot_apply_stops_it(
    harness: HarnessBuilder, demo_row_args: list[str], tmp_path: Path, knobs: dict[str, object], message: str
) -> None:
    broken = tmp_path / "broken"
    with_knob_overrides(harness.binary(), knobs, broken)  # type: ignore[arg-type]
    completed = _run(broken, demo_row_args, tmp_path / "timings.jsonl")
    assert completed.returncode != 0
    assert message in completed.stderr
    assert not (tmp_path / "timings.jsonl").exists()


def test_a_patched_binary_or_an_oversized_override_is_refused_before_writing(
        harness: HarnessBuilder, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="already carries knob overrides"):
        with_knob_overrides(harness.binary(WORK_SCALE=1.2), {"WORK_SCALE": 1.5}, tmp_path / "twice")
    with pytest.raises(ValueError, match="do not fit"):
        with_knob_overrides(harness.binary(), {"DROP_FLAG": "x" * 1100}, tmp_path / "long")
    assert not (tmp_path / "twice").exists() and not (tmp_path / "long").exists()
