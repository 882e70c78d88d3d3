"""SQLite (WAL) state of the bot: campaigns and their transitions here; deliveries (dedupe + work queue) in
`bot.store.deliveries`; fork approvals, seen heads and refusals in `bot.store.people`; pending publications in
`bot.store.publications`; details-page tokens and merge-base history in `bot.store.pages`; what operators ask (the
queue, run times, backlogs) in `bot.store.operations`. `Store` composes them over one connection.

Every campaign transition is written, with its reason and time, before the side effect it stands for
(start a process, kill it, publish), so after a crash the store says what was meant to happen and the
worker can finish it. Illegal transitions raise instead of being written.
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
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bot.core.attempts import PriorAttempt
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
from runners.config import CampaignMode

CampaignPurpose = Literal["pull_request", "bisect", "main", "reference"]
"""What a campaign is for: a pull request's gate; `bisect` (`/parity bisect`: `kv-parity bisect` from the merge
base to the head); `main` (a push to the default branch against its first parent, bot.core.tracking);
`reference` (the default branch's tip against `[main] reference`: the cumulative change since it)."""
SIDE_RUN_CHECKS = {"bisect": "bisect", "main": "main", "reference": "reference"}
"""Purposes reported on check runs of their own (`kv-parity / main`, ...), never in a pull request's status."""


class CampaignState(StrEnum):
    REQUESTED = "requested"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"
    TIMED_OUT = "timed_out"
    ERRORED = "errored"


S = CampaignState
__all__ = [
    "ACTIVE_STATES",
    "ALLOWED",
    "COVERING_STATES",
    "FINAL_STATES",
    "LIVE_STATES",
    "CampaignState",
    "CampaignView",
    "Delivery",
    "DuplicateCampaign",
    "IllegalTransition",
    "NewCampaign",
    "Store",
    "Transition",
]
LIVE_STATES = frozenset({S.REQUESTED, S.DISPATCHED, S.RUNNING})
ACTIVE_STATES = frozenset({S.DISPATCHED, S.RUNNING})
"""States in which a process (or remote run) may exist for the campaign."""
_ENDINGS = {S.CANCELLED, S.SUPERSEDED, S.TIMED_OUT, S.ERRORED}
ALLOWED: dict[CampaignState | None, frozenset[CampaignState]] = {
    None: frozenset({S.REQUESTED}),
    S.REQUESTED: frozenset({S.DISPATCHED, *_ENDINGS}),
    # Back to requested = restarted from scratch after the service lost the process.
    S.DISPATCHED: frozenset({S.RUNNING, S.REQUESTED, *_ENDINGS}),
    S.RUNNING: frozenset({S.COMPLETED, S.REQUESTED, *_ENDINGS}),
    S.COMPLETED: frozenset(),
    S.CANCELLED: frozenset(),
    S.SUPERSEDED: frozenset(),
    S.TIMED_OUT: frozenset(),
    S.ERRORED: frozenset(),
}
FINAL_STATES = frozenset({S.COMPLETED, *_ENDINGS})
COVERING_STATES = (S.REQUESTED, S.DISPATCHED, S.RUNNING, S.COMPLETED)
"""A campaign in one of these states covers its (PR, head, base, rows) key for a label or a push (answered as a
duplicate); an explicit rerun starts a new campaign anyway, replacing a live one (at most one is live per key)."""


class IllegalTransition(RuntimeError):
    """A transition the state machine does not allow, or from a state the campaign is no longer in."""


class CampaignView(BaseModel):
    """A stored campaign as the publisher and the dispatch backends see it (read-only)."""

    model_config = ConfigDict(frozen=True)

    id: str
    repo: str
    pr_number: int
    head_sha: str
    base_sha: str
    relationship: str
    """How base relates to head: ancestor (base is an ancestor of head), diverged, identical, behind."""
    rows: list[str] | None
    """Rows the requester named; None = every row of the base config."""
    state: CampaignState
    check_run_id: int | None
    status_comment_id: int | None
    requested_by: str
    trigger: str
    """label | synchronize | comment | check_run."""
    created_at: datetime
    deadline: datetime | None
    """Set when the campaign is first dispatched: a campaign waiting in the queue does not time out."""
    artifact_dir: Path | None
    """Directory of the current attempt (report.json lands in its `out/`); None until dispatched."""
    queue_position: int | None
    """0 = dispatched or running; n >= 1 = n-th in line for its backend; None once finished."""
    attempt: int
    """Number of times it was started (restarts from scratch after a lost process add one)."""
    reason: str
    """Reason recorded with the latest transition."""
    conclusion: str | None
    """Check conclusion of the report once completed."""
    config_source: str
    """Where the campaign config was read, e.g. `.github/kv-parity.toml @ <sha> (base branch tip)`."""
    config_sha: str | None = None
    """The base branch's tip the config and determinism patch were read at (None: recorded before it was kept)."""
    mode: CampaignMode = "campaign"
    """`profile`: requested with `/parity profile` (correctness, then attribution; no performance gate)."""
    scheduler_wait: str | None = None
    """Where its jobs wait in the backend's scheduler queue (Slurm's reason and place), as the backend last
    said; None when nothing waits or the backend has no queue of its own. Cleared by every transition."""
    details_url: str | None = None
    """Where a person follows the campaign (its details page, or its Actions run): set by the lifecycle for
    the publisher, never stored."""
    purpose: CampaignPurpose = "pull_request"
    """What the campaign is for; `pr_number` is 0 for `main` and `reference` (no pull request)."""

    @property
    def check_kind(self) -> str:
        """What names its check run besides the check name: the purpose of a side run, else the mode."""
        return SIDE_RUN_CHECKS.get(self.purpose, self.mode)


@dataclass(frozen=True)
class Transition:
    campaign_id: str
    from_state: CampaignState | None
    to_state: CampaignState
    at: datetime
    reason: str


@dataclass(frozen=True)
class NewCampaign:
    repo: str
    pr_number: int
    head_sha: str
    base_sha: str
    relationship: str
    rows: list[str] | None
    rows_key: str
    """Canonical selected-row ids (sorted, comma-joined): part of the duplicate key."""
    requested_by: str
    trigger: str
    delivery_id: str
    backend: str
    config_text: str
    config_source: str
    config_sha: str | None
    mode: CampaignMode = "campaign"
    purpose: CampaignPurpose = "pull_request"


class DuplicateCampaign(Exception):
    """The (PR, head, base, rows) key is already covered; `existing` is the campaign that covers it."""

    def __init__(self, existing: CampaignView) -> None:
        super().__init__(f"already covered by campaign {existing.id} ({existing.state})")
        self.existing = existing


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
    "seq, id, repo, pr_number, head_sha, base_sha, relationship, rows, state, check_run_id, "
    "status_comment_id, requested_by, trigger, created_at, deadline, artifact_dir, attempt, reason, "
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
) -> CampaignView:
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
        check_run_id,
        comment_id,
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
    return CampaignView(
        id=str(cid),
        repo=str(repo),
        pr_number=int(str(pr)),
        head_sha=str(head),
        base_sha=str(base),
        relationship=str(relationship),
        rows=None if rows is None else json.loads(str(rows)),
        state=state,
        check_run_id=None if check_run_id is None else int(str(check_run_id)),
        status_comment_id=None if comment_id is None else int(str(comment_id)),
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

    def _view(self, row: sqlite3.Row | tuple[object, ...]) -> CampaignView:
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

    def _select(self, where: str, params: tuple[object, ...]) -> list[CampaignView]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM campaigns WHERE {where}", params).fetchall()
            return [self._view(row) for row in rows]

    def get(self, campaign_id: str) -> CampaignView | None:
        found = self._select("id = ?", (campaign_id,))
        return found[0] if found else None

    def require(self, campaign_id: str) -> CampaignView:
        view = self.get(campaign_id)
        if view is None:
            raise KeyError(f"no campaign {campaign_id}")
        return view

    def by_delivery(self, delivery_id: str) -> list[CampaignView]:
        return self._select("delivery_id = ? ORDER BY seq", (delivery_id,))

    def for_pr(self, repo: str, pr_number: int, *, live_only: bool = False, limit: int = 20) -> list[CampaignView]:
        """A pull request's campaigns, newest first."""
        states = "AND state IN ('requested', 'dispatched', 'running')" if live_only else ""
        return self._select(f"repo = ? AND pr_number = ? {states} ORDER BY seq DESC LIMIT ?", (repo, pr_number, limit))

    def side_runs(self, repo: str, purposes: tuple[CampaignPurpose, ...], *, live_only: bool = False,
                  limit: int = 100) -> list[CampaignView]:
        """A repository's campaigns of these purposes (main-branch tracking), newest first."""
        marks = ", ".join("?" for _ in purposes)
        states = "AND state IN ('requested', 'dispatched', 'running')" if live_only else ""
        return self._select(f"repo = ? AND purpose IN ({marks}) {states} ORDER BY seq DESC LIMIT ?",
                            (repo, *purposes, limit))

    def in_states(self, states: frozenset[CampaignState], backend: str | None = None) -> list[CampaignView]:
        """Campaigns in the given states, oldest first (FIFO)."""
        marks = ", ".join("?" for _ in states)
        where = f"state IN ({marks})" + (" AND backend = ?" if backend else "") + " ORDER BY seq"
        return self._select(where, (*sorted(states), *([backend] if backend else [])))

    def covering(self, repo: str, pr_number: int, head_sha: str, base_sha: str, rows_key: str) -> CampaignView | None:
        marks = ", ".join("?" for _ in COVERING_STATES)
        found = self._select(
            f"repo = ? AND pr_number = ? AND head_sha = ? AND base_sha = ? AND rows_key = ? AND state IN ({marks})",
            (repo, pr_number, head_sha, base_sha, rows_key, *COVERING_STATES),
        )
        return found[0] if found else None

    def live_for_key(
        self, repo: str, pr_number: int, head_sha: str, base_sha: str, rows_key: str
    ) -> CampaignView | None:
        """The queued or running campaign of this key, if any (there is at most one)."""
        found = self._select(
            "repo = ? AND pr_number = ? AND head_sha = ? AND base_sha = ? AND rows_key = ? "
            "AND state IN ('requested', 'dispatched', 'running')",
            (repo, pr_number, head_sha, base_sha, rows_key),
        )
        return found[0] if found else None

    def latest_of_head(
        self, repo: str, pr_number: int, head_sha: str, *, completed: bool = False
    ) -> CampaignView | None:
        """The newest campaign (mode campaign, not a merge group's) of this pull-request head; with `completed`, the
        newest that finished with a report."""
        state = " AND state = 'completed'" if completed else ""
        found = self._select(
            f"repo = ? AND pr_number = ? AND head_sha = ? AND mode = 'campaign' AND trigger != 'merge_group'{state} "
            "ORDER BY seq DESC LIMIT 1",
            (repo, pr_number, head_sha),
        )
        return found[0] if found else None

    def live_of_head(self, repo: str, head_sha: str) -> list[CampaignView]:
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

    def create_campaign(self, new: NewCampaign) -> CampaignView:
        """Record a requested campaign (and its first transition); DuplicateCampaign if its key is covered."""
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
                        new.repo,
                        new.pr_number,
                        new.head_sha,
                        new.base_sha,
                        new.relationship,
                        None if new.rows is None else json.dumps(new.rows),
                        new.rows_key,
                        S.REQUESTED.value,
                        new.requested_by,
                        new.trigger,
                        new.delivery_id,
                        new.backend,
                        now,
                        f"requested by @{new.requested_by} ({new.trigger})",
                        new.config_text,
                        new.config_source,
                        new.config_sha,
                        new.mode,
                        new.purpose,
                    ),
                )
                db.execute(
                    "INSERT INTO transitions (campaign_id, from_state, to_state, at, reason) VALUES (?, NULL, ?, ?, ?)",
                    (
                        campaign_id,
                        S.REQUESTED.value,
                        now,
                        f"requested by @{new.requested_by} ({new.trigger})",
                    ),
                )
        except sqlite3.IntegrityError:
            live = self.live_for_key(new.repo, new.pr_number, new.head_sha, new.base_sha, new.rows_key)
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
    ) -> CampaignView:
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
        self._set(campaign_id, "check_run_id", check_run_id)

    def set_status_comment(self, campaign_id: str, comment_id: int) -> None:
        self._set(campaign_id, "status_comment_id", comment_id)

    def set_scheduler_wait(self, campaign_id: str, waiting: str) -> CampaignView:
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

    def with_handles(self) -> list[tuple[CampaignView, str]]:
        """Campaigns whose process may still exist (a handle not yet cleared)."""
        views = self._select("handle IS NOT NULL ORDER BY seq", ())
        return [(view, handle) for view in views if (handle := self.handle(view.id)) is not None]

    def config_text(self, campaign_id: str) -> str:
        with self._lock:
            row = self._db.execute("SELECT config_text FROM campaigns WHERE id = ?", (campaign_id,)).fetchone()
        if row is None:
            raise KeyError(f"no campaign {campaign_id}")
        return str(row[0])
