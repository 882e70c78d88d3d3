"""Pin what a campaign compares: the head SHA from the event, the merge base as the baseline, and the
campaign config read at that base through the API.

The config comes from the base revision, never from the head: a pull request must not be able to change
the rules it is judged by (thresholds, exclusions, build command run on our machines).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.github import MergeBase
from runners.config import CampaignConfig, ConfigError, parse_config

RELATIONSHIPS = {"ahead": "ancestor", "diverged": "diverged", "identical": "identical", "behind": "behind"}
"""compare(base branch, head) status -> how the base branch relates to the head."""


class RevisionSource(Protocol):
    def merge_base(self, base_ref: str, head_sha: str) -> MergeBase: ...

    def read_file(self, path: str, ref: str) -> bytes | None: ...


@dataclass(frozen=True)
class Resolution:
    head_sha: str
    base_sha: str
    relationship: str
    config_source: str
    config_text: str
    config: CampaignConfig | None
    error: str | None
    """Why the config cannot be used (missing, not UTF-8, invalid); the campaign then fails fast."""


def resolve(api: RevisionSource, head_sha: str, base_ref: str, config_path: str) -> Resolution:
    """Merge base of `base_ref` and the pinned head, and the config at that merge base."""
    merge_base = api.merge_base(base_ref, head_sha)
    base_sha = merge_base.sha
    source = f"{config_path}@{base_sha}"
    relationship = RELATIONSHIPS.get(merge_base.status, merge_base.status)

    def failed(error: str, text: str = "") -> Resolution:
        return Resolution(head_sha, base_sha, relationship, source, text, None, error)

    raw = api.read_file(config_path, base_sha)
    if raw is None:
        return failed(f"{source}: no campaign config in the base revision (it is read from the merge base)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return failed(f"{source}: not UTF-8 text: {exc}")
    try:
        config = parse_config(text, source)
    except ConfigError as exc:
        return failed(str(exc), text)
    return Resolution(head_sha, base_sha, relationship, source, text, config, None)
