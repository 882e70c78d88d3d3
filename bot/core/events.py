"""Pydantic models of exactly the webhook fields the bot reads, and nothing else.

Validating at the door means a malformed delivery is answered 400 naming the field, before it is queued,
so the worker only ever sees payloads it can act on. SHAs are checked to be full hex SHAs because they end
up in a subprocess's argv.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

Sha = Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")]
HANDLED_EVENTS = ("pull_request", "issue_comment", "check_run", "check_suite", "merge_group", "push")


class PayloadError(ValueError):
    """A delivery whose payload lacks or mistypes a field the bot reads; the message names the field."""


class _Read(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class User(_Read):
    login: str
    id: int
    """Who this is: logins are text a human may share with the bot's slug; the numeric id is unique."""
    type: str = "User"


class Repo(_Read):
    full_name: str
    private: bool = True
    """A payload without it (GitHub always sends it) counts as private: a details page is never made for it
    by mistake."""


class Label(_Read):
    name: str


class HeadRef(_Read):
    ref: str
    sha: Sha
    repo: Repo | None
    """None when the fork the pull request came from was deleted."""


class BaseRef(_Read):
    ref: str
    sha: Sha
    repo: Repo


class PullRequest(_Read):
    number: int
    state: str
    head: HeadRef
    base: BaseRef
    labels: list[Label] = Field(default_factory=list)
    user: User

    @property
    def is_fork(self) -> bool:
        return self.head.repo is None or self.head.repo.full_name != self.base.repo.full_name


class PullRequestEvent(_Read):
    kind: Literal["pull_request"] = "pull_request"
    action: str
    pull_request: PullRequest
    label: Label | None = None
    sender: User
    repository: Repo


class Issue(_Read):
    number: int
    pull_request: dict[str, object] | None = None
    """Present only when the issue is a pull request."""


class Comment(_Read):
    id: int
    body: str | None = None
    user: User
    created_at: datetime
    """When it was written: a plain fork approval covers only the head the bot recorded at that time."""
    html_url: str = ""
    """Where it is read: an acceptance links to the comment that made it."""


class IssueCommentEvent(_Read):
    kind: Literal["issue_comment"] = "issue_comment"
    action: str
    issue: Issue
    comment: Comment
    sender: User
    repository: Repo


class CheckRunPull(_Read):
    number: int


class CheckRun(_Read):
    id: int
    name: str
    external_id: str | None = None
    head_sha: Sha
    pull_requests: list[CheckRunPull] = Field(default_factory=list)
    """Empty for pull requests from forks; the campaign is then found by external_id."""


class RequestedAction(_Read):
    identifier: str


class CheckRunEvent(_Read):
    kind: Literal["check_run"] = "check_run"
    action: str
    check_run: CheckRun
    requested_action: RequestedAction | None = None
    sender: User
    repository: Repo


class CheckSuitePull(_Read):
    number: int


class CheckSuite(_Read):
    id: int
    head_sha: Sha
    pull_requests: list[CheckSuitePull] = Field(default_factory=list)
    """Empty for pull requests from forks; the campaign is then found through the suite's kv-parity check run."""


class CheckSuiteEvent(_Read):
    """`check_suite`: `rerequested` is GitHub's "Re-run all checks" / "Re-run failed checks" on a suite."""

    kind: Literal["check_suite"] = "check_suite"
    action: str
    check_suite: CheckSuite
    sender: User
    repository: Repo


class MergeGroup(_Read):
    head_sha: Sha
    """The merge group's commit: the queue waits for the required checks on it."""
    head_ref: str
    """`refs/heads/gh-readonly-queue/<base branch>/pr-<number>-<head sha>`: names the pull request that entered."""
    base_sha: Sha
    """The group's parent commit (the base branch's tip, or the group ahead of it in the queue)."""
    base_ref: str
    """`refs/heads/<base branch>`."""


class MergeGroupEvent(_Read):
    """`merge_group`: `checks_requested` when the queue built a group, `destroyed` when it is merged or dropped."""

    kind: Literal["merge_group"] = "merge_group"
    action: str
    merge_group: MergeGroup
    reason: str | None = None
    """Why a group was destroyed: merged, invalidated or dequeued."""
    sender: User | None = None
    repository: Repo


class PushedRepo(Repo):
    default_branch: str
    """A push to this branch is a push to the default branch, which main-branch tracking measures."""


class PushEvent(_Read):
    """A push (bot.core.tracking): only the pushed ref, the commit it now names and who pushed are read."""

    kind: Literal["push"] = "push"
    ref: str
    before: str
    after: str
    """The ref's commit after the push: all zeros when the ref was deleted."""
    deleted: bool = False
    forced: bool = False
    repository: PushedRepo
    sender: User

    @property
    def default_branch_head(self) -> str | None:
        """The default branch's new head when this push moved it (not deleted), else None."""
        if self.deleted or self.ref != f"refs/heads/{self.repository.default_branch}":
            return None
        return self.after if re.fullmatch(r"[0-9a-f]{40}", self.after) and set(self.after) != {"0"} else None


WebhookEvent = PullRequestEvent | IssueCommentEvent | CheckRunEvent | CheckSuiteEvent | MergeGroupEvent
AnyEvent = WebhookEvent | PushEvent
"""Every handled event: a push goes to main-branch tracking, the others to the pull-request decision core."""
_MODELS: dict[
    str,
    type[PullRequestEvent]
    | type[IssueCommentEvent]
    | type[CheckRunEvent]
    | type[CheckSuiteEvent]
    | type[MergeGroupEvent]
    | type[PushEvent],
] = {
    "pull_request": PullRequestEvent,
    "issue_comment": IssueCommentEvent,
    "check_run": CheckRunEvent,
    "check_suite": CheckSuiteEvent,
    "merge_group": MergeGroupEvent,
    "push": PushEvent,
}


def parse_event(event_name: str, body: bytes) -> AnyEvent:
    """The typed event for a handled X-GitHub-Event; PayloadError names the first bad fields."""
    model = _MODELS.get(event_name)
    if model is None:
        raise PayloadError(f"event {event_name!r} is not handled (handled: {', '.join(HANDLED_EVENTS)})")
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PayloadError(f"payload is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise PayloadError("payload is not a JSON object")
    data.pop("kind", None)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()[:5]]
        raise PayloadError(f"{event_name} payload: " + "; ".join(problems)) from exc
