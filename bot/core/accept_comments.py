"""Acceptances kept in GitHub itself, for Actions-only mode (no database): the accept comment is the record.

When the bot accepts `/parity accept ...` it replies with a hidden marker naming the accept comment's id, the head
it accepts, the SHA-256 of the comment's body as written and the commenter's permission then; `revoke` replies
with a marker naming the head. Whoever publishes later (`kv-parity event` republishing at once, `kv-parity publish`
at the end of a rerun) walks the bot's own replies (by author id, so a pasted marker counts for nothing), reads
each accept comment back by its id, and takes the acceptance from the comment itself: a comment that was edited
since (its body no longer has the recorded digest) or deleted is refused, never applied.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.core.commands import AcceptArgs, ParsedCommand, parse_commands
from bot.core.repo_values import CommentInfo
from runners.schema.report import Acceptance

ACCEPT_MARKER = re.compile(
    r"^<!-- kv-parity:accept comment=(?P<comment>\d+) head=(?P<head>[0-9a-f]{40}) sha256=(?P<digest>[0-9a-f]{64}) "
    r"permission=(?P<permission>[a-z]+) at=(?P<at>\d+) -->$"
)
REVOKE_MARKER = re.compile(r"^<!-- kv-parity:revoke comment=(?P<comment>\d+) head=(?P<head>[0-9a-f]{40}) -->$")


def body_digest(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def accept_marker(acceptance: Acceptance, body: str) -> str:
    """The first line of the bot's reply that accepts: where Actions-only mode finds the accept comment again."""
    return (
        f"<!-- kv-parity:accept comment={acceptance.comment_id} head={acceptance.head_sha} "
        f"sha256={body_digest(body)} permission={acceptance.permission} at={int(acceptance.recorded_unix)} -->"
    )


def revoke_marker(comment_id: int, head_sha: str) -> str:
    return f"<!-- kv-parity:revoke comment={comment_id} head={head_sha} -->"


@dataclass(frozen=True)
class ReadBack:
    """The standing acceptances of a head, and the accept comments that were refused on the way (and why)."""

    acceptances: list[Acceptance]
    refused: list[str]


def _from_comment(comment: CommentInfo, marker: re.Match[str], command_word: str) -> Acceptance | str:
    """The acceptance the comment itself states, or why it no longer counts."""
    comment_id = int(marker["comment"])
    if body_digest(comment.body) != marker["digest"]:
        return f"accept comment {comment_id} was edited after it was accepted, so it is not applied"
    commands = parse_commands(comment.body, command_word)
    first = commands[0] if commands else None
    if not isinstance(first, ParsedCommand) or first.accept is None or first.accept.revoke:
        return f"accept comment {comment_id} no longer reads as an acceptance"
    written = comment.created_at.timestamp() if comment.created_at else float(marker["at"])
    return acceptance_of(first.accept, login=comment.author_login, permission=marker["permission"],
                         comment_id=comment_id, comment_url=comment.html_url, head_sha=marker["head"],
                         written_unix=written, recorded_unix=float(marker["at"]))


def acceptance_of(args: AcceptArgs, *, login: str, permission: str, comment_id: int, comment_url: str,
                  head_sha: str, written_unix: float, recorded_unix: float) -> Acceptance:
    """The acceptance an `accept perf|size` command records: what it says, who wrote it where, and when (the one
    builder for an acceptance handled now and one read back from its comment)."""
    assert args.gate is not None and args.max is not None, "a revoke accepts nothing"
    return Acceptance(
        gate="performance" if args.gate == "performance" else "sizes", login=login, permission=permission,
        comment_id=comment_id, comment_url=comment_url, reason=args.reason,
        rows=list(args.rows) if args.rows else None, max=args.max, head_sha=head_sha, written_unix=written_unix,
        recorded_unix=recorded_unix,
    )


def read_back(
    ours: Sequence[CommentInfo], head_sha: str, fetch: Callable[[int], CommentInfo | None], command_word: str
) -> ReadBack:
    """The acceptances of `head_sha` the bot's own replies (`ours`, oldest first) point at, each read back from its
    accept comment; a revoke marker for the head withdraws every acceptance before it."""
    pointed: list[re.Match[str]] = []
    for comment in ours:
        first_line = comment.body.split("\n", 1)[0]
        accepted, revoked = ACCEPT_MARKER.match(first_line), REVOKE_MARKER.match(first_line)
        if accepted is not None and accepted["head"] == head_sha:
            pointed.append(accepted)
        elif revoked is not None and revoked["head"] == head_sha:
            pointed.clear()
    acceptances: list[Acceptance] = []
    refused: list[str] = []
    for marker in pointed:
        accept_comment = fetch(int(marker["comment"]))
        found = (
            f"accept comment {marker['comment']} was deleted, so it is not applied"
            if accept_comment is None
            else _from_comment(accept_comment, marker, command_word)
        )
        if isinstance(found, str):
            refused.append(found)
        elif all(existing.comment_id != found.comment_id for existing in acceptances):
            acceptances.append(found)
    return ReadBack(acceptances, refused)
