"""Acceptances of an intended performance or size FAIL (`/parity accept`), as the service keeps them.

One row per accept comment (a redelivery of the same comment records nothing twice), pinned to the head SHA
that was current when it was written; `revoke` marks every standing acceptance of that head revoked, with who
and when, and never deletes one: `kv-parity history` shows both.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from runners.schema.report import Acceptance

from bot.store.base import StorePart

SCHEMA = """
CREATE TABLE IF NOT EXISTS acceptances (
    seq INTEGER PRIMARY KEY,
    repo TEXT NOT NULL,
    pr_number INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    comment_id INTEGER NOT NULL,
    acceptance TEXT NOT NULL,
    recorded_at REAL NOT NULL,
    revoked_at REAL,
    revoked_by TEXT,
    revoke_comment_id INTEGER,
    UNIQUE (repo, comment_id)
);
CREATE INDEX IF NOT EXISTS acceptances_by_head ON acceptances (repo, pr_number, head_sha);
"""


@dataclass(frozen=True)
class AcceptanceEntry:
    """An acceptance as recorded, with its revocation if any (for `kv-parity history` and the pages)."""

    pr_number: int
    acceptance: Acceptance
    revoked_at: float | None
    revoked_by: str | None


class AcceptanceRecords(StorePart):
    """The acceptances table (see the module docstring)."""

    def record_acceptance(self, repo: str, pr_number: int, acceptance: Acceptance) -> bool:
        """Keep an acceptance; False when its comment was recorded before (a redelivery)."""
        with self._tx() as db:
            done = db.execute(
                "INSERT OR IGNORE INTO acceptances (repo, pr_number, head_sha, comment_id, acceptance, recorded_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    repo,
                    pr_number,
                    acceptance.head_sha,
                    acceptance.comment_id,
                    acceptance.model_dump_json(),
                    acceptance.recorded_unix,
                ),
            )
            return done.rowcount == 1

    def revoke_acceptances(self, repo: str, pr_number: int, head_sha: str, login: str, comment_id: int) -> int:
        """Revoke every standing acceptance of this head; returns how many were revoked."""
        with self._tx() as db:
            done = db.execute(
                "UPDATE acceptances SET revoked_at = ?, revoked_by = ?, revoke_comment_id = ? "
                "WHERE repo = ? AND pr_number = ? AND head_sha = ? AND revoked_at IS NULL",
                (time.time(), login, comment_id, repo, pr_number, head_sha),
            )
            return done.rowcount

    def acceptances(self, repo: str, pr_number: int, head_sha: str) -> list[Acceptance]:
        """The standing (not revoked) acceptances of this head, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT acceptance FROM acceptances WHERE repo = ? AND pr_number = ? AND head_sha = ? "
                "AND revoked_at IS NULL ORDER BY seq",
                (repo, pr_number, head_sha),
            ).fetchall()
        return [Acceptance.model_validate_json(str(row[0])) for row in rows]

    def acceptance_history(self, repo: str, pr_number: int | None = None) -> list[AcceptanceEntry]:
        """Every acceptance of a pull request (or of the repository), revoked ones included, oldest first."""
        where, params = (
            ("repo = ?", (repo,)) if pr_number is None else ("repo = ? AND pr_number = ?", (repo, pr_number))
        )
        with self._lock:
            rows = self._db.execute(
                f"SELECT pr_number, acceptance, revoked_at, revoked_by FROM acceptances WHERE {where} ORDER BY seq",
                params,
            ).fetchall()
        return [
            AcceptanceEntry(
                pr_number=int(row[0]),
                acceptance=Acceptance.model_validate_json(str(row[1])),
                revoked_at=None if row[2] is None else float(row[2]),
                revoked_by=None if row[3] is None else str(row[3]),
            )
            for row in rows
        ]

