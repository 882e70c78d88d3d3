"""What an operator asks of the store: the queue, how long campaigns ran, the backlogs (`/metrics` in `bot.metrics`,
the queue page in `bot.pages.queue_page`). Read-only queries over the tables the other parts own; no table here.

Campaigns are returned as ids (with times), for `Store.get`: the views are built in `bot.store.campaigns`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.store.base import StorePart

_LAST_DISPATCH = (
    "(SELECT MAX(t.at) FROM transitions t WHERE t.campaign_id = c.id AND t.to_state = 'dispatched')"
)
"""When the campaign's latest attempt was dispatched: its run is timed from there."""
_DISPATCHES = (
    "(SELECT campaign_id, MAX(at) AS at FROM transitions WHERE to_state = 'dispatched' GROUP BY campaign_id)"
)
"""Every campaign's latest dispatch, computed once for a query over many campaigns."""
_QUEUED_SINCE = "(SELECT MAX(t.at) FROM transitions t WHERE t.campaign_id = c.id AND t.to_state = 'requested')"
"""When it last entered the queue (a campaign restarted after a lost process queues again)."""


@dataclass(frozen=True)
class RunDurations:
    """Finished campaigns of one backend and final state: how many ran at most each bucket's bound (cumulative, as
    Prometheus counts), and the sum of their run times, from the latest dispatch to the ending."""

    backend: str
    state: str
    at_most: list[int]
    count: int
    total_seconds: float


@dataclass(frozen=True)
class Waiting:
    """A live campaign's id and backend, with when it entered the queue and (running) when its run began."""

    campaign_id: str
    backend: str
    queued_since: float
    started: float | None


class OperatorQueries(StorePart):
    """Counts and times over the campaigns, deliveries and publications tables."""

    def campaign_counts(self) -> list[tuple[str, str, int]]:
        """(state, backend, campaigns) for every pair that has any."""
        with self._lock:
            rows = self._db.execute("SELECT state, backend, COUNT(*) FROM campaigns GROUP BY state, backend")
            return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]

    def live_campaigns(self) -> list[Waiting]:
        """Queued and running campaigns, oldest first, with their queue and start times."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT c.id, c.backend, COALESCE({_QUEUED_SINCE}, c.created_at), "
                f"CASE WHEN c.state = 'requested' THEN NULL ELSE {_LAST_DISPATCH} END FROM campaigns c "
                "WHERE c.state IN ('requested', 'dispatched', 'running') ORDER BY c.seq"
            ).fetchall()
        return [Waiting(str(r[0]), str(r[1]), float(r[2]), None if r[3] is None else float(r[3])) for r in rows]

    def run_durations(self, bounds: Sequence[float]) -> list[RunDurations]:
        """Run times of every finished campaign that was dispatched, bucketed in SQL (one row per group)."""
        buckets = ", ".join(f"SUM(CASE WHEN d <= {float(bound)!r} THEN 1 ELSE 0 END)" for bound in bounds)
        with self._lock:
            rows = self._db.execute(
                f"SELECT backend, state, COUNT(*), COALESCE(SUM(d), 0){', ' + buckets if buckets else ''} FROM "
                f"(SELECT c.backend AS backend, c.state AS state, c.finished_at - x.at AS d FROM campaigns c "
                f"JOIN {_DISPATCHES} x ON x.campaign_id = c.id WHERE c.finished_at IS NOT NULL) GROUP BY backend, state"
            ).fetchall()
        return [RunDurations(str(r[0]), str(r[1]), [int(n) for n in r[4:]], int(r[2]), float(r[3])) for r in rows]

    def recent_run_seconds(self, backend: str, limit: int) -> list[float]:
        """Run times of the latest `limit` campaigns that ran to an ending on `backend`, newest first (looked for
        among its latest `5 * limit` endings: a campaign ended before its dispatch has no run time)."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT c.finished_at - {_LAST_DISPATCH} FROM (SELECT id, finished_at FROM campaigns "
                "WHERE backend = ? AND finished_at IS NOT NULL ORDER BY finished_at DESC LIMIT ?) c "
                "ORDER BY c.finished_at DESC",
                (backend, 5 * limit),
            ).fetchall()
        return [float(r[0]) for r in rows if r[0] is not None][:limit]

    def recent_endings(self, limit: int) -> list[tuple[str, float, float | None]]:
        """(campaign id, when it ended, its run time or None if never dispatched) of the latest endings."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT c.id, c.finished_at, c.finished_at - {_LAST_DISPATCH} FROM campaigns c "
                "WHERE c.finished_at IS NOT NULL ORDER BY c.finished_at DESC, c.seq DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [(str(r[0]), float(r[1]), None if r[2] is None else float(r[2])) for r in rows]

    def delivery_backlog(self) -> tuple[dict[str, int], float | None]:
        """Deliveries by status, and when the oldest still pending one arrived (None: none pending)."""
        with self._lock:
            counts = self._db.execute("SELECT status, COUNT(*) FROM deliveries GROUP BY status").fetchall()
            oldest = self._db.execute("SELECT MIN(received_at) FROM deliveries WHERE status = 'pending'").fetchone()
        return {str(s): int(n) for s, n in counts}, None if oldest[0] is None else float(oldest[0])

    def publication_counts(self) -> dict[str, int]:
        """Publications by status: `pending` is the backlog, `failed` gave up."""
        with self._lock:
            rows = self._db.execute("SELECT status, COUNT(*) FROM publications GROUP BY status").fetchall()
        return {str(s): int(n) for s, n in rows}
