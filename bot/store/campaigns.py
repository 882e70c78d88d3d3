"""SQLite (WAL) state of the bot: campaigns and their transitions here; deliveries (dedupe + work queue) in
`bot.store.deliveries`; fork approvals, seen heads and refusals in `bot.store.people`; pending publications in
`bot.store.publications`; details-page tokens and merge-base history in `bot.store.pages`; what operators ask (the
queue, run times, backlogs) in `bot.store.operations`. `Store` composes them over one connection.

A campaign row maps to and from the core's model (`bot.core.campaign.Campaign`, recorded from a
`CampaignRequest`); the store imports the model, never the reverse. Every campaign transition is written, with
its reason and time, before the side effect it stands for (start a process, kill it, publish), so after a crash
the store says what was meant to happen and the worker can finish it. Transitions the core's state machine
(`bot.core.campaign.ALLOWED`) does not allow raise instead of being written.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bot.core.attempts import PriorAttempt
from bot.core.campaign import (
    ACTIVE_STATES,
    ALLOWED,
    COVERING_STATES,
    FINAL_STATES,
    Campaign,
    CampaignPurpose,
    CampaignRequest,
    CampaignState,
    DuplicateCampaign,
    IllegalTransition,
)
from bot.store.acceptances import SCHEMA as ACCEPTANCES_SCHEMA
from bot.store.acceptances import AcceptanceRecords
from bot.store.deliveries import SCHEMA as DELIVERIES_SCHEMA
from bot.store.deliveries import Delivery, DeliveryQueue
from bot.store.operations import OperatorQueries
from bot.store.pages import SCHEMA as PAGES_SCHEMA
from bot.store.pages import PageRecords
from bot.store.people import SCHEMA as PEOPLE_SCHEMA
from bot.store.people import PeopleRecords
from bot.store.publications import SCHEMA as PUBLICATIONS_SCHEMA
from bot.store.publications import PublicationQueue
from bot.store.tracking import SCHEMA as TRACKING_SCHEMA
from bot.store.tracking import TrackingRecords

S = CampaignState
__all__ = [
    "Delivery",
    "Store",
    "Transition",
]


@dataclass(frozen=True)
class Transition:
    campaign_id: str
    from_state: CampaignState | None
    to_state: CampaignState
    at: datetime
    reason: str


_SCHEMA = """
CREATE TABLE IF NOT EXISTS campaigns (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    repo TEXT NOT NULL,
    pr_number INTEGER NOT NULL,
    head_sha TEXT NOT NULL,
    base_sha TEXT NOT NULL,
    relationship TEXT NOT NULL,
    rows TEXT,
    rows_key TEXT NOT NULL,
    state TEXT NOT NULL,
    check_run_id INTEGER,
    status_comment_id INTEGER,
    published_position INTEGER,
    requested_by TEXT NOT NULL,
    trigger TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    backend TEXT NOT NULL,
    created_at REAL NOT NULL,
    deadline REAL,
    artifact_dir TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    handle TEXT,
    reason TEXT NOT NULL DEFAULT '',
    conclusion TEXT,
    config_text TEXT NOT NULL,
    config_source TEXT NOT NULL
);
DROP INDEX IF EXISTS campaigns_one_per_key;
CREATE UNIQUE INDEX IF NOT EXISTS campaigns_one_live_per_key
    ON campaigns (repo, pr_number, head_sha, base_sha, rows_key)
    WHERE state IN ('requested', 'dispatched', 'running');
CREATE INDEX IF NOT EXISTS campaigns_by_pr ON campaigns (repo, pr_number);
CREATE INDEX IF NOT EXISTS campaigns_by_delivery ON campaigns (delivery_id);
CREATE INDEX IF NOT EXISTS campaigns_by_state ON campaigns (state);
CREATE TABLE IF NOT EXISTS transitions (
    seq INTEGER PRIMARY KEY,
    campaign_id TEXT NOT NULL REFERENCES campaigns (id),
    from_state TEXT,
    to_state TEXT NOT NULL,
    at REAL NOT NULL,
    reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS transitions_by_campaign ON transitions (campaign_id);
"""
_ADDED_COLUMNS = {
    "config_sha": "TEXT",
    "semantic": "TEXT",
    "performance": "TEXT",
    "finished_at": "REAL",
    "mode": "TEXT NOT NULL DEFAULT 'campaign'",
    "scheduler_wait": "TEXT",
    "purpose": "TEXT NOT NULL DEFAULT 'pull_request'",
}
"""Campaign columns added after the first schema: added in place to a database that lacks them."""

_COLUMNS = (
    "seq, id, repo, pr_number, head_sha, base_sha, relationship, rows, state, requested_by, trigger, "
    "created_at, deadline, artifact_dir, attempt, reason, "
    "conclusion, config_source, backend, config_sha, mode, scheduler_wait, purpose"
)


def _utc(unix: float | None) -> datetime | None:
    return None if unix is None else datetime.fromtimestamp(unix, UTC)


def _purpose(value: object) -> CampaignPurpose:
    for known in ("bisect", "main", "reference"):
        if value == known:
            return known
    return "pull_request"


def campaign_from_row(
    row: sqlite3.Row | tuple[object, ...], position: Callable[[int, CampaignState, str], int | None]
) -> Campaign:
    """Decode one `_COLUMNS` row; `position` gives its queue position (it needs the rest of the queue)."""
    (
        seq,
        cid,
        repo,
        pr,
        head,
        base,
        relationship,
        rows,
        state,
        requested_by,
        trigger,
        created_at,
        deadline,
        artifact_dir,
        attempt,
        reason,
        conclusion,
        config_source,
        backend,
        config_sha,
        mode,
        scheduler_wait,
        purpose,
    ) = row
    state = CampaignState(str(state))
    return Campaign(
        id=str(cid),
        repo=str(repo),
        pr_number=int(str(pr)),
        head_sha=str(head),
        base_sha=str(base),
        relationship=str(relationship),
        rows=None if rows is None else json.loads(str(rows)),
        state=state,
        requested_by=str(requested_by),
        trigger=str(trigger),
        created_at=_utc(float(str(created_at))),
        deadline=_utc(None if deadline is None else float(str(deadline))),
        artifact_dir=None if artifact_dir is None else Path(str(artifact_dir)),
        queue_position=position(int(str(seq)), state, str(backend)),
        attempt=int(str(attempt)),
        reason=str(reason),
        conclusion=None if conclusion is None else str(conclusion),
        config_source=str(config_source),
        config_sha=None if config_sha is None else str(config_sha),
        mode="profile" if mode == "profile" else "campaign",
        scheduler_wait=None if scheduler_wait is None else str(scheduler_wait),
        purpose=_purpose(purpose),
    )


class Store(
    DeliveryQueue, PeopleRecords, PublicationQueue, PageRecords, TrackingRecords, AcceptanceRecords, OperatorQueries
):
    """One SQLite connection guarded by a lock; cheap enough to share between the HTTP side and a worker."""

    def __init__(self, path: Path, *, power_safe: bool = True, busy_timeout: float = 30.0) -> None:
        """`power_safe` (synchronous=FULL) makes every commit survive power loss; without it (NORMAL, WAL)
        commits survive any process crash but the last ones may be lost with the machine. The webhook's
        acknowledgements use FULL (GitHub will not redeliver what we acknowledged); the worker's bookkeeping
        uses NORMAL, since after a power loss its processes are gone too and recovery redoes lost steps
        idempotently, and a second fsync stream would contend with the acknowledgements for the disk.
        `busy_timeout` bounds the wait for another process's write lock before sqlite3.OperationalError
        ("database is locked"): the service keeps it well under GitHub's 10 s delivery timeout."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=busy_timeout)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={'FULL' if power_safe else 'NORMAL'}")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(
            DELIVERIES_SCHEMA + _SCHEMA + PEOPLE_SCHEMA + PUBLICATIONS_SCHEMA + PAGES_SCHEMA + TRACKING_SCHEMA
            + ACCEPTANCES_SCHEMA
        )
        present = {str(row[1]) for row in self._db.execute("PRAGMA table_info(campaigns)")}
        for column, kind in _ADDED_COLUMNS.items():
            if column not in present:
                self._db.execute(f"ALTER TABLE campaigns ADD COLUMN {column} {kind}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ campaigns

    def _view(self, row: sqlite3.Row | tuple[object, ...]) -> Campaign:
        return campaign_from_row(row, self._position)

    def _position(self, seq: int, state: CampaignState, backend: str) -> int | None:
        if state in ACTIVE_STATES:
            return 0
        if state != S.REQUESTED:
            return None
        ahead = self._db.execute(
            "SELECT COUNT(*) FROM campaigns WHERE backend = ? AND state = 'requested' AND seq < ?",
            (backend, seq),
        ).fetchone()[0]
        return int(ahead) + 1

    def _select(self, where: str, params: tuple[object, ...]) -> list[Campaign]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM campaigns WHERE {where}", params).fetchall()
            return [self._view(row) for row in rows]

    def get(self, campaign_id: str) -> Campaign | None:
        found = self._select("id = ?", (campaign_id,))
        return found[0] if found else None

    def require(self, campaign_id: str) -> Campaign:
        view = self.get(campaign_id)
        if view is None:
            raise KeyError(f"no campaign {campaign_id}")
        return view

    def by_delivery(self, delivery_id: str) -> list[Campaign]:
        return self._select("delivery_id = ? ORDER BY seq", (delivery_id,))

    def for_pr(self, repo: str, pr_number: int, *, live_only: bool = False, limit: int = 20) -> list[Campaign]:
        """A pull request's campaigns, newest first."""
        states = "AND state IN ('requested', 'dispatched', 'running')" if live_only else ""
        return self._select(f"repo = ? AND pr_number = ? {states} ORDER BY seq DESC LIMIT ?", (repo, pr_number, limit))

    def side_runs(self, repo: str, purposes: tuple[CampaignPurpose, ...], *, live_only: bool = False,
                  limit: int = 100) -> list[Campaign]:
        """A repository's campaigns of these purposes (main-branch tracking), newest first."""
        marks = ", ".join("?" for _ in purposes)
        states = "AND state IN ('requested', 'dispatched', 'running')" if live_only else ""
        return self._select(f"repo = ? AND purpose IN ({marks}) {states} ORDER BY seq DESC LIMIT ?",
                            (repo, *purposes, limit))

    def in_states(self, states: frozenset[CampaignState], backend: str | None = None) -> list[Campaign]:
        """Campaigns in the given states, oldest first (FIFO)."""
        marks = ", ".join("?" for _ in states)
        where = f"state IN ({marks})" + (" AND backend = ?" if backend else "") + " ORDER BY seq"
        return self._select(where, (*sorted(states), *([backend] if backend else [])))

    def covering(self, repo: str, pr_number: int, head_sha: str, base_sha: str, rows_key: str) -> Campaign | None:
        marks = ", ".join("?" for _ in COVERING_STATES)
        found = self._select(
            f"repo = ? AND pr_number = ? AND head_sha = ? AND base_sha = ? AND rows_key = ? AND state IN ({marks})",
            (repo, pr_number, head_sha, base_sha, rows_key, *COVERING_STATES),
        )
        return found[0] if found else None

    def live_for_key(
        self, repo: str, pr_number: int, head_sha: str, base_sha: str, rows_key: str
    ) -> Campaign | None:
        """The queued or running campaign of this key, if any (there is at most one)."""
        found = self._select(
            "repo = ? AND pr_number = ? AND head_sha = ? AND base_sha = ? AND rows_key = ? "
            "AND state IN ('requested', 'dispatched', 'running')",
            (repo, pr_number, head_sha, base_sha, rows_key),
        )
        return found[0] if found else None

    def latest_of_head(
        self, repo: str, pr_number: int, head_sha: str, *, completed: bool = False
    ) -> Campaign | None:
        """The newest campaign of this pull-request head that judges it (mode campaign, neither a merge group's nor
        a bisect, whose success names a culprit); with `completed`, the newest that finished with a report."""
        state = " AND state = 'completed'" if completed else ""
        found = self._select(
            f"repo = ? AND pr_number = ? AND head_sha = ? AND mode = 'campaign' AND trigger != 'merge_group' "
            f"AND purpose = 'pull_request'{state} ORDER BY seq DESC LIMIT 1",
            (repo, pr_number, head_sha),
        )
        return found[0] if found else None

    def live_of_head(self, repo: str, head_sha: str) -> list[Campaign]:
        """The queued and running campaigns of a commit, whichever pull request they are recorded under."""
        return self._select(
            "repo = ? AND head_sha = ? AND state IN ('requested', 'dispatched', 'running') ORDER BY seq",
            (repo, head_sha),
        )

    def set_conclusion(self, campaign_id: str, conclusion: str) -> None:
        """The conclusion last published (a republish with an acceptance changes it)."""
        self._set(campaign_id, "conclusion", conclusion)

    def prior_attempts(self, campaign_id: str) -> list[PriorAttempt]:
        """The campaigns of the same pull request and head created before this one, oldest first, with their
        verdicts: every rerun shows what came before it."""
        with self._lock:
            found = self._db.execute(
                "SELECT c.id, c.head_sha, c.state, c.semantic, c.performance, c.requested_by, c.finished_at "
                "FROM campaigns c JOIN campaigns this ON this.id = ? AND c.repo = this.repo "
                "AND c.pr_number = this.pr_number AND c.head_sha = this.head_sha AND c.seq < this.seq "
                "ORDER BY c.seq",
                (campaign_id,),
            ).fetchall()
        return [
            PriorAttempt(
                campaign_id=str(r[0]),
                head_sha=str(r[1]),
                state=str(r[2]),
                semantic=None if r[3] is None else str(r[3]),
                performance=None if r[4] is None else str(r[4]),
                requested_by=str(r[5]),
                finished_unix=None if r[6] is None else float(r[6]),
            )
            for r in found
        ]

    def create_campaign(self, request: CampaignRequest, repo: str, *, delivery_id: str, backend: str) -> Campaign:
        """Record a requested campaign of `repo` (and its first transition), asked for by `delivery_id` and run by
        `backend`; DuplicateCampaign if its key is covered."""
        campaign_id = f"kvp-{uuid.uuid4().hex[:12]}"
        now = time.time()
        try:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO campaigns (id, repo, pr_number, head_sha, base_sha, relationship, rows, "
                    "rows_key, state, requested_by, trigger, delivery_id, backend, created_at, reason, "
                    "config_text, config_source, config_sha, mode, purpose) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        campaign_id,
                        repo,
                        request.pr_number,
                        request.head_sha,
                        request.base_sha,
                        request.relationship,
                        None if request.rows is None else json.dumps(request.rows),
                        request.rows_key,
                        S.REQUESTED.value,
                        request.requested_by,
                        request.trigger,
                        delivery_id,
                        backend,
                        now,
                        f"requested by @{request.requested_by} ({request.trigger})",
                        request.config_text,
                        request.config_source,
                        request.config_sha,
                        request.mode,
                        request.purpose,
                    ),
                )
                db.execute(
                    "INSERT INTO transitions (campaign_id, from_state, to_state, at, reason) VALUES (?, NULL, ?, ?, ?)",
                    (
                        campaign_id,
                        S.REQUESTED.value,
                        now,
                        f"requested by @{request.requested_by} ({request.trigger})",
                    ),
                )
        except sqlite3.IntegrityError:
            live = self.live_for_key(repo, request.pr_number, request.head_sha, request.base_sha, request.rows_key)
            if live is None:
                raise
            raise DuplicateCampaign(live) from None
        return self.require(campaign_id)

    def transition(
        self,
        campaign_id: str,
        to_state: CampaignState,
        reason: str,
        *,
        publish: str | None = None,
        published_state: str | None = None,
        **updates: object,
    ) -> Campaign:
        """Move a campaign to `to_state`, recording why; `publish` queues a publication in the same commit
        (of kind `publish`, announcing `published_state`, by default the new state).

        `updates` may set deadline (unix), artifact_dir, attempt, handle (JSON text or None), conclusion and
        the report's semantic and performance verdicts. A final state also records when it was reached.
        """
        allowed_updates = {"deadline", "artifact_dir", "attempt", "handle", "conclusion", "semantic", "performance"}
        unknown = set(updates) - allowed_updates
        if unknown:
            raise ValueError(f"cannot update {sorted(unknown)} in a transition")
        now = time.time()
        if to_state in FINAL_STATES:
            updates["finished_at"] = now
        with self._tx() as db:
            row = db.execute("SELECT state FROM campaigns WHERE id = ?", (campaign_id,)).fetchone()
            if row is None:
                raise KeyError(f"no campaign {campaign_id}")
            current = CampaignState(row[0])
            if to_state not in ALLOWED[current]:
                raise IllegalTransition(f"campaign {campaign_id}: {current} -> {to_state} is not allowed")
            sets = ", ".join(f"{name} = ?" for name in updates)
            db.execute(
                f"UPDATE campaigns SET state = ?, reason = ?, scheduler_wait = NULL{', ' + sets if sets else ''} "
                "WHERE id = ?",
                (to_state.value, reason, *updates.values(), campaign_id),
            )
            db.execute(
                "INSERT INTO transitions (campaign_id, from_state, to_state, at, reason) VALUES (?, ?, ?, ?, ?)",
                (campaign_id, current.value, to_state.value, now, reason),
            )
            if publish is not None:
                db.execute(
                    "INSERT OR IGNORE INTO publications (campaign_id, kind, state, reason) VALUES (?, ?, ?, ?)",
                    (campaign_id, publish, published_state or to_state.value, reason),
                )
        return self.require(campaign_id)

    def transitions(self, campaign_id: str) -> list[Transition]:
        with self._lock:
            rows = self._db.execute(
                "SELECT campaign_id, from_state, to_state, at, reason FROM transitions WHERE campaign_id = ? "
                "ORDER BY seq",
                (campaign_id,),
            ).fetchall()
        return [
            Transition(
                r[0],
                None if r[1] is None else CampaignState(r[1]),
                CampaignState(r[2]),
                datetime.fromtimestamp(r[3], UTC),
                r[4],
            )
            for r in rows
        ]

    def _set(self, campaign_id: str, column: str, value: object) -> None:
        with self._tx() as db:
            db.execute(f"UPDATE campaigns SET {column} = ? WHERE id = ?", (value, campaign_id))

    def set_check_run(self, campaign_id: str, check_run_id: int) -> None:
        """Keep the id of the check run the publisher wrote (for the details pages' link to it)."""
        self._set(campaign_id, "check_run_id", check_run_id)

    def check_run_of(self, campaign_id: str) -> int | None:
        with self._lock:
            row = self._db.execute("SELECT check_run_id FROM campaigns WHERE id = ?", (campaign_id,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def set_scheduler_wait(self, campaign_id: str, waiting: str) -> Campaign:
        """Keep the backend's latest word on where the campaign waits in its queue ('' = nothing waits)."""
        self._set(campaign_id, "scheduler_wait", waiting or None)
        return self.require(campaign_id)

    def set_published_position(self, campaign_id: str, position: int) -> None:
        self._set(campaign_id, "published_position", position)

    def published_position(self, campaign_id: str) -> int | None:
        with self._lock:
            row = self._db.execute("SELECT published_position FROM campaigns WHERE id = ?", (campaign_id,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def clear_handle(self, campaign_id: str) -> None:
        self._set(campaign_id, "handle", None)

    def handle(self, campaign_id: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT handle FROM campaigns WHERE id = ?", (campaign_id,)).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def with_handles(self) -> list[tuple[Campaign, str]]:
        """Campaigns whose process may still exist (a handle not yet cleared)."""
        views = self._select("handle IS NOT NULL ORDER BY seq", ())
        return [(view, handle) for view in views if (handle := self.handle(view.id)) is not None]

    def config_text(self, campaign_id: str) -> str:
        with self._lock:
            row = self._db.execute("SELECT config_text FROM campaigns WHERE id = ?", (campaign_id,)).fetchone()
        if row is None:
            raise KeyError(f"no campaign {campaign_id}")
        return str(row[0])
