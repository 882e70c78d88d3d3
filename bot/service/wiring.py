"""What the service is built from: its database, the backend campaigns run on, and per repository a gateway with
its publishers (built on first use and kept)."""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Callable

from bot.core.ports import PullRequestPublisher, RepoServices, SideRunPublisher
from bot.dispatch.base import Backend
from bot.dispatch.local import LocalBackend
from bot.github.connect import make_gateway
from bot.github.gateway import GitHubGateway
from bot.github.retry import ApiObserver
from bot.settings import Settings
from bot.store.campaigns import Store

PublisherFactory = Callable[[GitHubGateway, Settings], PullRequestPublisher]
SideRunFactory = Callable[[GitHubGateway, Settings], SideRunPublisher]


class DatabaseError(RuntimeError):
    """The service's SQLite database cannot be opened or written; the message names its path."""


def open_store(settings: Settings, *, power_safe: bool) -> Store:
    """The store, or DatabaseError naming the path (a corrupt file, a directory that cannot be made)."""
    try:
        return Store(settings.db_path, power_safe=power_safe, busy_timeout=settings.db_busy_timeout_seconds)
    except (sqlite3.Error, OSError) as exc:
        raise DatabaseError(f"cannot open the database {settings.db_path}: {exc}") from exc


def default_publisher(gateway: GitHubGateway, settings: Settings) -> PullRequestPublisher:
    from bot.publish.publisher import Publisher as GitHubPublisher

    return GitHubPublisher(gateway, settings)


def default_side_runs(gateway: GitHubGateway, settings: Settings) -> SideRunPublisher:
    from bot.publish.side_runs import SideRunPublisher as GitHubSideRuns

    return GitHubSideRuns(gateway, settings)


def make_backend(
    settings: Settings, stop: threading.Event | None = None, observer: ApiObserver | None = None
) -> Backend:
    if settings.backend == "actions":
        from bot.dispatch.actions import ActionsBackend

        gateways = functools.cache(lambda repo: make_gateway(settings, repo, stop, observer))
        return ActionsBackend(
            gateways,
            workflow=settings.actions_workflow,
            ref=settings.actions_ref,
            poll_seconds=settings.actions_poll_seconds,
        )
    assert settings.local_repo_path is not None
    if settings.backend == "slurm":
        from bot.dispatch.slurm import SlurmBackend
        from runners.pipeline.slurm import SlurmOptions

        return SlurmBackend(settings.local_repo_path, options=settings.slurm or SlurmOptions(),
                            fetch_remote=settings.local_fetch_remote, sandbox=settings.sandbox,
                            cancel_grace_seconds=settings.cancel_grace_seconds, build_cache=settings.build_cache)
    return LocalBackend(
        settings.local_repo_path,
        argv_prefix=settings.local_campaign_argv,
        fetch_remote=settings.local_fetch_remote,
        cancel_grace_seconds=settings.cancel_grace_seconds,
        sandbox=settings.sandbox,
        build_cache=settings.build_cache,
        bisect_prefix=settings.local_bisect_argv,
    )


def services_factory(
    settings: Settings, publisher_factory: PublisherFactory, stop: threading.Event, observer: ApiObserver | None,
    side_run_factory: SideRunFactory = default_side_runs,
) -> Callable[[str], RepoServices]:
    """Gateway + publisher per repository, built on first use and kept (installation tokens are cached)."""
    cache: dict[str, RepoServices] = {}

    def services(repo: str) -> RepoServices:
        key = repo.lower()
        if key not in cache:
            gateway = make_gateway(settings, repo, stop, observer)
            cache[key] = RepoServices(
                api=gateway,
                publisher=publisher_factory(gateway, settings),
                bot=gateway.identity(),
                side_runs=side_run_factory(gateway, settings),
            )
        return cache[key]

    return services
