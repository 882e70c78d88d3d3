"""A bisect's Markdown: bisect.md, the bot's comment on the pull request and its `kv-parity / bisect` check run,
all from `templates/bisect.md.j2` (pinned by golden files, like every other text the bot posts)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.publish.limits import CHECK_TEXT_LIMIT, COMMENT_LIMIT, trim_markdown
from bot.publish.markdown import code, icon, short
from bot.publish.templating import MARKDOWN
from bot.publish.views import CheckRunContent, Links
from runners.schema.bisect_rule import BisectReport, ProbeState

BISECT_MARKER_PREFIX = "<!-- kv-parity:bisect"
STATE_LABELS = {ProbeState.BAD: "❌ bad", ProbeState.GOOD: "✅ good", ProbeState.UNDECIDED: "⚠️ undecided"}


@dataclass(frozen=True)
class ProbeView:
    number: int
    commit: str
    position: int
    state: str
    semantic: str
    performance: str
    sizes: str
    attempts: str


@dataclass(frozen=True)
class CommitView:
    sha: str
    mark: str


def headline(bisect: BisectReport) -> str:
    result = bisect.result
    if result.outcome == "culprit" and result.culprit is not None:
        return f"🔎 Bisect: the first bad commit is {code(short(result.culprit))}"
    if result.outcome == "not_bad":
        return f"✅ Bisect: {code(short(bisect.bad))} does not fail against good"
    return (f"⚠️ Bisect narrowed it to {code(short(result.good))}.."
            f"{code(short(result.bad))}")


def _probe_views(bisect: BisectReport) -> list[ProbeView]:
    views = []
    for number, probe in enumerate(bisect.probes, 1):
        verdicts = probe.attempts[-1].report.concluded
        views.append(ProbeView(
            number=number, commit=probe.commit, position=probe.position, state=STATE_LABELS[probe.state],
            semantic=f"{icon(verdicts.semantic)} {verdicts.semantic.value}",
            performance=f"{icon(verdicts.performance)} {verdicts.performance.value}",
            sizes=f"{icon(verdicts.sizes)} {verdicts.sizes.value}",
            attempts=" → ".join(attempt.state.value for attempt in probe.attempts),
        ))
    return views


def _commit_views(bisect: BisectReport) -> list[CommitView]:
    probed = {probe.commit: probe.state for probe in bisect.probes}
    culprit = bisect.result.culprit
    return [CommitView(sha=sha, mark=" ".join(filter(None, (
        STATE_LABELS[probed[sha]] if sha in probed else "",
        "← culprit" if sha == culprit else "",
    )))) for sha in bisect.commits]


def _render(bisect: BisectReport, marker: str, links: Links | None) -> str:
    context = {
        "marker": marker, "headline": headline(bisect), "bisect": bisect, "result": bisect.result,
        "target": ", ".join(bisect.rule.target) or "none decided", "probes": _probe_views(bisect),
        "campaigns": sum(len(probe.attempts) for probe in bisect.probes), "commits": _commit_views(bisect),
        "links": links,
    }
    text = MARKDOWN.get_template("bisect.md.j2").render(**context)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n") + "\n"


def bisect_markdown(bisect: BisectReport) -> str:
    """bisect.md, beside bisect.json."""
    return _render(bisect, "", None)


def bisect_marker(campaign_id: str) -> str:
    return f"{BISECT_MARKER_PREFIX} {campaign_id} -->"


def bisect_comment(bisect: BisectReport, campaign_id: str, links: Links) -> str:
    """The comment the bot posts on the pull request, found again by its marker (posted once)."""
    pointer = "the full result is in bisect.md beside every probe's report"
    return trim_markdown(_render(bisect, bisect_marker(campaign_id), links), COMMENT_LIMIT, pointer)


def bisect_check_run(bisect: BisectReport, links: Links) -> CheckRunContent:
    """The `kv-parity / bisect` check run: the result as its title, the same Markdown as its summary."""
    result = bisect.result
    title = (f"Culprit {short(result.culprit)}" if result.outcome == "culprit" and result.culprit
             else "Nothing to bisect" if result.outcome == "not_bad"
             else f"Range {short(result.good)}..{short(result.bad)}")
    body = trim_markdown(_render(bisect, "", links), CHECK_TEXT_LIMIT, "see bisect.md")
    return CheckRunContent(title=title, summary=body, text="")
