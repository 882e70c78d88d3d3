"""The App service's adapter: a stored delivery is parsed (unless the door handed over what it parsed) and
decided against the service's SQLite ledger (`bot.modes.store_ledger`); a duplicate delivery (same
X-GitHub-Delivery) is never acted on twice."""

from __future__ import annotations

import time
from collections.abc import Callable

from bot.core.events import AnyEvent, PayloadError, parse_event
from bot.core.ports import CampaignDriver, RepoApi, RepoServices
from bot.modes.store_ledger import StoreLedger
from bot.modes.wiring import decide
from bot.settings import Settings
from bot.store.campaigns import Delivery, Store


class Intake:
    """Turns stored deliveries into decisions; runs on the service's single worker thread."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        backend_name: str,
        services: Callable[[str], RepoServices[RepoApi]],
        driver: CampaignDriver,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.settings = settings
        self.backend_name = backend_name
        self.services = services
        self.driver = driver
        self.clock = clock

    def handle(self, delivery: Delivery, event: AnyEvent | None = None) -> str:
        """Act on one stored delivery (`event`: its payload as the door parsed it, when handed over); returns the
        outcome recorded with it."""
        if event is None:
            try:
                event = parse_event(delivery.event, delivery.payload)
            except PayloadError as exc:
                return f"rejected: {exc}"
        repo = event.repository.full_name
        unserved = self.settings.unserved(repo)
        if unserved is not None:
            return f"ignored: {unserved}"
        already = self.store.by_delivery(delivery.id)
        if already:
            return f"already handled: campaign {already[0].id}"
        ledger = StoreLedger(self.store, self.driver, repo, backend=self.backend_name, delivery_id=delivery.id)
        return decide(event, ledger, self.services(repo), self.settings, received_at=delivery.received_at,
                      clock=self.clock)
