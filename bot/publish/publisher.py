"""Effects of reporting: the check run, the sticky status comment, the result comment and the artifact.

`Publisher` is what the lifecycle engine calls at each step of a campaign; it composes the check-run
writer (`bot.publish.check_runs`), the comment writer (`bot.publish.comments`) and the artifact writer
(`bot.publish.artifact`), all behind one `RedactingGateway`, so every string that leaves for GitHub passes the
redactor. `publish_main` is the `kv-parity publish` command that (re)posts a finished report.json through the same
`Publisher.finished`, after checking that the report belongs to the campaign that was dispatched. All text
comes from `bot.publish.render`.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from pydantic import SecretStr, ValidationError

from bot.core.accept_comments import read_back
from bot.core.attempts import PriorAttempt
from bot.core.campaign import Campaign, CampaignPurpose, CampaignState
from bot.core.commands import COMMANDS
from bot.core.merge_queue import MERGE_GROUP_TRIGGER, CarriedResult, queue_entry
from bot.core.repo_values import CommentInfo, PullInfo
from bot.github.errors import GitHubError
from bot.github.gateway import GitHubGateway
from bot.github.models import CheckConclusion, CheckOutput, TokenAuth
from bot.github.redact import Gateway, RedactingGateway, Redactor, secret_values
from bot.publish import render
from bot.publish.artifact import write_artifact as write_artifact
from bot.publish.check_runs import CheckRunWriter
from bot.publish.comments import CommentWriter
from bot.publish.render import CheckRunContent, Links, ProgressView
from bot.publish.report_guard import DispatchedCampaign, ReportMismatch, check_report_matches
from runners.progress import ProgressEvent
from runners.schema.config import parse_rows
from runners.schema.report import Acceptance, CampaignReport
from runners.schema.verdicts import with_acceptances, with_verdicts

PROGRESS_INTERVAL_SECONDS = 10.0
"""At most one progress update per campaign in this window, except when the stage or row changes."""

STATE_CONCLUSIONS: dict[str, CheckConclusion] = {
    "cancelled": "cancelled",
    "superseded": "neutral",
    "timed_out": "timed_out",
    "errored": "failure",
    "config_error": "action_required",
}
"""Check-run conclusion of a campaign that ended without a report.

Superseded is neutral rather than `stale` because only GitHub may set `stale`; neutral does not block a merge
and the newer campaign's check run carries the verdict.
"""


def _comments_on_pull(campaign: Campaign) -> bool:
    """A merge group's campaign reports on the group's check run only, never in the pull request's comments."""
    return campaign.trigger != MERGE_GROUP_TRIGGER


def _details_url(links: Links) -> str | None:
    """Where a completed check run's Details lead: the details page, else the workflow run (both in
    `details_url`), else the artifact, else the check run's own page. GitHub requires one for
    `action_required`, the conclusion of every campaign that reached no decision by default."""
    return links.details_url or links.artifact_url or links.check_run_url


class PublishSettings(Protocol):
    """The settings the publisher reads; `bot.settings.Settings` satisfies it."""

    @property
    def check_name(self) -> str: ...

    @property
    def command_word(self) -> str: ...

    @property
    def label(self) -> str: ...

    @property
    def api_base_url(self) -> str: ...


def web_url(api_base_url: str) -> str:
    """The web root that belongs to an API root (github.com, GHES `/api/v3`, or a local stand-in)."""
    parts = urlsplit(api_base_url.rstrip("/"))
    host = parts.netloc
    if host == "api.github.com":
        host = "github.com"
    path = parts.path.removesuffix("/api/v3")
    return f"{parts.scheme}://{host}{path}"


class Publisher:
    """Turns campaign lifecycle steps into GitHub check runs and comments, quietly and idempotently.

    Quiet: one status comment per pull request, edited when a campaign is queued, starts and ends (edits
    notify nobody); one new result comment per finished campaign (that one should notify); live progress
    only on the check run, one write per stage change and at most one per PROGRESS_INTERVAL_SECONDS within
    a stage. Idempotent: the check run is found again by its external_id (`CheckRunWriter`), the status comment
    and result comments by their hidden markers, on the bot's own comments only, so a publisher created after a
    restart continues where the old one stopped and nobody else's comment can stand in for them.

    Every step takes the campaign and `details_url`, where a person follows it (its details page or its Actions
    run; None: the artifact, else the check run's own page); each step that writes the check run returns its id.
    `open_when_queued` (the service) opens the check run as soon as a campaign is queued; Actions-only mode's
    publisher waits for the publish job or a failure (`bot.publish.check_runs`).
    """

    def __init__(
        self,
        gateway: Gateway,
        settings_like: PublishSettings,
        clock: Callable[[], float] = time.monotonic,
        *,
        artifact_base_url: str | None = None,
        progress_interval: float = PROGRESS_INTERVAL_SECONDS,
        redactor: Redactor | None = None,
        open_when_queued: bool = True,
    ) -> None:
        self.redactor = redactor or Redactor(secret_values(settings_like, os.environ))
        self.gateway = RedactingGateway(gateway, self.redactor)
        self.settings = settings_like
        self.artifact_base_url = artifact_base_url.rstrip("/") if artifact_base_url else None
        self._web = web_url(settings_like.api_base_url)
        self._lock = threading.RLock()
        self.check_runs = CheckRunWriter(
            self.gateway, settings_like.check_name, clock, progress_interval, open_when_queued=open_when_queued
        )
        self.comments = CommentWriter(self.gateway)

    def _links(
        self,
        campaign: Campaign,
        run_id: int | None,
        details_url: str | None,
        artifact_url: str | None = None,
        result_url: str | None = None,
    ) -> Links:
        if artifact_url is None and self.artifact_base_url:
            artifact_url = f"{self.artifact_base_url}/{campaign.id}/"
        return Links(
            artifact_url=artifact_url,
            check_run_url=f"{self._web}/{campaign.repo}/runs/{run_id}" if run_id else None,
            result_url=result_url,
            details_url=details_url,
        )

    def _opening(self, campaign: Campaign, details_url: str | None) -> Callable[[], CheckRunContent]:
        """What a check run shows when it is created: the campaign queued at its position."""
        return lambda: render.progress_content(
            campaign, None, self._links(campaign, None, details_url), self.settings.command_word,
            position=campaign.queue_position,
        )

    # --- lifecycle steps

    def open_check_run(self, campaign: Campaign, *, details_url: str | None = None) -> int:
        """The campaign's check run on the head SHA: found by its external_id, else created queued with its Cancel
        button."""
        with self._lock:
            return self.check_runs.ensure(campaign, self._opening(campaign, details_url), details_url)

    def queued(self, campaign: Campaign, position: int, *, details_url: str | None = None) -> int | None:
        """Show the queue position (0 = started) on the check run and in the status comment; returns the check
        run's id (None: this publisher opens none for a queued campaign)."""
        with self._lock:
            run_id = self.check_runs.for_queue(campaign, self._opening(campaign, details_url), details_url)
            links = self._links(campaign, run_id, details_url)
            started = position == 0
            if run_id is not None:
                progress = (
                    ProgressView(stage="starting", row=None, detail="", done=None, total=None, eta_seconds=None)
                    if started
                    else None
                )
                content = render.progress_content(
                    campaign, progress, links, self.settings.command_word, position=position
                )
                self.check_runs.running(run_id, content, started, details_url)
            if _comments_on_pull(campaign):
                body = render.status_comment(
                    campaign, "running" if started else "queued", links, self.settings.command_word,
                    position=position,
                )
                self.comments.upsert_status(campaign, body)
            return run_id

    def progress(self, campaign: Campaign, event: ProgressEvent, *, details_url: str | None = None) -> None:
        """Live progress of one event (see `progress_batch`)."""
        self.progress_batch(campaign, [event], details_url=details_url)

    def progress_batch(
        self, campaign: Campaign, events: Sequence[ProgressEvent], *, details_url: str | None = None
    ) -> None:
        """Live progress on the check run: at most one write for a batch, at once on a stage or row change,
        else at most one per interval. The status comment is not touched (it links to the check run)."""
        with self._lock:
            view = self.check_runs.due(campaign, events)
            if view is None:
                return
            run_id = self.check_runs.ensure(campaign, self._opening(campaign, details_url), details_url)
            content = render.progress_content(
                campaign, view, self._links(campaign, run_id, details_url), self.settings.command_word
            )
            self.check_runs.running(run_id, content, started=True, details_url=details_url)

    def waiting(self, campaign: Campaign, *, details_url: str | None = None) -> None:
        """The running status comment again, now saying where the campaign waits in its scheduler's queue (or
        no longer): a person sees why nothing runs without opening the check run. One edit per change."""
        if not _comments_on_pull(campaign):
            return
        with self._lock:
            links = self._links(campaign, self.check_runs.find(campaign), details_url)
            body = render.status_comment(campaign, "running", links, self.settings.command_word)
            self.comments.upsert_status(campaign, body)

    def finished(
        self,
        campaign: Campaign,
        report: CampaignReport,
        artifact_dir: Path,
        artifact_url: str | None = None,
        *,
        prior_attempts: Sequence[PriorAttempt] = (),
        details_url: str | None = None,
    ) -> int:
        """Write the artifact, complete the check run, post ONE result comment and fold older ones; returns the
        check run's id.

        `prior_attempts` (earlier campaigns of the same head, oldest first) are listed on every surface.
        Calling it again for the same campaign re-completes the check run and re-edits the status comment
        (both idempotent) but posts nothing new: the result comment is recognised by its marker.
        """
        with self._lock:
            report = with_verdicts(report)
            write_artifact(report, artifact_dir, prior_attempts, self.redactor)
            run_id = self.check_runs.ensure(campaign, self._opening(campaign, details_url), details_url)
            links = self._links(campaign, run_id, details_url, artifact_url)
            command_word = self.settings.command_word
            content = render.check_run_content(report, links, command_word, prior_attempts)
            self.check_runs.complete(
                campaign, run_id, report.concluded.conclusion.value, content, _details_url(links)
            )
            if not _comments_on_pull(campaign):
                return run_id
            result = self.comments.post_result(
                campaign, render.result_comment(report, links, command_word, prior_attempts)
            )
            self.comments.upsert_status(
                campaign,
                render.status_comment(
                    campaign,
                    "finished",
                    Links(links.artifact_url, links.check_run_url, result.html_url, links.details_url),
                    command_word,
                    report=report,
                ),
            )
            return run_id

    def ended(self, campaign: Campaign, state: str, reason: str, *, details_url: str | None = None) -> int | None:
        """A campaign that stopped without a report: complete its check run and say why in the status; returns
        the check run's id (None: it has none, `CheckRunWriter.for_ending`)."""
        if state not in STATE_CONCLUSIONS:
            raise ValueError(f"unknown end state {state!r}; expected one of {sorted(STATE_CONCLUSIONS)}")
        with self._lock:
            run_id = self.check_runs.for_ending(campaign, state, self._opening(campaign, details_url), details_url)
            links = self._links(campaign, run_id, details_url)
            if run_id is not None:
                content = render.ended_content(campaign, state, reason, links, self.settings.command_word)
                self.check_runs.complete(campaign, run_id, STATE_CONCLUSIONS[state], content, _details_url(links))
            if _comments_on_pull(campaign):
                self.comments.upsert_status(
                    campaign,
                    render.status_comment(
                        campaign, "ended", links, self.settings.command_word, state=state, reason=reason
                    ),
                )
            return run_id

    def merge_group_carried(self, head_sha: str, result: CarriedResult) -> int:
        """The campaign check's run on a merge group's commit, created and concluded at once from the standing of
        the group's pull requests (carry mode); no buttons, since there is nothing to rerun there."""
        content = render.merge_group_content(result, self.settings.command_word)
        with self._lock:
            return self.gateway.create_check_run(
                head_sha, self.check_runs.check_name, f"merge-group-{head_sha[:12]}", status="completed",
                output=CheckOutput(title=content.title, summary=content.summary), conclusion=result.conclusion,
            )

    def reply(self, number: int, kind: str, **context: Any) -> None:
        """Answer a command with a new short comment.

        Context per kind: refused(reason, fix[, action]), help(), status(campaigns), duplicate(campaign),
        unknown_command(line, reason), accepted(marker, acceptance, outcome, verdicts, campaign),
        revoked(marker, count, head_sha, campaign).
        """
        body = render.reply(kind, self.settings.command_word, COMMANDS, self.settings.label, context)
        with self._lock:
            self.comments.reply(number, body)


# --- `kv-parity publish` ------------------------------------------------------------------------------------

EXIT_OK = 0
EXIT_GITHUB = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
"""The report does not belong to the dispatched campaign or to the pull request's head: maintainers must
look (a build script of the pull request may have rewritten it)."""


@dataclass(frozen=True)
class CliSettings:
    """Settings for `kv-parity publish`, which must work inside Actions without the service's settings."""

    check_name: str
    command_word: str
    label: str
    api_base_url: str


class PublishGateway(Gateway, Protocol):
    """The gateway `kv-parity publish` needs: the publisher's calls plus the pull request's current head and the
    accept comments an acceptance is read back from."""

    def pull(self, number: int) -> PullInfo: ...

    def comment(self, comment_id: int) -> CommentInfo | None: ...

    def matching_refs(self, prefix: str) -> list[tuple[str, str]]: ...


def in_merge_queue(gateway: PublishGateway, pr: int, sha: str) -> bool:
    """Whether `sha` is the commit of a live merge group of pull request `pr` (a queue branch names both): the
    report of a `measure` campaign is then published on the group's check run, not refused as another head."""
    for ref, head in gateway.matching_refs("heads/gh-readonly-queue/"):
        entry = queue_entry(ref)
        if entry is not None and entry[1] == pr and head == sha:
            return True
    return False


def standing_acceptances(gateway: PublishGateway, pr: int, head_sha: str, command_word: str) -> list[Acceptance]:
    """The head's acceptances as GitHub itself records them (Actions-only mode): the bot's own replies point at
    accept comments, each read back by id; an edited or deleted one is refused, saying so on stderr."""
    me = gateway.identity().id
    ours = [comment for comment in gateway.list_comments(pr) if comment.author_id == me]
    found = read_back(ours, head_sha, gateway.comment, command_word)
    for refused in found.refused:
        print(f"kv-parity publish: {refused}", file=sys.stderr)
    return found.acceptances


def campaign_from_report(
    report: CampaignReport,
    repo: str,
    pr_number: int,
    *,
    rows: list[str] | None = None,
    purpose: CampaignPurpose = "pull_request",
    trigger: str = "publish",
) -> Campaign:
    """The campaign a stand-alone report is of (`kv-parity publish`), read from the report itself, so publishing
    it shares `Publisher.finished` (and `SideRunPublisher.finished`) with the service; `trigger` is `merge_group`
    for a measured merge group's (published on the group's check run only)."""
    revisions = {r.arm: r.sha for r in report.revisions}
    return Campaign(
        id=report.campaign_id,
        repo=repo,
        pr_number=pr_number,
        head_sha=revisions["candidate"],
        base_sha=revisions["baseline"],
        relationship=report.relationship,
        rows=rows,
        requested_by="kv-parity publish",
        trigger=trigger,
        config_source=report.config_source,
        mode=report.mode,
        purpose=purpose,
        state=CampaignState.COMPLETED,
        created_at=datetime.fromtimestamp(report.created_unix, UTC),
        reason="published from report.json",
        conclusion=report.concluded.conclusion.value,
    )


def _default_bot_login() -> str | None:
    """Who the comments are posted as: `$KV_PARITY_BOT_LOGIN`, else `github-actions[bot]` inside Actions
    (an Actions token cannot ask `GET /user`), else None (the API is asked)."""
    if os.environ.get("KV_PARITY_BOT_LOGIN"):
        return os.environ["KV_PARITY_BOT_LOGIN"]
    return "github-actions[bot]" if os.environ.get("GITHUB_ACTIONS") == "true" else None


def _workflow_run_url(environ: Mapping[str, str]) -> str | None:
    """Inside Actions, the page of the run that publishes (its jobs, logs and artifacts): the check run's
    details when no other page is given."""
    server, repo, run_id = (environ.get(key) for key in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    return f"{server}/{repo}/actions/runs/{run_id}" if server and repo and run_id else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kv-parity publish",
        description="(Re)publish a finished report.json to a pull request: check run, status and result. "
        "The report must name exactly the campaign that was dispatched (--expect-*) and the pull request's "
        "current head; anything else is refused and nothing is published.",
    )
    parser.add_argument("--report", required=True, type=Path, help="report.json written by a campaign")
    parser.add_argument("--repo", required=True, help="owner/name")
    parser.add_argument("--pr", required=True, type=int, help="pull request number")
    parser.add_argument("--expect-campaign-id", required=True, help="the campaign id that was dispatched")
    parser.add_argument("--expect-head", required=True, help="the head SHA that was dispatched")
    parser.add_argument("--expect-base", required=True, help="the baseline (merge-base) SHA that was dispatched")
    parser.add_argument(
        "--expect-rows", default="", help="comma-separated rows that were dispatched (empty: every row)"
    )
    parser.add_argument(
        "--expect-mode", default="campaign", choices=("campaign", "profile"), help="the mode that was dispatched"
    )
    parser.add_argument(
        "--artifact-url", help="where the artifact is browsable (Actions artifact or a base URL)"
    )
    parser.add_argument(
        "--out", type=Path, help="artifact directory to (re)write (default: the report's directory)"
    )
    parser.add_argument(
        "--details-url",
        help="the check run's Details link (default: --artifact-url, else inside Actions this workflow run)",
    )
    parser.add_argument("--check-name", default=os.environ.get("KV_PARITY_CHECK_NAME", "kv-parity"))
    parser.add_argument("--command-word", default=os.environ.get("KV_PARITY_COMMAND_WORD", "/parity"))
    parser.add_argument("--label", default=os.environ.get("KV_PARITY_LABEL", "kv-parity"))
    parser.add_argument(
        "--bot-login", default=_default_bot_login(), help="the account comments are posted as"
    )
    parser.add_argument(
        "--api-url",
        default=os.environ.get("KV_PARITY_API_BASE_URL")
        or os.environ.get("GITHUB_API_URL")
        or "https://api.github.com",
    )
    return parser


def _expected(args: argparse.Namespace) -> DispatchedCampaign:
    return DispatchedCampaign(
        campaign_id=args.expect_campaign_id,
        head_sha=args.expect_head,
        base_sha=args.expect_base,
        rows=parse_rows(args.expect_rows),
        pr_number=args.pr,
        mode=args.expect_mode,
    )


def publish_main(argv: Sequence[str], gateway: PublishGateway | None = None) -> int:
    """`kv-parity publish`: token from $KV_PARITY_TOKEN or $GITHUB_TOKEN (an App or Actions token)."""
    args = _parser().parse_args(list(argv))
    try:
        report = with_verdicts(CampaignReport.model_validate_json(args.report.read_text(encoding="utf-8")))
        expected = _expected(args)
    except (OSError, ValidationError) as exc:
        print(f"kv-parity publish: cannot read report {args.report}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        check_report_matches(report, expected)
    except ReportMismatch as exc:
        print(f"kv-parity publish: refused, nothing published: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if gateway is None:
        token = os.environ.get("KV_PARITY_TOKEN") or os.environ.get("GITHUB_TOKEN")
        if not token:
            print(
                "kv-parity publish: set KV_PARITY_TOKEN or GITHUB_TOKEN (check runs need an App or Actions "
                "token)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        gateway = GitHubGateway(
            args.repo, TokenAuth(token=SecretStr(token)), args.api_url, bot_login=args.bot_login
        )
    settings = CliSettings(
        check_name=args.check_name,
        command_word=args.command_word,
        label=args.label,
        api_base_url=args.api_url,
    )
    out_dir: Path = args.out or args.report.resolve().parent
    details_url = args.details_url or (None if args.artifact_url else _workflow_run_url(os.environ))
    head_sha = expected.head_sha  # the report's own (check_report_matches)
    try:
        head = gateway.pull(args.pr).head_sha
        merge_group = head != head_sha and in_merge_queue(gateway, args.pr, head_sha)
        if head != head_sha and not merge_group:
            print(
                f"kv-parity publish: refused, nothing published: head SHA is {head_sha!r} in the "
                f"report but pull request #{args.pr}'s current head is {head!r}",
                file=sys.stderr,
            )
            return EXIT_REFUSED
        campaign = campaign_from_report(report, args.repo, args.pr,
                                        trigger=MERGE_GROUP_TRIGGER if merge_group else "publish")
        accepted = standing_acceptances(gateway, args.pr, campaign.head_sha, settings.command_word)
        report = with_acceptances(report, accepted)
        Publisher(gateway, settings).finished(
            campaign, report, out_dir, artifact_url=args.artifact_url, details_url=details_url
        )
    except GitHubError as exc:
        print(f"kv-parity publish: GitHub refused: {exc}", file=sys.stderr)
        return EXIT_GITHUB
    verdicts = report.concluded
    print(f"published {report.campaign_id} to {args.repo}#{args.pr}: {verdicts.summary}")
    return EXIT_OK
