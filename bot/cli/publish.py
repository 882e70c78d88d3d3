"""`kv-parity publish`: a finished report.json published as the service would publish it, from a workflow's publish
job (or by hand), after checking it is the campaign that was dispatched (`bot.publish.report_guard`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import SecretStr, ValidationError

from bot.core.merge_queue import MERGE_GROUP_TRIGGER
from bot.exit_codes import EXIT_GITHUB, EXIT_NOT_DISPATCHED, EXIT_OK, EXIT_USAGE
from bot.github.errors import GitHubError
from bot.github.gateway import GitHubGateway
from bot.github.models import ACTIONS_BOT, TokenAuth
from bot.github.redact import SideRunGateway
from bot.publish.from_report import PublishGateway, campaign_from_report, in_merge_queue, standing_acceptances
from bot.publish.publisher import Publisher
from bot.publish.report_guard import DispatchedCampaign, ReportMismatch, check_report_matches
from bot.publish.side_runs import SideRunPublisher
from bot.settings import Settings
from runners.schema.config import parse_rows
from runners.schema.report import CampaignReport
from runners.schema.verdicts import with_acceptances, with_verdicts

SERVICE_DEFAULTS = Settings.model_fields
"""The names the service uses by default (check run, command word, labels), so both modes agree."""


@dataclass(frozen=True)
class CliSettings:
    """Settings for `kv-parity publish`, which must work inside Actions without the service's settings: its flags
    and environment (the tracking label only for a main-branch campaign's report)."""

    check_name: str
    command_word: str
    label: str
    api_base_url: str
    tracking_label: str = SERVICE_DEFAULTS["tracking_label"].default


def _default_bot_login() -> str | None:
    """Who the comments are posted as: `$KV_PARITY_BOT_LOGIN`, else `github-actions[bot]` inside Actions
    (an Actions token cannot ask `GET /user`), else None (the API is asked)."""
    if os.environ.get("KV_PARITY_BOT_LOGIN"):
        return os.environ["KV_PARITY_BOT_LOGIN"]
    return ACTIONS_BOT.login if os.environ.get("GITHUB_ACTIONS") == "true" else None


def _workflow_run_url(environ: Mapping[str, str]) -> str | None:
    """Inside Actions, the page of the run that publishes (its jobs, logs and artifacts): the check run's
    details when no other page is given."""
    server, repo, run_id = (environ.get(key) for key in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    return f"{server}/{repo}/actions/runs/{run_id}" if server and repo and run_id else None


def _add_names(parser: argparse.ArgumentParser) -> None:
    """The check run's name, the command word and the label, as the service's settings would name them."""
    parser.add_argument("--check-name",
                        default=os.environ.get("KV_PARITY_CHECK_NAME", SERVICE_DEFAULTS["check_name"].default))
    parser.add_argument("--command-word",
                        default=os.environ.get("KV_PARITY_COMMAND_WORD", SERVICE_DEFAULTS["command_word"].default))
    parser.add_argument("--label", default=os.environ.get("KV_PARITY_LABEL", SERVICE_DEFAULTS["label"].default))


def _add_api_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api-url", default=os.environ.get("KV_PARITY_API_BASE_URL")
                        or os.environ.get("GITHUB_API_URL") or "https://api.github.com")


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
    _add_names(parser)
    parser.add_argument(
        "--bot-login", default=_default_bot_login(), help="the account comments are posted as"
    )
    _add_api_url(parser)
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


def _publish_pull_request(argv: Sequence[str], gateway: PublishGateway | None) -> int:
    """A pull request's report; token from $KV_PARITY_TOKEN or $GITHUB_TOKEN (an App or Actions token)."""
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
        return EXIT_NOT_DISPATCHED
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
            return EXIT_NOT_DISPATCHED
        campaign = campaign_from_report(report, args.repo, args.pr,
                                        trigger=MERGE_GROUP_TRIGGER if merge_group else "publish")
        standing = standing_acceptances(gateway, args.pr, campaign.head_sha, settings.command_word)
        for refused in standing.refused:
            print(f"kv-parity publish: {refused}", file=sys.stderr)
        report = with_acceptances(report, standing.acceptances)
        Publisher(gateway, settings).finished(
            campaign, report, out_dir, artifact_url=args.artifact_url, details_url=details_url
        )
    except GitHubError as exc:
        print(f"kv-parity publish: GitHub refused: {exc}", file=sys.stderr)
        return EXIT_GITHUB
    verdicts = report.concluded
    print(f"published {report.campaign_id} to {args.repo}#{args.pr}: {verdicts.summary}")
    return EXIT_OK


def _side_run_parser(purpose: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"kv-parity publish --purpose {purpose}",
        description="Publish a finished main-branch campaign's report.json: its check run (`kv-parity / main` or "
        "`/ reference`) on the measured commit and, on a FAIL, the tracking issue. The report must name exactly "
        "the campaign that was dispatched (--expect-*); anything else is refused and nothing is published.",
    )
    parser.add_argument("--report", required=True, type=Path, help="report.json written by a campaign")
    parser.add_argument("--repo", required=True, help="owner/name")
    parser.add_argument("--pr", default="", help="ignored: a main-branch campaign belongs to no pull request")
    parser.add_argument("--expect-campaign-id", required=True)
    parser.add_argument("--expect-head", required=True, help="the pushed commit (or the tip) that was dispatched")
    parser.add_argument("--expect-base", required=True, help="its first parent (or the reference) dispatched")
    parser.add_argument("--expect-rows", default="")
    parser.add_argument("--expect-mode", default="campaign", choices=("campaign",))
    parser.add_argument("--artifact-url",
                        help="where the artifact is browsable: the check run's Details and the tracking issue's link")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--details-url")
    _add_names(parser)
    parser.add_argument("--tracking-label",
                        default=os.environ.get("KV_PARITY_TRACKING_LABEL", SERVICE_DEFAULTS["tracking_label"].default))
    parser.add_argument("--bot-login", default=_default_bot_login())
    _add_api_url(parser)
    return parser


def publish_main(argv: Sequence[str], gateway: SideRunGateway | None = None) -> int:
    """`kv-parity publish`: a pull request's report (`Publisher.finished`), or with `--purpose main|reference` a
    main-branch campaign's (`SideRunPublisher.finished`)."""
    chosen = argparse.ArgumentParser(add_help=False)
    chosen.add_argument("--purpose", default="pull_request")
    known, rest = chosen.parse_known_args(list(argv))
    if known.purpose == "pull_request":
        return _publish_pull_request(rest, gateway)  # type: ignore[arg-type]  # a GitHubGateway serves both
    if known.purpose not in ("main", "reference"):
        print(f"kv-parity publish: --purpose {known.purpose!r} is not pull_request, main or reference",
              file=sys.stderr)
        return EXIT_USAGE
    purpose: Literal["main", "reference"] = "main" if known.purpose == "main" else "reference"
    args = _side_run_parser(purpose).parse_args(rest)
    try:
        report = with_verdicts(CampaignReport.model_validate_json(args.report.read_text(encoding="utf-8")))
        expected = DispatchedCampaign(campaign_id=args.expect_campaign_id, head_sha=args.expect_head,
                                      base_sha=args.expect_base, rows=parse_rows(args.expect_rows), pr_number=0)
        check_report_matches(report, expected)
    except (OSError, ValidationError) as exc:
        print(f"kv-parity publish: cannot read report {args.report}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ReportMismatch as exc:
        print(f"kv-parity publish: refused, nothing published: {exc}", file=sys.stderr)
        return EXIT_NOT_DISPATCHED
    if gateway is None:
        token = os.environ.get("KV_PARITY_TOKEN") or os.environ.get("GITHUB_TOKEN")
        if not token:
            print("kv-parity publish: set KV_PARITY_TOKEN or GITHUB_TOKEN", file=sys.stderr)
            return EXIT_USAGE
        gateway = GitHubGateway(args.repo, TokenAuth(token=SecretStr(token)), args.api_url, bot_login=args.bot_login)
    out_dir: Path = args.out or args.report.resolve().parent
    campaign = campaign_from_report(report, args.repo, 0, rows=parse_rows(args.expect_rows), purpose=purpose)
    details_url = args.details_url or (None if args.artifact_url else _workflow_run_url(os.environ))
    settings = CliSettings(check_name=args.check_name, command_word=args.command_word, label=args.label,
                           api_base_url=args.api_url, tracking_label=args.tracking_label)
    try:
        SideRunPublisher(gateway, settings).finished(
            campaign, report, out_dir, artifact_url=args.artifact_url, details_url=details_url
        )
    except GitHubError as exc:
        print(f"kv-parity publish: GitHub refused: {exc}", file=sys.stderr)
        return EXIT_GITHUB
    print(f"published {report.campaign_id} ({purpose}) to {args.repo}: {report.concluded.summary}")
    return EXIT_OK
