"""The acknowledging side's one thread: verified deliveries committed to SQLite in groups, off the event loop."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass

from bot.store.campaigns import Store

log = logging.getLogger(__name__)


class Ingest:
    """Group commit for acknowledgements: deliveries that arrive together share one transaction and one
    fsync, on a thread of their own, so a burst does not queue behind one fsync per delivery and the event
    loop never blocks on the disk."""

    _STOP = object()

    def __init__(self, store: Store, max_batch: int = 256) -> None:
        self.store = store
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="kv-parity-ingest", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._queue.put(self._STOP)
        self._thread.join(timeout)

    async def add(self, delivery_id: str, event: str, body: bytes) -> bool:
        """True once the delivery is committed; False if this delivery id was stored before."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._queue.put(_Pending(delivery_id, event, body, loop, future))
        return await future

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is self._STOP:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = self._STOP in batch
            pending = [item for item in batch if isinstance(item, _Pending)]
            try:
                results = self.store.add_deliveries([(p.delivery_id, p.event, p.body) for p in pending])
            except Exception as exc:
                log.error("storing %d deliveries in %s failed: %s", len(pending), self.store.path, exc)
                for item in pending:
                    item.loop.call_soon_threadsafe(_settle, item.future, exc)
            else:
                for item, fresh in zip(pending, results, strict=True):
                    item.loop.call_soon_threadsafe(_settle, item.future, fresh)
            if stop:
                return


@dataclass(frozen=True)
class _Pending:
    delivery_id: str
    event: str
    body: bytes
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[bool]


def _settle(future: asyncio.Future[bool], outcome: bool | Exception) -> None:
    if future.done():
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
