"""What the store's parts share: one SQLite connection, its lock and write transactions
(see `bot.store.campaigns.Store`).

Each part of the store (campaigns and deliveries, who asked and what was seen, publications) is a class over
this base, so a responsibility lives in its own module and `Store` composes them over one connection.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_WRITE_LOCKS: dict[Path, threading.Lock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def _write_lock(path: Path) -> threading.Lock:
    """One in-process queue of writers per database: SQLite's own busy handler backs off by sleeping, which
    starves a writer (the acknowledging one) behind a busy one; a lock hands over as soon as it is free."""
    key = path.resolve()
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(key, threading.Lock())


class StorePart:
    """The connection a store part works through and its write transactions; `bot.store.campaigns.Store` opens it."""

    path: Path
    _lock: threading.RLock
    _db: sqlite3.Connection

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (BEGIN IMMEDIATE ... COMMIT, rolled back on error)."""
        with self._lock, _write_lock(self.path):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
