"""Who asked and what they could have seen: fork approvals, the heads the bot has seen, and refusals.

- An approval names one full head SHA of a fork pull request; a later push needs a new one.
- Every time the bot learns what a pull request's head is (a pull_request delivery, a pull request it fetched)
  is kept with its time, so a plain `/parity rerun` on a fork approves a head only if it was the head when the
  comment was written and no other head was seen since (`bot.core.decisions`). Every observation is kept, not
  only changes: they can arrive out of time order (a delivery retried after a later fetch), and a record of
  changes alone would then lose the one that shows the head moved.
- Refusals are logged, each marked answered or not: one public answer per person per pull request per window,
  and within the window the recorded permission stands in for another API lookup.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.core.heads import HeadSeen
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
DROP TABLE IF EXISTS seen_heads;
CREATE TABLE IF NOT EXISTS head_observations (
    seq INTEGER PRIMARY KEY,
    repo TEXT NOT NULL,
    pr_number INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    at REAL NOT NULL,
    source TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS head_observations_by_time ON head_observations (repo, pr_number, at);
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
    login: str
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
        """Record that the pull request's head was `head_sha` at `at` (every observation, in any time order)."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO head_observations (repo, pr_number, head_sha, at, source) VALUES (?, ?, ?, ?, ?)",
                (repo, pr_number, head_sha, at, source),
            )

    def heads_since(self, repo: str, pr_number: int, at: float) -> list[HeadSeen]:
        """The latest observations at or before `at` (every one of that same time), then every later one, in time
        order: what the head was at `at`, and what it was seen to be since. Empty if never observed."""
        with self._lock:
            found = self._db.execute(
                "SELECT head_sha, at, source FROM head_observations WHERE repo = ? AND pr_number = ? AND at >= "
                "COALESCE((SELECT MAX(at) FROM head_observations WHERE repo = ? AND pr_number = ? AND at <= ?), "
                "-1e308) ORDER BY at, seq",
                (repo, pr_number, repo, pr_number, at),
            ).fetchall()
        return [HeadSeen(str(row[0]), float(row[1]), str(row[2])) for row in found]

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
                "SELECT login, permission, reason, at FROM refusal_log WHERE repo = ? AND pr_number = ? AND login = ? "
                "AND answered = 1 AND at >= ? ORDER BY seq DESC LIMIT 1",
                (repo, pr_number, login.lower(), since),
            ).fetchone()
        return None if row is None else Refusal(str(row[0]), str(row[1]), str(row[2]), float(row[3]), True)

    def refusals(self, repo: str, pr_number: int, login: str | None = None) -> list[Refusal]:
        """Every refusal on this pull request (of one person, or of everyone), oldest first: what
        `kv-parity history --pr` shows beside the campaigns."""
        person = "" if login is None else "AND login = ? "
        with self._lock:
            found = self._db.execute(
                "SELECT login, permission, reason, at, answered FROM refusal_log WHERE repo = ? AND pr_number = ? "
                f"{person}ORDER BY seq",
                (repo, pr_number) if login is None else (repo, pr_number, login.lower()),
            ).fetchall()
        return [Refusal(str(r[0]), str(r[1]), str(r[2]), float(r[3]), bool(r[4])) for r in found]
