"""Canonical report lines: exclusions, canonical bytes, digests and pointer-level diffs (Stages 2, 4, 5).

One encoder only: every line, of either arm, is parsed and encoded by orjson (`OPT_SORT_KEYS`, compact),
so two digests are comparable exactly when both came from this module. The stdlib encoder formats floats
and non-ASCII text differently (`1e-07` vs `1e-7`, `\\u00e9` vs UTF-8), so its digests must never be mixed
with these. orjson was chosen by benchmarks/bench_canonical.py on a 17 MB, 5,000-request line: the whole
canonicalize() runs at ~100-130 MB/s against ~30-40 MB/s for stdlib loads+dumps(sort_keys)+sha256, for
~25 MiB more working memory (orjson parses into an intermediate document before building Python objects).
Since issue 20 the per-request records are parsed and encoded one at a time where the line allows it, which
cut that working memory to ~1.7x the line and is faster than one whole parse (benchmarks/README.md).

Numbers: floats are re-emitted by orjson's shortest round-trip formatter, the same path for both arms.
NaN, Infinity and literals that overflow a double are not JSON and raise CanonicalError. orjson would
silently turn an integer outside [-2**63, 2**64) into a float, so such a literal raises CanonicalError too
instead of letting two different integers compare equal.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from runners.report import PointerDiff, Resolution

SECTIONS: tuple[str, ...] = ("coverage", "metadata", "per_request", "planner", "summary")
"""The top-level keys every canonical report carries."""

_ENCODE = orjson.OPT_SORT_KEYS
_BAD_ESCAPE = re.compile(r"~(?![01])")
_NON_BLANK = re.compile(rb"[^ \t\r\n]")
_RECORDS_KEY = b'"per_request":['
"""Where the per-request records start in a compact line; found once, else the line is parsed whole."""
_ABSENT = object()
_VALUE_CHARS = 200


class CanonicalError(ValueError):
    """A canonical line that cannot be compared; the message says what is wrong with it."""


class ReplayBenchNotActive(CanonicalError):
    """The report does not declare `metadata.replay_bench: true`, so seeded routing was not in force."""


@dataclass(frozen=True)
class Canonical:
    """One report line after the closed exclusions, with its canonical bytes and digests.

    Only the bytes are held: a parsed 5,000-request report is about five times the size of its line, and a row
    holds one report per arm from its determinism runs to its coverage checks. `data` parses the bytes again
    each time it is read (once per consumer: coverage, Stage 6 assertions, a mismatch's diff).
    """

    encoded: bytes | bytearray
    """The canonical encoding (a bytearray when it was written record by record: never copied once more)."""
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
    record_spans: list[tuple[int, int]] | None = None
    """Where each per-request record lies in `encoded`, when the line was canonicalised record by record."""

    @property
    def data(self) -> dict[str, Any]:
        """The canonical report as objects, parsed from `encoded` (the same values: orjson round-trips them)."""
        document: dict[str, Any] = orjson.loads(self.encoded)
        return document

    def streamed(self) -> dict[str, Any]:
        """The report with its per-request records parsed one at a time as they are read, never all at once
        (coverage counts walk 5,000 records once); the whole `data` when no record spans are known."""
        if self.record_spans is None:
            return self.data
        streamed = {name: self.section(name) for name in self.section_spans if name != "per_request"}
        streamed["per_request"] = Records(self.encoded, self.record_spans)
        return streamed

    def section(self, name: str) -> Any:
        """One top-level section parsed on its own (e.g. `metadata`, without the per-request records)."""
        start, end = self.section_spans[name]
        return orjson.loads(memoryview(self.encoded)[start:end])


class Records(Sequence[Any]):
    """Per-request records inside a canonical encoding, each parsed when it is read."""

    def __init__(self, encoded: bytes | bytearray, spans: list[tuple[int, int]]) -> None:
        self._view = memoryview(encoded)
        self._spans = spans

    def __len__(self) -> int:
        return len(self._spans)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        start, end = self._spans[index]
        return orjson.loads(self._view[start:end])


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


def _section_spans(document: dict[str, Any], encoded: bytes | bytearray) -> dict[str, tuple[int, int]]:
    """Where each top-level section lies inside the one encoding, so it is digested without a copy.

    The encoding is `{"key":body,...}` in sorted key order. Every section but per_request is small and
    encoded again to learn its length; per_request's length is what remains.
    """
    keys = sorted(document)
    small = {key: orjson.dumps(document[key], option=_ENCODE) for key in keys if key != "per_request"}
    names = {key: orjson.dumps(key) for key in keys}
    framing = 2 + len(keys) - 1 + sum(len(name) + 1 for name in names.values())
    remaining = len(encoded) - framing - sum(len(body) for body in small.values())
    spans: dict[str, tuple[int, int]] = {}
    offset = 1
    for key in keys:
        offset += len(names[key]) + 1
        length = len(small[key]) if key in small else remaining
        spans[key] = (offset, offset + length)
        offset += length + 1
    return spans


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
    """The rest of the line (its per-request array stood in for by a random string), that string, and each
    record's span in the line; None when the split cannot be proven, and the line is then parsed whole (which
    also gives every malformed line its one error message).

    Proof (completed by `_join_records`, which parses every piece): every piece between the separators parses
    on its own as an object, so the array text is exactly
    those objects; and the rest of the line, with a random string (drawn after the line was read) in the
    array's place, parses with that string as its top-level `per_request`, so the array was the value the
    whole line's parse gives that key. Records are found by the separator `},{"<first key>":`; a line where
    that also occurs inside a record fails the proof and is parsed whole.
    """
    at = line.find(_RECORDS_KEY)
    if at == -1 or line.find(_RECORDS_KEY, at + 1) != -1:
        return None
    opening = at + len(_RECORDS_KEY) - 1
    begin = opening + 1
    pieces: list[tuple[int, int]] = []
    if line[begin : begin + 1] == b"]":
        closing = begin
    else:
        key_end = line.find(b'"', begin + 2)
        if line[begin : begin + 2] != b'{"' or key_end == -1 or b"\\" in line[begin + 2 : key_end]:
            return None
        separator = b'},{"' + line[begin + 2 : key_end] + b'":'
        found = line.find(separator, begin)
        while found != -1:
            pieces.append((begin, found + 1))
            begin = found + 2
            found = line.find(separator, begin)
        closing = line.find(b"}]", begin)
        view = memoryview(line)
        while closing != -1:
            try:
                if isinstance(orjson.loads(view[begin : closing + 1]), dict):
                    break
            except orjson.JSONDecodeError:
                pass
            closing = line.find(b"}]", closing + 1)
        if closing == -1:
            return None
        pieces.append((begin, closing + 1))
        closing += 1
    stand_in = secrets.token_hex(16)
    if stand_in.encode() in line:
        return None
    try:
        rest = orjson.loads(b"".join([line[:opening], b'"', stand_in.encode(), b'"', line[closing + 1 :]]))
    except orjson.JSONDecodeError:
        return None
    if not isinstance(rest, dict) or rest.get("per_request") != stand_in:
        return None
    return rest, stand_in, pieces


def _join_records(
    line: bytes, pieces: list[tuple[int, int]], rest: dict[str, Any], stand_in: str
) -> tuple[bytes | bytearray, list[tuple[int, int]]] | None:
    """The canonical encoding: `rest` with the records, each parsed and encoded on its own, in uuid order in
    place of the stand-in, and each record's span; None when a piece is not JSON after all.

    The records are written straight into the one output buffer (a harness writes them in uuid order); orjson
    gives each small output an 8 KiB block, so none is kept. Out of order, they are reordered by span.
    """
    encoded_rest = orjson.dumps(rest, option=_ENCODE)
    token = b'"per_request":"' + stand_in.encode() + b'"'
    cut = encoded_rest.find(token)
    buffer = bytearray(encoded_rest[:cut])
    buffer += b'"per_request":['
    records: list[tuple[str, int, int]] = []
    view = memoryview(line)
    for position, (start, end) in enumerate(pieces):
        try:
            record = orjson.loads(view[start:end])
        except orjson.JSONDecodeError:
            return None
        if not isinstance(record, dict) or not isinstance(record.get("uuid"), str):
            raise CanonicalError(f"per_request[{position}] has no string uuid; records cannot be ordered")
        if position:
            buffer += b","
        offset = len(buffer)
        buffer += orjson.dumps(record, option=_ENCODE)
        records.append((record["uuid"], offset, len(buffer)))
    ordered = sorted(records, key=lambda record: record[0])
    for (before, _, _), (after, _, _) in zip(ordered, ordered[1:], strict=False):
        if before == after:
            raise CanonicalError(f"per_request has duplicate uuid {before}; request UUIDs must be unique")
    if ordered != records:
        body = memoryview(buffer)
        first = records[0][1] if records else len(buffer)
        parts: list[bytes | memoryview] = [body[:first]]
        for index, (_, start, end) in enumerate(ordered):
            parts.extend([b","] if index else [])
            parts.append(body[start:end])
        joined = b"".join(parts)
        body.release()
        buffer = bytearray(joined)
        records, offset = [], first
        for index, (uuid, start, end) in enumerate(ordered):
            offset += 1 if index else 0
            records.append((uuid, offset, offset + end - start))
            offset += end - start
    buffer += b"]"
    buffer += encoded_rest[cut + len(token) :]
    return buffer, [(start, end) for _, start, end in records]


def canonicalize(line: bytes, exclusions: Sequence[str], *, record_by_record: bool = True) -> Canonical:
    """Parse one harness line, remove exactly the configured exclusions, and encode it canonically.

    The per-request records (nearly all of a line) are parsed and encoded one at a time when the line allows
    it (`_split_records`), so the bot never holds a whole parsed report; otherwise, or with
    `record_by_record=False`, the line is parsed whole. Both give the same bytes.
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
        return canonicalize(line, exclusions, record_by_record=False)
    resolutions = {
        pointer: resolve(document, pointer)[0] for pointer in dict.fromkeys([*exclusions, *harness_exclusions])
    }
    for pointer in exclusions:
        _remove(document, pointer)
    joined = None if split is None else _join_records(line, split[2], document, split[1])
    if split is not None and joined is None:
        return canonicalize(line, exclusions, record_by_record=False)
    record_spans = None
    if joined is None:
        _sort_per_request(document["per_request"])
        encoded: bytes | bytearray = orjson.dumps(document, option=_ENCODE)
    else:
        encoded, record_spans = joined
    if _may_hold_rounded_integer(encoded):
        _check_integer_range(line)
    spans = _section_spans(document, encoded)
    view = memoryview(encoded)
    return Canonical(
        encoded=encoded,
        digest=hashlib.sha256(encoded).hexdigest(),
        section_digests={key: hashlib.sha256(view[start:end]).hexdigest() for key, (start, end) in spans.items()},
        section_spans=spans,
        harness_exclusions=harness_exclusions,
        replay_bench=True,
        resolutions=resolutions,
        record_spans=record_spans,
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
