"""Earlier campaigns of the same pull-request head, as the publisher renders them.

A rerun never hides what came before: every campaign's report and comment list the earlier attempts on the
same head with their verdicts, so a flaky PASS after two FAILs is visible to the reviewer.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class PriorAttempt(BaseModel):
    """One earlier campaign of the same pull request and head SHA, oldest first in a list."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    campaign_id: str
    head_sha: str
    state: str
    """The campaign's final (or current) state in the store: completed, failed, cancelled, superseded, …"""
    semantic: str | None
    """Semantic verdict when the campaign finished with a report; None otherwise."""
    performance: str | None
    """Performance verdict when the campaign finished with a report; None otherwise."""
    requested_by: str
    finished_unix: float | None
    """When it reached its final state; None while it is still queued or running."""
