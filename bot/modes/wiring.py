"""What both modes build for a repository, and how one event meets the decision core, each written once.

The App service (`bot.modes.intake`, on its worker thread) and Actions-only mode (`bot.modes.actions_only`,
`kv-parity event`) differ in their ledger (`bot.modes.store_ledger`, `bot.modes.run_title_ledger`) and in
when a check run opens; the gateway, both publishers, who the bot is, and the way an event reaches `bot.core.decisions`
or `bot.core.tracking` are the same, built here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from bot.core.decisions import Decisions
from bot.core.events import AnyEvent, PushEvent
from bot.core.ledger import Ledger
from bot.core.ports import PullRequestPublisher, RepoApi, RepoServices, SideRunPublisher
from bot.core.tracking import TrackingLedger, handle_push
from bot.github.connect import make_gateway
from bot.github.gateway import GitHubGateway
from bot.github.retry import ApiObserver
from bot.settings import Settings

PublisherFactory = Callable[[GitHubGateway, Settings], PullRequestPublisher]
SideRunFactory = Callable[[GitHubGateway, Settings], SideRunPublisher]


def default_publisher(
    gateway: GitHubGateway, settings: Settings, *, open_when_queued: bool = True
) -> PullRequestPublisher:
    """`bot.publish.publisher.Publisher`; `open_when_queued` (the service) opens a campaign's check run as soon as
    it is queued."""
    from bot.publish.publisher import Publisher as GitHubPublisher

    return GitHubPublisher(gateway, settings, open_when_queued=open_when_queued)


def default_side_runs(
    gateway: GitHubGateway, settings: Settings, *, open_when_queued: bool = True
) -> SideRunPublisher:
    from bot.publish.side_runs import SideRunPublisher as GitHubSideRuns

    return GitHubSideRuns(gateway, settings, open_when_queued=open_when_queued)


def repo_services(
    settings: Settings,
    repo: str,
    *,
    actions_only: bool = False,
    stop: threading.Event | None = None,
    observer: ApiObserver | None = None,
    publisher_factory: PublisherFactory | None = None,
    side_run_factory: SideRunFactory | None = None,
) -> RepoServices[GitHubGateway]:
    """One repository's gateway (authenticated as the settings choose, `bot.github.connect`), its pull requests'
    publisher, its side runs' publisher and who the bot is there (github-actions[bot] needs no call).

    `actions_only`: a check run opens only when the publish job (or a failure) completes it. The service's
    publishers can be replaced (`publisher_factory`, `side_run_factory`: tests record what would be published).
    `stop` cuts a retry wait short when the service stops; `observer` (its metrics) is told of every call.
    """
    gateway = make_gateway(settings, repo, stop, observer)
    opens = not actions_only  # nothing in Actions-only mode would end a check run left queued
    publisher = (publisher_factory(gateway, settings) if publisher_factory is not None
                 else default_publisher(gateway, settings, open_when_queued=opens))
    side_runs = (side_run_factory(gateway, settings) if side_run_factory is not None
                 else default_side_runs(gateway, settings, open_when_queued=opens))
    return RepoServices(api=gateway, publisher=publisher, bot=gateway.identity(), side_runs=side_runs)


class ModeLedger(Ledger, TrackingLedger, Protocol):
    """A mode's ledger: what the decision core and main-branch tracking both record against."""


def decide(
    event: AnyEvent,
    ledger: ModeLedger,
    services: RepoServices[RepoApi],
    settings: Settings,
    *,
    received_at: float,
    clock: Callable[[], float] = time.time,
) -> str:
    """One event, decided against a mode's ledger and acted on; returns the outcome. A push to the default branch
    goes to main-branch tracking (`bot.core.tracking`), everything else to the decision core."""
    if isinstance(event, PushEvent):
        return handle_push(event, ledger, services.api, settings.config_path)
    decisions = Decisions(ledger, services.api, services.publisher, settings, clock=clock)
    return decisions.handle(event, bot_id=services.bot.id, received_at=received_at)
