"""Who asked and what they could have seen: fork approvals, the heads the bot has seen, and refusals.

- An approval names one full head SHA of a fork pull request; a later push needs a new one.
- Every head SHA the bot learns of (a pull_request delivery, a pull request it fetched) is kept with the time it
  was first seen, so a plain `/parity rerun` on a fork approves only a head the commenter could have seen.
- Refusals are logged, each marked answered or not: one public answer per person per pull request per window,
  and within the window the recorded permission stands in for another API lookup.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.store.base import StorePart

SCHEMA = """
CREATE TABLE IF NOT EXISTS approvals (
    repo TEXT NOT NULL,
    pr_number INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    approved_by TEXT NOT NULL,
    approved_at REAL NOT NULL,
    PRIMARY KEY (repo, pr_number, head_sha)
);
CREATE TABLE IF NOT EXISTS seen_heads (
    repo TEXT NOT NULL,
    pr_number INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    first_seen REAL NOT NULL,
    source TEXT NOT NULL,
    PRIMARY KEY (repo, pr_number, head_sha)
);
DROP TABLE IF EXISTS refusals;
CREATE TABLE IF NOT EXISTS refusal_log (
    seq INTEGER PRIMARY KEY,
    repo TEXT NOT NULL,
    pr_number INTEGER NOT NULL,
    login TEXT NOT NULL,
    permission TEXT NOT NULL,
    reason TEXT NOT NULL,
    at REAL NOT NULL,
    answered INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS refusal_log_by_person ON refusal_log (repo, pr_number, login, at);
"""


@dataclass(frozen=True)
class Refusal:
    permission: str
    reason: str
    at: float
    answered: bool


class PeopleRecords(StorePart):
    """Approvals, seen heads and refusals (see the module docstring)."""

    # ------------------------------------------------------------------ fork approvals

    def approve_head(self, repo: str, pr_number: int, head_sha: str, login: str) -> None:
        """An authorised human approved exactly this head of a fork pull request."""
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO approvals (repo, pr_number, head_sha, approved_by, approved_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (repo, pr_number, head_sha, login, time.time()),
            )

    def is_approved(self, repo: str, pr_number: int, head_sha: str) -> bool:
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM approvals WHERE repo = ? AND pr_number = ? AND head_sha = ?",
                (repo, pr_number, head_sha),
            ).fetchone()
        return row is not None

    # ------------------------------------------------------------------ heads seen

    def see_head(self, repo: str, pr_number: int, head_sha: str, at: float, source: str) -> None:
        """Record that the bot knew of this head at `at` (keeps the earliest time and its source)."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO seen_heads (repo, pr_number, head_sha, first_seen, source) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (repo, pr_number, head_sha) DO UPDATE SET first_seen = excluded.first_seen, "
                "source = excluded.source WHERE excluded.first_seen < seen_heads.first_seen",
                (repo, pr_number, head_sha, at, source),
            )

    def head_first_seen(self, repo: str, pr_number: int, head_sha: str) -> float | None:
        """When the bot first knew of this head of the pull request (unix time); None if never."""
        with self._lock:
            row = self._db.execute(
                "SELECT first_seen FROM seen_heads WHERE repo = ? AND pr_number = ? AND head_sha = ?",
                (repo, pr_number, head_sha),
            ).fetchone()
        return None if row is None else float(row[0])

    # ------------------------------------------------------------------ refusals

    def record_refusal(
        self, repo: str, pr_number: int, login: str, permission: str, reason: str, *, answered: bool
    ) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO refusal_log (repo, pr_number, login, permission, reason, at, answered) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (repo, pr_number, login.lower(), permission, reason, time.time(), int(answered)),
            )

    def answered_refusal(self, repo: str, pr_number: int, login: str, since: float) -> Refusal | None:
        """The latest refusal of this person on this pull request answered publicly at or after `since`."""
        with self._lock:
            row = self._db.execute(
                "SELECT permission, reason, at FROM refusal_log WHERE repo = ? AND pr_number = ? AND login = ? "
                "AND answered = 1 AND at >= ? ORDER BY seq DESC LIMIT 1",
                (repo, pr_number, login.lower(), since),
            ).fetchone()
        return None if row is None else Refusal(str(row[0]), str(row[1]), float(row[2]), True)

    def refusals(self, repo: str, pr_number: int, login: str) -> list[Refusal]:
        """Every refusal of this person on this pull request, oldest first."""
        with self._lock:
            found = self._db.execute(
                "SELECT permission, reason, at, answered FROM refusal_log WHERE repo = ? AND pr_number = ? "
                "AND login = ? ORDER BY seq",
                (repo, pr_number, login.lower()),
            ).fetchall()
        return [Refusal(str(r[0]), str(r[1]), float(r[2]), bool(r[3])) for r in found]
