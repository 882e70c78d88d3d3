"""What the core reads about a repository through `bot.core.ports.RepoApi`: immutable values, owned here so the
decisions never import the GitHub side (`bot.github.gateway.GitHubGateway` returns exactly these)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict


class NotFoundError(LookupError):
    """What a port raises for something the repository does not have (a deleted pull request, an unknown comment);
    `bot.github.gateway.GitHubNotFoundError` is one."""


class _Frozen(BaseModel):
    """Immutable snapshot, safe to pass around and compare."""

    model_config = ConfigDict(frozen=True)


class PullInfo(_Frozen):
    """What the bot needs to decide whether and what to benchmark for a pull request."""

    number: int
    state: str
    head_sha: str
    head_ref: str
    head_repo_full_name: str | None  # None when the fork was deleted
    base_ref: str
    base_sha: str
    is_fork: bool  # head lives elsewhere (or is gone): its code is untrusted
    author_login: str
    labels: list[str]
    html_url: str



COMPARE_FILES_LIMIT = 300
"""GitHub's compare answer lists only the first 300 changed files."""


class MergeBase(_Frozen):
    """Where a head diverged from a base branch: the baseline to benchmark against."""

    sha: str
    base_tip_sha: str
    """The base branch's head when compared: the trusted revision the campaign config is read at."""
    status: Literal["ahead", "behind", "identical", "diverged"]
    ahead_by: int
    behind_by: int
    changed_files: tuple[str, ...] | None = None
    """Every path the head changes since the merge base (a rename names both paths); None when GitHub's answer
    was cut at its 300-file limit, so the whole list is not known."""



class CommentInfo(_Frozen):
    """An issue/PR comment; ``node_id`` is what GraphQL (e.g. minimizing) needs.

    ``author_id`` is what tells the bot's own comments apart: a login is text anyone can echo in a body,
    and a human may even own the bot's slug as a login; the numeric user id cannot be borrowed.
    """

    id: int
    node_id: str
    body: str
    author_login: str
    author_id: int
    html_url: str
    created_at: datetime | None = None
    """When it was written (an acceptance read back from its comment keeps it)."""



class BotIdentity(_Frozen):
    """Who the bot acts as on GitHub: its login for display, its numeric user id for every comparison."""

    login: str
    id: int



class CheckRunInfo(_Frozen):
    """A check run as the merge queue and the Re-run buttons read it: which campaign, and how it ended."""

    id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    external_id: str | None
    app_slug: str | None
    """Which App wrote it (`github-actions` in Actions-only mode): a check run's name is not an identity."""
    html_url: str



class CommitInfo(_Frozen):
    """A commit as main-branch tracking reads it: its full SHA and its parents' (the first is the first parent)."""

    sha: str
    parents: list[str]
