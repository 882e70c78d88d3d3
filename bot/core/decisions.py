"""One event -> what the bot does, for both modes: launch, rerun, supersede, cancel, approve, refuse or reply.

`bot.core.triggers.decide` says what an event asks for; this module acts on it against a `Ledger`, the only
thing the two modes differ in (`bot.modes.store_ledger.StoreLedger` for the service,
`bot.modes.run_title_ledger.RunTitleLedger` for Actions-only mode). The rules that make requests honest live here, once:

- A request for a head (a label, a push, an accepted rerun, a head awaiting approval) supersedes every live
  campaign of an older head before the config is read, so a config error or a duplicate still ends them.
- Rerun means rerun: `/parity rerun`, the check run's Rerun button and GitHub's "Re-run" start a new campaign
  for the current head; which live campaign it replaces, and which existing one answers a request instead
  (a label added again, a second identical request), is the ledger's `replaced` / `covering`.
- Fork approval names a head exactly: `sha=` takes all 40 hex digits (a shorter one is refused with the full
  SHA to use); a plain rerun approves the current head only if the ledger recorded it as the head when the
  comment was written and recorded no other head since, so a head swapped back and forth after a review is
  never approved by it (a ledger that records no heads cannot tell, and asks for `sha=`).
  Every approval hint is written by `bot.core.commands.approval_command`, so it is always a command we accept.
- Refusals are answered once per person per pull request per `refusal_window_seconds` when the ledger
  remembers them (the recorded permission then stands in for another API lookup), else every time.
- The config is read at the base branch's tip (`bot.core.resolve`); a missing or invalid one records the
  campaign and ends it at once as a config error, unknown rows are refused before anything is recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from bot.core.acceptance import AcceptanceDesk
from bot.core.authz import cached_lookup
from bot.core.campaign import LIVE_STATES, Campaign, CampaignRequest, CampaignState, DuplicateCampaign
from bot.core.commands import FULL_SHA, approval_command
from bot.core.events import CheckRunEvent, CheckSuiteEvent, IssueCommentEvent, PullRequestEvent, WebhookEvent
from bot.core.heads import not_the_head_written_about
from bot.core.ledger import Ledger
from bot.core.merge_queue import MERGE_GROUP_TRIGGER
from bot.core.ports import PullRequestPublisher, RepoApi
from bot.core.queue_actions import MergeQueueDesk
from bot.core.repo_values import PullInfo
from bot.core.resolve import resolve
from bot.core.triggers import (
    Accept,
    Bisect,
    Cancel,
    Help,
    Ignore,
    Intent,
    MergeQueue,
    NeedsApproval,
    Refuse,
    Rerun,
    Start,
    Status,
    TriggerContext,
    Unlabelled,
    decide,
)
from bot.core.watched_actions import WatchedPathsDesk
from bot.core.watched_paths import needs_campaign_pr
from bot.settings import Settings
from runners.schema.config import CampaignMode, ConfigError, format_rows

S = CampaignState
CONFIG_ERROR = "config_error"
"""The `state` given to `Publisher.ended` when the base branch's config is missing or invalid."""



class _RememberedPermissions:
    """Permission lookups that reuse a refusal answered within the window instead of asking the API again."""

    def __init__(self, ledger: Ledger, pr: int | None, api: RepoApi, since: float) -> None:
        self._ledger, self._pr, self._api, self._since = ledger, pr, api, since

    def permission(self, login: str) -> str:
        if self._pr is not None:
            recent = self._ledger.answered_refusal(self._pr, login, self._since)
            if recent is not None:
                return recent
        return self._api.permission(login)


class Decisions:
    """Acts on one repository's events through its ledger, API and publisher."""

    def __init__(
        self,
        ledger: Ledger,
        api: RepoApi,
        publisher: PullRequestPublisher,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger = ledger
        self.api = api
        self.publisher = publisher
        self.settings = settings
        self.clock = clock

    def handle(self, event: WebhookEvent, *, bot_id: int, received_at: float) -> str:
        """Decide the event (the bot's own actions are recognised by `bot_id`) and act; returns the outcome."""
        if isinstance(event, PullRequestEvent):
            pull = event.pull_request
            self.ledger.see_head(pull.number, pull.head.sha, received_at, f"pull_request {event.action}")
        since = self.clock() - self.settings.refusal_window_seconds
        context = TriggerContext(
            label=self.settings.label,
            command_word=self.settings.command_word,
            bot_id=bot_id,
            min_permission=self.settings.min_permission,
            permission_of=cached_lookup(_RememberedPermissions(self.ledger, self._event_pr(event), self.api, since)),
            is_approved=self.ledger.is_approved,
            suite_campaign=self._suite_campaign,
        )
        return self.act(decide(event, context))

    def _suite_campaign(self, check_suite_id: int) -> str | None:
        """The campaign id of the campaign check run a check suite holds ('' without one), None without the run."""
        runs = self.api.suite_check_runs(check_suite_id, self.settings.check_name)
        return (runs[0].external_id or "") if runs else None

    def act(self, intent: Intent) -> str:
        if isinstance(intent, Ignore):
            return f"ignored: {intent.reason}"
        if isinstance(intent, Accept):
            since = self.clock() - self.settings.refusal_window_seconds
            desk = AcceptanceDesk(
                self.ledger, self.api, self.publisher, self.settings, clock=self.clock, pull=self._pull,
                permission_of=cached_lookup(_RememberedPermissions(self.ledger, intent.pr, self.api, since)),
                refuse=self._refuse,
            )
            return desk.act(intent)
        if isinstance(intent, MergeQueue):
            return MergeQueueDesk(self.ledger, self.api, self.publisher, self.settings).act(intent.event)
        if isinstance(intent, Unlabelled):
            return WatchedPathsDesk(self.api, self.publisher, self.settings).act(intent)
        if isinstance(intent, Refuse):
            return self._refuse(intent)
        if isinstance(intent, Help):
            if intent.line is None:
                self.publisher.reply(intent.pr, "help")
                return "help"
            self.publisher.reply(intent.pr, "unknown_command", line=intent.line, reason=intent.reason)
            return f"unknown command: {intent.reason}"
        if isinstance(intent, Status):
            self.publisher.reply(intent.pr, "status", campaigns=self.ledger.campaigns(intent.pr))
            return "status"
        if isinstance(intent, NeedsApproval):
            self._supersede(intent.pr, intent.head_sha, f"new head {intent.head_sha[:12]} awaits approval")
            fix = (
                f"a collaborator with at least {self.settings.min_permission!r} permission reviews this head "
                f"and comments `{approval_command(self.settings.command_word, intent.head_sha)}`"
            )
            self.publisher.reply(intent.pr, "refused", reason=intent.reason, fix=fix)
            return f"needs approval: {intent.head_sha}"
        if isinstance(intent, Cancel):
            return self._cancel(intent)
        if isinstance(intent, Bisect):
            return self._bisect(intent)
        if isinstance(intent, Start):
            if intent.approve_head:
                self.ledger.approve(intent.pr, intent.head_sha, intent.requested_by)
            return self._launch(
                intent.pr, intent.head_sha, intent.base_ref, None, intent.requested_by, intent.trigger,
                rerun=False, mode="campaign",
            )
        return self._rerun(intent)

    # ------------------------------------------------------------------ which pull request

    def _event_pr(self, event: WebhookEvent) -> int | None:
        if isinstance(event, PullRequestEvent):
            return event.pull_request.number
        if isinstance(event, IssueCommentEvent):
            return event.issue.number
        if isinstance(event, CheckSuiteEvent):
            pulls = event.check_suite.pull_requests
            return pulls[0].number if pulls else None
        if not isinstance(event, CheckRunEvent):
            return None
        return self._campaign_pr(
            event.check_run.pull_requests[0].number if event.check_run.pull_requests else None,
            event.check_run.external_id,
        )[0]

    def _campaign_pr(self, pr: int | None, campaign_id: str | None) -> tuple[int | None, Campaign | None]:
        """A check run names its campaign; fork pull requests are missing from check_run.pull_requests."""
        campaign = self.ledger.campaign(campaign_id) if campaign_id else None
        if pr is None and campaign is None and campaign_id:
            pr = needs_campaign_pr(campaign_id)  # the Run button of a watched-paths check run on a fork's head
        return (pr if pr is not None else campaign.pr_number if campaign else None), campaign

    def _pull(self, pr: int) -> PullInfo:
        """Fetch the pull request, remembering its head as seen now."""
        pull = self.api.pull(pr)
        self.ledger.see_head(pr, pull.head_sha, self.clock(), "pull request fetched")
        return pull

    # ------------------------------------------------------------------ intents

    def _refuse(self, intent: Refuse) -> str:
        """Answer a refusal once per person, pull request and window when the ledger remembers; record it."""
        pr, _ = self._campaign_pr(intent.pr, intent.campaign_id)
        if pr is None:
            return f"refused, nowhere to answer: {intent.reason}"
        login, window = intent.requested_by, self.settings.refusal_window_seconds
        if self.ledger.answered_refusal(pr, login, self.clock() - window) is not None:
            self.ledger.record_refusal(pr, login, intent.permission, intent.reason, answered=False)
            return f"refused again, not answered (one answer per {window:g} s): {intent.reason}"
        fix = intent.fix or (
            f"ask a collaborator with at least {self.settings.min_permission!r} permission to add the "
            f"{self.settings.label!r} label or comment `{self.settings.command_word} rerun`"
        )
        if intent.action is not None:
            self.publisher.reply(pr, "refused", reason=intent.reason, fix=fix, login=login, action=intent.action)
        else:
            self.publisher.reply(pr, "refused", reason=intent.reason, fix=fix, login=login)
        self.ledger.record_refusal(pr, login, intent.permission, intent.reason, answered=True)
        return f"refused: {intent.reason}"

    def _cancel(self, intent: Cancel) -> str:
        pr, campaign = self._campaign_pr(intent.pr, intent.campaign_id)
        targets: list[Campaign] = []
        if intent.campaign_id:
            targets = [campaign] if campaign and campaign.state in LIVE_STATES else []
        elif pr is not None:
            targets = self.ledger.live(pr)
        for target in targets:
            self.ledger.end(target, S.CANCELLED, intent.reason)
        if not targets and pr is not None and intent.trigger in ("comment", "check_run"):
            self.publisher.reply(
                pr,
                "refused",
                reason="there is no queued or running campaign to cancel",
                fix=f"`{self.settings.command_word} status` lists this pull request's campaigns",
            )
        return f"cancelled {[target.id for target in targets]}: {intent.reason}"

    def _rerun(self, intent: Rerun) -> str:
        pr, original = self._campaign_pr(intent.pr, intent.campaign_id)
        if original is not None and original.purpose in ("main", "reference"):
            return self._rerun_side_run(original, intent.requested_by)
        if pr is None:
            return f"ignored: check run of unknown campaign {intent.campaign_id}"
        if intent.independent:
            original = None  # a new independent campaign: the original only said which pull request
        if original is not None and original.purpose == "bisect":
            return self._bisect(Bisect(pr, intent.requested_by, intent.trigger))
        rows = (
            intent.rows if intent.rows is not None else (tuple(original.rows) if original and original.rows else None)
        )
        # A profile check run's Rerun reruns the profile.
        profile = intent.profile or (original is not None and original.mode == "profile" and bool(intent.campaign_id))
        pull = self._pull(pr)
        refusal = self._head_refusal(intent, pull)
        if refusal is not None:
            reason, fix = refusal
            self.publisher.reply(pr, "refused", reason=reason, fix=fix)
            return f"invalid: {reason}"
        if pull.is_fork:
            self.ledger.approve(pr, pull.head_sha, intent.requested_by)
        return self._launch(
            pr, pull.head_sha, pull.base_ref, rows, intent.requested_by, intent.trigger,
            rerun=True, mode="profile" if profile else "campaign",
        )

    def _rerun_side_run(self, original: Campaign, requested_by: str) -> str:
        """The Rerun button of a main or reference campaign: the same commits under the same config again."""
        request = CampaignRequest(
            pr_number=0, head_sha=original.head_sha, base_sha=original.base_sha, relationship=original.relationship,
            rows=None, rows_key=f"{original.purpose}:", requested_by=requested_by, trigger="check_run",
            config_text=self.ledger.config_text(original), config_source=original.config_source,
            config_sha=original.config_sha or original.head_sha, mode="campaign", rerun=True,
            purpose=original.purpose,
        )
        for live in self.ledger.replaced(request):
            self.ledger.end(live, S.SUPERSEDED, f"replaced by a rerun requested by @{requested_by} (check_run)")
        return f"rerun of {original.id}: {self.ledger.launch(self.ledger.create(request))}"

    def _bisect(self, intent: Bisect) -> str:
        """Bisect the current head's FAILed campaign: from its merge base, under its config (the ledger's record
        of it), when the head has two or more commits; refused with the reason and what to do otherwise."""
        word = self.settings.command_word
        if not self.ledger.runs_bisect:
            reason = "this bot's mode cannot run a bisect (it runs on the service's local backend)"
            fix = ("run `kv-parity bisect --good <merge base> --bad <head>` on a measuring machine (with "
                   "`--backend slurm`, from a Slurm submit host: every probe runs as the cluster's jobs)")
            self.publisher.reply(intent.pr, "refused", reason=reason, fix=fix)
            return f"invalid: {reason}"
        pull = self._pull(intent.pr)
        failed = self.ledger.failed_campaign(intent.pr, pull.head_sha) if pull.state == "open" else None
        if failed is None:
            reason = (f"pull request #{intent.pr} is {pull.state}" if pull.state != "open" else
                      f"no campaign of the head {pull.head_sha[:12]} has FAILed: a bisect looks for the commit that "
                      "made one FAIL")
            self.publisher.reply(intent.pr, "refused", reason=reason, fix=f"comment `{word} rerun` for a campaign "
                                 f"of the current head, then `{word} bisect` if it FAILs")
            return f"invalid: {reason}"
        commits = self.api.merge_base(pull.base_ref, pull.head_sha).ahead_by
        if commits < 2:
            reason = f"the head {pull.head_sha[:12]} is {commits} commit ahead of its base: it is the culprit itself"
            self.publisher.reply(intent.pr, "refused", reason=reason, fix=f"`{word} profile` shows where its time goes")
            return f"invalid: {reason}"
        rows = tuple(failed.rows) if failed.rows else None
        request = CampaignRequest(
            pr_number=intent.pr, head_sha=failed.head_sha, base_sha=failed.base_sha, relationship=failed.relationship,
            rows=rows, rows_key=f"bisect:{format_rows(rows)}", requested_by=intent.requested_by,
            trigger=intent.trigger, config_text=self.ledger.config_text(failed), config_source=failed.config_source,
            config_sha=failed.config_sha or failed.base_sha, mode="campaign", rerun=True, purpose="bisect",
        )
        for live in self.ledger.replaced(request):
            self.ledger.end(live, S.SUPERSEDED, f"replaced by a bisect requested by @{intent.requested_by}")
        try:
            campaign = self.ledger.create(request)
        except DuplicateCampaign as duplicate:
            self.publisher.reply(intent.pr, "duplicate", campaign=duplicate.existing)
            return f"duplicate of {duplicate.existing.id}"
        return f"bisect of {failed.id}: {self.ledger.launch(campaign)}"

    def _head_refusal(self, intent: Rerun, pull: PullInfo) -> tuple[str, str] | None:
        """(reason, fix) when the request cannot apply to the current head; the fix names its full SHA."""
        head = pull.head_sha
        if pull.state != "open":
            return f"pull request #{pull.number} is {pull.state}", "reopen it first"
        approve = (
            f"check that {head} is the commit you reviewed, then comment "
            f"`{approval_command(self.settings.command_word, head)}`"
        )
        if intent.sha is not None:
            if not FULL_SHA.match(intent.sha):
                return f"`sha={intent.sha}` is not a full commit SHA (a head is named by all 40 hex digits)", approve
            if intent.sha != head:
                return f"the head moved from {intent.sha[:12]} to {head[:12]} since it was requested", approve
            return None
        if not pull.is_fork:
            return None
        if intent.written_at is None or not self.ledger.records_heads:
            reason = (
                f"a plain `{self.settings.command_word} rerun` cannot approve the head of a fork pull request here: "
                "nothing records which head the comment was written about"
            )
            return reason, approve
        return self._plain_approval_refusal(pull.number, head, intent.written_at.timestamp(), approve)

    def _plain_approval_refusal(self, pr: int, head: str, written: float, approve: str) -> tuple[str, str] | None:
        """A plain rerun approves `head` only if it is the head the comment was written about (bot.core.heads)."""
        reason = not_the_head_written_about(self.ledger.heads_since(pr, written), head, written,
                                            "the head of this fork pull request")
        return None if reason is None else (reason, approve)

    def _supersede(self, pr: int, head_sha: str, reason: str) -> None:
        """End the live campaigns of the pull request's older heads; a merge group's measurement, recorded under
        the pull request but of the group's commit, is the queue's (its `destroyed` ends it), never an older head."""
        for campaign in self.ledger.live(pr):
            if campaign.head_sha != head_sha and campaign.trigger != MERGE_GROUP_TRIGGER:
                self.ledger.end(campaign, S.SUPERSEDED, reason)

    def _launch(
        self,
        pr: int,
        head_sha: str,
        base_ref: str,
        rows: tuple[str, ...] | None,
        requested_by: str,
        trigger: str,
        *,
        rerun: bool,
        mode: CampaignMode,
    ) -> str:
        """Supersede older heads, pin base = merge base, read the config at the base branch's tip (never the
        head), then answer with a covering campaign or record and launch a new one."""
        self._supersede(pr, head_sha, f"superseded by head {head_sha[:12]}")
        resolution = resolve(self.api, head_sha, base_ref, self.settings.config_path)
        rows_key = "!config-error"
        if resolution.config is not None:
            try:
                selected = resolution.config.select_rows(list(rows) if rows else None)
            except ConfigError as exc:
                fix = f"name rows defined in {resolution.config_source}, or omit `rows=` to run every row"
                self.publisher.reply(pr, "refused", reason=str(exc), fix=fix)
                return f"invalid: {exc}"
            rows_key = format_rows(sorted(row.id for row in selected))
            if mode == "profile":
                rows_key = f"profile:{rows_key}"  # a profile never replaces nor answers for a campaign
        request = CampaignRequest(
            pr_number=pr,
            head_sha=head_sha,
            base_sha=resolution.base_sha,
            relationship=resolution.relationship,
            rows=rows,
            rows_key=rows_key,
            requested_by=requested_by,
            trigger=trigger,
            config_text=resolution.config_text,
            config_source=resolution.config_source,
            config_sha=resolution.config_sha,
            mode=mode,
            rerun=rerun,
        )
        if resolution.config is not None:
            existing = self.ledger.covering(request)
            if existing is not None:
                self.publisher.reply(pr, "duplicate", campaign=existing)
                return f"duplicate of {existing.id}"
            by = f"a {'rerun' if rerun else 'campaign'} requested by @{requested_by} ({trigger})"
            for live in self.ledger.replaced(request):
                self.ledger.end(live, S.SUPERSEDED, f"replaced by {by}")
        try:
            campaign = self.ledger.create(request)
        except DuplicateCampaign as duplicate:
            self.publisher.reply(pr, "duplicate", campaign=duplicate.existing)
            return f"duplicate of {duplicate.existing.id}"
        if resolution.error is not None:
            self.ledger.end(campaign, S.ERRORED, resolution.error, published_state=CONFIG_ERROR)
            return f"config error: campaign {campaign.id}"
        return self.ledger.launch(campaign)
