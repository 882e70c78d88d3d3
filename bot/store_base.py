"""What the store's parts share: one SQLite connection, its lock and write transactions (see `bot.store.Store`).

Each part of the store (campaigns and deliveries, who asked and what was seen, publications) is a class over
this base, so a responsibility lives in its own module and `Store` composes them over one connection.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import AbstractContextManager


class StorePart:
    """Declares the connection a store part works through; `bot.store.Store` provides it."""

    _lock: threading.RLock
    _db: sqlite3.Connection

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        """A write transaction (BEGIN IMMEDIATE ... COMMIT, rolled back on error)."""
        raise NotImplementedError
