"""Pure rendering: a campaign report (or a campaign's state) in, Markdown strings out.

Every string a human reads on GitHub comes from `templates/*.md.j2` through this module, so golden files pin
exactly what is posted. Nothing here performs I/O beyond reading templates; the effects live in
`bot.publish.publisher`. Numbers are formatted here, layout lives in the templates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pydantic import BaseModel

from bot.core.attempts import PriorAttempt
from bot.core.campaign import Campaign
from bot.core.commands import CommandSpec
from bot.core.merge_queue import CarriedResult
from runners.progress import ProgressEvent
from runners.resources import package_dir
from runners.schema.config import PerfConfig
from runners.schema.report import (
    ARMS,
    KERNEL_CLOCK_LABELS,
    CampaignReport,
    CheckConclusion,
    FixtureStatus,
    GateVerdict,
    PerfResult,
    PerfVerdict,
    Revision,
    RowReport,
    SemanticVerdict,
)
from runners.schema.verdicts import instruction_change, instruction_contradiction

TEMPLATES_DIR = package_dir("kv_parity_templates")

STATUS_MARKER = "<!-- kv-parity:status -->"
RESULT_MARKER_PREFIX = "<!-- kv-parity:result"
CHECK_TEXT_LIMIT = 65_535
"""GitHub's limit for a check run's output.summary and output.text."""
COMMENT_LIMIT = 65_536
"""GitHub's limit for an issue comment body."""
TITLE_LIMIT = 255
"""GitHub documents no limit for output.title; 255 keeps it on one line everywhere it is shown."""

ICONS: dict[str, str] = {
    "PASS": "✅",
    "PASS_WITH_SEMANTIC_EXCEPTIONS": "☑️",
    "FAIL": "❌",
    "INCONCLUSIVE": "⚠️",
    "BLOCKED": "⛔",
    "NOT_RUN": "➖",
    "STOPPED": "⛔",
    "UNSUPPORTED": "➖",
}
CONCLUSION_HEADLINES: dict[str, str] = {
    "success": "✅ Parity holds and no slowdown beyond the threshold",
    "failure": "❌ Parity campaign failed",
    "neutral": "⚠️ Parity campaign inconclusive",
    "action_required": "⛔ Parity campaign blocked: maintainers must act",
    "cancelled": "🚫 Parity campaign cancelled",
    "timed_out": "⌛ Parity campaign timed out",
}
ENDED_STATES: dict[str, tuple[str, str]] = {
    "cancelled": ("cancelled", "🚫 Cancelled"),
    "superseded": ("neutral", "⏭️ Superseded"),
    "timed_out": ("timed_out", "⌛ Timed out"),
    "errored": ("failure", "💥 Errored"),
    "config_error": ("action_required", "⛔ Config error"),
}
"""Campaign end states without a report: check-run conclusion and the status line's label."""

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")
_MD_LINE_START = re.compile(r"^(?:[#+-]|\d{1,9}(?=[.)]))(?=[.)]?(?:\s|$))")


# --- filters ----------------------------------------------------------------------------------------------


def _escape(text: str, line_start: bool) -> str:
    text = _MD_SPECIAL.sub(r"\\\1", text)
    if line_start:
        text = _MD_LINE_START.sub(
            lambda m: m.group(0) + "\\" if m.group(0)[0].isdigit() else "\\" + m.group(0), text
        )
    return defuse(text)


_MENTION = re.compile(r"@(?=[A-Za-z0-9])")
_REFERENCE = re.compile(r"(#|\bGH-)(?=\d)", re.IGNORECASE)


def defuse(text: str) -> str:
    """Break every `@mention` and `#123` / `owner/repo#1` / `GH-1` reference with a zero-width space.

    Whatever precedes the `@` (another `@`, a letter like `é`, punctuation, the line start), GitHub may read
    a mention there, so every `@` followed by a login character is defused; e-mail addresses lose their
    autolink, which is the price of never notifying anyone from text the bot did not write.
    """
    text = _MENTION.sub("@\u200b", text)
    return _REFERENCE.sub(lambda m: m.group(1) + "\u200b", text)


def md(value: object) -> str:
    """Escape user-controlled text (branch names, reasons, logins) so it renders literally, on one line.

    Backslash-escapes the characters that format, link, open HTML or split a table cell anywhere in a line,
    plus those that start a block at the beginning, and defuses `@mentions` and `#123` references, so a
    branch named `**x**|<img>` or `@team` neither formats, breaks a table nor notifies anyone.
    """
    return _escape(" ".join(str(value).split()), line_start=True)


_CODE_SPAN = re.compile(r"(`[^`]+`)")


def prose(value: object) -> str:
    """Escape a bot-composed reason like `md`, but keep its `code spans` (they render literally anyway)."""
    parts = _CODE_SPAN.split(" ".join(str(value).split()))
    return "".join(
        code(part[1:-1]) if index % 2 else _escape(part, line_start=index == 0)
        for index, part in enumerate(parts)
    )


def code(value: object, table: bool = True) -> str:
    """An inline code span that survives any content: the fence outgrows inner backticks.

    In a table cell a pipe must be escaped even inside code; outside tables (`table=False`) the backslash
    would show, so it is left alone.
    """
    text = " ".join(str(value).split())
    if table:
        text = text.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def block(value: object) -> str:
    """A fenced block for multi-line text (config errors, stderr tails) that the text cannot close early."""
    text = str(value).rstrip("\n")
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (longest + 1)
    return f"{fence}text\n{text}\n{fence}"


UNPINNED = "(not pinned)"
"""Shown for a revision the campaign stopped before pinning (the stop reason says why)."""


def short(sha: str | None) -> str:
    return (sha or "")[:7] if sha != UNPINNED else UNPINNED


def ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def pct(value: float) -> str:
    """A signed percentage with a real minus sign, e.g. `+0.4%` or `−1.2%`."""
    return f"{value * 100:+.1f}%".replace("-", "−")


def count(value: int) -> str:
    return f"{value:,}"


def when(value: object) -> str:
    """A timestamp (unix seconds or datetime) as `YYYY-MM-DD HH:MM UTC`; '—' when unknown."""
    if value is None:
        return "—"
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
    elif isinstance(value, int | float):
        moment = datetime.fromtimestamp(float(value), UTC)
    else:
        return md(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def duration(seconds: float | None) -> str:
    """A human ETA: `45 s`, `6 min`, `1 h 20 min`."""
    if seconds is None:
        return "—"
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{round(seconds)} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def plural(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def icon(verdict: object) -> str:
    return ICONS.get(str(verdict), "")


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES_DIR),
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        md=md,
        prose=prose,
        code=code,
        block=block,
        short=short,
        ratio=ratio,
        pct=pct,
        count=count,
        when=when,
        duration=duration,
        icon=icon,
        plural=plural,
    )
    env.globals.update(instruction_change=instruction_change, instruction_contradiction=instruction_contradiction)
    return env


ENV = _environment()


def _render(template: str, **context: Any) -> str:
    text = ENV.get_template(template).render(**context)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n") + "\n"


# --- trimming ---------------------------------------------------------------------------------------------


def _size(text: str) -> int:
    """Length as GitHub's limits count it, measured in UTF-8 bytes so multi-byte text can never overflow."""
    return len(text.encode("utf-8"))


def trim_markdown(text: str, limit: int, pointer: str) -> str:
    """Cut `text` to `limit` at a line outside any code fence and append `pointer` (to the full report).

    Cutting inside a fence would turn the rest of the page into code, so the cut backs up to the last line
    where no fence is open.
    """
    if _size(text) <= limit:
        return text
    note = f"\n\n---\n✂️ {pointer}\n"
    budget = limit - _size(note)
    kept: list[str] = []
    used = 0
    last_safe = 0
    fence: str | None = None
    for line in text.split("\n"):
        cost = _size(line) + 1
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
        match = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if match:
            marker = match.group(1)
            if fence is None:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = None
        if fence is None:
            last_safe = len(kept)
    return "\n".join(kept[:last_safe]).rstrip("\n") + note


# --- what may be published -----------------------------------------------------------------------------

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


# --- view models ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckRunContent:
    """What a check run shows: a one-line title, a glanceable summary and the complete text."""

    title: str
    summary: str
    text: str


@dataclass(frozen=True)
class Links:
    """Where the full evidence lives; every field may be unknown (then no link is rendered)."""

    artifact_url: str | None = None
    check_run_url: str | None = None
    result_url: str | None = None
    details_url: str | None = None
    """The campaign's details page (or its Actions run): shown as "Details" when known."""


@dataclass(frozen=True)
class Chart:
    title: str
    y_min: float
    y_max: float
    ratios: list[float]
    lower: float
    upper: float
    threshold: float

    @property
    def values(self) -> str:
        return ", ".join(f"{r:.4f}" for r in self.ratios)

    def flat(self, value: float) -> str:
        return ", ".join([f"{value:.4f}"] * len(self.ratios))


@dataclass(frozen=True)
class RowView:
    """One row's cells, pre-formatted so every surface shows the same words for the same evidence."""

    id: str
    report: RowReport | None
    semantic: str
    digests: str
    coverage: str
    performance: str
    diagnostics: str
    placement: str
    perf_verdict: str
    reasons: list[str] = field(default_factory=list)
    chart: Chart | None = None
    instructions: str = "—"
    """The instruction counts' cell: candidate / baseline and the difference, what they count, and whether they
    contradict the reported time."""


def _digest_cell(row: RowReport) -> str:
    parity = row.parity
    if parity is None:
        return "no parity evidence"
    if parity.identical:
        return f"✅ match {code(parity.candidate_digest[:12])}"
    shown = ", ".join(code(d.pointer) for d in parity.differences[:3]) or ", ".join(
        code(p) for p in parity.differing_pointers[:3]
    )
    more = parity.differences_total - min(3, max(len(parity.differences), len(parity.differing_pointers[:3])))
    tail = f" (+{count(more)} more)" if more > 0 else ""
    verified = [o.record.id for o in row.exceptions if o.verified]
    if row.semantic == SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS:
        covered_by = ", ".join(code(v) for v in verified)
        return f"☑️ {count(parity.differences_total)} differ, all covered by {covered_by}"
    return f"❌ differ at {shown}{tail}"


def _coverage_cell(row: RowReport) -> str:
    coverage = row.coverage
    if coverage is None:
        return "no coverage evidence"
    low, high = row.row.expect.pressure
    counts = coverage.counts.get("candidate") or next(iter(coverage.counts.values()))
    failed = [check.name for check in coverage.checks if not check.ok]
    status = (
        f"✅ {len(coverage.checks)}/{len(coverage.checks)}"
        if not failed
        else (
            f"❌ {len(coverage.checks) - len(failed)}/{len(coverage.checks)} ({', '.join(map(md, failed))})"
        )
    )
    pressure = counts.readmitted_pressure_events
    band = "∈" if low <= pressure <= high else "∉"
    queued = sum(counts.queued_by_pool.values())
    return (
        f"{status} · pressure {pressure} {band} [{low}, {high}] · handoffs {count(counts.handoffs)}"
        f" · queued {queued}"
    )


def diagnostics_breached(perf: PerfResult | None) -> bool:
    return perf is not None and any(check.breached for check in perf.diagnostics)


def _perf_cell(row: RowReport, threshold: float) -> str:
    perf = row.performance
    verdict = row.perf_verdict
    if verdict in (PerfVerdict.BLOCKED, PerfVerdict.NOT_RUN) or perf is None or perf.bounds is None:
        return f"{icon(verdict)} {verdict.value}: not measured (see why)"
    bounds = perf.bounds
    numbers = f"{ratio(bounds.median)} [{ratio(bounds.lower)}, {ratio(bounds.upper)}]"
    if perf.dependence is not None:
        return f"{icon(verdict)} {md(perf.dependence.line)}"
    if diagnostics_breached(perf):
        return f"{icon(verdict)} {verdict.value}: diagnostics breached, bounds not applied"
    relation = {PerfVerdict.PASS: "≤", PerfVerdict.FAIL: ">"}.get(perf.reported_verdict or verdict, "straddle")
    cell = f"{icon(verdict)} {numbers} {relation} {threshold:g} ({pct(bounds.median - 1)})"
    failing = [gate for gate in perf.kernel_gates if gate.verdict == PerfVerdict.FAIL]
    if verdict == PerfVerdict.FAIL and perf.reported_verdict == PerfVerdict.PASS and failing:
        kernel = failing[0].bounds
        cell += (f" as reported; kernel {md(KERNEL_CLOCK_LABELS[failing[0].clock])} {ratio(kernel.median)} "
                 f"[{ratio(kernel.lower)}, {ratio(kernel.upper)}] > {threshold:g}")
    elif verdict == PerfVerdict.FAIL and perf.verdict == PerfVerdict.PASS and row.instructions is not None:
        cell += " as reported; the instruction count fails it"
    return cell


def _instructions_cell(row: RowReport, perf: PerfConfig) -> str:
    """`✅ ×1.0002 (+41,273) timed region`: ❌ above the threshold when the counts corroborate (⚠️ when they are
    only shown); runs of one arm that differ and a reported time that fell while the work rose are flagged."""
    counts = row.instructions
    if counts is None:
        return "off: not counted" if perf.instructions == "off" and row.performance is not None else "—"
    if counts.problem is not None or counts.ratio is None or counts.delta is None:
        return f"⚠️ not counted: {md(one_line(counts.problem or 'incomplete counts', ''))}"
    above = (counts.lowest_ratio or 0.0) > perf.instructions_threshold
    mark = ("❌" if perf.instructions == "corroborate" else "⚠️") if above else "✅"
    scope = "timed region" if counts.scope == "region" else "whole process"
    cell = f"{mark} ×{counts.ratio:.4f} ({counts.delta:+,}) {scope}"
    if not all(counts.agree(arm) for arm in ARMS):
        cell += " · ⚠️ runs differ"
    if instruction_contradiction(row.performance, counts) is not None:
        cell += " · ⚠️ time fell, work rose"
    return cell


def _diagnostics_cell(perf: PerfResult | None) -> str:
    if perf is None or not perf.diagnostics:
        return "—"
    breached = [check for check in perf.diagnostics if check.breached]
    if not breached:
        return f"✅ {len(perf.diagnostics)}/{len(perf.diagnostics)} ok"
    return "⚠️ " + "; ".join(
        f"{md(check.detail)} (needs {md(check.threshold)})" for check in breached
    )


def _placement_cell(row: RowReport) -> str:
    perf = row.performance
    cpus = ",".join(str(c) for c in row.placement_cpus)
    text = f"{md(row.host)} · CPUs {cpus}"
    if perf is not None:
        place = perf.placement
        text += f" · perf CPU {','.join(str(c) for c in place.cpu_set)} (NUMA {place.numa_node})"
    return text


def _chart(row: RowReport, threshold: float) -> Chart | None:
    perf = row.performance
    if perf is None or perf.bounds is None or not perf.ratios:
        return None
    values = [*perf.ratios, perf.bounds.lower, perf.bounds.upper, threshold]
    margin = max(0.005, (max(values) - min(values)) * 0.1)
    return Chart(
        title=f"{row.row.id}: candidate / baseline per pair",
        y_min=math.floor((min(values) - margin) * 100) / 100,
        y_max=math.ceil((max(values) + margin) * 100) / 100,
        ratios=perf.ratios,
        lower=perf.bounds.lower,
        upper=perf.bounds.upper,
        threshold=threshold,
    )


def row_views(report: CampaignReport) -> list[RowView]:
    """Every configured row, including the ones that never ran (shown as not run, never silently dropped)."""
    threshold = report.config.perf.threshold
    ran = {row.row.id: row for row in report.rows}
    views: list[RowView] = []
    for row in report.rows:
        reasons = [] if row.semantic == SemanticVerdict.PASS else list(row.semantic_reasons)
        if row.perf_verdict != PerfVerdict.PASS:
            reasons.append(f"performance {row.perf_verdict.value}: {row.perf_reason}")
        contradiction = instruction_contradiction(row.performance, row.instructions)
        if contradiction is not None and row.perf_verdict != PerfVerdict.FAIL:
            reasons.append(contradiction)
        views.append(
            RowView(
                id=row.row.id,
                report=row,
                semantic=f"{icon(row.semantic)} {row.semantic.value}",
                digests=_digest_cell(row),
                coverage=_coverage_cell(row),
                performance=_perf_cell(row, threshold),
                diagnostics=_diagnostics_cell(row.performance),
                placement=_placement_cell(row),
                perf_verdict=row.perf_verdict.value,
                reasons=reasons,
                chart=_chart(row, threshold),
                instructions=_instructions_cell(row, report.config.perf),
            )
        )
    for config_row in report.config.rows:
        if config_row.id not in ran and report.stopped is not None:
            views.append(
                RowView(
                    id=config_row.id,
                    report=None,
                    semantic="➖ not run",
                    digests="—",
                    coverage="—",
                    performance="➖ not run",
                    diagnostics="—",
                    placement="—",
                    perf_verdict="NOT_RUN",
                )
            )
    return views


def gate_lines(report: CampaignReport) -> list[tuple[str, str, str]]:
    """(gate, verdict cell, why) for the three independent gates."""
    verdicts = report.concluded
    threshold = report.config.perf.threshold
    rows = report.rows
    fixtures_held = [f.id for f in report.fixtures
                     if f.status in (FixtureStatus.PASS, FixtureStatus.PASS_WITH_SEMANTIC_EXCEPTIONS)]
    fixtures_note = f"; {len(fixtures_held)} lifecycle fixtures hold" if fixtures_held else ""
    if verdicts.semantic == SemanticVerdict.PASS:
        semantic_why = f"canonical digests match on {len(rows)}/{len(rows)} rows{fixtures_note}"
    elif verdicts.semantic == SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS:
        ids = sorted({o.record.id for r in rows for o in r.exceptions if o.verified})
        semantic_why = f"every difference is covered by a verified exception ({', '.join(ids)})"
    elif report.stopped is not None:
        semantic_why = f"stopped at {report.stopped.stage} before any verdict"
    else:
        failed = [r.row.id for r in rows if r.semantic == SemanticVerdict.FAIL]
        parts = [f"{len(failed)} of {len(rows)} rows failed: {', '.join(failed)}"] if failed else []
        for status, word in ((FixtureStatus.FAIL, "failed"), (FixtureStatus.STOPPED, "stopped")):
            ids = [f.id for f in report.fixtures if f.status == status]
            if ids:
                parts.append(f"lifecycle fixture{'s' if len(ids) > 1 else ''} {word}: {', '.join(ids)}")
        semantic_why = "; ".join(parts) or "no row ran"
    perf_rows = {v: [r.row.id for r in rows if r.perf_verdict == v] for v in PerfVerdict}
    counted = [r.row.id for r in rows if r.perf_verdict == PerfVerdict.FAIL and r.performance is not None
               and r.performance.verdict == PerfVerdict.PASS]
    timed = [row_id for row_id in perf_rows[PerfVerdict.FAIL] if row_id not in counted]
    fail_why = "; ".join(
        [f"lower bound > {threshold:g} on {', '.join(timed)}"] * bool(timed)
        + [f"instructions above ×{report.config.perf.instructions_threshold:g} under a wall-time PASS on "
           f"{', '.join(counted)}"] * bool(counted))
    perf_why = {
        PerfVerdict.PASS: f"upper bound ≤ {threshold:g} on every row",
        PerfVerdict.FAIL: fail_why,
        PerfVerdict.INCONCLUSIVE: f"no decision on {', '.join(perf_rows[PerfVerdict.INCONCLUSIVE])}",
        PerfVerdict.BLOCKED: f"could not measure {', '.join(perf_rows[PerfVerdict.BLOCKED])}",
        PerfVerdict.NOT_RUN: f"not run: stopped at {report.stopped.stage}"
        if report.stopped
        else "not measured: a profile was requested (see where the time goes below)"
        if report.mode == "profile"
        else f"not run on {', '.join(perf_rows[PerfVerdict.NOT_RUN]) or 'any row'}",
    }[verdicts.performance]
    sizes_why = report.sizes.reason if report.sizes else "not measured"
    accepted_rows = sorted(
        {row for o in verdicts.acceptances if o.acceptance.gate == "performance" for row in o.covered}
    )
    if accepted_rows:
        perf_why += f"; accepted on {', '.join(accepted_rows)} (see Accepted)"
    if any(o.covered for o in verdicts.acceptances if o.acceptance.gate == "sizes"):
        sizes_why += "; accepted (see Accepted)"
    return [
        ("Semantic parity", f"{icon(verdicts.semantic)} {verdicts.semantic.value}", semantic_why),
        ("Performance", f"{icon(verdicts.performance)} {verdicts.performance.value}", perf_why),
        ("Binary and .text size", f"{icon(verdicts.sizes)} {verdicts.sizes.value}", sizes_why),
    ]


def relationship(report: CampaignReport) -> str:
    """How the baseline relates to the candidate, in words (Stage 1.1 asks for it to be documented)."""
    base = short(report.merge_base)
    return {
        "ancestor": "baseline is an ancestor of the candidate",
        "identical": "baseline and candidate are the same commit",
        "descendant": "baseline descends from the candidate",
        "diverged": f"diverged from merge base {code(base)}",
        "unrelated": "no common history",
    }.get(report.relationship, md(report.relationship))


def accepted_line(report: CampaignReport) -> str | None:
    """`performance FAIL accepted by @who (max 1.10): reason` for each acceptance that covers a FAIL of a campaign
    that succeeded because of them, joined; None when no acceptance made the difference."""
    verdicts = report.concluded
    if verdicts.conclusion != CheckConclusion.SUCCESS or not verdicts.accepted:
        return None
    return "; ".join(o.acceptance.line() for o in verdicts.acceptances if o.covered)


def headline(report: CampaignReport, markdown: bool = True) -> str:
    """The verdict in words; a pass with exceptions never reads as plain byte parity, an accepted FAIL never as a
    pass (its words carry who accepted it and why: escaped for Markdown unless `markdown` is False)."""
    verdicts = report.concluded
    accepted = accepted_line(report)
    if accepted is not None:
        return f"☑️ {md(accepted) if markdown else accepted}"
    if (
        verdicts.conclusion == CheckConclusion.SUCCESS
        and verdicts.semantic == SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS
    ):
        return "☑️ Passed with verified semantic exceptions and no slowdown beyond the threshold"
    if report.mode == "profile" and verdicts.semantic in (
        SemanticVerdict.PASS, SemanticVerdict.PASS_WITH_SEMANTIC_EXCEPTIONS
    ):
        return "🔎 Profile: where the candidate's time goes (requested; no performance gate ran)"
    if verdicts.undecided is not None:  # the words follow the outcome, whichever conclusion the repository chose
        return CONCLUSION_HEADLINES["action_required" if verdicts.undecided == "blocked" else "neutral"]
    return CONCLUSION_HEADLINES[verdicts.conclusion.value]


UNDECIDED_EFFECTS: dict[str, str] = {
    "action_required": "which blocks a required check until a campaign decides",
    "failure": "which fails a required check",
    "neutral": "which GitHub counts as passing for a required check",
}
"""What each conclusion the repository may choose for an undecided campaign does to a required check."""


def undecided_note(report: CampaignReport, command_word: str) -> str | None:
    """One line on a check run that reached no decision: what its conclusion means and how to get a decision."""
    verdicts = report.concluded
    if verdicts.undecided is None:
        return None
    rerun = code(f"{command_word} rerun")
    if report.mode == "profile":
        return (
            f"A profile decides nothing: this check concludes {code('neutral')} under its own name and never "
            f"stands in for the campaign's check; comment {rerun} for a verdict."
        )
    conclusion = verdicts.conclusion.value
    how = (
        f"fix what **Why** names, then comment {rerun}"
        if verdicts.undecided == "blocked"
        else f"comment {rerun} to measure again (less noise decides: a quieter runner or more `perf.pairs`)"
    )
    return (
        f"**No decision was reached, so this check concludes {code(conclusion)}, "
        f"{UNDECIDED_EFFECTS[conclusion]}** (`[checks] undecided_conclusion` in the base branch's campaign "
        f"config). To get a decision, {how}."
    )


def verdict_line(report: CampaignReport, markdown: bool = True) -> str:
    """One line for the sticky status comment (Markdown) and the check-run title (plain text)."""
    verdicts = report.concluded
    line = (
        f"semantic {verdicts.semantic.value} · performance {verdicts.performance.value}"
        f" · sizes {verdicts.sizes.value}"
    )
    if report.stopped is not None:
        stage = one_line(report.stopped.stage, "…")
        line += f" · stopped at {md(stage) if markdown else stage}"
    return line


def _context(
    report: CampaignReport,
    links: Links,
    command_word: str,
    prior_attempts: Sequence[PriorAttempt],
    **extra: Any,
) -> dict[str, Any]:
    verdicts = report.concluded
    revisions = {r.arm: r for r in report.revisions}
    unpinned = {arm: Revision(arm=arm, sha=UNPINNED, requested=UNPINNED) for arm in ("baseline", "candidate")}
    return {
        "mode": "report",
        "report": report,
        "verdicts": verdicts,
        "conclusion": verdicts.conclusion.value,
        "headline": headline(report),
        "undecided_note": undecided_note(report, command_word),
        "accepted": accepted_line(report),
        "verdict_line": verdict_line(report),
        "gates": gate_lines(report),
        "rows": row_views(report),
        "baseline": revisions.get("baseline", unpinned["baseline"]),
        "candidate": revisions.get("candidate", unpinned["candidate"]),
        "links": links,
        "command_word": command_word,
        "threshold": report.config.perf.threshold,
        "prior_attempts": list(prior_attempts),
        **extra,
    }


def _fit_rows(template: str, context: dict[str, Any], limit: int, pointer: str) -> str:
    """Render every row's details; if too long, drop trailing rows' details (saying so), then hard-trim."""
    views: list[RowView] = context["rows"]
    shown = len(views)
    while True:
        text = _render(template, **context, detailed=views[:shown], omitted=[v.id for v in views[shown:]])
        if _size(text) <= limit or shown == 0:
            return trim_markdown(text, limit, pointer)
        # Shrink proportionally to the overflow, at least one row per step.
        shown = min(shown - 1, int(shown * limit / _size(text)))
        shown = max(shown, 0)


def _pointer(links: Links) -> str:
    if links.artifact_url:
        return (
            f"Trimmed to fit GitHub's limit; the complete report is in the [artifact]({links.artifact_url})."
        )
    return "Trimmed to fit GitHub's limit; the complete report is report.md in the campaign artifact."


def check_run_content(
    report: CampaignReport,
    links: Links,
    command_word: str = "/parity",
    prior_attempts: Sequence[PriorAttempt] = (),
) -> CheckRunContent:
    """The completed check run: title, summary (glance) and text (every row's evidence and charts)."""
    report = PublicReport.of(report).report
    context = _context(report, links, command_word, prior_attempts)
    title = f"{headline(report, markdown=False)} — {verdict_line(report, markdown=False)}"
    summary = _fit_rows("check_run_summary.md.j2", context, CHECK_TEXT_LIMIT, _pointer(links))
    text = _fit_rows("check_run_text.md.j2", context, CHECK_TEXT_LIMIT, _pointer(links))
    return CheckRunContent(title=_one_line(title, TITLE_LIMIT), summary=summary, text=text)


def result_comment(
    report: CampaignReport,
    links: Links,
    command_word: str = "/parity",
    prior_attempts: Sequence[PriorAttempt] = (),
) -> str:
    """The NEW comment posted when verdicts land (its marker carries the campaign id for idempotency)."""
    report = PublicReport.of(report).report
    context = _context(
        report,
        links,
        command_word,
        prior_attempts,
        marker=result_marker(report.campaign_id, context_sha(report)),
    )
    return _fit_rows("comment_result.md.j2", context, COMMENT_LIMIT, _pointer(links))


def report_markdown(
    report: CampaignReport,
    links: Links,
    command_word: str = "/parity",
    prior_attempts: Sequence[PriorAttempt] = (),
) -> str:
    """report.md for the artifact: everything, never trimmed, including the raw output of the code under
    test that the check run and the comments withhold."""
    context = _context(report, links, command_word, prior_attempts)
    return _render(
        "report.md.j2", **context, detailed=context["rows"], omitted=[], raw_outputs=raw_outputs(report)
    )


def context_sha(report: CampaignReport) -> str:
    """The candidate SHA for the result marker; a SHA is hex, anything else is not carried into a marker."""
    sha = next((r.sha for r in report.revisions if r.arm == "candidate"), "")
    return sha if re.fullmatch(r"[0-9a-f]{7,64}", sha) else "unknown"


def _marker_safe(campaign_id: str) -> str:
    return campaign_id if re.fullmatch(r"[A-Za-z0-9._-]{1,100}", campaign_id) else "invalid"


def result_marker(campaign_id: str, head_sha: str) -> str:
    return f"{RESULT_MARKER_PREFIX} campaign={_marker_safe(campaign_id)} sha={head_sha} -->"


def result_marker_campaign(body: str) -> str | None:
    """The campaign id of a result comment we posted (the marker opens the body), else None.

    Requiring the marker at the very start ignores people quoting our comments (quotes start with `>`).
    """
    match = re.match(re.escape(RESULT_MARKER_PREFIX) + r" campaign=(\S+) sha=\S+ -->", body)
    return match.group(1) if match else None


def is_status_comment(body: str) -> bool:
    return body.startswith(STATUS_MARKER)


STATE_LABELS = {
    "requested": "queued",
    "dispatched": "starting",
    "running": "running",
    "completed": "completed",
    "cancelled": "cancelled",
    "superseded": "superseded",
    "timed_out": "timed out",
    "errored": "errored",
}


def state_label(state: object) -> str:
    """A stored campaign state in reviewers' words (`requested` is waiting in the queue)."""
    return STATE_LABELS.get(str(state), md(state))


def sentence(text: str) -> str:
    """Close a reason with a full stop unless it already ends a sentence."""
    return "" if text.rstrip().endswith((".", "!", "?", ")")) else "."


NOT_PUBLISHED = " (the rest is not published: it may carry output of the code under test)"


def ended_reason(state: str, reason: str) -> str:
    """What the check run shows of an end reason: a config error in full (the config is the base
    revision's own, and the maintainer needs every line to fix it), anything else on one line, since an
    errored campaign's reason may end in the log of the code under test."""
    return reason if state == "config_error" else one_line(reason, NOT_PUBLISHED)


def first_line(reason: str) -> str:
    """The headline of a possibly multi-line reason, saying how much more the check run shows."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    head = lines[0].rstrip(":")
    more = len(lines) - 1
    return f"{head} ({more} more line{'s' if more != 1 else ''} in the check run)" if more else head


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- lifecycle surfaces -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgressView:
    """Where a running campaign is, for the in-progress check run and the status comment."""

    stage: str
    row: str | None
    detail: str
    done: int | None
    total: int | None
    eta_seconds: float | None

    @classmethod
    def of(cls, event: ProgressEvent, eta_seconds: float | None) -> ProgressView:
        """Stage, row and detail come from the campaign process (a stop's detail carries its reason), so
        each is cut to one line like every other published reason."""
        return cls(
            stage=one_line(event.stage, "…"),
            row=one_line(event.row, "…") if event.row is not None else None,
            detail=one_line(event.detail),
            done=event.done,
            total=event.total,
            eta_seconds=eta_seconds,
        )

    @property
    def step(self) -> str:
        if self.done is None or not self.total:
            return "—"
        unit = "pair" if self.stage.startswith("perf") else "step"
        return f"{unit} {self.done}/{self.total}"


def progress_content(
    campaign: Campaign,
    progress: ProgressView | None,
    links: Links,
    command_word: str = "/parity",
    *,
    position: int | None = None,
) -> CheckRunContent:
    """The queued or in-progress check run: where the campaign is and how to stop it."""
    context = {
        "campaign": campaign,
        "progress": progress,
        "links": links,
        "command_word": command_word,
        "position": position,
    }
    where = f"{progress.stage}{' · ' + progress.row if progress.row else ''}" if progress else "queued"
    step = f" · {progress.step}" if progress and progress.step != "—" else ""
    eta = f" · ETA {duration(progress.eta_seconds)}" if progress and progress.eta_seconds is not None else ""
    return CheckRunContent(
        title=_one_line(
            f"🏃 Running: {where}{step}{eta}"
            if progress
            else f"⏳ Queued{f' (position {position})' if position else ''}",
            TITLE_LIMIT,
        ),
        summary=trim_markdown(
            _render("check_run_summary.md.j2", mode="progress", **context),
            CHECK_TEXT_LIMIT,
            "Trimmed to fit GitHub's limit.",
        ),
        text="",
    )


def ended_content(
    campaign: Campaign, state: str, reason: str, links: Links, command_word: str = "/parity"
) -> CheckRunContent:
    """A campaign that ended without a report (cancelled, superseded, timed out, errored, bad config)."""
    conclusion, label = ENDED_STATES[state]
    headline_reason = first_line(reason) if state == "config_error" else one_line(reason, "")
    context = {
        "campaign": campaign,
        "state": state,
        "label": label,
        "reason": ended_reason(state, reason),
        "links": links,
        "command_word": command_word,
        "conclusion": conclusion,
    }
    return CheckRunContent(
        title=_one_line(f"{label}: {headline_reason or state}", TITLE_LIMIT),
        summary=trim_markdown(
            _render("check_run_summary.md.j2", mode="ended", **context),
            CHECK_TEXT_LIMIT,
            "Trimmed to fit GitHub's limit.",
        ),
        text="",
    )


def status_comment(
    campaign: Campaign,
    mode: str,
    links: Links,
    command_word: str = "/parity",
    *,
    position: int | None = None,
    report: CampaignReport | None = None,
    state: str | None = None,
    reason: str | None = None,
) -> str:
    """The sticky status comment, starting with its marker so a restarted bot finds it again.

    It carries no live progress: each edit is a write, and the check run already shows the stage.
    """
    label = ENDED_STATES[state][1] if state else ""
    if state is not None and reason is not None:
        reason = ended_reason(state, reason)
    context = {
        "marker": STATUS_MARKER,
        "campaign": campaign,
        "mode": mode,
        "links": links,
        "command_word": command_word,
        "position": position,
        "report": report,
        "verdict_line": verdict_line(PublicReport.of(report).report) if report else "",
        "headline": headline(report) if report else "",
        "state": state,
        "label": label,
        "reason": reason,
    }
    return trim_markdown(
        _render("comment_status.md.j2", **context), COMMENT_LIMIT, "Trimmed to fit GitHub's limit."
    )


REPLY_KINDS = ("refused", "help", "status", "duplicate", "unknown_command", "accepted", "revoked")


def reply(
    kind: str, command_word: str, commands: Iterable[CommandSpec], label: str, context: Mapping[str, Any]
) -> str:
    """A short reply to a command: refusals and errors name the reason and the fix."""
    if kind not in REPLY_KINDS:
        raise ValueError(f"unknown reply kind {kind!r}; expected one of {REPLY_KINDS}")
    text = _render(
        "reply.md.j2", kind=kind, command_word=command_word, commands=list(commands), label=label, **context
    )
    return trim_markdown(text, COMMENT_LIMIT, "Trimmed to fit GitHub's limit.")


def merge_group_content(result: CarriedResult, command_word: str = "/parity") -> CheckRunContent:
    """The campaign check on a merge group's commit in carry mode: concluded from the group's pull requests,
    saying plainly that nothing was measured on that commit."""
    lacking = [member for member in result.members if not member.carried]
    if result.conclusion == "success":
        title = f"✅ Carried forward: {plural(len(result.members), 'pull request')} passed kv-parity at their heads"
    elif not result.members:
        title = "❌ Not carried forward: the merge group names no pull request"
    else:
        title = f"❌ Not carried forward: {', '.join(f'#{m.number}' for m in lacking)} lack a successful kv-parity"
    summary = _render("merge_group.md.j2", result=result, lacking=lacking, command_word=command_word)
    return CheckRunContent(
        title=_one_line(title, TITLE_LIMIT),
        summary=trim_markdown(summary, CHECK_TEXT_LIMIT, "Trimmed to fit GitHub's limit."),
        text="",
    )


_SAFE_URL = re.compile(r"^https?://[^\s()<>\[\]`]+$")


def link(label: str, url: object) -> str:
    """A Markdown link when `url` is a plain http(s) URL, else the label alone (a URL is never made to break out)."""
    return f"[{label}]({url})" if isinstance(url, str) and _SAFE_URL.match(url) else label


def covered_label(covered: Sequence[str]) -> str:
    """What an acceptance covers: `the size gate`, or the rows as code."""
    return ", ".join("the size gate" if item == "sizes" else code(item) for item in covered)


def rows_label(rows: Sequence[str] | None) -> str:
    return ", ".join(rows) if rows else "every row"


ENV.filters["rows_label"] = rows_label
ENV.filters.update(state_label=state_label)
ENV.globals.update(
    link=link,
    covered_label=covered_label,
    first_line=first_line,
    sentence=sentence,
    diagnostics_breached=diagnostics_breached,
    kernel_clocks=KERNEL_CLOCK_LABELS,
    relationship=relationship,
    GateVerdict=GateVerdict,
)
