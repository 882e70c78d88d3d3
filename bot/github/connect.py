"""The gateway for one repository, built from the settings: beside the gateway, so every mode (the service,
Actions-only `kv-parity event`, the CLI) builds it the same way without importing the service."""

from __future__ import annotations

import functools
import threading
import time

from bot.github.errors import Interrupted
from bot.github.gateway import GitHubGateway
from bot.github.models import AppAuth, TokenAuth
from bot.github.retry import ApiObserver
from bot.settings import Settings


def make_gateway(
    settings: Settings, repo: str, stop: threading.Event | None = None, observer: ApiObserver | None = None
) -> GitHubGateway:
    """The gateway for one repository, authenticated the way the settings choose.

    With `stop`, a retry wait ends as soon as it is set (raising Interrupted), so a shutdown never waits
    out a backoff; `observer` (the service's metrics) is told of every call.
    """
    auth: TokenAuth | AppAuth
    if settings.token is not None:
        auth = TokenAuth(token=settings.token)
    else:
        assert settings.app_id is not None and settings.private_key_path is not None
        auth = AppAuth(
            app_id=settings.app_id,
            private_key=settings.private_key_path.read_text(encoding="utf-8"),
            installation_id=settings.installation_id,
        )
    return GitHubGateway(
        repo,
        auth,
        settings.api_base_url,
        bot_login=settings.bot_login,
        max_wait=settings.api_max_retry_wait_seconds,
        sleep=time.sleep if stop is None else functools.partial(_interruptible_sleep, stop),
        seconds_between_requests=settings.api_seconds_between_requests,
        seconds_between_writes=settings.api_seconds_between_writes,
        observer=observer,
    )


def _interruptible_sleep(stop: threading.Event, seconds: float) -> None:
    if stop.wait(seconds):
        raise Interrupted(f"a {seconds:g} s retry wait was cut short: the service is stopping")
