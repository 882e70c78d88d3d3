"""The acting side's one thread: recover after a restart, then handle stored deliveries and tick the lifecycle.

A delivery is parsed once: the door parses it to answer (400 naming the field, or 202), and hands the typed event
here with `HandedEvents`; the worker acts on that event and parses the stored payload only for a delivery it was
not handed (one stored before a restart, or one dropped from the bounded hand-off).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import OrderedDict

from bot.core.events import AnyEvent
from bot.github.errors import GitHubRetryLaterError, Interrupted
from bot.lifecycle import Lifecycle
from bot.logs import delivery_concerns, log_context, log_failure
from bot.modes.intake import Intake
from bot.settings import Settings
from bot.store.campaigns import Delivery, Store

log = logging.getLogger(__name__)


class HandedEvents:
    """The typed events the door parsed, waiting for the worker to act on their stored deliveries.

    The door hands an event over before it commits the delivery (the worker may read the delivery the moment it
    is committed), and takes it back when the delivery was a duplicate or could not be stored. At most `limit`
    wait (the oldest is dropped: its delivery is then parsed from the store, as after a restart).
    """

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._events: OrderedDict[str, AnyEvent] = OrderedDict()
        self._lock = threading.Lock()

    def hand(self, delivery_id: str, event: AnyEvent) -> None:
        """Keep the event for its delivery; an event already waiting for this delivery id is kept instead."""
        with self._lock:
            self._events.setdefault(delivery_id, event)
            while len(self._events) > self.limit:
                self._events.popitem(last=False)

    def take_back(self, delivery_id: str, event: AnyEvent) -> None:
        """Withdraw this very event (a duplicate's or an unstored delivery's), never one handed for another POST."""
        with self._lock:
            if self._events.get(delivery_id) is event:
                del self._events[delivery_id]

    def take(self, delivery_id: str) -> AnyEvent | None:
        with self._lock:
            return self._events.pop(delivery_id, None)


class Worker:
    """One thread: recover, then alternate between the oldest due delivery and a lifecycle tick.

    `stop` is shared with the gateways: setting it also cuts their retry waits short, so stopping takes
    at most one in-flight HTTP request, never a backoff.
    """

    def __init__(
        self,
        store: Store,
        intake: Intake,
        lifecycle: Lifecycle,
        settings: Settings,
        stop: threading.Event,
        handed: HandedEvents,
    ) -> None:
        self.store = store
        self.intake = intake
        self.lifecycle = lifecycle
        self.settings = settings
        self.handed = handed
        self._wake = threading.Event()
        self._stop = stop
        self._thread = threading.Thread(target=self._run, name="kv-parity-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 3.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("worker still in a GitHub request after %g s; exiting without it", timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            self.lifecycle.recover()
        except Exception:
            log.exception("recovery after restart failed; continuing with the queue")
        while not self._stop.is_set():
            self._wake.clear()
            try:
                handled = self._step()
            except sqlite3.Error as exc:
                # Another process holding the write lock, or a disk problem: keep the thread, try again.
                log.error("database %s unusable (%s); retrying", self.settings.db_path, exc)
                handled = False
            if not handled:
                self._wake.wait(self.settings.poll_interval_seconds)

    def _step(self) -> bool:
        delivery = self.store.next_delivery(time.time())
        if delivery is not None:
            with log_context(delivery_id=delivery.id, **delivery_concerns(delivery.payload)):
                self._handle(delivery)
        try:
            self.lifecycle.tick()
        except sqlite3.Error:
            raise
        except Exception as exc:
            log_failure(log, exc, "lifecycle tick failed")
        return delivery is not None

    def _handle(self, delivery: Delivery) -> None:
        """Never let one delivery kill the worker; retry it with backoff, then keep it as failed.

        A delivery cut short by shutdown stays pending (redone after the restart); one GitHub asked us to
        hold off for longer than the gateway waits is re-queued for then, without counting as a failure.
        """
        try:
            outcome = self.intake.handle(delivery, self.handed.take(delivery.id))
        except Interrupted:
            log.info("delivery %s (%s) interrupted by shutdown; redone after restart", delivery.id, delivery.event)
            return
        except GitHubRetryLaterError as exc:
            log.warning("delivery %s (%s) re-queued: %s", delivery.id, delivery.event, exc)
            self.store.retry_delivery(delivery.id, f"{type(exc).__name__}: {exc}", exc.not_before, give_up=False)
            return
        except sqlite3.Error:
            raise
        except Exception as exc:
            attempts = delivery.attempts + 1
            give_up = attempts >= self.settings.delivery_max_attempts
            log_failure(log, exc, "delivery %s (%s) failed, attempt %d", delivery.id, delivery.event, attempts)
            self.store.retry_delivery(
                delivery.id,
                f"{type(exc).__name__}: {exc}",
                time.time() + min(2.0**attempts, 300.0),
                give_up=give_up,
            )
            return
        made = self.store.by_delivery(delivery.id)
        with log_context(campaign_id=made[-1].id if made else None):
            log.info("delivery %s (%s): %s", delivery.id, delivery.event, outcome)
        self.store.finish_delivery(delivery.id, outcome)
