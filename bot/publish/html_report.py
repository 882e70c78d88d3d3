"""report.html: the campaign report as a page people look at (verdicts, tables, inline SVG charts).

The templates' HTML environment (`bot.publish.templating`), with autoescape on: every string of a report came back
from jobs that ran pull-request code, so nothing reaches the page unescaped. The page is
self-contained (no script, no fetch, CSS inline, charts as inline SVG from bot/publish/svg.py) and readable on a
phone; the service's pages extend the same base (`templates/_page.html.j2`) through `page`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

from jinja2 import Environment
from markupsafe import Markup, escape

from bot.core.attempts import PriorAttempt
from bot.publish import svg
from bot.publish.markdown import prose, ratio
from bot.publish.marks import with_marks
from bot.publish.public import PublicReport, one_line, raw_outputs
from bot.publish.templating import environment
from bot.publish.views import Links, RowView, diagnostics_breached, gate_lines, row_views
from bot.publish.wording import headline, relationship, verdict_line
from runners.schema.config import PerfConfig
from runners.schema.report import (
    CampaignReport,
    DeterminismResult,
    HostFacts,
    InstructionCounts,
    ParityResult,
    PerfResult,
    RowReport,
    Sample,
    build_setting_differences,
)

_PUNCTUATION = re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_INLINE = re.compile(rf"\\([{_PUNCTUATION}])|(`+)")


def inline(markdown: str) -> Markup:
    """HTML for one line of bot/publish/render.py's cell Markdown (backslash escapes and `code spans` only).

    The Markdown cells (`row_views`, `gate_lines`, `prose`) are reused so the page says exactly what the
    check run says; their text is escaped for HTML after the Markdown escapes are undone, so no input can
    produce a tag. Code spans follow CommonMark: a run of N backticks closes at the next run of exactly N.
    """
    out: list[str] = []
    position = 0
    text = markdown
    while True:
        match = _INLINE.search(text, position)
        if match is None:
            out.append(str(escape(text[position:])))
            break
        out.append(str(escape(text[position : match.start()])))
        if match.group(1) is not None:
            out.append(str(escape(match.group(1))))
            position = match.end()
            continue
        fence = match.group(2)
        closing = re.compile(rf"(?<!`){fence}(?!`)")
        end = closing.search(text, match.end())
        if end is None:
            out.append(str(escape(fence)))
            position = match.end()
            continue
        content = text[match.end() : end.start()].replace("\\|", "|")
        if content.startswith(" ") and content.endswith(" ") and content.strip():
            content = content[1:-1]
        out.append(f"<code>{escape(content)}</code>")
        position = end.end()
    return Markup("".join(out))


def _environment() -> Environment:
    env = environment(html=True)
    env.filters.update(
        inline=inline,
        prose=lambda value: inline(prose(value)),
        href=lambda name: artifact_href(*str(name).split("/")),
    )
    return env


ENV = _environment()

_PAGE = ENV.from_string(
    '{% extends "_page.html.j2" %}{% block title %}{{ title }}{% endblock %}'
    "{% block content %}{{ body }}{% endblock %}"
)


def page(title: str, body_html: Markup) -> str:
    """A complete page in the shared base: `title` is escaped, `body_html` is inserted as the caller built it
    (build it with `markupsafe.escape`/`Markup` or this module's templates, never from raw input)."""
    return with_marks(_PAGE.render(title=title, body=body_html))


# --- the report page ----------------------------------------------------------------------------------------


def safe_url(url: str | None) -> str | None:
    """`url` if it is an absolute http(s) URL (a `Links` field), else None: no `javascript:` or `data:` link."""
    if not url:
        return None
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    if any(c in url.strip() for c in "\"'<>`\\ ") or any(ord(c) < 32 or ord(c) == 127 for c in url):
        return None
    return url.strip()


def artifact_href(*segments: str) -> str | None:
    """A relative link to a file of the artifact, each segment percent-encoded so it cannot become a scheme,
    an absolute path or a parent directory; None when a segment is empty, `.` or `..`."""
    if any(segment in ("", ".", "..") for segment in segments):
        return None
    return "/".join(quote(segment, safe="") for segment in segments)


@dataclass(frozen=True)
class RatioPoints:
    """A row's pair ratios in run order: by arm order, and the attempts invalidated (and rerun)."""

    baseline_first: list[tuple[float, float]]
    candidate_first: list[tuple[float, float]]
    invalidated: list[tuple[float, float]]


def ratio_points(perf: PerfResult) -> RatioPoints:
    """Each measured pair attempt's candidate/baseline ratio at the pair's position in run order.

    Read from the recorded samples (every attempt is kept), so invalidated attempts are shown next to the
    rerun that replaced them; a report without samples falls back to the final ratios in pair order.
    """
    orders = {plan.pair: plan.order for plan in perf.schedule}
    attempts: dict[tuple[int, int], dict[str, Sample]] = {}
    for sample in perf.samples:
        if sample.kind == "measured" and sample.pair is not None:
            attempts.setdefault((sample.pair, sample.attempt), {})[sample.arm] = sample
    position: dict[int, int] = {}
    points = RatioPoints([], [], [])
    for (pair, _attempt), members in attempts.items():
        x = float(position.setdefault(pair, len(position) + 1))
        base, cand = members.get("baseline"), members.get("candidate")
        if base is None or cand is None or not base.metric_ms or cand.metric_ms is None:
            continue
        value = cand.metric_ms / base.metric_ms
        if "invalidated" in (base.status, cand.status):
            points.invalidated.append((x, value))
        elif base.status == "ok" and cand.status == "ok":
            target = points.baseline_first if orders.get(pair) == "baseline_first" else points.candidate_first
            target.append((x, value))
    if not (points.baseline_first or points.candidate_first) and perf.ratios:
        for index, value in enumerate(perf.ratios):
            order = perf.schedule[index].order if index < len(perf.schedule) else "baseline_first"
            target = points.baseline_first if order == "baseline_first" else points.candidate_first
            target.append((float(index + 1), value))
    return points


def _reference_lines(perf: PerfResult, threshold: float) -> dict[str, float]:
    lines = {"threshold": threshold}
    if perf.bounds is not None:
        applied = "" if not diagnostics_breached(perf) else " (not applied)"
        lines[f"lower bound{applied}"] = perf.bounds.lower
        lines["median"] = perf.bounds.median
        lines[f"upper bound{applied}"] = perf.bounds.upper
    return lines


def row_charts(row_id: str, perf: PerfResult | None, threshold: float) -> list[Markup]:
    """The ratio-per-pair chart in run order and the histogram of ratios, or a sentence saying why not."""
    if perf is None:
        return [Markup(svg.empty_chart(f"{row_id}: ratios", "performance was not measured on this row"))]
    points = ratio_points(perf)
    series = [
        svg.Series("baseline first", points.baseline_first, line=False, colour=svg.PALETTE[0]),
        svg.Series("candidate first", points.candidate_first, line=False, colour=svg.PALETTE[1], marker="square"),
        svg.Series("invalidated attempt", points.invalidated, line=False, colour=svg.PALETTE[5], marker="cross"),
    ]
    if not any(s.points for s in series):
        why = "no pair completed, so there is no ratio to draw" + (f" ({one_line(perf.reason, '')})"
                                                                     if perf.reason else "")
        return [Markup(svg.empty_chart(f"{row_id}: ratios", why))]
    references = _reference_lines(perf, threshold)
    scatter = svg.chart(
        [s for s in series if s.points],
        title=f"{row_id}: candidate / baseline per pair, run order",
        x_label="pair (run order)",
        y_label="ratio",
        reference_lines=references,
    )
    final = [value for _, value in points.baseline_first + points.candidate_first]
    if not final:
        why = "no pair completed, only invalidated attempts, so there is no ratio to count"
        return [Markup(scatter), Markup(svg.empty_chart(f"{row_id}: distribution of pair ratios", why))]
    hist = svg.histogram(
        final,
        title=f"{row_id}: distribution of pair ratios",
        x_label="candidate / baseline",
        reference_lines={name: value for name, value in references.items() if name in ("threshold", "median")},
    )
    return [Markup(scatter), Markup(hist)]


def instruction_chart(row_id: str, counts: InstructionCounts, perf: PerfConfig) -> Markup:
    """Each arm's count per run as a bar, against the count above which the candidate's would fail a PASS."""
    title = f"{row_id}: instructions in the {'timed region' if counts.scope == 'region' else 'whole process'}"
    if counts.problem is not None:
        return Markup(svg.empty_chart(title, f"not counted: {one_line(counts.problem, '')}"))
    colours = {"baseline": svg.PALETTE[0], "candidate": svg.PALETTE[1]}
    values = [(f"{run.arm} run {run.run + 1}", figure / 1e6, colours[run.arm])
              for run in sorted(counts.runs, key=lambda run: (run.arm != "baseline", run.run))
              for figure in [run.region_ir if counts.scope == "region" else run.process_ir] if figure is not None]
    baseline = counts.figures("baseline")
    references = ({f"baseline ×{perf.instructions_threshold:g} ({perf.instructions})":
                   max(baseline) * perf.instructions_threshold / 1e6} if baseline else {})
    return Markup(svg.bars(values, title=title, x_label="million instructions", reference_lines=references))


def _determinism_cell(determinism: DeterminismResult | None) -> str:
    if determinism is None:
        return "— no evidence"
    runs = " + ".join(str(len(determinism.digests.get(arm, []))) for arm in ("baseline", "candidate"))
    if determinism.unstable_arms:
        return f"❌ unstable: {', '.join(determinism.unstable_arms)} ({runs} runs)"
    return f"✅ stable ({runs} runs{', concurrent' if determinism.concurrent else ''})"


def _digests_short(parity: ParityResult | None) -> str:
    if parity is None:
        return "—"
    return f"{parity.baseline_digest[:12]} / {parity.candidate_digest[:12]}"


@dataclass(frozen=True)
class RowPage:
    """One row of the page: render.py's cells (the same words as the check run) plus what only HTML shows."""

    view: RowView
    anchor: str
    determinism: str
    digests_short: str
    ratio: str
    decision: str
    charts: list[Markup]
    host: HostFacts | None
    files: list[tuple[str, str | None]] = field(default_factory=list)
    instruction_chart: Markup | None = None


def _anchor(prefix: str, index: int, name: str) -> str:
    return f"{prefix}-{index}-{re.sub(r'[^A-Za-z0-9_-]+', '-', name)[:40]}"


def _ratio_cell(perf: PerfResult | None) -> str:
    if perf is None or perf.bounds is None:
        return "—"
    bounds = perf.bounds
    return f"{ratio(bounds.median)} [{ratio(bounds.lower)}, {ratio(bounds.upper)}]"


def _decision(perf: PerfResult | None, row: RowReport | None) -> str:
    """The one line saying which method decided and why (the dependence method's own line when it ran)."""
    if perf is not None and perf.dependence is not None:
        return one_line(perf.dependence.line, "")
    if perf is not None and perf.reason:
        return one_line(perf.reason, "")
    return one_line(row.perf_reason, "") if row is not None else "not run"


def row_pages(report: CampaignReport) -> list[RowPage]:
    threshold = report.perf_threshold
    pages: list[RowPage] = []
    for index, view in enumerate(row_views(report)):
        row = view.report
        perf = row.performance if row is not None else None
        attribution = row.attribution if row is not None else None
        files = [
            (name, artifact_href("attribution", view.id, name)) for name in (attribution.files if attribution else [])
        ]
        pages.append(
            RowPage(
                view=view,
                anchor=_anchor("row", index, view.id),
                determinism=_determinism_cell(row.determinism) if row is not None else "—",
                digests_short=_digests_short(row.parity) if row is not None else "—",
                ratio=_ratio_cell(perf),
                decision=_decision(perf, row),
                charts=row_charts(view.id, perf, threshold) if row is not None else [],
                host=(row.node or (perf.placement.host if perf else None)) if row is not None else None,
                files=files,
                instruction_chart=(instruction_chart(view.id, row.instructions, report.config.perf)
                                   if row is not None and row.instructions is not None else None),
            )
        )
    return pages


def _gates(report: CampaignReport) -> list[tuple[str, str, str, Markup]]:
    """(gate, verdict word, verdict cell, why) for the banner: render.py's three gates and the conclusion."""
    verdicts = report.concluded
    words = (verdicts.semantic.value, verdicts.performance.value, verdicts.sizes.value)
    gates = [
        (gate, word, cell, inline(prose(why)))
        for (gate, cell, why), word in zip(gate_lines(report), words, strict=True)
    ]
    gates.append(
        ("Check run conclusion", verdicts.conclusion.value, verdicts.conclusion.value, Markup(""))
    )
    return gates


def report_html(
    report: CampaignReport,
    links: Links | None = None,
    prior_attempts: Sequence[PriorAttempt] = (),
    public: bool = False,
    nav: Markup | None = None,
) -> str:
    """report.html: the verdicts, every row's table and charts, fixtures, sizes, revisions and inputs.

    `public=True` renders the stripped public report (no raw output of the code under test, every reason on
    one line), the variant a web page may serve; the artifact's page renders everything. `nav` is the serving
    page's own navigation, shown above the banner. Verdict emoji become inline-SVG marks (`bot.publish.marks`).
    """
    if public:
        report = PublicReport.of(report).report
    links = links or Links()
    verdicts = report.concluded
    revisions = {r.arm: r for r in report.revisions}
    settings = {a.arm: a.settings for a in report.artifacts if a.settings is not None}
    document = ENV.get_template("report.html.j2").render(
        report=report,
        verdicts=verdicts,
        headline=headline(report, markdown=False),
        verdict_line=verdict_line(report, markdown=False),
        gates=_gates(report),
        rows=row_pages(report),
        fixtures=[(_anchor("fixture", i, f.id), f) for i, f in enumerate(report.fixtures)],
        baseline=revisions.get("baseline"),
        candidate=revisions.get("candidate"),
        relationship=inline(relationship(report)),
        settings=settings,
        build_differences=build_setting_differences(settings.get("baseline"), settings.get("candidate")),
        threshold=report.perf_threshold,
        links={name: safe_url(getattr(links, name)) for name in ("artifact_url", "check_run_url", "result_url")},
        prior_attempts=list(prior_attempts),
        raw_outputs=[] if public else raw_outputs(report),
        public=public,
        nav=nav,
    )
    return with_marks(document)
