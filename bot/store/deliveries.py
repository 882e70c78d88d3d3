"""Deliveries: every verified webhook is stored (deduplicated by X-GitHub-Delivery) before it is acknowledged,
then handled by the worker in arrival order; signed but malformed ones are kept apart for diagnosis."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.store.base import StorePart

SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    id TEXT PRIMARY KEY,
    event TEXT NOT NULL,
    payload BLOB NOT NULL,
    received_at REAL NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before REAL NOT NULL DEFAULT 0,
    outcome TEXT
);
CREATE INDEX IF NOT EXISTS deliveries_by_status ON deliveries (status);
CREATE TABLE IF NOT EXISTS rejected_deliveries (
    seq INTEGER PRIMARY KEY,
    delivery_id TEXT NOT NULL,
    event TEXT NOT NULL,
    received_at REAL NOT NULL,
    reason TEXT NOT NULL,
    payload BLOB NOT NULL
);
"""


@dataclass(frozen=True)
class Delivery:
    id: str
    event: str
    payload: bytes
    attempts: int
    received_at: float
    """When the service acknowledged it: the bot knew of what it says from then on."""


class DeliveryQueue(StorePart):
    """The deliveries and rejected_deliveries tables."""

    def add_delivery(self, delivery_id: str, event: str, payload: bytes) -> bool:
        """Persist a verified delivery; False when this delivery id was already stored."""
        return self.add_deliveries([(delivery_id, event, payload)])[0]

    def add_deliveries(self, deliveries: list[tuple[str, str, bytes]]) -> list[bool]:
        """Persist several verified deliveries in one transaction (one fsync); False marks a duplicate."""
        now = time.time()
        with self._tx() as db:
            return [
                db.execute(
                    "INSERT OR IGNORE INTO deliveries (id, event, payload, received_at) VALUES (?, ?, ?, ?)",
                    (delivery_id, event, payload, now),
                ).rowcount
                == 1
                for delivery_id, event, payload in deliveries
            ]

    def reject_delivery(self, delivery_id: str, event: str, reason: str, payload: bytes) -> None:
        """Keep a signed but malformed delivery for diagnosis; it never enters the work queue."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO rejected_deliveries (delivery_id, event, received_at, reason, payload) "
                "VALUES (?, ?, ?, ?, ?)",
                (delivery_id, event, time.time(), reason, payload),
            )

    def rejected_deliveries(self) -> list[tuple[str, str, str]]:
        with self._lock:
            rows = self._db.execute("SELECT delivery_id, event, reason FROM rejected_deliveries ORDER BY seq")
            return [(str(r[0]), str(r[1]), str(r[2])) for r in rows]

    def next_delivery(self, now: float) -> Delivery | None:
        """The oldest pending delivery that is due (deliveries are handled in arrival order)."""
        with self._lock:
            row = self._db.execute(
                "SELECT id, event, payload, attempts, received_at FROM deliveries "
                "WHERE status = 'pending' AND not_before <= ? ORDER BY rowid LIMIT 1",
                (now,),
            ).fetchone()
        return None if row is None else Delivery(row[0], row[1], bytes(row[2]), row[3], float(row[4]))

    def finish_delivery(self, delivery_id: str, outcome: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE deliveries SET status = 'done', outcome = ? WHERE id = ?", (outcome, delivery_id))

    def retry_delivery(self, delivery_id: str, error: str, not_before: float, *, give_up: bool) -> None:
        """Count a failed attempt; after the last one the delivery is kept as failed for diagnosis."""
        status = "failed" if give_up else "pending"
        with self._tx() as db:
            db.execute(
                "UPDATE deliveries SET status = ?, attempts = attempts + 1, not_before = ?, outcome = ? WHERE id = ?",
                (status, not_before, error, delivery_id),
            )

    def delivery_status(self, delivery_id: str) -> tuple[str, str | None] | None:
        with self._lock:
            row = self._db.execute("SELECT status, outcome FROM deliveries WHERE id = ?", (delivery_id,)).fetchone()
        return None if row is None else (str(row[0]), row[1])

    def delivery_counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT status, COUNT(*) FROM deliveries GROUP BY status").fetchall()
        return {str(status): int(count) for status, count in rows}
