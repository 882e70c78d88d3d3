"""Pending publications of finished or ended campaigns: queued in the same commit as the transition they
announce, retried with backoff, and marked done once the publisher succeeded (so a result goes out once)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.store.base import StorePart

SCHEMA = """
CREATE TABLE IF NOT EXISTS publications (
    campaign_id TEXT NOT NULL REFERENCES campaigns (id),
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before REAL NOT NULL DEFAULT 0,
    error TEXT,
    PRIMARY KEY (campaign_id, kind)
);
"""


@dataclass(frozen=True)
class Publication:
    campaign_id: str
    kind: str
    """finished | ended"""
    state: str
    reason: str
    attempts: int


class PublicationQueue(StorePart):
    """The publications table (rows are inserted by `Store.transition`, in the transition's commit)."""

    def due_publications(self, now: float) -> list[Publication]:
        with self._lock:
            rows = self._db.execute(
                "SELECT campaign_id, kind, state, reason, attempts FROM publications "
                "WHERE status = 'pending' AND not_before <= ? ORDER BY rowid",
                (now,),
            ).fetchall()
        return [Publication(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def publication_done(self, campaign_id: str, kind: str) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE publications SET status = 'done', error = NULL WHERE campaign_id = ? AND kind = ?",
                (campaign_id, kind),
            )

    def publication_failed(self, campaign_id: str, kind: str, error: str, not_before: float, *, give_up: bool) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE publications SET status = ?, attempts = attempts + 1, not_before = ?, error = ? "
                "WHERE campaign_id = ? AND kind = ?",
                ("failed" if give_up else "pending", not_before, error, campaign_id, kind),
            )

    def publications(self, campaign_id: str) -> list[tuple[str, str]]:
        """(kind, status) of a campaign's publications."""
        with self._lock:
            rows = self._db.execute(
                "SELECT kind, status FROM publications WHERE campaign_id = ? ORDER BY rowid", (campaign_id,)
            ).fetchall()
        return [(str(r[0]), str(r[1])) for r in rows]

    def republish(self, campaign_id: str, kind: str, reason: str) -> None:
        """Publish a campaign's `kind` again (an acceptance changed its conclusion): pending now, attempts reset."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO publications (campaign_id, kind, state, reason) VALUES (?, ?, 'completed', ?) "
                "ON CONFLICT (campaign_id, kind) DO UPDATE SET status = 'pending', attempts = 0, not_before = 0, "
                "error = NULL, reason = excluded.reason",
                (campaign_id, kind, reason),
            )
