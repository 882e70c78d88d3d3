"""What the gateway is given (credentials) and what it answers: small frozen models, never live PyGithub objects.

A PyGithub object fetches, and can fail, lazily on attribute access; these are read once inside a call (under the
retry policy) and are then safe to pass around, compare and keep. The values the decision core reads (a pull
request, a merge base, a comment, a commit, a check run, who the bot is) are the core's own (bot.core.repo_values):
the gateway answers with them; these are the rest.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, SecretStr

from bot.core.repo_values import BotIdentity

CheckStatus = Literal["queued", "in_progress", "completed", "waiting", "requested", "pending"]
CheckConclusion = Literal[
    "action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out"
]
MinimizeClassifier = Literal["ABUSE", "DUPLICATE", "OFF_TOPIC", "OUTDATED", "RESOLVED", "SPAM"]


class _Frozen(BaseModel):
    """Immutable snapshot, safe to pass around and compare."""

    model_config = ConfigDict(frozen=True)


class TokenAuth(_Frozen):
    """A token used as-is (PAT, or ``GITHUB_TOKEN`` inside Actions)."""

    token: SecretStr


class AppAuth(_Frozen):
    """GitHub App credentials; installation tokens are minted from them and cached until expiry.

    ``installation_id`` comes with every webhook; when absent it is looked up for the repository.
    """

    app_id: int
    private_key: SecretStr
    installation_id: int | None = None






class CheckOutput(_Frozen):
    """Check run output; GitHub requires title and summary together and caps summary/text at 65535."""

    title: str
    summary: str
    text: str | None = None


class CheckAction(_Frozen):
    """A check run button (at most 3; label <= 20, description <= 40, identifier <= 20 chars)."""

    label: str
    description: str
    identifier: str


class WorkflowRunInfo(_Frozen):
    """A workflow run as the Actions backend and Actions-only mode read it."""

    id: int
    display_title: str
    """The rendered `run-name`, which names the campaign the run belongs to."""
    status: str
    conclusion: str | None
    html_url: str
    created_at: datetime


class WorkflowStepInfo(_Frozen):
    """One step of a job as GitHub recorded it (the runner reports each step's end)."""

    number: int
    name: str
    status: str
    conclusion: str | None


class WorkflowJobInfo(_Frozen):
    """One job of a run; for a matrix job `name` is the rendered job name (e.g. `row vllm-disagg`)."""

    id: int
    name: str
    status: str
    conclusion: str | None
    runner_id: int | None
    runner_name: str | None
    html_url: str | None
    steps: list[WorkflowStepInfo]






ACTIONS_BOT = BotIdentity(login="github-actions[bot]", id=41898282)
"""The author of everything done with ``GITHUB_TOKEN`` (a fixed account on github.com)."""






class PullRef(_Frozen):
    """A pull request that brought a commit (`GET /repos/{owner}/{repo}/commits/{sha}/pulls`)."""

    number: int
    title: str
    html_url: str
    merged: bool
    """Merged (not only containing the commit as an open pull request's head)."""


class IssueInfo(_Frozen):
    """An issue the bot opened (the tracking issue), told apart from others by its author's numeric id."""

    number: int
    title: str
    body: str
    author_id: int
    html_url: str

