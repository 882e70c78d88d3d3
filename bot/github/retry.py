"""The gateway's one retry policy: which failures are retried and how long to wait, GitHub's refusals translated
into `bot.github.errors`, and the observer told of every call, retry and failure.

Retried: 5xx, connection errors/timeouts, and rate limits (403/429) whose requested wait (``Retry-After``, else
``x-ratelimit-reset``, else one minute) fits in ``max_wait``; waiting longer would stall the bot, so those surface
as :class:`GitHubRetryLaterError` at once (and calls are refused without a request until then). Other failures
are translated and raised on the first attempt.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

import httpx
from github import GithubException
from github.Requester import Requester
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from bot.github.errors import (
    GitHubAuthError,
    GitHubError,
    GitHubNotFoundError,
    GitHubRateLimitError,
    GitHubRetryLaterError,
    GitHubUnavailableError,
    GitHubValidationError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class ApiObserver(Protocol):
    """Told about every call through the gateway (the service's metrics, `bot.metrics`): the door counts itself."""

    def github_call(self, repo: str) -> None: ...

    def github_error(self, repo: str, error: GitHubError) -> None:
        """The call failed for good (after the retries it was allowed)."""
        ...

    def github_retry(self, repo: str, error: BaseException) -> None: ...

    def github_rate_limit(self, repo: str, remaining: int, limit: int) -> None:
        """The rate limit GitHub reported with its latest answer."""
        ...


class RetryPolicy:
    """Runs one repository's calls: retries what may succeed later, refuses calls while GitHub asked to wait.

    ``sleep`` and ``clock`` are injectable so tests can observe waits without waiting.
    """

    def __init__(
        self,
        repo_full_name: str,
        *,
        max_attempts: int,
        max_wait: float,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
        observer: ApiObserver | None,
    ) -> None:
        self._repo_name = repo_full_name
        self._observer = observer
        self._max_wait = max_wait
        self._clock = clock
        self._blocked_until = float("-inf")
        self._blocked_status = 403
        self._retrying = Retrying(
            stop=stop_after_attempt(max_attempts),
            wait=self._wait,
            retry=retry_if_exception(self._should_retry),
            sleep=sleep,
            reraise=True,
            before_sleep=self._before_retry,
        )

    def call(self, what: str, fn: Callable[[], T], after_attempt: Callable[[], None]) -> T:
        """Run ``fn`` under the retry policy, translating failures into GitHubError subclasses; ``after_attempt``
        runs after every attempt, answered or not.

        A rate limit asking for more than ``max_wait`` raises GitHubRetryLaterError, and every call until
        that time raises it again without a request (GitHub counts requests made while limited against
        the integration)."""
        now = self._clock()
        if now < self._blocked_until:
            raise GitHubRetryLaterError(
                f"{what}: not sent, GitHub asked to wait another {self._blocked_until - now:.0f} s",
                status=self._blocked_status,
                body=None,
                retry_after=self._blocked_until - now,
                not_before=self._blocked_until,
            )

        def attempt() -> T:
            try:
                return fn()
            except GithubException as exc:
                raise self._translate(what, exc) from exc
            # requests' connection errors and timeouts (raised through PyGithub) are OSErrors.
            except (OSError, httpx.TransportError) as exc:
                raise GitHubUnavailableError(f"{what}: no answer from GitHub ({exc})") from exc
            finally:
                after_attempt()

        if self._observer is not None:
            self._observer.github_call(self._repo_name)
        try:
            return self._retrying(attempt)
        except GitHubRateLimitError as exc:
            if exc.retry_after <= self._max_wait or isinstance(exc, GitHubRetryLaterError):
                self._observe_error(exc)
                raise
            self._blocked_until = self._clock() + exc.retry_after
            self._blocked_status = exc.status or 403
            later = GitHubRetryLaterError(
                f"{exc} (asked to wait {exc.retry_after:.0f} s, longer than the {self._max_wait:g} s "
                "this service waits in place)",
                status=self._blocked_status,
                body=exc.body,
                retry_after=exc.retry_after,
                not_before=self._blocked_until,
            )
            self._observe_error(later)
            raise later from exc
        except GitHubError as exc:
            self._observe_error(exc)
            raise

    def _observe_error(self, error: GitHubError) -> None:
        if self._observer is not None:
            self._observer.github_error(self._repo_name, error)

    def _translate(self, what: str, exc: GithubException) -> GitHubError:
        status, body = exc.status, exc.data
        headers = {key.lower(): str(value) for key, value in (exc.headers or {}).items()}
        message = body.get("message") if isinstance(body, dict) else None
        text = f"{what}: HTTP {status} {message or ''}".rstrip()
        if status == 422:
            log.error("GitHub rejected %s: %s", what, json.dumps(body))
            return GitHubValidationError(text, status=status, body=body)
        if status == 401:
            return GitHubAuthError(text, status=status, body=body)
        if status in (403, 429) and self._is_rate_limited(status, message, headers):
            return GitHubRateLimitError(
                text, status=status, body=body, retry_after=self._retry_after(headers)
            )
        if status == 404:
            return GitHubNotFoundError(text, status=status, body=body)
        if status >= 500:
            return GitHubUnavailableError(text, status=status, body=body)
        return GitHubError(text, status=status, body=body)

    @staticmethod
    def _is_rate_limited(status: int, message: str | None, headers: Mapping[str, str]) -> bool:
        return (
            status == 429
            or "retry-after" in headers
            or headers.get("x-ratelimit-remaining") == "0"
            or Requester.isRateLimitError(message or "")
        )

    def _retry_after(self, headers: Mapping[str, str]) -> float:
        """Seconds GitHub asked us to wait; one minute when it did not say (GitHub's guidance)."""
        for header, relative in (("retry-after", True), ("x-ratelimit-reset", False)):
            try:
                seconds = float(headers[header])
            except (KeyError, ValueError):
                continue
            return max(seconds if relative else seconds - self._clock(), 0.0)
        return 60.0

    def _should_retry(self, exc: BaseException) -> bool:
        if isinstance(exc, GitHubRateLimitError):
            return exc.retry_after <= self._max_wait
        return isinstance(exc, GitHubUnavailableError)

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, GitHubRateLimitError):
            return exc.retry_after
        return float(min(2 ** (state.attempt_number - 1), self._max_wait))

    def _before_retry(self, state: RetryCallState) -> None:
        """One line per retry (an expected event: no traceback), and the retry counted."""
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning("GitHub call failed (attempt %d), retrying in %.1fs: %s", state.attempt_number, wait, exc)
        if self._observer is not None and exc is not None:
            self._observer.github_retry(self._repo_name, exc)

