"""Actions-only mode's adapter, nothing to host: one GitHub event, read from the workflow's event file
(`kv-parity event`), is decided and acted on by the service's own decision core with the workflow's token against
the run-title ledger (`bot.modes.run_title_ledger`): dispatch the campaign workflow, cancel its runs, or answer
through the same publishers as the service (`bot.modes.wiring`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

from bot.core.events import AnyEvent, PushEvent
from bot.core.ports import RepoServices
from bot.github.gateway import GitHubGateway
from bot.github.models import ACTIONS_BOT
from bot.modes.run_title_ledger import EventApi, RunTitleLedger
from bot.modes.wiring import decide, repo_services
from bot.settings import Settings, load_settings

ACTIONS_BOT_LOGIN = ACTIONS_BOT.login
"""Who comments with the workflow's GITHUB_TOKEN: its own comments must be ignored."""
NO_WEBHOOK_SECRET = "unused: Actions-only mode receives no webhooks"
"""The settings model requires a webhook secret for the service; GitHub runs this mode, nobody posts to it."""
EVENT_ALIASES = {"pull_request_target": "pull_request"}
"""pull_request_target carries the pull_request payload; only where the workflow runs differs."""


def actions_settings(path: Path | None, environ: Mapping[str, str]) -> Settings:
    """The service's settings model, with what an Actions runner provides as defaults: the token, repository,
    API URL and bot login; the backend is always `actions` (this mode only ever dispatches the workflow)."""
    values = dict(environ)
    defaults = {
        "KV_PARITY_TOKEN": environ.get("GITHUB_TOKEN"),
        "KV_PARITY_REPO": environ.get("GITHUB_REPOSITORY"),
        "KV_PARITY_API_BASE_URL": environ.get("GITHUB_API_URL"),
        "KV_PARITY_BOT_LOGIN": ACTIONS_BOT_LOGIN,
        "KV_PARITY_WEBHOOK_SECRET": NO_WEBHOOK_SECRET,
    }
    for key, value in defaults.items():
        if value and not values.get(key):
            values[key] = value
    values["KV_PARITY_BACKEND"] = "actions"
    return load_settings(path, values)


def actions_services(settings: Settings, repo: str) -> RepoServices[GitHubGateway]:
    """The repository's services as this mode builds them: a check run opens only when the publish job (or a
    failure) completes it; github-actions[bot] is who the bot is, unless the settings name another login."""
    return repo_services(settings, repo, actions_only=True)


def actions_ledger(
    services: RepoServices[EventApi], settings: Settings, repo: str, *, side_runs: bool,
    clock: Callable[[], float] = time.time,
) -> RunTitleLedger:
    """The run-title ledger over the repository's services; with `side_runs` its campaigns (main-branch tracking)
    are reported by the side runs' publisher, else by the pull requests'."""
    reporter = (services.side_runs or services.publisher) if side_runs else services.publisher
    return RunTitleLedger(services.api, reporter, settings, repo, clock=clock, bot_id=services.bot.id)


def handle_event(
    event: AnyEvent, services: RepoServices[EventApi], settings: Settings, *, clock: Callable[[], float] = time.time
) -> str:
    """Decide and act on one event with the run titles as the ledger; returns the outcome. A push goes to
    main-branch tracking (bot.core.tracking), reported by the side runs' publisher."""
    repo = event.repository.full_name
    ledger = actions_ledger(services, settings, repo, side_runs=isinstance(event, PushEvent), clock=clock)
    return decide(event, ledger, services, settings, received_at=clock(), clock=clock)
