"""Event -> Intent: what a webhook delivery asks the bot to do, decided without side effects.

Guard order, the same for every event: not a pull request -> the bot's own action -> no command ->
sender not authorised. The permission lookup and the fork-approval lookup are passed in as plain
functions, so this module is pure given them and table-tested with dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from bot.core.authz import is_sufficient
from bot.core.commands import AcceptArgs, ParsedCommand, UnknownCommand, approval_command, parse_commands
from bot.core.events import (
    CheckRunEvent,
    CheckSuiteEvent,
    IssueCommentEvent,
    MergeGroupEvent,
    PullRequestEvent,
    User,
    WebhookEvent,
)

CHECK_ACTIONS = ("rerun", "cancel")
"""Identifiers of the check run's requested actions (the buttons the publisher offers)."""


@dataclass(frozen=True)
class Start:
    """Run a campaign for this exact head (a maintainer's label, or a push while the label is on)."""

    pr: int
    head_sha: str
    base_ref: str
    trigger: str
    requested_by: str
    approve_head: bool
    """True for a fork pull request: this authorised request approves exactly `head_sha`."""


@dataclass(frozen=True)
class Rerun:
    """Start a new campaign for the current head; `sha` if given must be the full SHA of that head."""

    pr: int | None
    requested_by: str
    trigger: str
    rows: tuple[str, ...] | None = None
    sha: str | None = None
    campaign_id: str | None = None
    """Set from a check run's external_id; its rows are reused when `rows` is None."""
    written_at: datetime | None = None
    """When the comment was written: without `sha=`, a fork's head is approved only if it was the head then."""
    profile: bool = False
    """`/parity profile`: correctness, then regression attribution instead of the performance gate."""
    independent: bool = False
    """A new independent campaign (GitHub's Re-run of a check suite): `campaign_id` only finds the pull request,
    its rows and mode are not reused."""


@dataclass(frozen=True)
class Bisect:
    """`/parity bisect`: find the commit of the pull request's FAILed head that made it FAIL."""

    pr: int
    requested_by: str
    trigger: str = "comment"


@dataclass(frozen=True)
class Cancel:
    pr: int | None
    requested_by: str
    trigger: str
    """label | closed | comment | check_run: a command or button with nothing to cancel is answered."""
    reason: str
    campaign_id: str | None = None


@dataclass(frozen=True)
class Status:
    pr: int
    requested_by: str


@dataclass(frozen=True)
class Help:
    """`help`, or a line addressed to the bot that it did not understand (then `line` and `reason`)."""

    pr: int
    requested_by: str
    line: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Refuse:
    pr: int | None
    requested_by: str
    permission: str
    reason: str
    campaign_id: str | None = None
    fix: str | None = None
    """What to do instead, when it is not to ask for the label or a rerun (an acceptance needs another role)."""
    action: str | None = None
    """What is refused, in the reply's words ("accepting"); None: starting a parity campaign."""


@dataclass(frozen=True)
class Accept:
    """`/parity accept ...`: authorised against the base branch's `[checks] accept_permission` by the decisions,
    which read that config (`bot.core.acceptance`)."""

    pr: int
    requested_by: str
    args: AcceptArgs
    comment_id: int
    comment_url: str
    written_at: datetime
    """When the comment was written: it accepts the head that was current then."""
    body: str
    """The comment as written (Actions-only mode reads it back by id and refuses it if edited)."""


@dataclass(frozen=True)
class MergeQueue:
    """A merge-group event: decided by `bot.core.merge_queue` with the base branch's `[merge_queue] mode`."""

    event: MergeGroupEvent


@dataclass(frozen=True)
class NeedsApproval:
    """A push to a labelled pull request that may not run by itself; running campaigns are superseded."""

    pr: int
    head_sha: str
    reason: str


@dataclass(frozen=True)
class Unlabelled:
    """A new head of an open pull request without the label (opened, reopened, pushed): the base branch's
    `[checks] watched_paths` say whether it needs a campaign (`bot.core.watched`); nothing runs by itself."""

    pr: int
    head_sha: str
    base_ref: str


@dataclass(frozen=True)
class Ignore:
    reason: str


Intent = (Start | Rerun | Bisect | Cancel | Status | Help | Refuse | NeedsApproval | Ignore | Accept | MergeQueue
          | Unlabelled)


@dataclass(frozen=True)
class TriggerContext:
    label: str
    command_word: str
    bot_id: int
    """The bot's numeric user id: its own actions are ignored, a human sharing its login is not."""
    min_permission: str
    permission_of: Callable[[str], str]
    """Sender login -> repository permission (called only once the earlier guards passed)."""
    is_approved: Callable[[int, str], bool]
    """(pull request, head SHA) -> an authorised human approved exactly this head of a fork."""
    suite_campaign: Callable[[int], str | None] | None = None
    """Check suite id -> the campaign id (external id) of the kv-parity check run it holds, or None when it holds
    none (called only for a Re-run of a check suite)."""


def _is_bot(user: User, ctx: TriggerContext) -> bool:
    return user.id == ctx.bot_id


def _refusal(login: str, ctx: TriggerContext, what: str) -> tuple[str, str] | None:
    permission = ctx.permission_of(login)
    if is_sufficient(permission, ctx.min_permission):
        return None
    reason = f"@{login} has {permission!r} permission on this repository; {what} needs at least {ctx.min_permission!r}"
    return permission, reason


def _pull_request(event: PullRequestEvent, ctx: TriggerContext) -> Intent:
    pull, sender = event.pull_request, event.sender.login
    if _is_bot(event.sender, ctx):
        return Ignore("the bot's own action")
    labelled = any(label.name == ctx.label for label in pull.labels)
    if event.action == "labeled":
        if event.label is None or event.label.name != ctx.label:
            return Ignore("another label")
        if pull.state != "open":
            return Ignore("pull request is not open")
        refused = _refusal(sender, ctx, f"adding the {ctx.label!r} label")
        if refused:
            return Refuse(pull.number, sender, refused[0], refused[1])
        return Start(pull.number, pull.head.sha, pull.base.ref, "label", sender, approve_head=pull.is_fork)
    if event.action == "unlabeled":
        if event.label is None or event.label.name != ctx.label:
            return Ignore("another label")
        if pull.state != "open":
            return Ignore("pull request is not open")
        refused = _refusal(sender, ctx, f"removing the {ctx.label!r} label")
        if refused:
            return Refuse(pull.number, sender, refused[0], refused[1])
        return Cancel(pull.number, sender, "label", f"the {ctx.label!r} label was removed by @{sender}")
    if event.action == "closed":
        return Cancel(pull.number, sender, "closed", "the pull request was closed")
    if event.action in ("opened", "reopened", "synchronize") and not labelled:
        if pull.state != "open":
            return Ignore("pull request is not open")
        return Unlabelled(pull.number, pull.head.sha, pull.base.ref)
    if event.action == "synchronize":
        push = Start(pull.number, pull.head.sha, pull.base.ref, "synchronize", sender, approve_head=False)
        if pull.state != "open":
            return Ignore("pull request is not open")
        if pull.is_fork:
            if ctx.is_approved(pull.number, pull.head.sha):
                return push
            return NeedsApproval(
                pull.number,
                pull.head.sha,
                f"new head {pull.head.sha[:12]} of a fork pull request; a maintainer must approve it "
                f"(`{approval_command(ctx.command_word, pull.head.sha)}` or re-add the label)",
            )
        refused = _refusal(sender, ctx, "an automatic run after a push")
        if refused:
            return NeedsApproval(pull.number, pull.head.sha, refused[1])
        return push
    return Ignore(f"pull_request action {event.action!r} is not a trigger")


def _command_intent(command: ParsedCommand | UnknownCommand, pr: int, sender: str, written_at: datetime) -> Intent:
    if isinstance(command, UnknownCommand):
        return Help(pr, sender, line=command.line, reason=command.reason)
    if command.name == "rerun":
        return Rerun(pr, sender, "comment", rows=command.rows, sha=command.sha, written_at=written_at)
    if command.name == "profile":
        return Rerun(pr, sender, "comment", rows=command.rows, sha=command.sha, written_at=written_at, profile=True)
    if command.name == "bisect":
        return Bisect(pr, sender)
    if command.name == "cancel":
        return Cancel(pr, sender, "comment", f"`cancel` by @{sender}")
    if command.name == "status":
        return Status(pr, sender)
    return Help(pr, sender)


def _issue_comment(event: IssueCommentEvent, ctx: TriggerContext) -> Intent:
    if event.issue.pull_request is None:
        return Ignore("comment on an issue, not a pull request")
    if _is_bot(event.comment.user, ctx) or _is_bot(event.sender, ctx):
        return Ignore("the bot's own comment")
    if event.action != "created":
        return Ignore(f"comment {event.action}; only new comments carry commands")
    commands = parse_commands(event.comment.body or "", ctx.command_word)
    if not commands:
        return Ignore("no command")
    sender, pr = event.sender.login, event.issue.number
    first = commands[0]
    if isinstance(first, ParsedCommand) and first.accept is not None:
        comment = event.comment
        return Accept(pr, sender, first.accept, comment.id, comment.html_url, comment.created_at, comment.body or "")
    refused = _refusal(sender, ctx, f"a `{ctx.command_word}` command")
    if refused:
        return Refuse(pr, sender, refused[0], refused[1])
    return _command_intent(first, pr, sender, event.comment.created_at)


def _check_run(event: CheckRunEvent, ctx: TriggerContext) -> Intent:
    run, sender = event.check_run, event.sender.login
    if not run.external_id:
        return Ignore("check run not created by this bot")
    pr = run.pull_requests[0].number if run.pull_requests else None
    if _is_bot(event.sender, ctx):
        return Ignore("the bot's own action")
    if event.action == "requested_action":
        identifier = event.requested_action.identifier if event.requested_action else ""
        if identifier not in CHECK_ACTIONS:
            return Ignore(f"unknown requested action {identifier!r}")
    elif event.action == "rerequested":
        identifier = "rerun"
    else:
        return Ignore(f"check_run action {event.action!r} is not a trigger")
    refused = _refusal(sender, ctx, f"the {identifier!r} button")
    if refused:
        return Refuse(pr, sender, refused[0], refused[1], campaign_id=run.external_id)
    if identifier == "cancel":
        return Cancel(pr, sender, "check_run", f"cancel requested by @{sender}", campaign_id=run.external_id)
    return Rerun(pr, sender, "check_run", sha=run.head_sha, campaign_id=run.external_id)


def _check_suite(event: CheckSuiteEvent, ctx: TriggerContext) -> Intent:
    """GitHub's "Re-run all checks" / "Re-run failed checks": a `rerun` by whoever pressed it, for the suite's head,
    when the suite holds the kv-parity check run."""
    if event.action != "rerequested":
        return Ignore(f"check_suite action {event.action!r} is not a trigger")
    if _is_bot(event.sender, ctx):
        return Ignore("the bot's own action")
    suite, sender = event.check_suite, event.sender.login
    campaign_id = ctx.suite_campaign(suite.id) if ctx.suite_campaign is not None else None
    if campaign_id is None:
        return Ignore(f"check suite {suite.id} holds no kv-parity check run")
    pr = suite.pull_requests[0].number if suite.pull_requests else None
    refused = _refusal(sender, ctx, "re-running the checks")
    if refused:
        return Refuse(pr, sender, refused[0], refused[1], campaign_id=campaign_id or None)
    return Rerun(pr, sender, "check_suite", sha=suite.head_sha, campaign_id=campaign_id or None, independent=True)


def decide(event: WebhookEvent, ctx: TriggerContext) -> Intent:
    """The one intent of a delivery; only the first command of a comment counts."""
    if isinstance(event, PullRequestEvent):
        return _pull_request(event, ctx)
    if isinstance(event, IssueCommentEvent):
        return _issue_comment(event, ctx)
    if isinstance(event, CheckSuiteEvent):
        return _check_suite(event, ctx)
    if isinstance(event, MergeGroupEvent):
        return MergeQueue(event)
    return _check_run(event, ctx)
