"""The verdicts in words: the headline, the one-line verdict, what an undecided conclusion means, how the
revisions relate, and a campaign's states as reviewers read them."""

from __future__ import annotations

from bot.publish.markdown import code, md, short
from bot.publish.public import one_line
from runners.schema.report import CampaignReport, CheckConclusion, SemanticVerdict

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


def first_line(reason: str) -> str:
    """The headline of a possibly multi-line reason, saying how much more the check run shows."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    head = lines[0].rstrip(":")
    more = len(lines) - 1
    return f"{head} ({more} more line{'s' if more != 1 else ''} in the check run)" if more else head
