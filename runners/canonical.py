"""Canonical report lines: exclusions, canonical bytes, digests and pointer-level diffs (Stages 2, 4, 5).

One encoder only: every line, of either arm, is parsed and encoded by orjson (`OPT_SORT_KEYS`, compact),
so two digests are comparable exactly when both came from this module. The stdlib encoder formats floats
and non-ASCII text differently (`1e-07` vs `1e-7`, `\\u00e9` vs UTF-8), so its digests must never be mixed
with these. orjson was chosen by benchmarks/bench_canonical.py on a 17 MB, 5,000-request line: the whole
canonicalize() runs at ~100-130 MB/s against ~30-40 MB/s for stdlib loads+dumps(sort_keys)+sha256, for
~25 MiB more working memory (orjson parses into an intermediate document before building Python objects).
Since issue 20 the per-request records are parsed and encoded a run of about 64 KiB at a time where the line
allows it, and the digests are fed as the bytes are written, so the bytes can go to memory, to a file of the
bot's own or nowhere: canonicalising adds about 1 MiB to a 7.7 MB line's own size in the digest-only and file
ways, and runs faster than orjson's own whole-line loads+dumps (benchmarks/README.md).

Numbers: floats are re-emitted by orjson's shortest round-trip formatter, the same path for both arms.
NaN, Infinity and literals that overflow a double are not JSON and raise CanonicalError. orjson would
silently turn an integer outside [-2**63, 2**64) into a float, so such a literal raises CanonicalError too
instead of letting two different integers compare equal.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import os
import re
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from runners.schema.report import PointerDiff, Resolution

SECTIONS: tuple[str, ...] = ("coverage", "metadata", "per_request", "planner", "summary")
"""The top-level keys every canonical report carries."""

_ENCODE = orjson.OPT_SORT_KEYS
_BAD_ESCAPE = re.compile(r"~(?![01])")
_NON_BLANK = re.compile(rb"[^ \t\r\n]")
_RECORDS_KEY = b'"per_request":['
"""Where the per-request records start in a compact line (its first occurrence: the stand-in proof rejects any
other, a second top-level key or a key that only ends in these characters)."""
_RUN_BYTES = 64 << 10
"""Records are parsed and encoded in runs of about this size: 5,000 orjson calls each way (one per record) cost
nearly twice one call per 64 KiB run, and a run's parsed objects stay well under a megabyte
(benchmarks/README.md, bench_canonical.py)."""
_ABSENT = object()
_VALUE_CHARS = 200


class CanonicalError(ValueError):
    """A canonical line that cannot be compared; the message says what is wrong with it."""


class ReplayBenchNotActive(CanonicalError):
    """The report does not declare `metadata.replay_bench: true`, so seeded routing was not in force."""


Kept = bytes | bytearray | Path | None
"""Where a canonical encoding is kept: in memory, in a file of the bot's own, or nowhere (digests only)."""
RecordRuns = list[tuple[int, int, int]]
"""Runs of whole per-request records in an encoding: (start, end, how many records)."""


@dataclass(frozen=True)
class Canonical:
    """One report line after the closed exclusions, with its digests and, where kept, its canonical bytes.

    A parsed 5,000-request report is about five times the size of its line, so only bytes are ever held, and
    determinism keeps them in a file for the one repetition per arm that parity and coverage read: the bot's
    memory then holds one harness line at a time. `data` parses the bytes again each time it is read.
    """

    digest: str
    section_digests: dict[str, str]
    """SHA-256 of each top-level section's canonical encoding, so a mismatch names its sections."""
    section_spans: dict[str, tuple[int, int]]
    """Where each section's encoding lies in `encoded`, so one small section is read without the rest."""
    harness_exclusions: list[str]
    """`metadata.result_exclusions` exactly as the harness declared them."""
    replay_bench: bool
    resolutions: dict[str, Resolution]
    """What each declared and each campaign-excluded pointer resolved to in the line as the harness wrote it."""
    kept: Kept = None
    """The canonical encoding (bytes in memory, or the bot's file holding exactly them), or None: digests only."""
    record_runs: RecordRuns | None = None
    """Runs of whole per-request records in `encoded` (start, end, count), when the line was canonicalised a
    run at a time: each run's bytes are its records' encodings joined by commas."""

    @property
    def encoded(self) -> bytes | bytearray:
        """The canonical encoding (read from its file when it was kept in one)."""
        kept = self._kept()
        return kept.read_bytes() if isinstance(kept, Path) else kept

    def _kept(self) -> bytes | bytearray | Path:
        if self.kept is None:
            raise RuntimeError("only the digests of this canonical report were kept, not its bytes")
        return self.kept

    def _read(self, start: int, end: int) -> bytes | memoryview:
        kept = self._kept()
        if isinstance(kept, Path):
            with kept.open("rb") as handle:
                handle.seek(start)
                return handle.read(end - start)
        return memoryview(kept)[start:end]

    @property
    def data(self) -> dict[str, Any]:
        """The canonical report as objects, parsed from `encoded` (the same values: orjson round-trips them)."""
        document: dict[str, Any] = orjson.loads(self.encoded)
        return document

    def streamed(self) -> dict[str, Any]:
        """The report with its per-request records parsed a run at a time as they are read, never all at once
        (coverage counts walk 5,000 records once); the whole `data` when no record runs are known."""
        if self.record_runs is None:
            return self.data
        streamed = {name: self.section(name) for name in self.section_spans if name != "per_request"}
        streamed["per_request"] = Records(self._read, self.record_runs)
        return streamed

    def section(self, name: str) -> Any:
        """One top-level section parsed on its own (e.g. `metadata`, without the per-request records)."""
        start, end = self.section_spans[name]
        return orjson.loads(self._read(start, end))


class Records(Sequence[Any]):
    """Per-request records inside a canonical encoding, parsed one run of records at a time as they are read."""

    def __init__(self, read: Callable[[int, int], bytes | memoryview],
                 runs: RecordRuns) -> None:
        self._read = read
        self._runs = runs
        self._firsts = list(itertools.accumulate((count for _, _, count in runs), initial=0))

    def _run(self, index: int) -> list[Any]:
        start, end, _ = self._runs[index]
        records: list[Any] = orjson.loads(b"".join((b"[", self._read(start, end), b"]")))
        return records

    def __len__(self) -> int:
        return self._firsts[-1]

    def __iter__(self) -> Iterator[Any]:
        for index in range(len(self._runs)):
            yield from self._run(index)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        position = range(len(self))[index]  # an IndexError outside, as for a list
        run = bisect.bisect_right(self._firsts, position) - 1
        return self._run(run)[position - self._firsts[run]]


@dataclass(frozen=True)
class DiffResult:
    differing_sections: list[str]
    differences: list[PointerDiff]
    """The first `limit` differing pointers in document order, with both values as compact JSON."""
    total: int
    pointers: list[str]
    """Every differing pointer, so exception records can be checked against all of them."""


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def parse_pointer(pointer: str) -> list[str]:
    """RFC 6901 reference tokens of a pointer; the empty pointer (the whole report) is not excludable."""
    if not pointer.startswith("/"):
        raise CanonicalError(f"exclusion {pointer!r} is not a JSON pointer to a field (RFC 6901 '/a/b')")
    if _BAD_ESCAPE.search(pointer):
        raise CanonicalError(f"exclusion {pointer!r} has a '~' not followed by 0 or 1 (RFC 6901)")
    return [token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/")]


def _array_index(token: str, length: int) -> int | None:
    """The index a token names in an array, or None when it names no existing element."""
    if token.isdigit() and token.isascii() and (token == "0" or not token.startswith("0")):
        index = int(token)
        return index if index < length else None
    return None


def resolve(document: Any, pointer: str) -> tuple[Resolution, Any]:
    """Whether a pointer names a value in a document, and the value; an ancestor that is `null` is told apart
    from one that is missing, because a null parent holds nothing a harness could have withheld."""
    node = document
    for token in parse_pointer(pointer):
        if node is None:
            return "parent_null", None
        if isinstance(node, dict):
            if token not in node:
                return "absent", None
            node = node[token]
        elif isinstance(node, list):
            index = _array_index(token, len(node))
            if index is None:
                return "absent", None
            node = node[index]
        else:
            return "absent", None
    return "present", node


def _remove(document: dict[str, Any], pointer: str) -> None:
    """Remove the node at `pointer`; a pointer the report does not contain removes nothing."""
    *parents, last = parse_pointer(pointer)
    node: Any = document
    for token in parents:
        if isinstance(node, dict):
            if token not in node:
                return
            node = node[token]
        elif isinstance(node, list):
            index = _array_index(token, len(node))
            if index is None:
                return
            node = node[index]
        else:
            return
    if isinstance(node, dict):
        node.pop(last, None)
    elif isinstance(node, list):
        index = _array_index(last, len(node))
        if index is not None:
            del node[index]


def _may_hold_rounded_integer(encoded: bytes | bytearray) -> bool:
    """Whether orjson may have rounded an out-of-range integer literal into a float.

    Such a literal becomes a float of magnitude >= 9.2e18, and orjson writes every float of magnitude
    >= 1e16 in exponent form, so an encoding with no digit followed by `e+` cannot hold one. A match is
    only a reason to look closer (a huge float or a string may match too). Scanning for the rare `+`
    rather than `e+` keeps this at memchr speed.
    """
    at = encoded.find(b"+")
    while at != -1:
        if encoded[at - 1 : at] == b"e" and encoded[at - 2 : at - 1].isdigit():
            return True
        at = encoded.find(b"+", at + 1)
    return False


def _check_integer_range(line: bytes) -> None:
    """The exact (slow) check, run only when the encoding shows a possibly rounded integer."""

    def exact(text: str) -> int:
        value = int(text)
        if not -(2**63) <= value < 2**64:
            raise CanonicalError(
                f"integer {text} is outside the 64-bit range; "
                "it cannot be canonicalized without losing precision"
            )
        return value

    json.loads(line, parse_int=exact)


def _parse(line: bytes) -> dict[str, Any]:
    try:
        document = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise CanonicalError(f"canonical line is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise CanonicalError(f"canonical line is a JSON {type(document).__name__}, not an object")
    missing = [key for key in SECTIONS if key not in document]
    if missing:
        raise CanonicalError(f"canonical line lacks top-level keys {missing}; it has {sorted(document)}")
    return document


def _sort_per_request(records: Any) -> None:
    """Per-request records are the one explicitly unordered collection: sort them by `uuid` in place."""
    if not isinstance(records, list):
        raise CanonicalError(f"per_request is a JSON {type(records).__name__}, not an array")
    for position, record in enumerate(records):
        if not isinstance(record, dict) or not isinstance(record.get("uuid"), str):
            raise CanonicalError(f"per_request[{position}] has no string uuid; records cannot be ordered")
    records.sort(key=lambda record: record["uuid"])
    for before, after in zip(records, records[1:], strict=False):
        if before["uuid"] == after["uuid"]:
            raise CanonicalError(
                f"per_request has duplicate uuid {before['uuid']}; request UUIDs must be unique"
            )


def _harness_exclusions(metadata: dict[str, Any]) -> list[str]:
    declared = metadata.get("result_exclusions", [])
    if not isinstance(declared, list) or not all(isinstance(p, str) for p in declared):
        raise CanonicalError(f"metadata.result_exclusions must be a list of JSON pointers, got {declared!r}")
    for pointer in declared:
        try:
            parse_pointer(pointer)
        except CanonicalError as exc:
            raise CanonicalError(f"metadata.result_exclusions: {exc}") from exc
    return list(declared)


def _sections(document: dict[str, Any], length: int) -> tuple[dict[str, tuple[int, int]], dict[str, bytes]]:
    """Where each top-level section lies inside the one encoding of `length` bytes, and every section's
    encoding but per_request's, so each is digested without reading the encoding again.

    The encoding is `{"key":body,...}` in sorted key order. Every section but per_request is small and
    encoded again to learn its length; per_request's length is what remains.
    """
    keys = sorted(document)
    small = {key: orjson.dumps(document[key], option=_ENCODE) for key in keys if key != "per_request"}
    names = {key: orjson.dumps(key) for key in keys}
    framing = 2 + len(keys) - 1 + sum(len(name) + 1 for name in names.values())
    remaining = length - framing - sum(len(body) for body in small.values())
    spans: dict[str, tuple[int, int]] = {}
    offset = 1
    for key in keys:
        offset += len(names[key]) + 1
        size = len(small[key]) if key in small else remaining
        spans[key] = (offset, offset + size)
        offset += size + 1
    return spans, small


class _Output:
    """Where a canonical encoding goes as it is written: running SHA-256s of the whole and of its per-request
    section, and the bytes themselves where they are kept (a buffer, or a new file of the bot's own)."""

    def __init__(self, keep: bool | Path) -> None:
        self.path = keep if isinstance(keep, Path) else None
        self.buffer = bytearray() if keep is True else None
        self._file = None
        if self.path is not None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            self._file = os.fdopen(os.open(self.path, flags, 0o600), "wb")
        self.restart()

    def restart(self) -> None:
        """Forget everything written (records out of uuid order are written again, in order)."""
        self.whole, self.records, self.length = hashlib.sha256(), hashlib.sha256(), 0
        if self.buffer is not None:
            del self.buffer[:]
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()

    def write(self, chunk: bytes | memoryview, *, records: bool = False) -> None:
        self.whole.update(chunk)
        if records:
            self.records.update(chunk)
        self.length += len(chunk)
        if self.buffer is not None:
            self.buffer += chunk
        elif self._file is not None:
            self._file.write(chunk)

    def close(self) -> Kept:
        if self._file is not None:
            self._file.close()
        return self.path or self.buffer

    def discard(self) -> None:
        self.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def single_line(data: bytes) -> tuple[bytes | None, int]:
    """The output of a `--iterations 1` run when it holds exactly one non-blank line, and how many it holds.

    The whole output is returned, not a copy of the line: the blank lines and newlines around it are JSON
    whitespace, and a 5,000-request line is several megabytes.
    """
    count, start = 0, 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end == -1 else end
        count += _NON_BLANK.search(data, start, end) is not None
        start = end + 1
    return (data if count == 1 else None), count


def _touches_records(pointer: str) -> bool:
    return pointer == "/per_request" or pointer.startswith("/per_request/")


def _split_records(line: bytes) -> tuple[dict[str, Any], str, list[tuple[int, int]]] | None:
    """The rest of the line (its per-request array stood in for by a random string), that string, and runs of
    the array's records (spans of the line of about `_RUN_BYTES` each, cut between two records); None when the
    split cannot be proven, and the line is then parsed whole (which also gives every malformed line its one
    error message).

    Proof (completed by `_write_records`, which parses every run): each run, in brackets, parses as an array of
    objects, which it can only do when both its cuts lie between two top-level elements (a cut inside a string
    or a nested value leaves a bracket or a quote open), so the array text is exactly those runs' elements;
    and the rest of the line, with a random string (drawn after the line was read) in the array's place, parses
    with that string as its top-level `per_request`, so the array was the value the whole line's parse gives
    that key. Runs are cut at the separator `},{"<first key>":`; the array's end is found after the last one.
    """
    at = line.find(_RECORDS_KEY)
    if at == -1:
        return None
    opening = at + len(_RECORDS_KEY) - 1
    begin = opening + 1
    runs: list[tuple[int, int]] = []
    if line[begin : begin + 1] == b"]":
        closing = begin
    else:
        key_end = line.find(b'"', begin + 2)
        if line[begin : begin + 2] != b'{"' or key_end == -1 or b"\\" in line[begin + 2 : key_end]:
            return None
        separator = b'},{"' + line[begin + 2 : key_end] + b'":'
        found = line.rfind(separator, begin)
        last = begin if found == -1 else found + 2
        closing = line.find(b"}]", last)
        view = memoryview(line)
        while closing != -1:
            try:
                if isinstance(orjson.loads(view[last : closing + 1]), dict):
                    break
            except orjson.JSONDecodeError:
                pass
            closing = line.find(b"}]", closing + 1)
        if closing == -1:
            return None
        closing += 1
        found = line.find(separator, begin + _RUN_BYTES, last)
        while found != -1:
            runs.append((begin, found + 1))
            begin = found + 2
            found = line.find(separator, begin + _RUN_BYTES, last)
        runs.append((begin, closing))
    stand_in = secrets.token_hex(16)
    rest_text = b"".join([line[:opening], b'"', stand_in.encode(), b'"', line[closing + 1 :]])
    if rest_text.count(stand_in.encode()) != 1:  # only where it was put (the array's text is never searched)
        return None
    try:
        rest = orjson.loads(rest_text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(rest, dict) or rest.get("per_request") != stand_in:
        return None
    return rest, stand_in, runs


class _Unordered(Exception):
    """The records are not in uuid order: they are written again, each from its own encoding."""


def _parsed_runs(line: bytes, runs: list[tuple[int, int]], *, in_order: bool) -> Iterator[list[Any]]:
    """Each run's records, parsed by one orjson call (JSONDecodeError when a run is not JSON after all), each
    checked to be an object with a string uuid; with `in_order`, _Unordered at the first record whose uuid does
    not follow the one before."""
    view = memoryview(line)
    position, previous = 0, None
    for start, end in runs:
        records = orjson.loads(b"".join((b"[", view[start:end], b"]")))
        for record in records:
            uuid = record.get("uuid") if isinstance(record, dict) else None
            if not isinstance(uuid, str):
                raise CanonicalError(f"per_request[{position}] has no string uuid; records cannot be ordered")
            if in_order and previous is not None and not previous < uuid:
                raise _Unordered
            position, previous = position + 1, uuid
        yield records


def _write_records(line: bytes, runs: list[tuple[int, int]], output: _Output) -> tuple[RecordRuns, bool]:
    """The per-request array written run by run, each run encoded by one orjson call (one call per record
    costs more than the encoding itself); the runs written, and whether a rounded integer may hide in them.
    _Unordered at the first record out of uuid order (a harness writes them in order)."""
    written: RecordRuns = []
    suspicious = False
    output.write(b"[", records=True)
    for records in _parsed_runs(line, runs, in_order=True):
        encoded = orjson.dumps(records, option=_ENCODE)
        suspicious = suspicious or _may_hold_rounded_integer(encoded)
        if written:
            output.write(b",", records=True)
        start = output.length
        output.write(memoryview(encoded)[1:-1], records=True)
        written.append((start, output.length, len(records)))
    output.write(b"]", records=True)
    return written, suspicious


def _write_sorted(line: bytes, runs: list[tuple[int, int]], output: _Output) -> tuple[RecordRuns, bool]:
    """Records out of uuid order: each encoded on its own and written in uuid order, in runs of about
    `_RUN_BYTES` (the encodings are held meanwhile, about the line's size; the parsed records never are)."""
    encodings = sorted(
        (record["uuid"], orjson.dumps(record, option=_ENCODE)) for records in _parsed_runs(line, runs, in_order=False)
        for record in records
    )
    for (before, _), (after, _) in zip(encodings, encodings[1:], strict=False):
        if before == after:
            raise CanonicalError(f"per_request has duplicate uuid {before}; request UUIDs must be unique")
    written: RecordRuns = []
    output.write(b"[", records=True)
    group: list[bytes] = []
    for index, (_, encoded) in enumerate(encodings):
        group.append(encoded)
        if sum(map(len, group)) >= _RUN_BYTES or index == len(encodings) - 1:
            if written:
                output.write(b",", records=True)
            start = output.length
            output.write(b",".join(group), records=True)
            written.append((start, output.length, len(group)))
            group = []
    output.write(b"]", records=True)
    return written, any(_may_hold_rounded_integer(encoded) for _, encoded in encodings)


def _write_split(line: bytes, document: dict[str, Any], runs: list[tuple[int, int]], stand_in: str,
                 output: _Output) -> tuple[RecordRuns, bool] | None:
    """The canonical encoding of a split line: `document` (the rest) with the records in uuid order in place of
    the stand-in; the record runs written and whether a rounded integer may hide; None when a run is not JSON
    after all."""
    encoded_rest = orjson.dumps(document, option=_ENCODE)
    token = b'"per_request":"' + stand_in.encode() + b'"'
    cut = encoded_rest.find(token)
    head = memoryview(encoded_rest)[: cut + len(b'"per_request":')]
    output.write(head)
    try:
        try:
            written, suspicious = _write_records(line, runs, output)
        except _Unordered:
            output.restart()
            output.write(head)
            written, suspicious = _write_sorted(line, runs, output)
    except orjson.JSONDecodeError:
        return None
    output.write(memoryview(encoded_rest)[cut + len(token) :])
    return written, suspicious or _may_hold_rounded_integer(encoded_rest)


def _write_whole(document: dict[str, Any], output: _Output) -> bool:
    """The canonical encoding of a line parsed whole; whether a rounded integer may hide in it."""
    _sort_per_request(document["per_request"])
    encoded = orjson.dumps(document, option=_ENCODE)
    spans, _ = _sections(document, len(encoded))
    start, end = spans.get("per_request", (len(encoded), len(encoded)))
    view = memoryview(encoded)
    output.write(view[:start])
    output.write(view[start:end], records=True)
    output.write(view[end:])
    return _may_hold_rounded_integer(encoded)


def canonicalize(line: bytes, exclusions: Sequence[str], *, record_by_record: bool = True,
                 keep: bool | Path = True) -> Canonical:
    """Parse one harness line, remove exactly the configured exclusions, and encode and digest it canonically.

    The per-request records (nearly all of a line) are parsed and encoded a run at a time when the line allows
    it (`_split_records`), so the bot never holds a whole parsed report; otherwise, or with
    `record_by_record=False`, the line is parsed whole. Both give the same bytes. `keep` says where the bytes
    go: memory (True), a new file of the bot's own (a path that must not exist yet), or nowhere (False: the
    digests are all a later determinism repetition needs).
    """
    by_record = record_by_record and not any(_touches_records(p) for p in exclusions)
    split = _split_records(line) if by_record else None
    document = _parse(line) if split is None else split[0]
    if split is not None:
        missing = [key for key in SECTIONS if key not in document]
        if missing:
            raise CanonicalError(f"canonical line lacks top-level keys {missing}; it has {sorted(document)}")
    metadata = document["metadata"]
    if not isinstance(metadata, dict):
        raise CanonicalError(f"metadata is a JSON {type(metadata).__name__}, not an object")
    if metadata.get("replay_bench") is not True:
        shown = repr(metadata["replay_bench"]) if "replay_bench" in metadata else "missing"
        raise ReplayBenchNotActive(
            f"metadata.replay_bench is {shown}, not true: the seeded routing contract was not active"
        )
    harness_exclusions = _harness_exclusions(metadata)
    if split is not None and any(_touches_records(p) for p in harness_exclusions):
        return canonicalize(line, exclusions, record_by_record=False, keep=keep)
    resolutions = {
        pointer: resolve(document, pointer)[0] for pointer in dict.fromkeys([*exclusions, *harness_exclusions])
    }
    for pointer in exclusions:
        _remove(document, pointer)
    output = _Output(keep)
    try:
        record_runs = None
        if split is None:
            suspicious = _write_whole(document, output)
        else:
            written = _write_split(line, document, split[2], split[1], output)
            if written is None:
                output.discard()
                return canonicalize(line, exclusions, record_by_record=False, keep=keep)
            record_runs, suspicious = written
        if suspicious:
            _check_integer_range(line)
    except BaseException:
        output.discard()
        raise
    spans, small = _sections(document, output.length)
    return Canonical(
        digest=output.whole.hexdigest(),
        section_digests={
            key: output.records.hexdigest() if key == "per_request" else hashlib.sha256(small[key]).hexdigest()
            for key in spans
        },
        section_spans=spans,
        harness_exclusions=harness_exclusions,
        replay_bench=True,
        resolutions=resolutions,
        kept=output.close(),
        record_runs=record_runs,
    )


def _encode(value: Any) -> bytes:
    return orjson.dumps(value, option=_ENCODE)


def _render(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = _encode(value).decode()
    if len(text) <= _VALUE_CHARS:
        return text
    return f"{text[:_VALUE_CHARS]}… ({len(text)} chars)"


def _same_leaf(a: Any, b: Any) -> bool:
    """Equal as canonical bytes: `1`, `1.0` and `true` differ, and so do `0.0` and `-0.0`."""
    if type(a) is not type(b) or a != b:
        return False
    return not isinstance(a, float) or str(a) == str(b)


def _element(array: list[Any], index: int) -> Any:
    return array[index] if index < len(array) else _ABSENT


def _walk(a: Any, b: Any, pointer: str, found: list[tuple[str, Any, Any]]) -> None:
    """Append every differing leaf in document order; a type change is reported at the node itself.

    Equal subtrees are skipped by comparing their encodings in C, so one changed field among 5,000
    requests costs one pass of the encoder, not a Python walk of every leaf.
    """
    children: Iterator[tuple[str, Any, Any]]
    if isinstance(a, dict) and isinstance(b, dict):
        children = (
            (f"{pointer}/{_escape(key)}", a.get(key, _ABSENT), b.get(key, _ABSENT))
            for key in sorted(a.keys() | b.keys())
        )
    elif isinstance(a, list) and isinstance(b, list):
        length = max(len(a), len(b))
        children = ((f"{pointer}/{i}", _element(a, i), _element(b, i)) for i in range(length))
    else:
        if not _same_leaf(a, b):
            found.append((pointer, a, b))
        return
    for child, left, right in children:
        if isinstance(left, dict | list) and type(left) is type(right) and _encode(left) == _encode(right):
            continue
        _walk(left, right, child, found)


def diff(a: Canonical, b: Canonical, limit: int = 20) -> DiffResult:
    """Where two canonical reports differ; sections with equal digests are not walked."""
    sections = sorted(a.section_digests.keys() | b.section_digests.keys())
    differing = [s for s in sections if a.section_digests.get(s) != b.section_digests.get(s)]
    found: list[tuple[str, Any, Any]] = []
    for section in differing:
        left = a.section(section) if section in a.section_spans else _ABSENT
        right = b.section(section) if section in b.section_spans else _ABSENT
        _walk(left, right, f"/{_escape(section)}", found)
    return DiffResult(
        differing_sections=differing,
        differences=[
            PointerDiff(pointer=pointer, baseline=_render(left), candidate=_render(right))
            for pointer, left, right in found[:limit]
        ],
        total=len(found),
        pointers=[pointer for pointer, _, _ in found],
    )
