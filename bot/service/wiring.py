"""What the service is built from: its database, the backend campaigns run on, each repository's services (the same
as Actions-only mode's, `bot.modes.wiring`, built on first use and kept), and the parts that run them, wired once
(`wire_service`)."""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.core.ports import RepoServices
from bot.dispatch.base import Backend
from bot.dispatch.local import LocalBackend
from bot.github.connect import make_gateway
from bot.github.gateway import GitHubGateway
from bot.github.retry import ApiObserver
from bot.lifecycle import Lifecycle
from bot.modes.intake import Intake
from bot.modes.wiring import PublisherFactory, SideRunFactory, repo_services
from bot.service.ingest import Ingest
from bot.service.worker import HandedEvents, Worker
from bot.settings import Settings
from bot.store.campaigns import Store

if TYPE_CHECKING:
    from bot.metrics import ServiceMetrics


class DatabaseError(RuntimeError):
    """The service's SQLite database cannot be opened or written; the message names its path."""


def open_store(settings: Settings, *, power_safe: bool) -> Store:
    """The store, or DatabaseError naming the path (a corrupt file, a directory that cannot be made)."""
    try:
        return Store(settings.db_path, power_safe=power_safe, busy_timeout=settings.db_busy_timeout_seconds)
    except (sqlite3.Error, OSError) as exc:
        raise DatabaseError(f"cannot open the database {settings.db_path}: {exc}") from exc


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
    settings: Settings,
    stop: threading.Event,
    observer: ApiObserver | None,
    publisher_factory: PublisherFactory | None = None,
    side_run_factory: SideRunFactory | None = None,
) -> Callable[[str], RepoServices[GitHubGateway]]:
    """Each repository's services (`bot.modes.wiring.repo_services`), built on first use and kept (installation
    tokens are cached)."""
    cache: dict[str, RepoServices[GitHubGateway]] = {}

    def services(repo: str) -> RepoServices[GitHubGateway]:
        key = repo.lower()
        if key not in cache:
            cache[key] = repo_services(settings, repo, stop=stop, observer=observer,
                                       publisher_factory=publisher_factory, side_run_factory=side_run_factory)
        return cache[key]

    return services


@dataclass(frozen=True)
class ServiceParts:
    """The service's parts, each built once and handed to the parts that use it, so none builds another."""

    store: Store
    """The worker's connection (the lifecycle's, the pages', /healthz's)."""
    ingest: Ingest
    """The door's own, power-safe connection and its group committer."""
    stop: threading.Event
    metrics: ServiceMetrics | None
    backend: Backend
    lifecycle: Lifecycle
    worker: Worker
    handed: HandedEvents
    """What the door parsed, handed to the worker so a delivery is parsed once."""


def wire_service(
    settings: Settings,
    *,
    publisher_factory: PublisherFactory | None = None,
    backend: Backend | None = None,
    side_run_factory: SideRunFactory | None = None,
) -> ServiceParts:
    """Open the databases and wire the worker, the intake, the lifecycle, the backend and each repository's
    services. Raises DatabaseError (naming the path) when the database cannot be opened."""
    store = open_store(settings, power_safe=False)
    ingest = Ingest(open_store(settings, power_safe=True))
    stop = threading.Event()
    metrics = None
    if settings.metrics_enabled:
        from bot.metrics import ServiceMetrics

        backend_name = backend.name if backend is not None else settings.backend
        metrics = ServiceMetrics(open_store(settings, power_safe=False), settings, backend_name)
    services = services_factory(settings, stop, metrics, publisher_factory, side_run_factory)
    runs_on = backend or make_backend(settings, stop, metrics)
    lifecycle = Lifecycle(store, settings, runs_on, services, metrics=metrics)
    # The intake records campaigns and the lifecycle runs them; wired here so neither builds the other.
    intake = Intake(store, settings, runs_on.name, services, lifecycle)
    handed = HandedEvents()
    worker = Worker(store, intake, lifecycle, settings, stop, handed)
    return ServiceParts(store=store, ingest=ingest, stop=stop, metrics=metrics, backend=runs_on,
                        lifecycle=lifecycle, worker=worker, handed=handed)
