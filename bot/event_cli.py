"""`kv-parity event`: Actions-only mode, nothing to host. One GitHub event, read from the workflow's event
file, is decided by the service's own trigger and authorisation code (`bot.core.triggers.decide`, `bot.core.authz`,
`bot.core.resolve`) and acted on with the workflow's token: dispatch the campaign workflow, cancel its runs, or
answer through `bot.publish.publisher.Publisher`.

There is no database between events, so everything that must last lives in GitHub itself:
- Fork approval is the authorised label or command itself and approves the head SHA of that moment: the
  campaign is dispatched with exactly that SHA, and a push to a fork pull request never dispatches.
- A pull request's campaigns are its live campaign workflow runs, recognised by their display title (the
  campaign workflow's `run-name`, `bot.dispatch.actions.RUN_NAME`). They answer `status`, are cancelled by
  `cancel`, the label's removal or closing, are superseded by a newer campaign, and make a second request
  for the same head and rows a duplicate.
- Refusals are answered every time (there is no record of having answered before).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

from bot.core.authz import cached_lookup
from bot.core.commands import FULL_SHA, approval_command
from bot.core.events import PayloadError, WebhookEvent, parse_event
from bot.core.resolve import resolve
from bot.core.triggers import (
    Cancel,
    Help,
    Ignore,
    Intent,
    NeedsApproval,
    Refuse,
    Rerun,
    Start,
    Status,
    TriggerContext,
    decide,
)
from bot.dispatch.actions import LIVE_STATUSES, RunTitle, dispatch_inputs, parse_run_title
from bot.github.gateway import ACTIONS_BOT, BotIdentity, GitHubError, WorkflowRunInfo
from bot.lifecycle import Publisher, RepoApi
from bot.settings import Settings, SettingsError, load_settings
from bot.store.campaigns import CampaignState, CampaignView
from runners.config import ConfigError

ACTIONS_BOT_LOGIN = ACTIONS_BOT.login
"""Who comments with the workflow's GITHUB_TOKEN: its own comments must be ignored."""
NO_WEBHOOK_SECRET = "unused: Actions-only mode receives no webhooks"
"""The settings model requires a webhook secret for the service; GitHub runs this mode, nobody posts to it."""
EVENT_ALIASES = {"pull_request_target": "pull_request"}
"""pull_request_target carries the pull_request payload; only where the workflow runs differs."""
EXIT_OK, EXIT_GITHUB, EXIT_USAGE = 0, 1, 2


class EventApi(RepoApi, Protocol):
    """The reads of the service plus the Actions calls this mode makes (`bot.github.gateway.GitHubGateway`)."""

    def dispatch_workflow(self, workflow_file: str, ref: str, inputs: Mapping[str, str]) -> None: ...

    def workflow_runs(self, workflow_file: str, status: str) -> list[WorkflowRunInfo]: ...

    def cancel_workflow_run(self, run_id: int) -> bool: ...

    def identity(self) -> BotIdentity: ...


def actions_settings(path: Path | None, environ: Mapping[str, str]) -> Settings:
    """The service's settings model, with what an Actions runner provides as defaults: the token, repository,
    API URL and bot login; the backend is always `actions` (this mode only ever dispatches the workflow)."""
    values = dict(environ)
    defaults = {
        "KV_PARITY_TOKEN": environ.get("GITHUB_TOKEN"),
        "KV_PARITY_REPO": environ.get("GITHUB_REPOSITORY"),
        "KV_PARITY_API_BASE_URL": environ.get("GITHUB_API_URL"),
        "KV_PARITY_BOT_LOGIN": ACTIONS_BOT_LOGIN,
        "KV_PARITY_WEBHOOK_SECRET": NO_WEBHOOK_SECRET,
    }
    for key, value in defaults.items():
        if value and not values.get(key):
            values[key] = value
    values["KV_PARITY_BACKEND"] = "actions"
    return load_settings(path, values)


def _view(
    campaign_id: str,
    repo: str,
    pr: int,
    head_sha: str,
    rows: list[str] | None,
    state: CampaignState,
    *,
    base_sha: str = "",
    relationship: str = "unknown",
    requested_by: str,
    trigger: str,
    created_at: datetime,
    config_source: str = "",
    reason: str = "",
    mode: Literal["campaign", "profile"] = "campaign",
) -> CampaignView:
    """A campaign as the publisher sees it; a run's title does not carry the base, which no reply shows."""
    return CampaignView(
        id=campaign_id,
        repo=repo,
        pr_number=pr,
        head_sha=head_sha,
        base_sha=base_sha,
        relationship=relationship,
        rows=rows,
        state=state,
        check_run_id=None,
        status_comment_id=None,
        requested_by=requested_by,
        trigger=trigger,
        created_at=created_at,
        deadline=None,
        artifact_dir=None,
        queue_position=0 if state == CampaignState.RUNNING else None,
        attempt=1,
        reason=reason,
        conclusion=None,
        config_source=config_source,
        mode=mode,
    )


class ActionsOnly:
    """Acts on one decided event through the API; every effect is a GitHub call."""

    def __init__(
        self,
        api: EventApi,
        publisher: Publisher,
        settings: Settings,
        repo: str,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.publisher = publisher
        self.settings = settings
        self.repo = repo
        self.clock = clock

    def _bot_id(self) -> int:
        """github-actions[bot] acts with GITHUB_TOKEN (no lookup); another configured login is looked up."""
        if (self.settings.bot_login or ACTIONS_BOT.login) == ACTIONS_BOT.login:
            return ACTIONS_BOT.id
        return self.api.identity().id

    def handle(self, event: WebhookEvent) -> str:
        context = TriggerContext(
            label=self.settings.label,
            command_word=self.settings.command_word,
            bot_id=self._bot_id(),
            min_permission=self.settings.min_permission,
            permission_of=cached_lookup(self.api),
            is_approved=lambda pr, sha: False,
        )
        return self._act(decide(event, context))

    # ------------------------------------------------------------------ runs as campaigns

    def _runs(self, pr: int | None, campaign_id: str | None = None) -> list[tuple[WorkflowRunInfo, RunTitle]]:
        """Live campaign runs of a pull request (or of one campaign), oldest first."""
        found: dict[int, tuple[WorkflowRunInfo, RunTitle]] = {}
        for status in LIVE_STATUSES:
            for run in self.api.workflow_runs(self.settings.actions_workflow, status):
                title = parse_run_title(run.display_title)
                if title is None or (pr is not None and title.pr_number != pr):
                    continue
                if campaign_id is None or title.campaign_id == campaign_id:
                    found[run.id] = (run, title)
        return sorted(found.values(), key=lambda item: (item[0].created_at, item[0].id))

    def _run_view(self, run: WorkflowRunInfo, title: RunTitle) -> CampaignView:
        state = CampaignState.RUNNING if run.status == "in_progress" else CampaignState.REQUESTED
        return _view(
            title.campaign_id,
            self.repo,
            title.pr_number,
            title.head_sha,
            title.rows,
            state,
            requested_by=f"run {run.id}",
            trigger="workflow_dispatch",
            created_at=run.created_at,
            mode=title.mode,
        )

    def _end_runs(self, runs: list[tuple[WorkflowRunInfo, RunTitle]], state: str, reason: str) -> list[str]:
        """Cancel the runs, then say so in the status comment (and the check run, if one was opened)."""
        for run, title in runs:
            self.api.cancel_workflow_run(run.id)
            self.publisher.ended(self._run_view(run, title), state, reason)
        return [title.campaign_id for _, title in runs]

    # ------------------------------------------------------------------ intents

    def _act(self, intent: Intent) -> str:
        reply = self.publisher.reply
        word, minimum = self.settings.command_word, self.settings.min_permission
        if isinstance(intent, Ignore):
            return f"ignored: {intent.reason}"
        if isinstance(intent, Refuse):
            if intent.pr is None:
                return f"refused, nowhere to answer: {intent.reason}"
            fix = (
                f"ask a collaborator with at least {minimum!r} permission to add the "
                f"{self.settings.label!r} label or comment `{word} rerun`"
            )
            reply(intent.pr, "refused", reason=intent.reason, fix=fix, login=intent.requested_by)
            return f"refused: {intent.reason}"
        if isinstance(intent, Help):
            if intent.line is None:
                reply(intent.pr, "help")
                return "help"
            reply(intent.pr, "unknown_command", line=intent.line, reason=intent.reason)
            return f"unknown command: {intent.reason}"
        if isinstance(intent, Status):
            reply(intent.pr, "status", campaigns=[self._run_view(*item) for item in self._runs(intent.pr)])
            return "status"
        if isinstance(intent, NeedsApproval):
            stale = [(run, title) for run, title in self._runs(intent.pr) if title.head_sha != intent.head_sha]
            self._end_runs(stale, "superseded", f"new head {intent.head_sha[:12]} awaits approval")
            fix = (
                f"a collaborator with at least {minimum!r} permission reviews this head and comments "
                f"`{approval_command(word, intent.head_sha)}`"
            )
            reply(intent.pr, "refused", reason=intent.reason, fix=fix)
            return f"needs approval: {intent.head_sha}"
        if isinstance(intent, Cancel):
            return self._cancel(intent)
        if isinstance(intent, Start):
            return self._launch(intent.pr, intent.head_sha, intent.base_ref, None, intent.trigger, intent.requested_by)
        return self._rerun(intent)

    def _cancel(self, intent: Cancel) -> str:
        runs = self._runs(intent.pr, intent.campaign_id)
        cancelled = self._end_runs(runs, "cancelled", intent.reason)
        if not runs and intent.pr is not None and intent.trigger in ("comment", "check_run"):
            self.publisher.reply(
                intent.pr,
                "refused",
                reason="there is no queued or running campaign to cancel",
                fix=f"`{self.settings.command_word} status` lists this pull request's campaigns",
            )
        return f"cancelled {cancelled}: {intent.reason}"

    def _rerun(self, intent: Rerun) -> str:
        if intent.pr is None:
            return f"ignored: check run of campaign {intent.campaign_id} on a pull request it cannot name"
        pull = self.api.pull(intent.pr)
        reply = self.publisher.reply
        if pull.state != "open":
            reply(intent.pr, "refused", reason=f"pull request #{intent.pr} is {pull.state}", fix="reopen it first")
            return f"invalid: pull request is {pull.state}"
        if intent.sha and intent.sha != pull.head_sha:
            if FULL_SHA.match(intent.sha):
                reason = f"the head moved from {intent.sha[:12]} to {pull.head_sha[:12]} since it was requested"
            else:
                reason = f"`sha={intent.sha}` is not a full commit SHA (a head is named by all 40 hex digits)"
            rerun = approval_command(self.settings.command_word, pull.head_sha)
            reply(intent.pr, "refused", reason=reason, fix=f"review the head, then comment `{rerun}`")
            return f"invalid: {reason}"
        return self._launch(
            intent.pr, pull.head_sha, pull.base_ref, intent.rows, intent.trigger, intent.requested_by,
            mode="profile" if intent.profile else "campaign",
        )

    def _launch(
        self,
        pr: int,
        head_sha: str,
        base_ref: str,
        rows: tuple[str, ...] | None,
        trigger: str,
        requested_by: str,
        mode: Literal["campaign", "profile"] = "campaign",
    ) -> str:
        """Pin base = merge base, check the config at the base branch's tip, then dispatch exactly this head
        with `config_ref` = that tip (the workflow's plan job reads the config there, never at the head).
        `mode=profile` (`/parity profile`) checks correctness and attributes instead of gating performance."""
        resolution = resolve(self.api, head_sha, base_ref, self.settings.config_path)
        wanted = list(rows) if rows else None
        campaign = _view(
            f"kvp-{uuid.uuid4().hex[:12]}",
            self.repo,
            pr,
            head_sha,
            wanted,
            CampaignState.RUNNING,
            base_sha=resolution.base_sha,
            relationship=resolution.relationship,
            requested_by=requested_by,
            trigger=trigger,
            created_at=datetime.fromtimestamp(self.clock(), UTC),
            config_source=resolution.config_source,
            reason=f"requested by @{requested_by} ({trigger})",
            mode=mode,
        )
        if resolution.config is None:
            self.publisher.ended(campaign, "config_error", resolution.error or "no usable campaign config")
            return f"config error: {resolution.error}"
        try:
            resolution.config.select_rows(wanted)
        except ConfigError as exc:
            fix = f"name rows defined in {resolution.config_source}, or omit `rows=` to run every row"
            self.publisher.reply(pr, "refused", reason=str(exc), fix=fix)
            return f"invalid: {exc}"
        live = self._runs(pr)
        for run, title in live:
            same_rows = sorted(title.rows or []) == sorted(wanted or [])
            if title.head_sha == head_sha and same_rows and title.mode == mode:
                self.publisher.reply(pr, "duplicate", campaign=self._run_view(run, title))
                return f"duplicate of {title.campaign_id}"
        # A campaign and a profile of the same head run side by side (their own check names and concurrency
        # groups); anything of an older head, or of the same mode, is replaced.
        replaced = [(run, title) for run, title in live if title.head_sha != head_sha or title.mode == mode]
        self._end_runs(replaced, "superseded", f"superseded by campaign {campaign.id} for head {head_sha[:12]}")
        inputs = dispatch_inputs(
            campaign.id, resolution.base_sha, head_sha, wanted, pr, config_ref=resolution.config_sha, mode=mode
        )
        self.api.dispatch_workflow(self.settings.actions_workflow, self.settings.actions_ref, inputs)
        self.publisher.queued(campaign, 0)
        return (
            f"dispatched campaign {campaign.id}: head {head_sha} against merge base {resolution.base_sha}, "
            f"config at {resolution.config_sha}"
        )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kv-parity event",
        description="Actions-only mode: decide one GitHub event and dispatch, cancel or answer.",
    )
    parser.add_argument("--event-name", help="the event's name (default: $GITHUB_EVENT_NAME)")
    parser.add_argument("--event-path", type=Path, help="the event's JSON payload (default: $GITHUB_EVENT_PATH)")
    parser.add_argument("--settings", type=Path, help="TOML settings file (default: $KV_PARITY_SETTINGS)")
    return parser


def event_main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """Exit 0 once the event was handled (refusals and ignored events included), 1 when GitHub refused a
    call, 2 for an unusable event file or settings."""
    env = os.environ if environ is None else environ
    args = _parser().parse_args(list(argv))
    event_name = args.event_name or env.get("GITHUB_EVENT_NAME")
    event_path = args.event_path or (Path(env["GITHUB_EVENT_PATH"]) if env.get("GITHUB_EVENT_PATH") else None)
    if not event_name or event_path is None:
        print("kv-parity event: give --event-name and --event-path (or run inside GitHub Actions)", file=sys.stderr)
        return EXIT_USAGE
    try:
        event = parse_event(EVENT_ALIASES.get(event_name, event_name), event_path.read_bytes())
        settings = actions_settings(args.settings, env)
    except OSError as exc:
        print(f"kv-parity event: cannot read {event_path}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    except (PayloadError, SettingsError) as exc:
        print(f"kv-parity event: {exc}", file=sys.stderr)
        return EXIT_USAGE
    repo = event.repository.full_name
    if settings.repo and repo.lower() != settings.repo.lower():
        print(f"ignored: repository {repo} is not served (settings.repo = {settings.repo})")
        return EXIT_OK
    from bot.github.connect import make_gateway
    from bot.publish.publisher import Publisher as GitHubPublisher

    gateway = make_gateway(settings, repo)
    try:
        outcome = ActionsOnly(gateway, GitHubPublisher(gateway, settings), settings, repo).handle(event)
    except GitHubError as exc:
        print(f"kv-parity event: GitHub refused: {exc}", file=sys.stderr)
        return EXIT_GITHUB
    print(outcome)
    return EXIT_OK
