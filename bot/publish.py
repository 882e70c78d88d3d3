"""Effects of reporting: the check run, the sticky status comment, the result comment and the artifact.

`Publisher` is what the lifecycle engine calls at each step of a campaign; `publish_main` is the
`kv-parity publish` command that (re)posts a finished report.json through the same `Publisher.finished`, so
the webhook service and Actions-only mode can never report differently. All text comes from `bot.render`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from pydantic import SecretStr, ValidationError

from bot import render
from bot.commands import COMMANDS
from bot.github import (
    CheckAction,
    CheckConclusion,
    CheckOutput,
    CheckStatus,
    CommentInfo,
    GitHubError,
    GitHubGateway,
    GitHubNotFoundError,
    TokenAuth,
)
from bot.render import CheckRunContent, Links, ProgressView
from bot.store import CampaignState, CampaignView
from runners.progress import ProgressEvent
from runners.report import CampaignReport, campaign_verdicts

PROGRESS_INTERVAL_SECONDS = 10.0
"""At most one progress update per campaign in this window, except when the stage or row changes."""

RERUN = CheckAction(label="Rerun", description="Run the parity campaign again", identifier="rerun")
CANCEL = CheckAction(label="Cancel", description="Stop this parity campaign", identifier="cancel")
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
_OWNER_PREFIX = "<!-- kv-parity:campaign "


class Gateway(Protocol):
    """The slice of `bot.github.GitHubGateway` the publisher uses (a protocol so engine tests can record)."""

    def create_check_run(
        self,
        head_sha: str,
        name: str,
        external_id: str,
        status: CheckStatus = "queued",
        output: CheckOutput | None = None,
        actions: Sequence[CheckAction] = (),
        details_url: str | None = None,
    ) -> int: ...

    def update_check_run(
        self,
        check_run_id: int,
        *,
        status: CheckStatus | None = None,
        conclusion: CheckConclusion | None = None,
        output: CheckOutput | None = None,
        actions: Sequence[CheckAction] | None = None,
        details_url: str | None = None,
    ) -> None: ...

    def create_comment(self, number: int, body: str) -> CommentInfo: ...

    def edit_comment(self, comment_id: int, body: str) -> CommentInfo: ...

    def list_comments(self, number: int) -> list[CommentInfo]: ...

    def minimize_comment(self, node_id: str, classifier: Any = "OUTDATED") -> None: ...


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


@dataclass
class _Progress:
    """Rate-limit and ETA state of one campaign's progress updates."""

    key: tuple[str, str | None]
    stage_started: float
    done_at_start: int
    last_sent: float


# --- the artifact -----------------------------------------------------------------------------------------

SAMPLE_COLUMNS = (
    "row",
    "kind",
    "pair",
    "order",
    "attempt",
    "position",
    "arm",
    "status",
    "metric_ms",
    "setup_ms",
    "elapsed_s",
    "exit_code",
    "started_unix",
    "ended_unix",
    "cpu_set",
    "affinity_observed",
    "affinity_ok",
    "interference_ms",
    "failure",
    "invalidation",
)


def _samples_rows(report: CampaignReport) -> list[dict[str, object]]:
    """Every attempted sample of every row, warmups and invalidated attempts included, in run order."""
    rows: list[dict[str, object]] = []
    for row in report.rows:
        perf = row.performance
        if perf is None:
            continue
        orders = {plan.pair: plan.order for plan in perf.schedule}
        invalid = {(inv.pair, inv.attempt): f"{inv.reason}: {inv.evidence}" for inv in perf.invalidations}
        for sample in [*perf.warmups, *perf.samples]:
            rows.append(
                {
                    "row": row.row.id,
                    "kind": sample.kind,
                    "pair": sample.pair,
                    "order": orders.get(sample.pair, "") if sample.pair is not None else "",
                    "attempt": sample.attempt,
                    "position": sample.position,
                    "arm": sample.arm,
                    "status": sample.status,
                    "metric_ms": sample.metric_ms,
                    "setup_ms": sample.setup_ms,
                    "elapsed_s": sample.elapsed_s,
                    "exit_code": sample.exit_code,
                    "started_unix": sample.started_unix,
                    "ended_unix": sample.ended_unix,
                    "cpu_set": " ".join(map(str, sample.cpu_set)),
                    "affinity_observed": " ".join(map(str, sample.affinity_observed or [])),
                    "affinity_ok": sample.affinity_ok,
                    "interference_ms": sample.interference_ms,
                    "failure": sample.failure or "",
                    "invalidation": invalid.get((sample.pair, sample.attempt), "")
                    if sample.pair is not None
                    else "",
                }
            )
    return rows


def _digests_text(report: CampaignReport) -> str:
    """Every checksum of the campaign, one per line, greppable and diffable between campaigns."""
    lines = [f"# kv-parity digests, campaign {report.campaign_id}"]
    for revision in report.revisions:
        lines.append(f"revision {revision.arm} {revision.sha}")
    if report.determinism_patch_sha256:
        lines.append(f"determinism-patch {report.determinism_patch_sha256}")
    if report.trace:
        trace = report.trace
        lines.append(f"trace {trace.sha256} {trace.source_path}")
        lines.append(f"trace-slice {trace.slice_sha256} offset={trace.offset} count={trace.count}")
    for artifact in report.artifacts:
        lines.append(
            f"binary {artifact.arm} {artifact.binary_sha256} {artifact.binary_name} "
            f"size={artifact.binary_size} text={artifact.text_size}"
        )
    for row in report.rows:
        if row.determinism:
            for arm, digests in row.determinism.digests.items():
                lines.append(f"row {row.row.id} determinism {arm} {' '.join(digests)}")
        if row.parity:
            parity = row.parity
            lines.append(f"row {row.row.id} canonical baseline {parity.baseline_digest}")
            lines.append(f"row {row.row.id} canonical candidate {parity.candidate_digest}")
            lines.append(f"row {row.row.id} parity {'identical' if parity.identical else 'differ'}")
            for arm, sections in parity.section_digests.items():
                for section, digest in sorted(sections.items()):
                    lines.append(f"row {row.row.id} section {section} {arm} {digest}")
    return "\n".join(lines) + "\n"


def write_artifact(report: CampaignReport, out_dir: Path) -> list[Path]:
    """Write the campaign artifact (report.json, report.md, samples.csv, schedules, digests, plots).

    Deterministic for a given report (apart from PNG metadata), so re-publishing rewrites the same evidence.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def put(name: str, text: str) -> None:
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)

    put("report.json", report.model_dump_json(indent=2) + "\n")
    put("report.md", render.report_markdown(report, Links()))
    samples = out_dir / "samples.csv"
    with samples.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=SAMPLE_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(_samples_rows(report))
    written.append(samples)
    for row in report.rows:
        if row.performance is not None:
            perf = row.performance
            schedule = {
                "row": row.row.id,
                "seed": perf.schedule_seed,
                "pairs": [plan.model_dump() for plan in perf.schedule],
            }
            put(f"schedule-{row.row.id}.json", _json(schedule))
    put("digests.txt", _digests_text(report))
    from runners.plots import write_plots  # matplotlib loads only when an artifact is written

    for row in report.rows:
        if row.performance is not None and row.performance.ratios:
            written.extend(write_plots(row.performance, out_dir, row.row.id))
    return written


def _json(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


# --- the publisher ----------------------------------------------------------------------------------------


def web_url(api_base_url: str) -> str:
    """The web root that belongs to an API root (github.com, GHES `/api/v3`, or a local stand-in)."""
    parts = urlsplit(api_base_url.rstrip("/"))
    host = parts.netloc
    if host == "api.github.com":
        host = "github.com"
    path = parts.path.removesuffix("/api/v3")
    return f"{parts.scheme}://{host}{path}"


def _utc_iso(moment: datetime) -> str:
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _owner(body: str) -> tuple[str, str] | None:
    """(campaign id, created ISO) of the campaign a status comment currently describes."""
    for line in body.splitlines()[:3]:
        if line.startswith(_OWNER_PREFIX) and line.endswith(" -->"):
            campaign_id, _, created = line[len(_OWNER_PREFIX) : -4].partition(" ")
            return campaign_id, created
    return None


class Publisher:
    """Turns campaign lifecycle steps into GitHub check runs and comments, quietly and idempotently.

    Quiet: one status comment per pull request, edited in place (edits notify nobody); one new result
    comment per finished campaign (that one should notify); progress edits at most every
    PROGRESS_INTERVAL_SECONDS. Idempotent: the status comment and result comments are found again by their
    hidden markers, so a publisher created after a restart continues where the old one stopped.
    """

    def __init__(
        self,
        gateway: Gateway,
        settings_like: PublishSettings,
        clock: Callable[[], float] = time.monotonic,
        *,
        artifact_base_url: str | None = None,
        progress_interval: float = PROGRESS_INTERVAL_SECONDS,
    ) -> None:
        self.gateway = gateway
        self.settings = settings_like
        self.clock = clock
        self.artifact_base_url = artifact_base_url.rstrip("/") if artifact_base_url else None
        self.progress_interval = progress_interval
        self._web = web_url(settings_like.api_base_url)
        self._lock = threading.RLock()
        self._check_runs: dict[str, int] = {}
        self._status: dict[tuple[str, int], CommentInfo] = {}
        self._progress: dict[str, _Progress] = {}
        self._minimized: set[str] = set()

    # --- links

    def _check_run_id(self, campaign: CampaignView) -> int | None:
        return campaign.check_run_id or self._check_runs.get(campaign.id)

    def _links(
        self,
        campaign: CampaignView,
        artifact_url: str | None = None,
        result_url: str | None = None,
        check_run_id: int | None = None,
    ) -> Links:
        run_id = check_run_id or self._check_run_id(campaign)
        if artifact_url is None and self.artifact_base_url:
            artifact_url = f"{self.artifact_base_url}/{campaign.id}/"
        return Links(
            artifact_url=artifact_url,
            check_run_url=f"{self._web}/{campaign.repo}/runs/{run_id}" if run_id else None,
            result_url=result_url,
        )

    @staticmethod
    def _output(content: CheckRunContent) -> CheckOutput:
        return CheckOutput(title=content.title, summary=content.summary, text=content.text or None)

    # --- check run

    def open_check_run(self, campaign: CampaignView) -> int:
        """Create the campaign's check run on the head SHA, queued, with its Cancel button."""
        with self._lock:
            content = render.progress_content(
                campaign,
                None,
                self._links(campaign),
                self.settings.command_word,
                position=campaign.queue_position,
            )
            run_id = self.gateway.create_check_run(
                campaign.head_sha,
                self.settings.check_name,
                campaign.id,
                status="queued",
                output=self._output(content),
                actions=[RERUN, CANCEL],
            )
            self._check_runs[campaign.id] = run_id
            return run_id

    def _ensure_check_run(self, campaign: CampaignView) -> int:
        return self._check_run_id(campaign) or self.open_check_run(campaign)

    # --- lifecycle steps

    def queued(self, campaign: CampaignView, position: int) -> int | None:
        """Show the queue position (0 = started) on the check run and in the status comment.

        Returns the status comment's id for the store (None when a newer campaign owns that comment).
        """
        with self._lock:
            links = self._links(campaign)
            run_id = self._check_run_id(campaign)
            started = ProgressView(
                stage="starting", row=None, detail="", done=None, total=None, eta_seconds=None
            )
            progress = started if position == 0 else None
            if run_id is not None:
                content = render.progress_content(
                    campaign, progress, links, self.settings.command_word, position=position
                )
                self.gateway.update_check_run(
                    run_id,
                    status="in_progress" if progress else "queued",
                    output=self._output(content),
                    actions=[RERUN, CANCEL],
                )
            mode = "running" if progress else "queued"
            body = render.status_comment(
                campaign, mode, links, self.settings.command_word, position=position, progress=progress
            )
            return self._upsert_status(campaign, body)

    def progress(self, campaign: CampaignView, event: ProgressEvent) -> None:
        """Live progress, at most one update per interval unless the stage or row changed."""
        with self._lock:
            now = self.clock()
            key = (event.stage, event.row)
            state = self._progress.get(campaign.id)
            if state is not None and state.key == key and now - state.last_sent < self.progress_interval:
                return
            if state is None or state.key != key:
                state = _Progress(key=key, stage_started=now, done_at_start=event.done or 0, last_sent=now)
                self._progress[campaign.id] = state
            state.last_sent = now
            view = ProgressView.of(event, self._eta(state, event, now))
            links = self._links(campaign)
            run_id = self._ensure_check_run(campaign)
            content = render.progress_content(campaign, view, links, self.settings.command_word)
            self.gateway.update_check_run(
                run_id, status="in_progress", output=self._output(content), actions=[RERUN, CANCEL]
            )
            self._upsert_status(
                campaign,
                render.status_comment(
                    campaign,
                    "running",
                    self._links(campaign, check_run_id=run_id),
                    self.settings.command_word,
                    progress=view,
                ),
            )

    @staticmethod
    def _eta(state: _Progress, event: ProgressEvent, now: float) -> float | None:
        """Remaining time of this stage from its own pace so far; None until there is a pace."""
        if event.done is None or not event.total:
            return None
        progressed = event.done - state.done_at_start
        if progressed <= 0:
            return None
        return (now - state.stage_started) / progressed * (event.total - event.done)

    def finished(
        self,
        campaign: CampaignView,
        report: CampaignReport,
        artifact_dir: Path,
        artifact_url: str | None = None,
    ) -> None:
        """Write the artifact, complete the check run, post ONE result comment and fold older ones.

        Calling it again for the same campaign re-completes the check run and re-edits the status comment
        (both idempotent) but posts nothing new: the result comment is recognised by its marker.
        """
        with self._lock:
            self._progress.pop(campaign.id, None)
            if report.verdicts is None:
                report = report.model_copy(update={"verdicts": campaign_verdicts(report)})
            assert report.verdicts is not None
            write_artifact(report, artifact_dir)
            run_id = self._ensure_check_run(campaign)
            links = self._links(campaign, artifact_url, check_run_id=run_id)
            content = render.check_run_content(report, links, self.settings.command_word)
            self.gateway.update_check_run(
                run_id,
                status="completed",
                conclusion=report.verdicts.conclusion.value,
                output=self._output(content),
                actions=[RERUN],
                details_url=links.artifact_url,
            )
            comments = self.gateway.list_comments(campaign.pr_number)
            self._remember_status(campaign, comments)
            ours = [c for c in comments if render.result_marker_campaign(c.body) == campaign.id]
            result = (
                ours[0]
                if ours
                else self.gateway.create_comment(
                    campaign.pr_number, render.result_comment(report, links, self.settings.command_word)
                )
            )
            for comment in comments:
                owner = render.result_marker_campaign(comment.body)
                if (
                    owner is not None
                    and owner != campaign.id
                    and comment.id < result.id
                    and comment.node_id not in self._minimized
                ):
                    self.gateway.minimize_comment(comment.node_id, "OUTDATED")
                    self._minimized.add(comment.node_id)
            self._upsert_status(
                campaign,
                render.status_comment(
                    campaign,
                    "finished",
                    Links(links.artifact_url, links.check_run_url, result.html_url),
                    self.settings.command_word,
                    report=report,
                ),
            )

    def ended(self, campaign: CampaignView, state: str, reason: str) -> None:
        """A campaign that stopped without a report: complete its check run and say why in the status."""
        if state not in STATE_CONCLUSIONS:
            raise ValueError(f"unknown end state {state!r}; expected one of {sorted(STATE_CONCLUSIONS)}")
        with self._lock:
            self._progress.pop(campaign.id, None)
            run_id = self._check_run_id(campaign)
            if run_id is None and state in ("timed_out", "errored", "config_error"):
                run_id = self.open_check_run(campaign)
            links = self._links(campaign, check_run_id=run_id)
            if run_id is not None:
                content = render.ended_content(campaign, state, reason, links, self.settings.command_word)
                self.gateway.update_check_run(
                    run_id,
                    status="completed",
                    conclusion=STATE_CONCLUSIONS[state],
                    output=self._output(content),
                    actions=[RERUN],
                    details_url=links.artifact_url,
                )
            self._upsert_status(
                campaign,
                render.status_comment(
                    campaign, "ended", links, self.settings.command_word, state=state, reason=reason
                ),
            )

    def reply(self, number: int, kind: str, **context: Any) -> None:
        """Answer a command with a new short comment.

        Context per kind: refused(reason, fix), help(), status(campaigns), duplicate(campaign),
        unknown_command(line, reason).
        """
        body = render.reply(kind, self.settings.command_word, COMMANDS, self.settings.label, context)
        with self._lock:
            self.gateway.create_comment(number, body)

    # --- the sticky status comment

    def _remember_status(self, campaign: CampaignView, comments: list[CommentInfo]) -> None:
        found = next((c for c in comments if render.is_status_comment(c.body)), None)
        if found is not None:
            self._status[(campaign.repo, campaign.pr_number)] = found

    def _upsert_status(self, campaign: CampaignView, body: str) -> int | None:
        """Edit the one status comment in place (creating it once), unless a newer campaign owns it."""
        body = self._with_owner(campaign, body)
        key = (campaign.repo, campaign.pr_number)
        known = self._status.get(key)
        if known is None:
            self._remember_status(campaign, self.gateway.list_comments(campaign.pr_number))
            known = self._status.get(key)
        if known is None:
            self._status[key] = self.gateway.create_comment(campaign.pr_number, body)
            return self._status[key].id
        owner = _owner(known.body)
        if owner is not None and owner[0] != campaign.id and owner[1] > _utc_iso(campaign.created_at):
            return None
        if known.body != body:
            try:
                self._status[key] = self.gateway.edit_comment(known.id, body)
            except GitHubNotFoundError:
                self._status[key] = self.gateway.create_comment(campaign.pr_number, body)
        return self._status[key].id

    @staticmethod
    def _with_owner(campaign: CampaignView, body: str) -> str:
        marker, _, rest = body.partition("\n")
        return f"{marker}\n{_OWNER_PREFIX}{campaign.id} {_utc_iso(campaign.created_at)} -->\n{rest}"


# --- `kv-parity publish` ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CliSettings:
    """Settings for `kv-parity publish`, which must work inside Actions without the service's settings."""

    check_name: str
    command_word: str
    label: str
    api_base_url: str


def campaign_from_report(
    report: CampaignReport, repo: str, pr_number: int, artifact_dir: Path
) -> CampaignView:
    """The campaign a stand-alone report stands for, so publishing shares `Publisher.finished`."""
    revisions = {r.arm: r.sha for r in report.revisions}
    verdicts = report.verdicts or campaign_verdicts(report)
    return CampaignView(
        id=report.campaign_id,
        repo=repo,
        pr_number=pr_number,
        head_sha=revisions["candidate"],
        base_sha=revisions["baseline"],
        relationship=report.relationship,
        rows=None,
        state=CampaignState.COMPLETED,
        check_run_id=None,
        status_comment_id=None,
        requested_by="kv-parity publish",
        trigger="publish",
        created_at=datetime.fromtimestamp(report.created_unix, UTC),
        deadline=None,
        artifact_dir=artifact_dir,
        queue_position=None,
        attempt=1,
        reason="published from report.json",
        conclusion=verdicts.conclusion.value,
        config_source=report.config_source,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kv-parity publish",
        description="(Re)publish a finished report.json to a pull request: check run, status and result.",
    )
    parser.add_argument("--report", required=True, type=Path, help="report.json written by a campaign")
    parser.add_argument("--repo", required=True, help="owner/name")
    parser.add_argument("--pr", required=True, type=int, help="pull request number")
    parser.add_argument(
        "--artifact-url", help="where the artifact is browsable (Actions artifact or a base URL)"
    )
    parser.add_argument(
        "--out", type=Path, help="artifact directory to (re)write (default: the report's directory)"
    )
    parser.add_argument("--check-name", default=os.environ.get("KV_PARITY_CHECK_NAME", "kv-parity"))
    parser.add_argument("--command-word", default=os.environ.get("KV_PARITY_COMMAND_WORD", "/parity"))
    parser.add_argument("--label", default=os.environ.get("KV_PARITY_LABEL", "kv-parity"))
    parser.add_argument(
        "--api-url",
        default=os.environ.get("KV_PARITY_API_BASE_URL")
        or os.environ.get("GITHUB_API_URL")
        or "https://api.github.com",
    )
    return parser


def publish_main(argv: Sequence[str], gateway: Gateway | None = None) -> int:
    """`kv-parity publish`: token from $KV_PARITY_TOKEN or $GITHUB_TOKEN (an App or Actions token)."""
    args = _parser().parse_args(list(argv))
    try:
        report = CampaignReport.model_validate_json(args.report.read_text(encoding="utf-8"))
    except (OSError, ValidationError) as exc:
        print(f"kv-parity publish: cannot read report {args.report}: {exc}", file=sys.stderr)
        return 2
    if gateway is None:
        token = os.environ.get("KV_PARITY_TOKEN") or os.environ.get("GITHUB_TOKEN")
        if not token:
            print(
                "kv-parity publish: set KV_PARITY_TOKEN or GITHUB_TOKEN (check runs need an App or Actions "
                "token)",
                file=sys.stderr,
            )
            return 2
        gateway = GitHubGateway(args.repo, TokenAuth(token=SecretStr(token)), args.api_url)
    settings = CliSettings(
        check_name=args.check_name,
        command_word=args.command_word,
        label=args.label,
        api_base_url=args.api_url,
    )
    out_dir: Path = args.out or args.report.resolve().parent
    campaign = campaign_from_report(report, args.repo, args.pr, out_dir)
    try:
        Publisher(gateway, settings).finished(campaign, report, out_dir, artifact_url=args.artifact_url)
    except GitHubError as exc:
        print(f"kv-parity publish: GitHub refused: {exc}", file=sys.stderr)
        return 1
    verdicts = report.verdicts or campaign_verdicts(report)
    print(f"published {report.campaign_id} to {args.repo}#{args.pr}: {verdicts.summary}")
    return 0
