"""Main-branch history (bot.core.tracking): each row's ratio per tracked push (the pushed head against its first
parent) and per reference campaign (the default branch's tip against `[main] reference`: the cumulative change
since it), for the main history page and `kv-parity history --main`; and the token of that page."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from bot.store.base import StorePart
from bot.store.pages import new_token
from runners.schema.report import CampaignReport

SCHEMA = """
CREATE TABLE IF NOT EXISTS main_history (
    repo TEXT NOT NULL,
    campaign_id TEXT NOT NULL,
    row_id TEXT NOT NULL,
    purpose TEXT NOT NULL,
    head_sha TEXT NOT NULL,
    base_sha TEXT NOT NULL,
    measured_unix REAL NOT NULL,
    semantic TEXT NOT NULL,
    performance TEXT NOT NULL,
    median_ratio REAL,
    lower REAL,
    upper REAL,
    threshold REAL NOT NULL,
    PRIMARY KEY (repo, campaign_id, row_id)
);
CREATE INDEX IF NOT EXISTS main_history_by_row ON main_history (repo, row_id, measured_unix);
CREATE TABLE IF NOT EXISTS main_pages (
    repo TEXT PRIMARY KEY COLLATE NOCASE,
    token TEXT NOT NULL UNIQUE
);
"""


class MainPoint(BaseModel):
    """One row of one main-branch campaign: its verdicts and the median ratio with its exact bounds."""

    model_config = ConfigDict(frozen=True)

    repo: str
    campaign_id: str
    row_id: str
    purpose: Literal["main", "reference"]
    head_sha: str
    base_sha: str
    """The first parent (a push) or the reference (a reference campaign)."""
    measured_unix: float
    semantic: str
    performance: str
    median_ratio: float | None
    """candidate / baseline median of the gated field; None when performance was not measured."""
    lower: float | None
    upper: float | None
    threshold: float


def main_points(repo: str, campaign_id: str, purpose: Literal["main", "reference"], head_sha: str, base_sha: str,
                report: CampaignReport) -> list[MainPoint]:
    """The rows of a finished main or reference campaign as history points."""
    points = []
    for row in report.rows:
        bounds = row.performance.bounds if row.performance is not None else None
        points.append(MainPoint(
            repo=repo, campaign_id=campaign_id, row_id=row.row.id, purpose=purpose,
            head_sha=head_sha, base_sha=base_sha, measured_unix=report.created_unix,
            semantic=row.semantic.value, performance=row.perf_verdict.value,
            median_ratio=bounds.median if bounds else None, lower=bounds.lower if bounds else None,
            upper=bounds.upper if bounds else None, threshold=report.perf_threshold,
        ))
    return points


class TrackingRecords(StorePart):
    """The main_history and main_pages tables, and how many pushes were tracked since the last reference run."""

    def record_main_points(self, points: list[MainPoint]) -> None:
        """Keep a finished campaign's rows; recording the same campaign again (a re-publish) is ignored."""
        with self._tx() as db:
            db.executemany(
                "INSERT OR IGNORE INTO main_history (repo, campaign_id, row_id, purpose, head_sha, base_sha, "
                "measured_unix, semantic, performance, median_ratio, lower, upper, threshold) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(p.repo, p.campaign_id, p.row_id, p.purpose, p.head_sha, p.base_sha, p.measured_unix, p.semantic,
                  p.performance, p.median_ratio, p.lower, p.upper, p.threshold) for p in points],
            )

    def main_history(self, repo: str, row_id: str | None = None) -> list[MainPoint]:
        """A repository's main-branch points (one row's, or every row's), oldest first."""
        where, params = ("repo = ?", (repo,)) if row_id is None else ("repo = ? AND row_id = ?", (repo, row_id))
        with self._lock:
            rows = self._db.execute(
                "SELECT repo, campaign_id, row_id, purpose, head_sha, base_sha, measured_unix, semantic, "
                f"performance, median_ratio, lower, upper, threshold FROM main_history WHERE {where} "
                "ORDER BY measured_unix, campaign_id",
                params,
            ).fetchall()
        keys = tuple(MainPoint.model_fields)
        return [MainPoint.model_validate(dict(zip(keys, row, strict=True))) for row in rows]

    def pushes_since_reference(self, repo: str) -> int:
        """Tracked pushes (main campaigns) recorded after the newest reference campaign, or ever."""
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*) FROM campaigns WHERE repo = ? AND purpose = 'main' AND seq > "
                "COALESCE((SELECT MAX(seq) FROM campaigns WHERE repo = ? AND purpose = 'reference'), 0)",
                (repo, repo),
            ).fetchone()
        return int(row[0])

    def main_token(self, repo: str) -> str:
        """The main history page's token, made on first use."""
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO main_pages (repo, token) VALUES (?, ?)", (repo, new_token()))
            row = db.execute("SELECT token FROM main_pages WHERE repo = ?", (repo,)).fetchone()
        return str(row[0])

    def repo_of_main_token(self, token: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT repo FROM main_pages WHERE token = ?", (token,)).fetchone()
        return None if row is None else str(row[0])
