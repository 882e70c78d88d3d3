"""How the gateway talks to GitHub: the PyGithub clients for one repository and its credentials, every call under
the retry policy (`bot.github.retry`), and who the bot is.

PyGithub's own retries are off (the policy is the single retry layer); its own pacing (``seconds_between_*``)
follows GitHub's advice to space out mutating calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cached_property
from typing import Any, TypeVar

from github import Auth, Github, GithubIntegration
from github.AuthenticatedUser import AuthenticatedUser
from github.NamedUser import NamedUser
from github.Repository import Repository
from github.Requester import Requester

from bot.core.repo_values import BotIdentity
from bot.github.models import ACTIONS_BOT, AppAuth, TokenAuth
from bot.github.retry import ApiObserver, RetryPolicy

T = TypeVar("T")

DEFAULT_BASE_URL = "https://api.github.com"


def _identity_of(user: NamedUser | AuthenticatedUser) -> BotIdentity:
    return BotIdentity(login=user.login, id=user.id)


class GitHubTransport:
    """One repository's clients, credentials and retry policy; the gateway's concerns are built on ``_call``.

    ``sleep`` and ``clock`` are the retry policy's (injectable so tests can observe waits without waiting).
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
        self._timeout = timeout
        self._client_kwargs: dict[str, Any] = {
            "base_url": self._base_url,
            "timeout": timeout,
            "retry": None,  # the retry policy is the single retry layer
            "per_page": 100,
            "lazy": True,  # no GET before a PATCH/POST on an object we only know by id
            "seconds_between_requests": seconds_between_requests,
            "seconds_between_writes": seconds_between_writes,
        }
        self._policy = RetryPolicy(
            repo_full_name, max_attempts=max_attempts, max_wait=max_wait, sleep=sleep, clock=clock, observer=observer
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

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` under the retry policy (`RetryPolicy.call`), passing on the rate limit after each attempt."""
        return self._policy.call(what, fn, self._observe_rate_limit)

    def _observe_rate_limit(self) -> None:
        """Pass on the rate limit PyGithub read from the latest answer's headers (none before the first answer)."""
        client: Github | None = self.__dict__.get("_github")
        if self._observer is None or client is None:
            return
        remaining, limit = client.requester.rate_limiting
        if limit >= 0:
            self._observer.github_rate_limit(self._repo_name, remaining, limit)

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

