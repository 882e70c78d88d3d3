"""What a GitHub call can end in, besides its answer: one exception class per way it failed.

The gateway raises only these (PyGithub's and the network's exceptions are translated by the retry policy,
`bot.github.retry`), so a caller decides on the kind of failure, never on a status code.
"""

from __future__ import annotations

from typing import Any

from bot.core.repo_values import NotFoundError


class GitHubError(Exception):
    """A GitHub call failed for good; ``status``/``body`` are GitHub's answer when there was one."""

    def __init__(self, message: str, *, status: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class GitHubValidationError(GitHubError):
    """GitHub rejected the payload (422): retrying cannot help, the request must change."""


class GitHubAuthError(GitHubError):
    """The credentials were refused (401): a configuration problem, never retried."""


class GitHubNotFoundError(GitHubError, NotFoundError):
    """The resource does not exist, or is invisible to these credentials (404)."""


class GitHubRateLimitError(GitHubError):
    """Rate limited (403/429); ``retry_after`` is how long GitHub asked us to wait, in seconds."""

    def __init__(self, message: str, *, status: int, body: Any, retry_after: float) -> None:
        super().__init__(message, status=status, body=body)
        self.retry_after = retry_after


class GitHubRetryLaterError(GitHubRateLimitError):
    """GitHub asked for a longer wait than the gateway sleeps through: the caller re-queues its work for
    ``not_before`` (a ``clock()`` time) instead of blocking; until then the gateway sends nothing."""

    def __init__(self, message: str, *, status: int, body: Any, retry_after: float, not_before: float) -> None:
        super().__init__(message, status=status, body=body, retry_after=retry_after)
        self.not_before = not_before


class Interrupted(Exception):
    """A retry wait was cut short because the service is stopping; the work is redone after the restart."""


class GitHubUnavailableError(GitHubError):
    """5xx or no answer at all: transient on GitHub's side or the network's, so retried."""


class ArtifactTooLargeError(GitHubError):
    """An artifact larger than the caller accepts: refused before (or while) downloading, never buffered."""


TRANSIENT_ERRORS = (GitHubRateLimitError, GitHubUnavailableError)
"""GitHub asked to retry later (a rate limit, `Retry-After`) or did not answer (5xx, the network): the work is
tried again later, so these are expected events, logged in one line (`bot.logs.log_failure`)."""
