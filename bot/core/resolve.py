"""Pin what a campaign compares and the rules it is judged by: the head SHA from the event, the merge base as
the baseline, and the campaign config read at the base branch's current tip through the API.

The config comes from the trusted base branch, never from the head: a pull request must not be able to change
the rules it is judged by (thresholds, exclusions, build command run on our machines). It is read at the branch's
tip, not at the merge base, so a pull request branched from an old commit cannot pick the older, laxer config
either; the tip's SHA is recorded (`config_sha`), and the determinism patch is read at the same SHA. The
baseline is still built at the merge base, so the comparison measures only the pull request's own change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.core.repo_values import MergeBase
from runners.schema.config import CampaignConfig, ConfigError, parse_config

RELATIONSHIPS = {"ahead": "ancestor", "diverged": "diverged", "identical": "identical", "behind": "behind"}
"""compare(base branch, head) status -> how the base branch relates to the head."""


class RevisionSource(Protocol):
    def merge_base(self, base_ref: str, head_sha: str) -> MergeBase: ...

    def read_file(self, path: str, ref: str) -> bytes | None: ...


def config_source(config_path: str, config_sha: str) -> str:
    """How reports and comments name where the config came from (never a path on the bot's machine)."""
    return f"{config_path} @ {config_sha} (base branch tip)"


@dataclass(frozen=True)
class Resolution:
    head_sha: str
    base_sha: str
    """The merge base: the baseline revision."""
    relationship: str
    config_sha: str
    """The base branch's tip the config (and determinism patch) are read at."""
    config_source: str
    config_text: str
    config: CampaignConfig | None
    error: str | None
    """Why the config cannot be used (missing, not UTF-8, invalid); the campaign then fails fast."""
    changed_files: tuple[str, ...] | None = None
    """The paths the head changes since the merge base (None: more than GitHub lists)."""


def resolve(api: RevisionSource, head_sha: str, base_ref: str, config_path: str) -> Resolution:
    """Merge base of `base_ref` and the pinned head, and the config at `base_ref`'s tip as compared."""
    merge_base = api.merge_base(base_ref, head_sha)
    base_sha, config_sha = merge_base.sha, merge_base.base_tip_sha
    source = config_source(config_path, config_sha)
    relationship = RELATIONSHIPS.get(merge_base.status, merge_base.status)

    def failed(error: str, text: str = "") -> Resolution:
        return Resolution(head_sha, base_sha, relationship, config_sha, source, text, None, error,
                          merge_base.changed_files)

    raw = api.read_file(config_path, config_sha)
    if raw is None:
        return failed(f"{source}: no campaign config at the tip of {base_ref} (it is read from the base branch)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return failed(f"{source}: not UTF-8 text: {exc}")
    try:
        config = parse_config(text, source)
    except ConfigError as exc:
        return failed(str(exc), text)
    return Resolution(head_sha, base_sha, relationship, config_sha, source, text, config, None,
                      merge_base.changed_files)
