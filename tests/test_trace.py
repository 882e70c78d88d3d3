"""Trace checksum, contiguous window and Mooncake row validation, on small files and the generated demo trace."""

from __future__ import annotations

import hashlib
import json
import tracemalloc
from pathlib import Path

import pytest
from runners.schema.config import CampaignConfig, TraceConfig
from runners.stages.trace import TraceError, prepare_trace, sha256_file


def _row(index: int) -> str:
    return json.dumps({"timestamp": index * 10, "input_length": 512, "output_length": 8, "hash_ids": [index]})


def _write(path: Path, lines: list[str], trailing_newline: bool = True) -> str:
    data = "\n".join(lines) + ("\n" if trailing_newline else "")
    path.write_text(data, encoding="utf-8")
    return hashlib.sha256(data.encode()).hexdigest()


def _config(sha: str, offset: int, count: int, slice_sha: str | None = None) -> TraceConfig:
    return TraceConfig(path="trace.jsonl", sha256=sha, offset=offset, count=count, slice_sha256=slice_sha)


def test_window_is_the_exact_contiguous_rows(tmp_path: Path) -> None:
    lines = [_row(i) for i in range(8)]
    sha = _write(tmp_path / "trace.jsonl", lines)
    expected_slice = "".join(f"{line}\n" for line in lines[2:5]).encode()

    evidence = prepare_trace(tmp_path / "trace.jsonl", _config(sha, 2, 3), tmp_path / "out" / "window.jsonl")

    assert (tmp_path / "out" / "window.jsonl").read_bytes() == expected_slice
    assert evidence.sha256 == sha
    assert evidence.rows_total == 8
    assert (evidence.offset, evidence.count) == (2, 3)
    assert evidence.slice_sha256 == hashlib.sha256(expected_slice).hexdigest()


def test_last_row_without_newline_is_newline_terminated(tmp_path: Path) -> None:
    lines = [_row(i) for i in range(3)]
    sha = _write(tmp_path / "trace.jsonl", lines, trailing_newline=False)

    prepare_trace(tmp_path / "trace.jsonl", _config(sha, 1, 2), tmp_path / "window.jsonl")

    assert (tmp_path / "window.jsonl").read_text() == f"{lines[1]}\n{lines[2]}\n"


def test_slice_checksum_is_enforced_when_configured(tmp_path: Path) -> None:
    sha = _write(tmp_path / "trace.jsonl", [_row(i) for i in range(4)])
    good = prepare_trace(tmp_path / "trace.jsonl", _config(sha, 0, 2), tmp_path / "w.jsonl").slice_sha256
    prepare_trace(tmp_path / "trace.jsonl", _config(sha, 0, 2, good), tmp_path / "w.jsonl")

    with pytest.raises(TraceError) as caught:
        prepare_trace(tmp_path / "trace.jsonl", _config(sha, 1, 2, good), tmp_path / "w2.jsonl")

    assert good in str(caught.value) and "window [1, 3)" in str(caught.value)
    assert not (tmp_path / "w2.jsonl").exists()


def test_wrong_checksum_names_path_and_both_digests(tmp_path: Path) -> None:
    actual = _write(tmp_path / "trace.jsonl", [_row(i) for i in range(3)])
    wrong = "0" * 64

    with pytest.raises(TraceError) as caught:
        prepare_trace(tmp_path / "trace.jsonl", _config(wrong, 0, 2), tmp_path / "window.jsonl")

    message = str(caught.value)
    assert str(tmp_path / "trace.jsonl") in message and wrong in message and actual in message
    assert not (tmp_path / "window.jsonl").exists()


def test_wrong_checksum_is_reported_before_a_bad_row(tmp_path: Path) -> None:
    _write(tmp_path / "trace.jsonl", [_row(0), "not json"])

    with pytest.raises(TraceError, match="SHA-256 mismatch"):
        prepare_trace(tmp_path / "trace.jsonl", _config("0" * 64, 0, 2), tmp_path / "window.jsonl")


def test_short_trace_is_never_padded(tmp_path: Path) -> None:
    sha = _write(tmp_path / "trace.jsonl", [_row(i) for i in range(5)])

    with pytest.raises(TraceError) as caught:
        prepare_trace(tmp_path / "trace.jsonl", _config(sha, 3, 4), tmp_path / "window.jsonl")

    assert "trace has 5 rows; window [3, 7) needs 7 rows; a short trace is never padded or duplicated" in str(
        caught.value
    )
    assert not (tmp_path / "window.jsonl").exists()


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (json.dumps({"timestamp": 1, "hash_ids": [1]}), "missing output_length"),
        (json.dumps({"output_length": 3}), "missing hash_ids"),
        (json.dumps({"output_length": 3, "hash_ids": [1, "2"]}), "hash_ids must be a list"),
        (json.dumps({"output_length": True, "hash_ids": [1]}), "output_length must be a non-negative"),
        (json.dumps({"output_length": 3, "hash_ids": [1], "timestamp": "soon"}), "timestamp must be a"),
        ("[1, 2]", "not a JSON object"),
        ("{not json", "not JSON"),
        ("", "blank line"),
        ("   ", "blank line"),
    ],
)
def test_malformed_row_names_its_line(tmp_path: Path, bad: str, problem: str) -> None:
    lines = [_row(0), _row(1), bad, _row(3)]
    sha = _write(tmp_path / "trace.jsonl", lines)

    with pytest.raises(TraceError) as caught:
        prepare_trace(tmp_path / "trace.jsonl", _config(sha, 1, 3), tmp_path / "window.jsonl")

    assert f"trace.jsonl:3: {problem}" in str(caught.value)


def test_optional_fields_may_be_null_or_absent(tmp_path: Path) -> None:
    lines = [
        json.dumps({"output_length": 1, "hash_ids": []}),
        json.dumps({"output_length": 1, "hash_ids": [7], "timestamp": None, "input_length": 12.5}),
    ]
    sha = _write(tmp_path / "trace.jsonl", lines)

    assert prepare_trace(tmp_path / "trace.jsonl", _config(sha, 0, 2), tmp_path / "w.jsonl").count == 2


def test_blank_line_before_the_window_is_an_error(tmp_path: Path) -> None:
    sha = _write(tmp_path / "trace.jsonl", [_row(0), "", _row(2), _row(3)])

    with pytest.raises(TraceError, match=r"trace.jsonl:2: blank line before the window \[2, 4\)"):
        prepare_trace(tmp_path / "trace.jsonl", _config(sha, 2, 2), tmp_path / "window.jsonl")


def test_rows_after_the_window_are_counted_not_validated(tmp_path: Path) -> None:
    sha = _write(tmp_path / "trace.jsonl", [_row(0), _row(1), "garbage"])

    evidence = prepare_trace(tmp_path / "trace.jsonl", _config(sha, 0, 2), tmp_path / "window.jsonl")

    assert evidence.rows_total == 3


def test_missing_trace_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read trace"):
        prepare_trace(tmp_path / "absent.jsonl", _config("0" * 64, 0, 1), tmp_path / "window.jsonl")


def test_demo_trace_window_of_five_at_offset_ten(demo_trace: Path, campaign_config: CampaignConfig,
                                                 tmp_path: Path) -> None:
    sha = campaign_config.trace.sha256
    raw_lines = demo_trace.read_bytes().splitlines(keepends=True)
    expected_slice = b"".join(raw_lines[10:15])

    evidence = prepare_trace(demo_trace, _config(sha, 10, 5), tmp_path / "window.jsonl")

    assert evidence.sha256 == sha == sha256_file(demo_trace)
    assert evidence.rows_total == 1000
    assert evidence.source_path == str(demo_trace)
    assert (tmp_path / "window.jsonl").read_bytes() == expected_slice
    assert evidence.slice_sha256 == hashlib.sha256(expected_slice).hexdigest()


def test_demo_trace_cannot_serve_a_window_past_its_end(demo_trace: Path, campaign_config: CampaignConfig,
                                                      tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="trace has 1000 rows; window \\[0, 5000\\) needs 5000 rows"):
        prepare_trace(demo_trace, _config(campaign_config.trace.sha256, 0, 5000), tmp_path / "window.jsonl")


def test_sha256_file_matches_hashlib(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 9000
    (tmp_path / "blob").write_bytes(payload)

    assert sha256_file(tmp_path / "blob") == hashlib.sha256(payload).hexdigest()


def test_full_size_trace_is_streamed_not_loaded(tmp_path: Path) -> None:
    """A 23,608-row trace (the public trace's size) is cut without holding the file in memory."""
    rows = [
        json.dumps(
            {"timestamp": i, "input_length": 8000, "output_length": 300, "hash_ids": list(range(i, i + 16))}
        )
        for i in range(23_608)
    ]
    sha = _write(tmp_path / "trace.jsonl", rows)
    size = (tmp_path / "trace.jsonl").stat().st_size

    tracemalloc.start()
    try:
        evidence = prepare_trace(
            tmp_path / "trace.jsonl", _config(sha, 18_608, 5000), tmp_path / "window.jsonl"
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert evidence.rows_total == 23_608
    assert (tmp_path / "window.jsonl").read_text().splitlines() == rows[18_608:]
    assert peak < size / 10
