"""Unlabelled pull requests under `[checks] watched_paths`: does this head need a campaign? (Pure; what the bot
does with the answer is `bot.core.watched_actions`.)

A team that makes the campaign check required cannot have every pull request wait for a label: with watched
paths in the base branch's config, the bot concludes the check at an unlabelled head at once, `skipped` (which
passes a required check) when the head changes none of them, `action_required` naming what it changes when it
does, so the pull request waits for a maintainer's label and a campaign. Decided from the base branch's config
and GitHub's list of the head's changed files (a list GitHub cut at its limit counts as touching them: what it
did not list cannot be cleared).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

NEEDS_CAMPAIGN_PREFIX = "needs-campaign-"
"""External ids of these check runs: never a campaign's id, so they are told apart from the campaign's own."""


def needs_campaign_id(pr: int, head_sha: str) -> str:
    """The check run's external id: it names the pull request, which GitHub leaves out of a fork's check run, so
    its Run button (and GitHub's Re-run) reaches the pull request it was made for."""
    return f"{NEEDS_CAMPAIGN_PREFIX}{pr}-{head_sha}"


def needs_campaign_pr(external_id: str) -> int | None:
    """The pull request a watched-paths check run was made for, or None for any other external id."""
    number, _, head = external_id.removeprefix(NEEDS_CAMPAIGN_PREFIX).partition("-")
    if not external_id.startswith(NEEDS_CAMPAIGN_PREFIX) or not number.isdigit() or len(head) != 40:
        return None
    return int(number)


@dataclass(frozen=True)
class WatchedChange:
    """What an unlabelled head changes, against the base branch's watched paths."""

    pr: int
    head_sha: str
    config_source: str
    patterns: tuple[str, ...]
    changed: tuple[str, ...] | None
    """Every path the head changes since its merge base; None when GitHub's list was cut at its limit."""
    watched: tuple[str, ...]
    """The changed paths the patterns match."""

    @property
    def needs_campaign(self) -> bool:
        return self.changed is None or bool(self.watched)

    @property
    def conclusion(self) -> Literal["action_required", "skipped"]:
        return "action_required" if self.needs_campaign else "skipped"


def watched_change(pr: int, head_sha: str, config_source: str, patterns: list[str],
                   changed: tuple[str, ...] | None) -> WatchedChange:
    """Match the head's changed paths against the patterns as git matches `.gitignore` lines (the last matching
    line decides, so `!docs/**` after `lib/**` clears what it names)."""
    from pathspec import GitIgnoreSpec

    spec = GitIgnoreSpec.from_lines(patterns)
    watched = tuple(path for path in changed if spec.match_file(path)) if changed is not None else ()
    return WatchedChange(pr, head_sha, config_source, tuple(patterns), changed, watched)
