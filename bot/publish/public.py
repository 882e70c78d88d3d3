"""What of a report may be published on GitHub: no raw output of the code under test, every reason that may be
built around it on one line; report.md in the artifact keeps everything."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from runners.schema.report import CampaignReport

REASON_LIMIT = 300
"""Characters of a one-line reason on GitHub; the complete text stays in the artifact."""


ONE_LINE_FIELDS = frozenset(
    {"reason", "perf_reason", "semantic_reasons", "failure", "error", "evidence", "detail", "problem"}
)
"""Report fields whose text may be built around output of the code under test (an exception, a stderr
excerpt): on GitHub only their first line is shown, capped at REASON_LIMIT."""


WITHHELD = " (details in the artifact)"


def is_raw_output(field_name: str) -> bool:
    """Fields that hold output of the code under test verbatim (`stderr_tail`, `stdout_tail`, `output_tail`)."""
    return field_name.endswith("_tail")


def one_line(text: str, more: str = WITHHELD) -> str:
    """The first non-empty line of `text`, capped, saying so when anything was left out."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    head = lines[0]
    if len(head) > REASON_LIMIT:
        return head[: REASON_LIMIT - 1] + "…" + more
    return head.rstrip(":") + more if len(lines) > 1 else head


def _public(value: Any) -> Any:
    """`value` with raw output emptied and reason-like text cut to one line, rebuilt (never mutated)."""
    if isinstance(value, BaseModel):
        updates: dict[str, Any] = {}
        for name in type(value).model_fields:
            item = getattr(value, name)
            if is_raw_output(name) and isinstance(item, str):
                public: Any = ""
            elif name in ONE_LINE_FIELDS and isinstance(item, str):
                public = one_line(item)
            elif name in ONE_LINE_FIELDS and isinstance(item, list):
                public = [one_line(x) if isinstance(x, str) else _public(x) for x in item]
            else:
                public = _public(item)
            if public is not item:
                updates[name] = public
        return value.model_copy(update=updates) if updates else value
    if isinstance(value, list):
        items = [_public(item) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if isinstance(value, dict):
        entries = {key: _public(item) for key, item in value.items()}
        return entries if any(entries[k] is not value[k] for k in value) else value
    return value


@dataclass(frozen=True)
class PublicReport:
    """A report fit for GitHub: no raw output of the code under test, every reason on one line.

    The check run and the comments render only this (the public renderers take a CampaignReport and build
    one first), so no template can reach a stderr tail, a build log or a panic message even by mistake;
    report.md in the artifact renders the full report.
    """

    report: CampaignReport

    @classmethod
    def of(cls, report: CampaignReport) -> PublicReport:
        public: CampaignReport = _public(report)
        return cls(public)


def raw_outputs(report: CampaignReport) -> list[tuple[str, str]]:
    """(JSON pointer, text) of every non-empty raw-output field, for report.md only."""
    found: list[tuple[str, str]] = []

    def walk(value: Any, pointer: str) -> None:
        if isinstance(value, BaseModel):
            for name in type(value).model_fields:
                item = getattr(value, name)
                if is_raw_output(name) and isinstance(item, str):
                    if item.strip():
                        found.append((f"{pointer}/{name}", item))
                else:
                    walk(item, f"{pointer}/{name}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{pointer}/{index}")
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{pointer}/{key}")

    walk(report, "")
    return found


NOT_PUBLISHED = " (the rest is not published: it may carry output of the code under test)"


def ended_reason(state: str, reason: str) -> str:
    """What the check run shows of an end reason: a config error in full (the config is the base
    revision's own, and the maintainer needs every line to fix it), anything else on one line, since an
    errored campaign's reason may end in the log of the code under test."""
    return reason if state == "config_error" else one_line(reason, NOT_PUBLISHED)
