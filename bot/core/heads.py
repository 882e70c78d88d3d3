"""Which head a comment was written about: the one rule a fork approval and an acceptance both rest on.

A plain `/parity rerun` approving a fork head, and a `/parity accept` pinned to the head being accepted, each apply
only to the head the commenter could have been looking at: the one the ledger recorded as the head when the comment
was written, with no other head recorded since. A head pushed after the review, or pushed away and back (A-B-A)
before the comment was handled, is never covered.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True)
class HeadSeen:
    """The bot learned at `at` (unix time) that the pull request's head was `head_sha`, from `source`."""

    head_sha: str
    at: float
    source: str


def utc(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def not_the_head_written_about(seen: list[HeadSeen], head: str, written: float, what: str) -> str | None:
    """Why `head` may not be the commit a comment written at `written` was about, or None when it is. `seen` is
    the ledger's `heads_since(pr, written)`; `what` names the head in the reason ("the head of this fork pull
    request")."""
    then = {record.head_sha for record in seen if record.at <= written}
    if then != {head}:
        recorded = ", ".join(sorted(sha[:12] for sha in then)) if then else "no head"
        return (f"{what} is {head[:12]}, but when the comment was written ({utc(written)}) the bot had recorded "
                f"{recorded} as its head: it may not be the commit that was reviewed")
    moved = next((record for record in seen if record.head_sha != head), None)
    if moved is not None:
        return (f"{what} moved after the comment was written ({utc(written)}): to {moved.head_sha[:12]} at "
                f"{utc(moved.at)} ({moved.source}), and is {head[:12]} now; it may not be the commit that was "
                "reviewed")
    return None
