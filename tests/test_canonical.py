"""Canonical encoding, the closed exclusions, the replay-bench contract and pointer-level diffs.

Reports are built from tests/data/canonical_record.json (the harness's documented canonical shape), so the
tests exercise the fields the harness writes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from runners.schema.config import PROTOCOL_EXCLUSIONS
from runners.stages.canonical import (
    SECTIONS,
    Canonical,
    CanonicalError,
    ReplayBenchNotActive,
    canonicalize,
    diff,
    parse_pointer,
    single_line,
)

EXAMPLE = Path(__file__).resolve().parent / "data" / "canonical_record.json"
EXCLUSIONS = list(PROTOCOL_EXCLUSIONS)


def _report(requests: int = 6) -> dict[str, Any]:
    """The canonical record fixture with `requests` distinct per-request records and the three excluded timings."""
    example: dict[str, Any] = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    template = example["per_request"][0]
    records = []
    for index in range(requests):
        record = copy.deepcopy(template)
        record["uuid"] = f"00000000-0000-0000-0000-{index:012x}"
        record["arrival_time_ms"] = float(index * 25)
        record["decode_admit_ms"] = 612.4 + index
        records.append(record)
    example["per_request"] = records
    example["summary"].update(
        {"wall_time_ms": 1234.5, "processed_tokens_per_s": 99.5, "processed_output_tokens_per_s": 7.25}
    )
    return example


def _line(report: dict[str, Any]) -> bytes:
    return json.dumps(report, separators=(",", ":")).encode()


def _reverse_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _reverse_keys(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reverse_keys(item) for item in value]
    return value


def test_key_order_and_whitespace_do_not_change_the_digest() -> None:
    report = _report()
    pretty = json.dumps(_reverse_keys(report), indent=3).encode()

    assert canonicalize(pretty, EXCLUSIONS).digest == canonicalize(_line(report), EXCLUSIONS).digest


def test_encoding_is_compact_and_recursively_key_sorted() -> None:
    canon = canonicalize(_line(_reverse_keys(_report())), EXCLUSIONS)

    assert canon.encoded == orjson.dumps(canon.data, option=orjson.OPT_SORT_KEYS)
    assert canon.encoded == json.dumps(canon.data, sort_keys=True, separators=(",", ":")).encode()
    assert sorted(canon.section_digests) == sorted(SECTIONS)


@pytest.mark.parametrize("requests", [0, 1, 6])
def test_section_digests_are_digests_of_each_sections_encoding(requests: int) -> None:
    report = _report(requests)
    report["extra_section"] = {"kept": [1, 2.5, "three"]}

    canon = canonicalize(_line(report), EXCLUSIONS)

    assert canon.section_digests == {
        key: hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()
        for key, value in canon.data.items()
    }
    assert canon.digest == hashlib.sha256(canon.encoded).hexdigest()


def test_per_request_order_does_not_change_the_digest() -> None:
    report = _report()
    shuffled = copy.deepcopy(report)
    random.Random(7).shuffle(shuffled["per_request"])

    canon = canonicalize(_line(shuffled), EXCLUSIONS)

    assert canon.digest == canonicalize(_line(report), EXCLUSIONS).digest
    assert [r["uuid"] for r in canon.data["per_request"]] == sorted(r["uuid"] for r in report["per_request"])


def test_event_arrays_keep_their_order() -> None:
    report = _report()
    swapped = copy.deepcopy(report)
    history = swapped["per_request"][2]["routing_history"]
    history[0], history[1] = history[1], history[0]

    base, moved = canonicalize(_line(report), EXCLUSIONS), canonicalize(_line(swapped), EXCLUSIONS)

    assert base.digest != moved.digest
    changed = [s for s in SECTIONS if base.section_digests[s] != moved.section_digests[s]]
    assert changed == ["per_request"]


def test_exactly_the_three_exclusions_are_removed() -> None:
    report = _report()
    canon = canonicalize(_line(report), EXCLUSIONS)

    expected = copy.deepcopy(report)
    for key in ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"):
        del expected["summary"][key]
    assert canon.data == expected


def test_excluded_timing_does_not_change_the_digest_but_a_kept_metric_does() -> None:
    report = _report()
    slower, later = copy.deepcopy(report), copy.deepcopy(report)
    slower["summary"]["wall_time_ms"] = 99999.0
    slower["summary"]["processed_tokens_per_s"] = 1.0
    later["summary"]["mean_ttft_ms"] = 1733.3
    digest = canonicalize(_line(report), EXCLUSIONS).digest

    assert canonicalize(_line(slower), EXCLUSIONS).digest == digest
    assert canonicalize(_line(later), EXCLUSIONS).digest != digest


def test_absent_exclusion_pointer_is_fine() -> None:
    report = _report()
    del report["summary"]["wall_time_ms"]

    assert canonicalize(_line(report), EXCLUSIONS).digest == canonicalize(_line(_report()), EXCLUSIONS).digest


def test_pointer_escapes_and_array_elements() -> None:
    report = _report()
    report["summary"]["a/b"] = 1
    report["summary"]["m~n"] = 2
    report["summary"]["m/n"] = 3

    pointers = ["/summary/a~1b", "/summary/m~0n", "/per_request/0/routing_history/1"]
    canon = canonicalize(_line(report), pointers)

    assert "a/b" not in canon.data["summary"] and "m~n" not in canon.data["summary"]
    assert canon.data["summary"]["m/n"] == 3
    assert len(canon.data["per_request"][0]["routing_history"]) == 1
    assert parse_pointer("/x~01/y~10") == ["x~1", "y/0"]


@pytest.mark.parametrize("pointer", ["summary/wall_time_ms", "", "/summary/bad~2escape"])
def test_malformed_exclusion_pointer_is_rejected(pointer: str) -> None:
    with pytest.raises(CanonicalError, match="exclusion"):
        canonicalize(_line(_report()), [pointer])


@pytest.mark.parametrize("value", [False, None, "true", 1])
def test_replay_bench_not_true_means_seeded_routing_was_not_active(value: Any) -> None:
    report = _report()
    report["metadata"]["replay_bench"] = value

    with pytest.raises(ReplayBenchNotActive, match="the seeded routing contract was not active"):
        canonicalize(_line(report), EXCLUSIONS)


def test_missing_replay_bench_is_not_active() -> None:
    report = _report()
    del report["metadata"]["replay_bench"]

    with pytest.raises(ReplayBenchNotActive, match="replay_bench is missing"):
        canonicalize(_line(report), EXCLUSIONS)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "a JSON list, not an object"),
        (b'{"summary": {"x": NaN}}', "not JSON"),
        (b'{"summary": {"x": 1e999}}', "not JSON"),
    ],
)
def test_unusable_lines_are_canonical_errors(line: bytes, message: str) -> None:
    with pytest.raises(CanonicalError, match=message):
        canonicalize(line, EXCLUSIONS)


def test_missing_top_level_key_is_named() -> None:
    report = _report()
    del report["planner"]

    with pytest.raises(CanonicalError, match=r"lacks top-level keys \['planner'\]"):
        canonicalize(_line(report), EXCLUSIONS)


def test_integers_beyond_64_bits_are_rejected_not_rounded() -> None:
    report = _report()
    report["summary"]["processed_tokens"] = 18446744073709551615
    canonicalize(_line(report), EXCLUSIONS)

    for too_big in (18446744073709551616, -9223372036854775809):
        report["summary"]["processed_tokens"] = too_big
        with pytest.raises(CanonicalError, match=f"integer {too_big} is outside the 64-bit range"):
            canonicalize(_line(report), EXCLUSIONS)


def test_huge_floats_and_exponent_text_are_not_mistaken_for_rounded_integers() -> None:
    report = _report()
    report["metadata"]["workload"]["digest"] = "1" * 30 + "e+5"
    report["summary"]["gpu_hours"] = 1.5e20

    canon = canonicalize(_line(report), EXCLUSIONS)

    assert canon.data["summary"]["gpu_hours"] == 1.5e20
    assert b'"gpu_hours":1.5e+20' in canon.encoded


@pytest.mark.parametrize("problem", ["duplicate", "missing"])
def test_per_request_needs_unique_string_uuids(problem: str) -> None:
    report = _report()
    if problem == "duplicate":
        report["per_request"][4]["uuid"] = report["per_request"][1]["uuid"]
    else:
        del report["per_request"][4]["uuid"]

    message = "duplicate uuid" if problem == "duplicate" else "no string uuid"
    with pytest.raises(CanonicalError, match=message):
        canonicalize(_line(report), EXCLUSIONS)


def test_harness_exclusions_are_recorded_as_declared_and_never_drop_anything() -> None:
    canon = canonicalize(EXAMPLE.read_bytes(), EXCLUSIONS)

    assert canon.replay_bench is True
    assert canon.harness_exclusions == [*PROTOCOL_EXCLUSIONS, "/planner/html_report_path"]
    assert canon.data["planner"] is None
    assert canonicalize(EXAMPLE.read_bytes(), []).data["summary"]["wall_time_ms"] == 1843.271


def test_harness_exclusions_must_be_pointer_strings() -> None:
    report = _report()
    report["metadata"]["result_exclusions"] = "/summary/wall_time_ms"

    with pytest.raises(CanonicalError, match="result_exclusions"):
        canonicalize(_line(report), EXCLUSIONS)


def test_identical_reports_have_no_differences() -> None:
    canon = canonicalize(_line(_report()), EXCLUSIONS)

    result = diff(canon, canon)

    assert (result.differing_sections, result.differences, result.total, result.pointers) == ([], [], 0, [])


def test_diff_lists_exact_pointers_with_both_values() -> None:
    report = _report()
    candidate = copy.deepcopy(report)
    candidate["per_request"][3]["decode_admit_ms"] = 700.25
    candidate["per_request"][1]["routing_history"].append({"outcome": "queued", "pool": "decode"})
    candidate["planner"] = {"html_report_path": "/tmp/x.html"}
    candidate["summary"]["mean_ttft_ms"] = 1733
    candidate["summary"]["wall_time_ms"] = 1.0

    result = diff(canonicalize(_line(report), EXCLUSIONS), canonicalize(_line(candidate), EXCLUSIONS))

    assert result.differing_sections == ["per_request", "planner", "summary"]
    assert result.pointers == [
        "/per_request/1/routing_history/2",
        "/per_request/3/decode_admit_ms",
        "/planner",
        "/summary/mean_ttft_ms",
    ]
    assert result.total == 4
    values = {d.pointer: (d.baseline, d.candidate) for d in result.differences}
    assert values == {
        "/per_request/1/routing_history/2": ("(absent)", '{"outcome":"queued","pool":"decode"}'),
        "/per_request/3/decode_admit_ms": ("615.4", "700.25"),
        "/planner": ("null", '{"html_report_path":"/tmp/x.html"}'),
        "/summary/mean_ttft_ms": ("1733.2", "1733"),
    }


def test_diff_reports_shorter_arrays_and_removed_keys() -> None:
    report = _report(requests=5)
    candidate = copy.deepcopy(report)
    candidate["per_request"].pop()
    del candidate["coverage"]["kv_ingest"]["tier_counts"]

    result = diff(canonicalize(_line(report), EXCLUSIONS), canonicalize(_line(candidate), EXCLUSIONS))

    assert result.pointers == ["/coverage/kv_ingest/tier_counts", "/per_request/4"]
    assert result.differences[0].candidate == "(absent)"
    assert result.differences[1].baseline.startswith('{"admission_count":2,')
    assert result.differences[1].baseline.endswith("chars)")
    assert len(result.differences[1].baseline) < 240


def test_diff_distinguishes_number_types_and_signed_zero() -> None:
    report = _report()
    report["summary"]["zero"] = 0.0
    candidate = copy.deepcopy(report)
    candidate["summary"]["completed_requests"] = 1000.0
    candidate["summary"]["zero"] = -0.0
    candidate["summary"]["decode_gpus_per_worker"] = True

    result = diff(canonicalize(_line(report), EXCLUSIONS), canonicalize(_line(candidate), EXCLUSIONS))

    assert result.pointers == [
        "/summary/completed_requests",
        "/summary/decode_gpus_per_worker",
        "/summary/zero",
    ]


def test_diff_limit_bounds_differences_but_not_pointers() -> None:
    report = _report(requests=30)
    candidate = copy.deepcopy(report)
    for record in candidate["per_request"]:
        record["ttft_ms"] += 1.0

    baseline, changed = canonicalize(_line(report), EXCLUSIONS), canonicalize(_line(candidate), EXCLUSIONS)
    result = diff(baseline, changed, limit=5)

    assert result.total == 30 and len(result.pointers) == 30
    assert [d.pointer for d in result.differences] == [f"/per_request/{i}/ttft_ms" for i in range(5)]


def test_the_one_line_of_an_output_is_used_without_copying_it_and_other_counts_are_reported() -> None:
    output = b"\n  \n" + b'{"a":1}' + b"\n\n"
    line, count = single_line(output)
    assert count == 1 and line is output, "the newlines around the one line are JSON whitespace"
    assert orjson.loads(line) == {"a": 1}
    assert single_line(b'{"a":1}\n{"a":1}\n') == (None, 2)
    assert single_line(b" \n\t\n") == (None, 0)


def test_a_canonical_report_holds_its_bytes_and_parses_them_afresh_for_each_reader() -> None:
    """A parsed 5,000-request report is several times its line: only the bytes are kept between stages."""
    canon = canonicalize(_line(_report()), EXCLUSIONS)
    first = canon.data
    first["summary"]["tampered"] = True

    assert "tampered" not in canon.data["summary"]
    assert orjson.dumps(canon.data, option=orjson.OPT_SORT_KEYS) == canon.encoded
    assert {name: canon.section(name) for name in SECTIONS} == canon.data


def test_the_aic_to_ais_rename_differs_in_bytes_and_is_shown_by_section_and_pointer() -> None:
    """In-tree revisions write `aic_*` metadata keys, the bench `ais_*`: a pair straddling the rename differs in
    bytes by design, so the mismatch names the metadata section and every renamed pointer, nothing else."""
    older = _report()
    newer = copy.deepcopy(older)
    execution = newer["metadata"]["execution"]
    for key in [k for k in execution if k.startswith("aic_")]:
        execution["ais_" + key[4:]] = execution.pop(key)
    features = newer["metadata"]["semantic_features"]
    features["ais_forward_pass"] = features.pop("aic_forward_pass")

    a, b = canonicalize(_line(older), EXCLUSIONS), canonicalize(_line(newer), EXCLUSIONS)
    result = diff(a, b)

    assert a.digest != b.digest
    assert result.differing_sections == ["metadata"]
    assert [s for s in SECTIONS if a.section_digests[s] != b.section_digests[s]] == ["metadata"]
    assert result.pointers == [
        "/metadata/execution/aic_performance_model_implementation",
        "/metadata/execution/aic_prefill_load_estimator",
        "/metadata/execution/aic_prefill_load_estimator_implementation",
        "/metadata/execution/ais_performance_model_implementation",
        "/metadata/execution/ais_prefill_load_estimator",
        "/metadata/execution/ais_prefill_load_estimator_implementation",
        "/metadata/semantic_features/aic_forward_pass",
        "/metadata/semantic_features/ais_forward_pass",
    ]


def _both_ways(line: bytes) -> tuple[Canonical, Canonical]:
    return canonicalize(line, EXCLUSIONS), canonicalize(line, EXCLUSIONS, record_by_record=False)


def _same(streamed: Canonical, whole: Canonical) -> None:
    assert streamed.encoded == whole.encoded and streamed.digest == whole.digest
    assert streamed.section_digests == whole.section_digests and streamed.section_spans == whole.section_spans
    assert (streamed.resolutions, streamed.harness_exclusions) == (whole.resolutions, whole.harness_exclusions)
    view = streamed.streamed()
    assert {**view, "per_request": list(view["per_request"])} == whole.data == streamed.data


def _shuffled(report: dict[str, Any]) -> dict[str, Any]:
    shuffled = copy.deepcopy(report)
    random.Random(7).shuffle(shuffled["per_request"])
    return shuffled


@pytest.mark.parametrize("requests", [0, 1, 2, 40])
def test_records_parsed_one_at_a_time_give_the_bytes_of_the_whole_parse(requests: int) -> None:
    """A compact line is canonicalised record by record (the bot never holds the whole parsed report); the
    result is byte for byte the whole parse's, records out of order and keys unsorted included."""
    for report in (_report(requests), _reverse_keys(_shuffled(_report(requests)))):
        streamed, whole = _both_ways(_line(report))
        _same(streamed, whole)
        assert streamed.record_runs is not None and sum(count for *_, count in streamed.record_runs) == requests
        assert whole.record_runs is None
        records = streamed.streamed()["per_request"]
        assert [records[i]["uuid"] for i in range(len(records))] == sorted(r["uuid"] for r in report["per_request"])


def _with_string(report: dict[str, Any], where: str, text: str) -> dict[str, Any]:
    changed = copy.deepcopy(report)
    if where == "metadata":
        changed["metadata"]["note"] = text
    else:
        changed["per_request"][1]["session_id"] = text
    return changed


@pytest.mark.parametrize(
    ("where", "text"),
    [
        ("metadata", '"per_request":[{"admission_count":1}]'),
        ("record", '},{"admission_count":'),
        ("record", '}]'),
        ("record", '},{"admission_count":2,"uuid":"x"},{"admission_count":'),
    ],
    ids=["records-key-in-a-string", "separator-in-a-record", "array-end-in-a-record", "forged-record"],
)
def test_a_line_whose_records_cannot_be_proven_apart_is_parsed_whole_with_the_same_result(
    where: str, text: str
) -> None:
    """Strings that imitate the record layout never change what the line says: the split is proven (each piece
    an object, a random stand-in for the array) or abandoned for the whole parse."""
    line = _line(_with_string(_report(5), where, text))
    streamed, whole = _both_ways(line)

    _same(streamed, whole)
    data = streamed.data
    assert (data["metadata"]["note"] if where == "metadata" else data["per_request"][1]["session_id"]) == text


def test_a_duplicated_records_key_is_parsed_whole_so_the_last_one_counts_as_everywhere() -> None:
    report = _report(3)
    line = _line(report).replace(b'"per_request":[', b'"per_request":[],"per_request":[', 1)
    streamed, whole = _both_ways(line)

    _same(streamed, whole)
    assert streamed.record_runs is None and len(streamed.data["per_request"]) == 3


def test_malformed_records_get_the_whole_parse_s_error() -> None:
    report = _report(3)
    report["per_request"][1].pop("uuid")
    with pytest.raises(CanonicalError, match=r"per_request\[1\] has no string uuid"):
        canonicalize(_line(report), EXCLUSIONS)
    line = _line(_report(3)).replace(b'"itl_ms":10.03', b'"itl_ms":NaN', 1)
    with pytest.raises(CanonicalError, match="canonical line is not JSON"):
        canonicalize(line, EXCLUSIONS)


def test_many_records_are_read_in_several_runs_each_parsed_once_with_the_whole_parse_s_bytes() -> None:
    report = _report(200)
    for line in (_line(report), _line(_reverse_keys(_shuffled(report)))):
        streamed, whole = _both_ways(line)
        _same(streamed, whole)
        assert streamed.record_runs is not None and len(streamed.record_runs) > 1
        records = streamed.streamed()["per_request"]
        assert [records[i]["uuid"] for i in (0, 99, 199, -1)] == [whole.data["per_request"][i]["uuid"]
                                                                  for i in (0, 99, 199, -1)]
        assert records[10:13] == whole.data["per_request"][10:13]
        with pytest.raises(IndexError):
            records[200]


def test_a_run_cut_inside_a_record_is_refused_and_the_line_parsed_whole() -> None:
    """Nested objects that open with the records' first key put every cut past the first run inside a record (a
    string cannot hold the separator: its quote would be escaped): the run then does not parse as an array, and
    the line is parsed whole, with the same result."""
    report = _report(40)
    first_key = next(iter(report["per_request"][0]))
    for record in report["per_request"][:-1]:  # the last record's end is found after the last separator
        record["nested"] = [{first_key: index} for index in range(400)]
    streamed, whole = _both_ways(_line(report))
    _same(streamed, whole)
    assert streamed.record_runs is None


def test_the_bytes_kept_in_a_file_or_not_at_all_have_the_same_digests(tmp_path: Path) -> None:
    line = _line(_shuffled(_report(200)))
    in_memory = canonicalize(line, EXCLUSIONS)
    in_file = canonicalize(line, EXCLUSIONS, keep=tmp_path / "kept.json")
    digests_only = canonicalize(line, EXCLUSIONS, keep=False)
    assert (tmp_path / "kept.json").read_bytes() == in_file.encoded == in_memory.encoded
    for canon in (in_file, digests_only):
        assert (canon.digest, canon.section_digests) == (in_memory.digest, in_memory.section_digests)
    assert in_file.section("summary") == in_memory.section("summary")
    assert list(in_file.streamed()["per_request"]) == in_memory.data["per_request"]
    with pytest.raises(RuntimeError, match="only the digests"):
        digests_only.section("summary")
    with pytest.raises(FileExistsError):
        canonicalize(line, EXCLUSIONS, keep=tmp_path / "kept.json")


@pytest.mark.parametrize("problem", ["duplicate", "rounded"])
def test_a_refused_line_leaves_no_kept_file(tmp_path: Path, problem: str) -> None:
    report = _report(3)
    if problem == "duplicate":
        report["per_request"][2]["uuid"] = report["per_request"][0]["uuid"]
        line, message = _line(report), "duplicate uuid"
    else:
        line, message = _line(report).replace(b'"itl_ms":10.03', b'"itl_ms":18446744073709551616', 1), "64-bit"
    with pytest.raises(CanonicalError, match=message):
        canonicalize(line, EXCLUSIONS, keep=tmp_path / "kept.json")
    assert not (tmp_path / "kept.json").exists()
