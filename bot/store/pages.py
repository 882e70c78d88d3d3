"""Details pages and merge-base history: page tokens, the public report a page shows, baseline figures per row.

A page is found only by its token (`secrets.token_urlsafe(32)`, never derived from an id) through an indexed
equality lookup; nothing here lists tokens. A campaign's page row also records whether its repository was
private when the campaign was requested, which decides whether it may have a page at all (`bot.pages.details`), and
every delivery records its repository's visibility now, which decides whether any page of it is served.
"""

from __future__ import annotations

import secrets

from pydantic import BaseModel, ConfigDict

from bot.store.base import StorePart

SCHEMA = """
CREATE TABLE IF NOT EXISTS campaign_pages (
    campaign_id TEXT PRIMARY KEY REFERENCES campaigns (id),
    private INTEGER NOT NULL,
    token TEXT UNIQUE,
    report_json TEXT
);
CREATE TABLE IF NOT EXISTS pr_pages (
    repo TEXT NOT NULL,
    pr_number INTEGER NOT NULL,
    token TEXT NOT NULL UNIQUE,
    PRIMARY KEY (repo, pr_number)
);
CREATE TABLE IF NOT EXISTS baseline_history (
    repo TEXT NOT NULL,
    row_id TEXT NOT NULL,
    campaign_id TEXT NOT NULL,
    node_label TEXT NOT NULL,
    base_sha TEXT NOT NULL,
    measured_unix REAL NOT NULL,
    median REAL NOT NULL,
    timing_field TEXT NOT NULL,
    unit TEXT NOT NULL,
    samples INTEGER NOT NULL,
    PRIMARY KEY (repo, campaign_id, row_id)
);
CREATE INDEX IF NOT EXISTS baseline_history_by_row ON baseline_history (repo, row_id, measured_unix);
CREATE TABLE IF NOT EXISTS baseline_instructions (
    repo TEXT NOT NULL,
    row_id TEXT NOT NULL,
    campaign_id TEXT NOT NULL,
    node_label TEXT NOT NULL,
    base_sha TEXT NOT NULL,
    measured_unix REAL NOT NULL,
    instructions INTEGER NOT NULL,
    counted TEXT NOT NULL,
    exact INTEGER NOT NULL,
    PRIMARY KEY (repo, campaign_id, row_id)
);
CREATE INDEX IF NOT EXISTS baseline_instructions_by_row ON baseline_instructions (repo, row_id, measured_unix);
CREATE TABLE IF NOT EXISTS repository_visibility (
    repo TEXT PRIMARY KEY COLLATE NOCASE,
    private INTEGER NOT NULL,
    visibility TEXT,
    seen_unix REAL NOT NULL
);
"""
NOT_COMPARABLE = (
    "Nodes differ: points from different node labels (runner labels, CPU model, host) were measured on different "
    "hardware and are not comparable with each other; compare points of one label only."
)
"""The caveat printed wherever baseline history is shown (row page, `kv-parity history --baseline`)."""


def new_token() -> str:
    """256 random bits, URL-safe: the only thing that guards a page."""
    return secrets.token_urlsafe(32)


class CampaignPage(BaseModel):
    """A campaign's page record: no token means no page (a private repository not opted in)."""

    model_config = ConfigDict(frozen=True)

    campaign_id: str
    private: bool
    token: str | None
    report_json: str | None
    """The public, redacted report (`bot.pages.details.page_report`) once the campaign finished with one."""


class RepositorySeen(BaseModel):
    """A repository's visibility as one delivery stated it (`repository.private`, `repository.visibility`)."""

    model_config = ConfigDict(frozen=True)

    full_name: str
    private: bool
    visibility: str | None = None
    """public | private | internal (GitHub Enterprise); an internal repository is never public."""

    @property
    def hidden(self) -> bool:
        return self.private or self.visibility in ("private", "internal")


class BaselinePoint(BaseModel):
    """One row's merge-base timing in one campaign: the median of its valid measured baseline samples."""

    model_config = ConfigDict(frozen=True)

    repo: str
    row_id: str
    campaign_id: str
    node_label: str
    """The row's runner labels, the node's CPU model and hostname: points of different labels differ in
    hardware and are not comparable."""
    base_sha: str
    measured_unix: float
    median: float
    timing_field: str
    unit: str
    samples: int


class InstructionPoint(BaseModel):
    """One row's merge-base instruction count in one campaign: the mean of the baseline's counted runs."""

    model_config = ConfigDict(frozen=True)

    repo: str
    row_id: str
    campaign_id: str
    node_label: str
    base_sha: str
    measured_unix: float
    instructions: int
    counted: str
    """What the count covers (`InstructionCounts.scope_label`): points counting different things differ."""
    exact: bool
    """The baseline's runs agreed exactly (no nondeterministic work)."""


class PageRecords(StorePart):
    """The campaign_pages, pr_pages, baseline_history and baseline_instructions tables."""

    def campaign_page(self, campaign_id: str) -> CampaignPage | None:
        with self._lock:
            row = self._db.execute(
                "SELECT campaign_id, private, token, report_json FROM campaign_pages WHERE campaign_id = ?",
                (campaign_id,),
            ).fetchone()
        if row is None:
            return None
        return CampaignPage(campaign_id=row[0], private=bool(row[1]), token=row[2], report_json=row[3])

    def record_campaign_page(self, campaign_id: str, *, private: bool, with_page: bool) -> CampaignPage:
        """Record the campaign's privacy and (with a page) its token; the first record stands, so a token once
        published never changes. With a page, its pull request gets a token too."""
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO campaign_pages (campaign_id, private, token) VALUES (?, ?, ?)",
                (campaign_id, int(private), new_token() if with_page else None),
            )
            if with_page:
                db.execute(
                    "INSERT OR IGNORE INTO pr_pages (repo, pr_number, token) "
                    "SELECT repo, pr_number, ? FROM campaigns WHERE id = ?",
                    (new_token(), campaign_id),
                )
        page = self.campaign_page(campaign_id)
        assert page is not None
        return page

    def record_visibility(self, seen: RepositorySeen, seen_unix: float) -> bool:
        """Remember what the newest delivery said of its repository; written only when it changed (most
        deliveries repeat it), so acknowledging a delivery costs no extra commit. True when it changed."""
        with self._lock:
            row = self._db.execute(
                "SELECT private, visibility FROM repository_visibility WHERE repo = ?", (seen.full_name,)
            ).fetchone()
        if row is not None and (bool(row[0]), row[1]) == (seen.hidden, seen.visibility):
            return False
        with self._tx() as db:
            db.execute(
                "INSERT INTO repository_visibility (repo, private, visibility, seen_unix) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (repo) DO UPDATE SET private = excluded.private, visibility = excluded.visibility, "
                "seen_unix = excluded.seen_unix",
                (seen.full_name, int(seen.hidden), seen.visibility, seen_unix),
            )
        return True

    def repository_private(self, repo: str) -> bool | None:
        """Whether the repository is private as the newest delivery said; None when none said so yet."""
        with self._lock:
            row = self._db.execute("SELECT private FROM repository_visibility WHERE repo = ?", (repo,)).fetchone()
        return None if row is None else bool(row[0])

    def keep_page_report(self, campaign_id: str, report_json: str) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE campaign_pages SET report_json = ? WHERE campaign_id = ? AND token IS NOT NULL",
                (report_json, campaign_id),
            )

    def campaign_of_token(self, token: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT campaign_id FROM campaign_pages WHERE token = ?", (token,)).fetchone()
        return None if row is None else str(row[0])

    def pr_token(self, repo: str, pr_number: int) -> str | None:
        with self._lock:
            row = self._db.execute(
                "SELECT token FROM pr_pages WHERE repo = ? AND pr_number = ?", (repo, pr_number)
            ).fetchone()
        return None if row is None else str(row[0])

    def pr_of_token(self, token: str) -> tuple[str, int] | None:
        with self._lock:
            row = self._db.execute("SELECT repo, pr_number FROM pr_pages WHERE token = ?", (token,)).fetchone()
        return None if row is None else (str(row[0]), int(row[1]))

    def page_tokens(self, campaign_ids: list[str]) -> dict[str, str]:
        """Page tokens of these campaigns (those that have a page)."""
        if not campaign_ids:
            return {}
        marks = ", ".join("?" for _ in campaign_ids)
        with self._lock:
            rows = self._db.execute(
                f"SELECT campaign_id, token FROM campaign_pages WHERE token IS NOT NULL AND campaign_id IN ({marks})",
                campaign_ids,
            ).fetchall()
        return {str(r[0]): str(r[1]) for r in rows}

    def verdicts_of(self, campaign_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        """(semantic, performance) verdicts recorded when each of these campaigns completed."""
        if not campaign_ids:
            return {}
        marks = ", ".join("?" for _ in campaign_ids)
        with self._lock:
            rows = self._db.execute(
                f"SELECT id, semantic, performance FROM campaigns WHERE id IN ({marks})", campaign_ids
            ).fetchall()
        return {str(r[0]): (r[1], r[2]) for r in rows}

    def delivery_of_campaign(self, campaign_id: str) -> tuple[str, bytes] | None:
        """(event, payload) of the delivery that requested the campaign, while it is stored."""
        with self._lock:
            row = self._db.execute(
                "SELECT d.event, d.payload FROM campaigns c JOIN deliveries d ON d.id = c.delivery_id WHERE c.id = ?",
                (campaign_id,),
            ).fetchone()
        return None if row is None else (str(row[0]), bytes(row[1]))

    def record_baselines(self, points: list[BaselinePoint]) -> None:
        """Keep merge-base figures; the same (repo, campaign, row) recorded again (a re-publish) is ignored."""
        with self._tx() as db:
            db.executemany(
                "INSERT OR IGNORE INTO baseline_history (repo, row_id, campaign_id, node_label, base_sha, "
                "measured_unix, median, timing_field, unit, samples) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        p.repo,
                        p.row_id,
                        p.campaign_id,
                        p.node_label,
                        p.base_sha,
                        p.measured_unix,
                        p.median,
                        p.timing_field,
                        p.unit,
                        p.samples,
                    )
                    for p in points
                ],
            )

    def baseline_history(self, repo: str, row_id: str | None = None) -> list[BaselinePoint]:
        """A repository's merge-base figures (of one row, or all), by row then time."""
        where, params = ("repo = ?", (repo,)) if row_id is None else ("repo = ? AND row_id = ?", (repo, row_id))
        with self._lock:
            rows = self._db.execute(
                "SELECT repo, row_id, campaign_id, node_label, base_sha, measured_unix, median, timing_field, unit, "
                f"samples FROM baseline_history WHERE {where} ORDER BY row_id, measured_unix, rowid",
                params,
            ).fetchall()
        return [
            BaselinePoint(
                repo=r[0],
                row_id=r[1],
                campaign_id=r[2],
                node_label=r[3],
                base_sha=r[4],
                measured_unix=r[5],
                median=r[6],
                timing_field=r[7],
                unit=r[8],
                samples=r[9],
            )
            for r in rows
        ]

    def record_instruction_points(self, points: list[InstructionPoint]) -> None:
        """Keep merge-base instruction counts; a re-publish of the same (repo, campaign, row) is ignored."""
        with self._tx() as db:
            db.executemany(
                "INSERT OR IGNORE INTO baseline_instructions (repo, row_id, campaign_id, node_label, base_sha, "
                "measured_unix, instructions, counted, exact) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(p.repo, p.row_id, p.campaign_id, p.node_label, p.base_sha, p.measured_unix, p.instructions,
                  p.counted, int(p.exact)) for p in points],
            )

    def instruction_history(self, repo: str, row_id: str) -> list[InstructionPoint]:
        """One row's merge-base instruction counts, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT repo, row_id, campaign_id, node_label, base_sha, measured_unix, instructions, counted, exact "
                "FROM baseline_instructions WHERE repo = ? AND row_id = ? ORDER BY measured_unix, rowid",
                (repo, row_id),
            ).fetchall()
        return [
            InstructionPoint(repo=r[0], row_id=r[1], campaign_id=r[2], node_label=r[3], base_sha=r[4],
                             measured_unix=r[5], instructions=r[6], counted=r[7], exact=bool(r[8]))
            for r in rows
        ]
