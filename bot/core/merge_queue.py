"""GitHub's merge queue, carried forward: which pull requests a merge group holds, and the rule that concludes the
campaign check on the group's commit from the conclusions those pull requests already have (pure; the effects are
in `bot.core.queue_actions`).

A merge group's commit is the base branch with every pull request ahead of it in the queue and its own on top. Its
pull requests are named by the queue's own branches, `gh-readonly-queue/<base>/pr-<number>-<sha>`: the event's
`head_ref` names the entry that made the group, and the entries ahead of it are the queue branches whose commits
lie inside the group (between the base branch and the group's commit). Carrying forward never measures: the check
succeeds only when every one of them is open and has a successful kv-parity conclusion (PASS, or an accepted FAIL)
at its current head (a push removes a pull request from the queue, so its current head is the one queued), or, under
the base branch's `[checks] watched_paths`, a head that changes none of them and so needs no campaign.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

MERGE_GROUP_TRIGGER = "merge_group"
"""The trigger recorded for a campaign measuring a merge group: its result is the check run on the group's commit,
so it posts no pull-request comments."""
QUEUE_BRANCH = re.compile(r"^refs/heads/gh-readonly-queue/(?P<base>.+)/pr-(?P<number>\d+)-[0-9a-f]{40}$")
"""A merge queue entry's branch: its base branch and the pull request it holds."""


def queue_entry(ref: str) -> tuple[str, int] | None:
    """(base branch, pull request) of a queue branch (`refs/heads/gh-readonly-queue/<base>/pr-<n>-<sha>`)."""
    match = QUEUE_BRANCH.match(ref)
    return (match["base"], int(match["number"])) if match else None


def branch_of(ref: str) -> str:
    """`main` for `refs/heads/main`."""
    return ref.removeprefix("refs/heads/")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MemberStanding(_Frozen):
    """One pull request of a merge group and whether its kv-parity conclusion carries forward."""

    number: int
    head_sha: str | None
    """The pull request's head now (None when it could not be read)."""
    conclusion: str | None
    campaign_id: str | None
    detail: str
    """Which campaign concluded what, or why there is no conclusion."""
    carried: bool
    """It is open and its head's latest campaign concluded success, or its head needs none (`skipped`: it changes
    none of the base branch's `[checks] watched_paths`)."""


class CarriedResult(_Frozen):
    """The merge group's campaign check, concluded from its pull requests' standing without measuring."""

    head_sha: str
    base_sha: str
    base_ref: str
    members: list[MemberStanding]
    conclusion: Literal["success", "failure"]


def standing(
    number: int, head_sha: str | None, state: str | None, conclusion: str | None, campaign_id: str | None, detail: str
) -> MemberStanding:
    """One member's standing: carried only from a successful conclusion at its current head while it is open, or
    from `skipped`, a head that changes no watched path (what its own check concluded)."""
    if head_sha is None or state != "open":
        return MemberStanding(
            number=number, head_sha=head_sha, conclusion=None, campaign_id=None,
            detail=f"pull request #{number} is {state or 'unreadable'}", carried=False,
        )
    return MemberStanding(
        number=number, head_sha=head_sha, conclusion=conclusion, campaign_id=campaign_id, detail=detail,
        carried=conclusion in ("success", "skipped"),
    )


def carry(head_sha: str, base_sha: str, base_ref: str, members: list[MemberStanding]) -> CarriedResult:
    """Success only when the group names at least one pull request and every one of them is carried."""
    ok = bool(members) and all(member.carried for member in members)
    return CarriedResult(
        head_sha=head_sha, base_sha=base_sha, base_ref=base_ref, members=sorted(members, key=lambda m: m.number),
        conclusion="success" if ok else "failure",
    )
