"""What the bot does at an unlabelled pull request's new head under `[checks] watched_paths`, for both modes:
read the base branch's config, and conclude the campaign check at the head (`bot.core.watched_paths` decides
how) unless the pull request got the label meanwhile or the head already has a campaign check run.
"""

from __future__ import annotations

from bot.core.ports import PullRequestPublisher, RepoApi
from bot.core.resolve import resolve
from bot.core.triggers import Unlabelled
from bot.core.watched_paths import watched_change
from bot.settings import Settings
from runners.schema.config import ConfigError, parse_config


class WatchedPathsDesk:
    """Concludes the campaign check at an unlabelled pull request's head when the base branch watches paths."""

    def __init__(self, api: RepoApi, publisher: PullRequestPublisher, settings: Settings) -> None:
        self.api, self.publisher, self.settings = api, publisher, settings

    def act(self, intent: Unlabelled) -> str:
        if not self._watching(intent.base_ref):
            return f"ignored: push to a pull request without the {self.settings.label!r} label"
        resolution = resolve(self.api, intent.head_sha, intent.base_ref, self.settings.config_path)
        if resolution.config is None:
            return f"ignored: no usable campaign config on {intent.base_ref} for an unlabelled head"
        patterns = resolution.config.checks.watched_paths
        if not patterns:
            return f"ignored: push to a pull request without the {self.settings.label!r} label"
        pull = self.api.pull(intent.pr)
        if pull.state != "open" or pull.head_sha != intent.head_sha or self.settings.label in pull.labels:
            return (f"ignored: pull request #{intent.pr} is no longer an open, unlabelled pull request at "
                    f"{intent.head_sha[:12]}")
        standing = self.api.check_runs_of(intent.head_sha, self.settings.check_name)
        if standing:  # a campaign's check run (or this one, from a repeated delivery) already answers for the head
            return f"ignored: the head {intent.head_sha[:12]} already has a {self.settings.check_name!r} check run"
        change = watched_change(intent.pr, intent.head_sha, resolution.config_source, patterns,
                                resolution.changed_files)
        run_id = self.publisher.watched_paths_concluded(change, details_url=pull.html_url)
        return f"{change.conclusion}: {len(change.watched)} watched path(s) changed (check run {run_id})"

    def _watching(self, base_ref: str) -> bool:
        """Whether the base branch's config watches paths at all, from one read at the branch (every unlabelled
        push asks, and most repositories watch none); a config that watches is then read again at the tip the
        compare pins, with the changed files, as every decision reads it."""
        raw = self.api.read_file(self.settings.config_path, base_ref)
        if raw is None:
            return False
        try:
            return bool(parse_config(raw.decode("utf-8"), base_ref).checks.watched_paths)
        except (UnicodeDecodeError, ConfigError):
            return False
