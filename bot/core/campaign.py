"""The campaign, one model for both modes and every layer: what was asked for, and where it stands.

The decisions ask for a `CampaignRequest`; a ledger records it and hands back a `Campaign` (the service's store
maps its SQLite rows to and from it, Actions-only mode reads it from a workflow run's title); the dispatch
backends run a `Campaign` and the publishers show it. What a campaign is of (`CampaignFacts`) is declared once
and fixed when it is asked for: a request and the campaign recorded from it share those fields, never copied
one by one. The state machine is here too, so the store enforces the core's rules rather than owning them.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from runners.schema.config import CampaignMode

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
"""The transitions a campaign may make; the store refuses any other (`IllegalTransition`)."""
FINAL_STATES = frozenset({S.COMPLETED, *_ENDINGS})
COVERING_STATES = (S.REQUESTED, S.DISPATCHED, S.RUNNING, S.COMPLETED)
"""A campaign in one of these states covers its (PR, head, base, rows) key for a label or a push (answered as a
duplicate); an explicit rerun starts a new campaign anyway, replacing a live one (at most one is live per key)."""


class IllegalTransition(RuntimeError):
    """A transition the state machine does not allow, or from a state the campaign is no longer in."""


class CampaignFacts(BaseModel):
    """What a campaign is of and who asked for it how: pinned when it is requested, never changed after."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pr_number: int
    """The pull request; 0 for `main` and `reference` (no pull request)."""
    head_sha: str
    base_sha: str
    relationship: str
    """How base relates to head: ancestor (base is an ancestor of head), diverged, identical, behind."""
    rows: list[str] | None
    """Rows the requester named; None = every row of the config."""
    requested_by: str
    trigger: str
    """label | synchronize | comment | check_run | merge_group | push | ..."""
    config_source: str
    """Where the campaign config was read, e.g. `.github/kv-parity.toml @ <sha> (base branch tip)`."""
    config_sha: str | None = None
    """The base branch's tip the config and determinism patch were read at (None: recorded before it was kept)."""
    mode: CampaignMode = "campaign"
    """`profile`: requested with `/parity profile` (correctness, then attribution; no performance gate)."""
    purpose: CampaignPurpose = "pull_request"
    """What the campaign is for."""

    @field_validator("rows")
    @classmethod
    def _no_empty_selection(cls, rows: list[str] | None) -> list[str] | None:
        """An empty selection names no row: it means every row, as None does."""
        return rows or None

    def facts(self) -> dict[str, Any]:
        """These fields and their values, to record another model of the same campaign from."""
        return {name: getattr(self, name) for name in CampaignFacts.model_fields}


class CampaignRequest(CampaignFacts):
    """A campaign the decisions want: its facts, the key that tells which requests are the same, and the config
    it runs under (read at the base branch's tip)."""

    rows_key: str
    """Canonical selected-row ids (sorted, comma-joined; `profile:` in front for a profile): the duplicate key."""
    config_text: str
    rerun: bool
    """Asked to run again (`rerun`, `profile`, a Rerun button), not a label or a push."""


class Campaign(CampaignFacts):
    """A recorded campaign: the facts of the request it came from, and where it stands now."""

    id: str
    repo: str
    state: CampaignState
    created_at: datetime
    reason: str = ""
    """Reason recorded with the latest transition."""
    attempt: int = 0
    """Number of times it was started (restarts from scratch after a lost process add one)."""
    deadline: datetime | None = None
    """Set when the campaign is first dispatched: a campaign waiting in the queue does not time out."""
    artifact_dir: Path | None = None
    """Directory of the current attempt (report.json lands in its `out/`); None until dispatched."""
    queue_position: int | None = None
    """0 = dispatched or running; n >= 1 = n-th in line for its backend; None once finished."""
    conclusion: str | None = None
    """Check conclusion of the report once completed."""
    scheduler_wait: str | None = None
    """Where its jobs wait in the backend's scheduler queue (Slurm's reason and place), as the backend last
    said; None when nothing waits or the backend has no queue of its own. Cleared by every transition."""

    @property
    def check_kind(self) -> str:
        """What names its check run besides the check name: the purpose of a side run, else the mode."""
        return SIDE_RUN_CHECKS.get(self.purpose, self.mode)

    @classmethod
    def recorded(cls, request: CampaignFacts, **where: Any) -> Campaign:
        """The campaign of `request`, with `where` it stands (id, repo, state, created_at, ...)."""
        return cls(**request.facts(), **where)


class DuplicateCampaign(Exception):
    """The (PR, head, base, rows) key is already covered; `existing` is the campaign that covers it."""

    def __init__(self, existing: Campaign) -> None:
        super().__init__(f"already covered by campaign {existing.id} ({existing.state})")
        self.existing = existing
