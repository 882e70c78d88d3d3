"""Pure rendering: a campaign report (or a campaign's state) in, Markdown strings out.

Every string a human reads on GitHub comes from `templates/*.md.j2` through this module, so golden files pin
exactly what is posted. Nothing here performs I/O beyond reading templates; the effects live in
`bot.publish.publisher`. Numbers are formatted in `bot.publish.markdown`, cells in `bot.publish.views`, words in
`bot.publish.wording`; layout lives in the templates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bot.core.attempts import PriorAttempt
from bot.core.campaign import Campaign
from bot.core.commands import CommandSpec
from bot.core.merge_queue import CarriedResult
from bot.core.repo_values import COMPARE_FILES_LIMIT
from bot.core.watched_paths import WatchedChange
from bot.publish.comment_markers import STATUS_MARKER, context_sha, result_marker
from bot.publish.limits import CHECK_TEXT_LIMIT, COMMENT_LIMIT, TITLE_LIMIT, title_line, trim_markdown, utf8_size
from bot.publish.markdown import UNPINNED, duration, plural
from bot.publish.public import PublicReport, ended_reason, one_line, raw_outputs
from bot.publish.templating import render_markdown
from bot.publish.views import CheckRunContent, Links, ProgressView, RowView, gate_lines, row_views
from bot.publish.wording import (
    ENDED_STATES,
    accepted_line,
    first_line,
    headline,
    undecided_note,
    verdict_line,
)
from runners.schema.report import CampaignReport, Revision


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
        "threshold": report.perf_threshold,
        "prior_attempts": list(prior_attempts),
        **extra,
    }


def _fit_rows(template: str, context: dict[str, Any], limit: int, pointer: str) -> str:
    """Render every row's details; if too long, drop trailing rows' details (saying so), then hard-trim."""
    views: list[RowView] = context["rows"]
    shown = len(views)
    while True:
        text = render_markdown(template, **context, detailed=views[:shown], omitted=[v.id for v in views[shown:]])
        if utf8_size(text) <= limit or shown == 0:
            return trim_markdown(text, limit, pointer)
        # Shrink proportionally to the overflow, at least one row per step.
        shown = min(shown - 1, int(shown * limit / utf8_size(text)))
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
    return CheckRunContent(title=title_line(title, TITLE_LIMIT), summary=summary, text=text)


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
    return render_markdown(
        "report.md.j2", **context, detailed=context["rows"], omitted=[], raw_outputs=raw_outputs(report)
    )


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
        title=title_line(
            f"🏃 Running: {where}{step}{eta}"
            if progress
            else f"⏳ Queued{f' (position {position})' if position else ''}",
            TITLE_LIMIT,
        ),
        summary=trim_markdown(
            render_markdown("check_run_summary.md.j2", mode="progress", **context),
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
        title=title_line(f"{label}: {headline_reason or state}", TITLE_LIMIT),
        summary=trim_markdown(
            render_markdown("check_run_summary.md.j2", mode="ended", **context),
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
        render_markdown("comment_status.md.j2", **context), COMMENT_LIMIT, "Trimmed to fit GitHub's limit."
    )


REPLY_KINDS = ("refused", "help", "status", "duplicate", "unknown_command", "accepted", "revoked")


def reply(
    kind: str, command_word: str, commands: Iterable[CommandSpec], label: str, context: Mapping[str, Any]
) -> str:
    """A short reply to a command: refusals and errors name the reason and the fix."""
    if kind not in REPLY_KINDS:
        raise ValueError(f"unknown reply kind {kind!r}; expected one of {REPLY_KINDS}")
    text = render_markdown(
        "reply.md.j2", kind=kind, command_word=command_word, commands=list(commands), label=label, **context
    )
    return trim_markdown(text, COMMENT_LIMIT, "Trimmed to fit GitHub's limit.")


WATCHED_PATHS_SHOWN = 50
"""How many of an unlabelled head's watched changes the check run lists (the rest are counted)."""


def watched_paths_content(change: WatchedChange, label: str, command_word: str = "/parity") -> CheckRunContent:
    """The campaign check at an unlabelled head under watched paths: skipped, or waiting for a campaign, saying
    plainly that nothing was measured."""
    if change.changed is None:
        title = "⏸ kv-parity needed: more files changed than GitHub lists"
    elif change.needs_campaign:
        title = f"⏸ kv-parity needed: {plural(len(change.watched), 'watched path')} changed"
    else:
        title = "⏭ kv-parity not needed: no watched path changed"
    summary = render_markdown("watched_paths.md.j2", change=change, label=label, command_word=command_word,
                              shown=WATCHED_PATHS_SHOWN, limit=COMPARE_FILES_LIMIT)
    return CheckRunContent(
        title=title_line(title, TITLE_LIMIT),
        summary=trim_markdown(summary, CHECK_TEXT_LIMIT, "Trimmed to fit GitHub's limit."),
        text="",
    )


def merge_group_content(result: CarriedResult, command_word: str = "/parity") -> CheckRunContent:
    """The campaign check on a merge group's commit in carry mode: concluded from the group's pull requests,
    saying plainly that nothing was measured on that commit."""
    lacking = [member for member in result.members if not member.carried]
    needless = sum(member.conclusion == "skipped" for member in result.members)
    if result.conclusion == "success":
        title = f"✅ Carried forward: {plural(len(result.members), 'pull request')} passed kv-parity at their heads"
        title += f" ({needless} needed no campaign)" if needless else ""
    elif not result.members:
        title = "❌ Not carried forward: the merge group names no pull request"
    else:
        title = f"❌ Not carried forward: {', '.join(f'#{m.number}' for m in lacking)} lack a successful kv-parity"
    summary = render_markdown("merge_group.md.j2", result=result, lacking=lacking, command_word=command_word)
    return CheckRunContent(
        title=title_line(title, TITLE_LIMIT),
        summary=trim_markdown(summary, CHECK_TEXT_LIMIT, "Trimmed to fit GitHub's limit."),
        text="",
    )
