"""The bot's only door to GitHub: one repository, PyGithub underneath, one retry policy on top.

Keeping every call here means retry/backoff, error translation and logging are decided once, and
the rest of the bot deals in small frozen models instead of live PyGithub objects (which fetch,
and can fail, lazily on attribute access). GitHubGateway is composed by responsibility: the transport
(clients, retry policy, identity), repository reads, checks and comments, and Actions calls.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import urllib.parse
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, Literal, Protocol, TypeVar

import httpx
from github import Auth, Github, GithubException, GithubIntegration
from github.Artifact import Artifact
from github.AuthenticatedUser import AuthenticatedUser
from github.IssueComment import IssueComment
from github.NamedUser import NamedUser
from github.PaginatedList import PaginatedList
from github.Repository import Repository
from github.Requester import Requester
from github.WorkflowJob import WorkflowJob
from github.WorkflowRun import WorkflowRun
from pydantic import BaseModel, ConfigDict, SecretStr
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from bot.core.repo_values import (
    BotIdentity,
    CheckRunInfo,
    CommentInfo,
    CommitInfo,
    MergeBase,
    NotFoundError,
    PullInfo,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_BASE_URL = "https://api.github.com"
CheckStatus = Literal["queued", "in_progress", "completed", "waiting", "requested", "pending"]
CheckConclusion = Literal[
    "action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out"
]
MinimizeClassifier = Literal["ABUSE", "DUPLICATE", "OFF_TOPIC", "OUTDATED", "RESOLVED", "SPAM"]
BASE_ROLES = frozenset({"admin", "maintain", "write", "triage", "read", "none"})


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


class _Frozen(BaseModel):
    """Immutable snapshot, safe to pass around and compare."""

    model_config = ConfigDict(frozen=True)


class TokenAuth(_Frozen):
    """A token used as-is (PAT, or ``GITHUB_TOKEN`` inside Actions)."""

    token: SecretStr


class AppAuth(_Frozen):
    """GitHub App credentials; installation tokens are minted from them and cached until expiry.

    ``installation_id`` comes with every webhook; when absent it is looked up for the repository.
    """

    app_id: int
    private_key: SecretStr
    installation_id: int | None = None


class CheckOutput(_Frozen):
    """Check run output; GitHub requires title and summary together and caps summary/text at 65535."""

    title: str
    summary: str
    text: str | None = None


class CheckAction(_Frozen):
    """A check run button (at most 3; label <= 20, description <= 40, identifier <= 20 chars)."""

    label: str
    description: str
    identifier: str


class WorkflowRunInfo(_Frozen):
    """A workflow run as the Actions backend and Actions-only mode read it."""

    id: int
    display_title: str
    """The rendered `run-name`, which names the campaign the run belongs to."""
    status: str
    conclusion: str | None
    html_url: str
    created_at: datetime


class WorkflowStepInfo(_Frozen):
    """One step of a job as GitHub recorded it (the runner reports each step's end)."""

    number: int
    name: str
    status: str
    conclusion: str | None


class WorkflowJobInfo(_Frozen):
    """One job of a run; for a matrix job `name` is the rendered job name (e.g. `row vllm-disagg`)."""

    id: int
    name: str
    status: str
    conclusion: str | None
    runner_id: int | None
    runner_name: str | None
    html_url: str | None
    steps: list[WorkflowStepInfo]


def _run_info(run: WorkflowRun) -> WorkflowRunInfo:
    return WorkflowRunInfo(
        id=run.id,
        display_title=run.display_title,
        status=run.status,
        conclusion=run.conclusion,
        html_url=run.html_url,
        created_at=run.created_at,
    )


def _job_info(job: WorkflowJob) -> WorkflowJobInfo:
    return WorkflowJobInfo(
        id=job.id,
        name=job.name,
        status=job.status,
        conclusion=job.conclusion,
        runner_id=job.runner_id,
        runner_name=job.runner_name,
        html_url=job.html_url,
        steps=[
            WorkflowStepInfo(number=step.number, name=step.name, status=step.status, conclusion=step.conclusion)
            for step in job.steps
        ],
    )


ACTIONS_BOT = BotIdentity(login="github-actions[bot]", id=41898282)
"""The author of everything done with ``GITHUB_TOKEN`` (a fixed account on github.com)."""


def _identity_of(user: NamedUser | AuthenticatedUser) -> BotIdentity:
    return BotIdentity(login=user.login, id=user.id)


def _comment_info(comment: IssueComment) -> CommentInfo:
    return CommentInfo(
        id=comment.id,
        node_id=comment.node_id,
        body=comment.body,
        author_login=comment.user.login,
        author_id=comment.user.id,
        html_url=comment.html_url,
        created_at=comment.created_at,
    )


def _check_run_info(data: Mapping[str, Any]) -> CheckRunInfo:
    app = data.get("app") or {}
    return CheckRunInfo(
        id=int(data["id"]),
        name=str(data["name"]),
        head_sha=str(data["head_sha"]),
        status=str(data["status"]),
        conclusion=data.get("conclusion"),
        external_id=data.get("external_id") or None,
        app_slug=app.get("slug"),
        html_url=str(data.get("html_url") or ""),
    )


class GitHubTransport:
    """How the gateway talks to GitHub: clients and credentials, one retry policy, and who the bot is.

    Retried: 5xx, connection errors/timeouts, and rate limits (403/429) whose requested wait
    (``Retry-After``, else ``x-ratelimit-reset``, else one minute) fits in ``max_wait``; waiting
    longer would stall the bot, so those surface as :class:`GitHubRetryLaterError` at once (and calls
    are refused without a request until then). Other failures are translated and raised on the first
    attempt.

    ``sleep`` and ``clock`` are injectable so tests can observe waits without waiting. PyGithub's
    own pacing (``seconds_between_*``) follows GitHub's advice to space out mutating calls.
    """

    def __init__(
        self,
        repo_full_name: str,
        auth: TokenAuth | AppAuth,
        base_url: str = DEFAULT_BASE_URL,
        *,
        bot_login: str | None = None,
        max_attempts: int = 5,
        max_wait: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        timeout: int = 15,
        seconds_between_requests: float | None = 0.25,
        seconds_between_writes: float | None = 1.0,
        observer: ApiObserver | None = None,
    ) -> None:
        self._repo_name = repo_full_name
        self._observer = observer
        self._auth = auth
        self._base_url = base_url.rstrip("/")
        self._login = bot_login
        self._identity: BotIdentity | None = None
        self._max_wait = max_wait
        self._clock = clock
        self._blocked_until = float("-inf")
        self._blocked_status = 403
        self._timeout = timeout
        self._client_kwargs: dict[str, Any] = {
            "base_url": self._base_url,
            "timeout": timeout,
            "retry": None,  # tenacity below is the single retry layer
            "per_page": 100,
            "lazy": True,  # no GET before a PATCH/POST on an object we only know by id
            "seconds_between_requests": seconds_between_requests,
            "seconds_between_writes": seconds_between_writes,
        }
        self._retrying = Retrying(
            stop=stop_after_attempt(max_attempts),
            wait=self._wait,
            retry=retry_if_exception(self._should_retry),
            sleep=sleep,
            reraise=True,
            before_sleep=self._before_retry,
        )

    # ----------------------------------------------------------------- clients

    def _app_auth(self) -> Auth.AppAuth:
        assert isinstance(self._auth, AppAuth)
        return Auth.AppAuth(self._auth.app_id, self._auth.private_key.get_secret_value())

    @cached_property
    def _integration(self) -> GithubIntegration:
        return GithubIntegration(auth=self._app_auth(), **self._client_kwargs)

    @cached_property
    def _github(self) -> Github:
        if isinstance(self._auth, TokenAuth):
            return Github(auth=Auth.Token(self._auth.token.get_secret_value()), **self._client_kwargs)
        installation_id = self._auth.installation_id
        if installation_id is None:
            owner, name = self._repo_name.split("/", 1)
            installation_id = self._integration.get_repo_installation(owner, name).id
        # AppInstallationAuth mints a token on first use and reuses it until shortly before expiry.
        return Github(auth=self._app_auth().get_installation_auth(installation_id), **self._client_kwargs)

    @property
    def _requester(self) -> Requester:
        return self._github.requester

    @property
    def _repo(self) -> Repository:
        return self._github.get_repo(self._repo_name)

    # ----------------------------------------------------------------- retry policy

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` under the retry policy, translating failures into GitHubError subclasses.

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
                self._observe_rate_limit()

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

    def _observe_rate_limit(self) -> None:
        """Pass on the rate limit PyGithub read from the latest answer's headers (none before the first answer)."""
        client: Github | None = self.__dict__.get("_github")
        if self._observer is None or client is None:
            return
        remaining, limit = client.requester.rate_limiting
        if limit >= 0:
            self._observer.github_rate_limit(self._repo_name, remaining, limit)

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

    # ----------------------------------------------------------------- identity

    def authenticated_login(self) -> str:
        """Who our own comments are from, so the bot can ignore them (``<app-slug>[bot]`` for apps).

        Installation tokens cannot read ``/user``; with ``GITHUB_TOKEN`` pass
        ``bot_login="github-actions[bot]"``.
        """
        if self._login is None:
            if isinstance(self._auth, TokenAuth):
                self._login = self._call("GET /user", lambda: self._github.get_user().login)
            else:
                self._login = self._call("GET /app", lambda: f"{self._integration.get_app().slug}[bot]")
        return self._login

    def identity(self) -> BotIdentity:
        """The bot's login and numeric user id, looked up once.

        Token mode: ``GET /user``. App mode: the app's bot user ``GET /users/<slug>[bot]`` (the app id is
        not the bot user's id). Actions mode (``bot_login="github-actions[bot]"``): the fixed account, no
        call. Any other configured login is looked up with ``GET /users/<login>``.
        """
        if self._identity is None:
            if self._login == ACTIONS_BOT.login:
                self._identity = ACTIONS_BOT
            elif self._login is None and isinstance(self._auth, TokenAuth):
                # Attributes are read inside the call: PyGithub objects fetch lazily on first access.
                me = self._call("GET /user", lambda: _identity_of(self._github.get_user()))
                self._identity, self._login = me, me.login
            else:
                login = self.authenticated_login()
                self._identity = self._call(f"GET /users/{login}", lambda: _identity_of(self._github.get_user(login)))
        return self._identity


class RepositoryReads(GitHubTransport):
    """What the bot reads of the repository: pull requests, merge bases, permissions, files."""

    def pull(self, number: int) -> PullInfo:
        def fetch() -> PullInfo:
            pr = self._repo.get_pull(number)
            head_repo = pr.head.repo
            head_repo_name = head_repo.full_name if head_repo is not None else None
            return PullInfo(
                number=pr.number,
                state=pr.state,
                head_sha=pr.head.sha,
                head_ref=pr.head.ref,
                head_repo_full_name=head_repo_name,
                base_ref=pr.base.ref,
                base_sha=pr.base.sha,
                is_fork=head_repo_name is None or head_repo_name.lower() != pr.base.repo.full_name.lower(),
                author_login=pr.user.login,
                labels=[label.name for label in pr.labels],
                html_url=pr.html_url,
            )

        return self._call(f"GET pull #{number}", fetch)

    def merge_base(self, base_ref: str, head_sha: str) -> MergeBase:
        def fetch() -> MergeBase:
            comparison = self._repo.compare(base_ref, head_sha)
            return MergeBase.model_validate(
                {
                    "sha": comparison.merge_base_commit.sha,
                    "base_tip_sha": comparison.base_commit.sha,
                    "status": comparison.status,
                    "ahead_by": comparison.ahead_by,
                    "behind_by": comparison.behind_by,
                }
            )

        return self._call(f"compare {base_ref}...{head_sha}", fetch)

    def permission(self, login: str) -> str:
        """The user's role: admin, maintain, write, triage, read or none.

        Custom roles are reported as the base level they build on. A 404 (unknown user) is "none".
        """
        url = f"{self._repo.url}/collaborators/{urllib.parse.quote(login, safe='')}/permission"
        try:
            _, data = self._call(
                f"GET permission of {login}", lambda: self._requester.requestJsonAndCheck("GET", url)
            )
        except GitHubNotFoundError:
            return "none"
        role = data.get("role_name")
        return role if role in BASE_ROLES else str(data["permission"])

    def check_runs_of(self, ref: str, check_name: str) -> list[CheckRunInfo]:
        """The check runs of this name on a commit, newest first (GitHub's `filter=latest` keeps the newest run of
        each name per App)."""
        url = f"{self._repo.url}/commits/{urllib.parse.quote(ref, safe='')}/check-runs"

        def fetch() -> list[CheckRunInfo]:
            _, data = self._requester.requestJsonAndCheck(
                "GET", url, parameters={"check_name": check_name, "filter": "latest", "per_page": 100}
            )
            return [_check_run_info(run) for run in data.get("check_runs", [])]

        return self._call(f"GET check runs {check_name!r} of {ref}", fetch)

    def suite_check_runs(self, check_suite_id: int, check_name: str) -> list[CheckRunInfo]:
        """The check runs of this name in one check suite (what GitHub's Re-run buttons act on); none for a suite
        GitHub does not know."""
        url = f"{self._repo.url}/check-suites/{check_suite_id}/check-runs"

        def fetch() -> list[CheckRunInfo]:
            _, data = self._requester.requestJsonAndCheck(
                "GET", url, parameters={"check_name": check_name, "per_page": 100}
            )
            return [_check_run_info(run) for run in data.get("check_runs", [])]

        try:
            return self._call(f"GET check runs {check_name!r} of suite {check_suite_id}", fetch)
        except GitHubNotFoundError:
            return []  # a suite GitHub does not know (or no longer shows) holds nothing of ours

    def matching_refs(self, prefix: str) -> list[tuple[str, str]]:
        """(ref, commit SHA) of every branch or tag whose name starts with `prefix`
        (e.g. `heads/gh-readonly-queue/main/`)."""
        url = f"{self._repo.url}/git/matching-refs/{urllib.parse.quote(prefix, safe='/')}"

        def fetch() -> list[tuple[str, str]]:
            _, data = self._requester.requestJsonAndCheck("GET", url)
            return [(str(ref["ref"]), str(ref["object"]["sha"])) for ref in data or []]

        return self._call(f"GET refs matching {prefix}", fetch)

    def commits_between(self, base: str, head: str) -> list[str]:
        """The SHAs of the commits in `head` that `base` lacks (GitHub's comparison, every page)."""

        def fetch() -> list[str]:
            return [commit.sha for commit in self._repo.compare(base, head).commits]

        return self._call(f"commits of {base}...{head}", fetch)

    def comment(self, comment_id: int) -> CommentInfo | None:
        """One issue comment by id, as it reads now; None when it was deleted."""
        try:
            return self._call(
                f"GET comment {comment_id}",
                lambda: _comment_info(
                    IssueComment(self._requester, url=f"{self._repo.url}/issues/comments/{comment_id}")
                ),
            )
        except GitHubNotFoundError:
            return None

    def read_file(self, path: str, ref: str) -> bytes | None:
        """The file's bytes at ``ref``; None when the path (or the ref) does not exist."""
        try:
            content = self._call(f"GET {path}@{ref}", lambda: self._repo.get_contents(path, ref=ref))
        except GitHubNotFoundError:
            return None
        if isinstance(content, list):
            raise GitHubError(f"{path}@{ref} is a directory, not a file")
        if content.encoding == "base64":
            return content.decoded_content
        # Files over 1 MB come without inline content; the blob API serves up to 100 MB.
        blob = self._call(f"GET blob {content.sha}", lambda: self._repo.get_git_blob(content.sha))
        return base64.b64decode(blob.content)


class ChecksAndComments(GitHubTransport):
    """What the bot writes where people read it: check runs and issue comments.

    Comment creation looks for the comment a failed POST may have made before posting again.
    """

    def create_check_run(
        self,
        head_sha: str,
        name: str,
        external_id: str,
        status: CheckStatus = "queued",
        output: CheckOutput | None = None,
        actions: Sequence[CheckAction] = (),
        details_url: str | None = None,
        conclusion: CheckConclusion | None = None,
    ) -> int:
        """Create a check run; with `conclusion` (and status `completed`) it is created already concluded."""
        kwargs: dict[str, Any] = {
            "name": name,
            "head_sha": head_sha,
            "external_id": external_id,
            "status": status,
        }
        if conclusion is not None:
            kwargs["conclusion"] = conclusion
        if output is not None:
            kwargs["output"] = output.model_dump(exclude_none=True)
        if actions:
            kwargs["actions"] = [action.model_dump() for action in actions]
        if details_url is not None:
            kwargs["details_url"] = details_url
        run = self._call(f"create check run {name!r}", lambda: self._repo.create_check_run(**kwargs))
        return run.id

    def check_run_of(self, head_sha: str, name: str, external_id: str) -> int | None:
        """The id of the check run of this name and external id on a commit (the first made, should there be more),
        or None: what the publisher looks for before it creates one. Every run of the name counts, not only the
        newest (`filter=all`): an older campaign of the same head keeps its own."""
        url = f"{self._repo.url}/commits/{urllib.parse.quote(head_sha, safe='')}/check-runs"

        def fetch() -> int | None:
            _, data = self._requester.requestJsonAndCheck(
                "GET", url, parameters={"check_name": name, "filter": "all", "per_page": 100}
            )
            ids = [int(run["id"]) for run in data.get("check_runs", []) if run.get("external_id") == external_id]
            return min(ids) if ids else None

        return self._call(f"GET check run {external_id!r} of {head_sha}", fetch)

    def update_check_run(
        self,
        check_run_id: int,
        *,
        status: CheckStatus | None = None,
        conclusion: CheckConclusion | None = None,
        output: CheckOutput | None = None,
        actions: Sequence[CheckAction] | None = None,
        details_url: str | None = None,
    ) -> None:
        """Change only what is given; ``actions=[]`` removes the buttons."""
        kwargs: dict[str, Any] = {}
        if status is not None:
            kwargs["status"] = status
        if conclusion is not None:
            kwargs["conclusion"] = conclusion
        if output is not None:
            kwargs["output"] = output.model_dump(exclude_none=True)
        if actions is not None:
            kwargs["actions"] = [action.model_dump() for action in actions]
        if details_url is not None:
            kwargs["details_url"] = details_url
        self._call(
            f"update check run {check_run_id}",
            lambda: self._repo.get_check_run(check_run_id).edit(**kwargs),
        )


    def _comment(self, comment_id: int) -> IssueComment:
        return IssueComment(self._requester, url=f"{self._repo.url}/issues/comments/{comment_id}")

    def create_comment(self, number: int, body: str) -> CommentInfo:
        """Post a comment, at most once: a POST that failed retryably (5xx, no answer, rate limit) may have
        been acted on, so before posting again the issue's comments are searched for the one it would have
        made (`_posted_before`), and that one is returned if GitHub did create it."""
        tried = False

        def attempt() -> CommentInfo:
            nonlocal tried
            if tried:
                existing = self._posted_before(number, body)
                if existing is not None:
                    log.info("comment on #%d was created by a POST that failed; using comment %d", number, existing.id)
                    return existing
            tried = True
            return _comment_info(self._repo.get_issue(number).create_comment(body))

        return self._call(f"comment on #{number}", attempt)

    def _posted_before(self, number: int, body: str) -> CommentInfo | None:
        """The bot's own comment (by user id) on the issue with this body, or with the same opening hidden
        marker when the marker names a campaign (`<!-- kv-parity:... campaign=... -->`)."""
        me = self.identity().id
        marker = body.split("\n", 1)[0]
        specific = marker.startswith("<!-- kv-parity:") and marker.endswith("-->") and "campaign" in marker
        for comment in self._repo.get_issue(number).get_comments():
            if comment.user.id != me:
                continue
            if comment.body == body or (specific and comment.body.split("\n", 1)[0] == marker):
                return _comment_info(comment)
        return None

    def edit_comment(self, comment_id: int, body: str) -> CommentInfo:
        def edit() -> CommentInfo:
            comment = self._comment(comment_id)
            comment.edit(body)
            return _comment_info(comment)

        return self._call(f"edit comment {comment_id}", edit)

    def list_comments(self, number: int) -> list[CommentInfo]:
        return self._call(
            f"list comments of #{number}",
            lambda: [_comment_info(comment) for comment in self._repo.get_issue(number).get_comments()],
        )

    def minimize_comment(self, node_id: str, classifier: MinimizeClassifier = "OUTDATED") -> None:
        """Fold an outdated bot report away (GraphQL only; REST cannot minimize)."""
        _, data = self._call(
            f"minimize comment {node_id}",
            lambda: self._requester.graphql_named_mutation(
                "minimizeComment",
                {"subjectId": node_id, "classifier": classifier},
                "minimizedComment { isMinimized }",
            ),
        )
        if not (data.get("minimizedComment") or {}).get("isMinimized"):
            raise GitHubError(f"comment {node_id} was not minimized", body=data)


class ActionsCalls(GitHubTransport):
    """The Actions backend's calls: dispatch a workflow, follow its run and jobs, cancel it, fetch its
    artifact (dispatches are retried as they are: GitHub returns no id to look one up by)."""

    def dispatch_workflow(self, workflow_file: str, ref: str, inputs: Mapping[str, str]) -> None:
        self._call(
            f"dispatch {workflow_file}@{ref}",
            lambda: self._repo.get_workflow(workflow_file).create_dispatch(ref, dict(inputs), throw=True),
        )

    def find_dispatched_run(
        self, workflow_file: str, created_after: datetime, exclude: Collection[int] = ()
    ) -> int | None:
        """The first ``workflow_dispatch`` run of the workflow created at or after ``created_after``.

        The dispatch API returns no run id, so the run is found by time; GitHub filters at whole
        seconds, hence "at or after", and ``exclude`` skips runs already attributed to an earlier
        dispatch of the same second. Returns None while GitHub has not created the run yet.
        """
        if created_after.tzinfo is None:
            raise ValueError("created_after must be timezone-aware")
        since = created_after.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        def find() -> int | None:
            runs = self._repo.get_workflow(workflow_file).get_runs(
                event="workflow_dispatch", created=f">={since}"
            )
            candidates = [(run.created_at, run.id) for run in runs if run.id not in exclude]
            return min(candidates)[1] if candidates else None

        return self._call(f"find runs of {workflow_file}", find)

    def workflow_runs(self, workflow_file: str, status: str) -> list[WorkflowRunInfo]:
        """The workflow's ``workflow_dispatch`` runs in one status (GitHub filters one status at a time)."""
        return self._call(
            f"list {status} runs of {workflow_file}",
            lambda: [
                _run_info(run)
                for run in self._repo.get_workflow(workflow_file).get_runs(event="workflow_dispatch", status=status)
            ],
        )

    def workflow_run(self, run_id: int) -> WorkflowRunInfo:
        return self._call(f"GET run {run_id}", lambda: _run_info(self._repo.get_workflow_run(run_id)))

    def workflow_jobs(self, run_id: int) -> list[WorkflowJobInfo]:
        """The jobs of the run's latest attempt."""

        def fetch() -> list[WorkflowJobInfo]:
            jobs: PaginatedList[WorkflowJob] = PaginatedList(
                WorkflowJob,
                self._requester,
                f"{self._repo.url}/actions/runs/{run_id}/jobs",
                {"filter": "latest"},
                list_item="jobs",
            )
            return [_job_info(job) for job in jobs]

        return self._call(f"list jobs of run {run_id}", fetch)

    def cancel_workflow_run(self, run_id: int) -> bool:
        """Ask GitHub to cancel the run; False when it had already completed (GitHub answers 409)."""

        def cancel() -> bool:
            status, headers, body = self._requester.requestJson(
                "POST", f"{self._repo.url}/actions/runs/{run_id}/cancel"
            )
            if status == 202:
                return True
            if status == 409:
                return False
            raise Requester.createException(status, headers, json.loads(body) if body else {})

        return self._call(f"cancel run {run_id}", cancel)

    def download_artifact(self, run_id: int, name: str, max_bytes: int | None = None) -> bytes | None:
        """The artifact's zip archive; None when the run has no live artifact of that name.

        With `max_bytes`, an artifact GitHub reports as larger is refused before the download, and the
        download itself stops once it passes the limit (row jobs run pull-request code and upload evidence).
        """

        def locate() -> str | None:
            artifacts: PaginatedList[Artifact] = PaginatedList(
                Artifact,
                self._requester,
                f"{self._repo.url}/actions/runs/{run_id}/artifacts",
                {"name": name},
                list_item="artifacts",
            )
            live = [artifact for artifact in artifacts if artifact.name == name and not artifact.expired]
            if not live:
                return None
            newest = max(live, key=lambda artifact: artifact.created_at)
            if max_bytes is not None and newest.size_in_bytes > max_bytes:
                raise ArtifactTooLargeError(
                    f"artifact {name!r} of run {run_id} is {newest.size_in_bytes} bytes; the limit is {max_bytes}"
                )
            status, headers, body = self._requester.requestJson(
                "GET", f"{self._repo.url}/actions/artifacts/{newest.id}/zip"
            )
            if status == 302:
                return str(headers["location"])
            if status in (404, 410):
                return None
            raise Requester.createException(status, headers, json.loads(body) if body else {})

        location = self._call(f"locate artifact {name!r} of run {run_id}", locate)
        if location is None:
            return None

        def fetch() -> bytes:
            # A pre-signed URL on another host: our token must not travel there.
            with httpx.stream("GET", location, timeout=self._timeout) as response:
                if response.status_code >= 500:
                    raise GitHubUnavailableError(
                        f"artifact download: HTTP {response.status_code}", status=response.status_code
                    )
                if response.status_code != 200:
                    response.read()
                    raise GitHubError(
                        f"artifact download: HTTP {response.status_code}",
                        status=response.status_code,
                        body=response.text,
                    )
                chunks: list[bytes] = []
                received = 0
                for chunk in response.iter_bytes():
                    received += len(chunk)
                    if max_bytes is not None and received > max_bytes:
                        raise ArtifactTooLargeError(
                            f"artifact {name!r} of run {run_id} passed {max_bytes} bytes while downloading"
                        )
                    chunks.append(chunk)
                return b"".join(chunks)

        return self._call(f"download artifact {name!r}", fetch)


class PullRef(_Frozen):
    """A pull request that brought a commit (`GET /repos/{owner}/{repo}/commits/{sha}/pulls`)."""

    number: int
    title: str
    html_url: str
    merged: bool
    """Merged (not only containing the commit as an open pull request's head)."""


class IssueInfo(_Frozen):
    """An issue the bot opened (the tracking issue), told apart from others by its author's numeric id."""

    number: int
    title: str
    body: str
    author_id: int
    html_url: str


class TrackingCalls(GitHubTransport):
    """Main-branch tracking's calls: resolve a commit or tag to a commit and its parents, find the pull requests
    that brought a commit, and keep one labelled tracking issue (the label made when missing)."""

    def default_branch(self) -> str:
        return self._call("GET repository", lambda: str(self._repo.default_branch))

    def commit(self, ref: str) -> CommitInfo:
        url = f"{self._repo.url}/commits/{urllib.parse.quote(ref, safe='')}"
        _, data = self._call(f"GET commit {ref}", lambda: self._requester.requestJsonAndCheck("GET", url))
        return CommitInfo(sha=str(data["sha"]), parents=[str(parent["sha"]) for parent in data.get("parents", [])])

    def pulls_of_commit(self, sha: str) -> list[PullRef]:
        def fetch() -> list[PullRef]:
            return [PullRef(number=pull.number, title=pull.title, html_url=pull.html_url,
                            merged=pull.merged_at is not None)
                    for pull in self._repo.get_commit(sha).get_pulls()]

        return self._call(f"GET pulls of {sha[:12]}", fetch)

    def ensure_label(self, name: str, color: str, description: str) -> None:
        """The label, created when the repository lacks it (creating an issue with an unknown label would create
        it without a description, or drop it when the token may not)."""
        url = f"{self._repo.url}/labels/{urllib.parse.quote(name, safe='')}"
        try:
            self._call(f"GET label {name!r}", lambda: self._requester.requestJsonAndCheck("GET", url))
        except GitHubNotFoundError:
            self._call(f"create label {name!r}",
                       lambda: self._repo.create_label(name=name, color=color, description=description))

    def open_issues(self, label: str) -> list[IssueInfo]:
        """Open issues (not pull requests) carrying the label, oldest first (the first hundred: one is kept open)."""
        query = urllib.parse.urlencode({"state": "open", "labels": label, "sort": "created", "direction": "asc",
                                        "per_page": "100"})
        url = f"{self._repo.url}/issues?{query}"
        _, data = self._call(f"list open issues labelled {label!r}",
                             lambda: self._requester.requestJsonAndCheck("GET", url))
        return [IssueInfo(number=int(item["number"]), title=str(item["title"]), body=str(item.get("body") or ""),
                          author_id=int(item["user"]["id"]), html_url=str(item["html_url"]))
                for item in data if "pull_request" not in item]

    def create_issue(self, title: str, body: str, labels: Sequence[str]) -> IssueInfo:
        """Open an issue, at most once: a retried POST first looks for the one a failed POST may have made (the
        bot's own open issue with this title and first label)."""
        tried = False

        def attempt() -> IssueInfo:
            nonlocal tried
            if tried and labels:
                me = self.identity().id
                made = [i for i in self.open_issues(labels[0]) if i.author_id == me and i.title == title]
                if made:
                    return made[-1]
            tried = True
            issue = self._repo.create_issue(title=title, body=body, labels=list(labels))
            return IssueInfo(number=issue.number, title=issue.title, body=issue.body or "",
                             author_id=issue.user.id, html_url=issue.html_url)

        return self._call(f"create issue {title!r}", attempt)


class GitHubGateway(RepositoryReads, ChecksAndComments, ActionsCalls, TrackingCalls):
    """The bot's only door to GitHub, for one repository: every call under the transport's retry policy."""
