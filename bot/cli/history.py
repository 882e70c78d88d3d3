"""`kv-parity history`: what the service recorded, read straight from its SQLite database.

Operators answer "what happened to this campaign / delivery?" from the transitions and publications the
lifecycle persisted before each side effect, without a debugger or raw SQL.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bot.core.campaign import Campaign
from bot.exit_codes import EXIT_NOTHING_FOUND, EXIT_OK, EXIT_USAGE
from bot.store.acceptances import AcceptanceEntry
from bot.store.campaigns import Store
from bot.store.pages import NOT_COMPARABLE, BaselinePoint
from bot.store.people import Refusal
from bot.store.tracking import MainPoint


def _stamp(unix: float) -> str:
    return f"{datetime.fromtimestamp(unix, UTC):%Y-%m-%d %H:%M:%S}"


def acceptance_line(entry: AcceptanceEntry) -> str:
    """One acceptance: who, with which permission, of which head, what and why, where, and whether it stands."""
    accepted = entry.acceptance
    line = (
        f"acceptance by {accepted.login} ({accepted.permission}) of head {accepted.head_sha[:12]}: {accepted.line()} "
        f"· {accepted.comment_url} · written {_stamp(accepted.written_unix)} recorded {_stamp(accepted.recorded_unix)}"
    )
    if entry.revoked_at is not None:
        line += f" · revoked by {entry.revoked_by} at {_stamp(entry.revoked_at)}"
    return line


def refusal_line(refusal: Refusal) -> str:
    """One refused request: who, with which permission, when, why, and whether it was answered on GitHub (a
    repeated refusal within the refusal window is recorded, not answered again)."""
    answered = "answered" if refusal.answered else "not answered (within the refusal window)"
    return f"refused {refusal.login} ({refusal.permission}) at {_stamp(refusal.at)}: {refusal.reason} · {answered}"


def _campaign_lines(store: Store, campaign: Campaign) -> list[str]:
    lines = [
        f"campaign {campaign.id}: {campaign.state.value} · {campaign.repo}#{campaign.pr_number} "
        f"head {campaign.head_sha[:12]} base {campaign.base_sha[:12]} ({campaign.relationship}) "
        f"rows {','.join(campaign.rows) if campaign.rows else 'all'} · by {campaign.requested_by} "
        f"via {campaign.trigger} · attempt {campaign.attempt}",
    ]
    for step in store.transitions(campaign.id):
        source = step.from_state.value if step.from_state else "(new)"
        lines.append(f"  {step.at:%Y-%m-%d %H:%M:%S} {source} -> {step.to_state.value}: {step.reason}")
    lines.extend(f"  publication {kind}: {status}" for kind, status in store.publications(campaign.id))
    lines.extend(
        f"  {acceptance_line(entry)}"
        for entry in store.acceptance_history(campaign.repo, campaign.pr_number)
        if entry.acceptance.head_sha == campaign.head_sha
    )
    return lines


def _baseline_lines(points: list[BaselinePoint]) -> list[str]:
    """Per row, per node label, one line per campaign: when, merge base, median, field, samples."""
    lines: list[str] = []
    for row in sorted({p.row_id for p in points}):
        lines.append(f"row {row} (merge-base median of valid samples; {NOT_COMPARABLE})")
        of_row = [p for p in points if p.row_id == row]
        for label in sorted({p.node_label for p in of_row}):
            lines.append(f"  node {label}")
            lines.extend(
                f"    {datetime.fromtimestamp(p.measured_unix, UTC):%Y-%m-%d %H:%M:%S} base {p.base_sha[:12]} "
                f"{p.median:.4f} {p.unit} ({p.timing_field}, n={p.samples}) campaign {p.campaign_id}"
                for p in of_row
                if p.node_label == label
            )
    return lines


def _main_lines(points: list[MainPoint]) -> list[str]:
    """Per row, one line per main-branch campaign: when, kind, head against base, median [bounds], verdicts."""
    lines: list[str] = []

    def ratio(value: float | None) -> str:
        return "—" if value is None else f"{value:.4f}"

    for row in sorted({p.row_id for p in points}):
        lines.append(f"row {row} (push: head / first parent; reference: tip / reference, the cumulative change)")
        lines.extend(
            f"  {datetime.fromtimestamp(p.measured_unix, UTC):%Y-%m-%d %H:%M:%S} "
            f"{'push     ' if p.purpose == 'main' else 'reference'} {p.head_sha[:12]} vs {p.base_sha[:12]} "
            f"{ratio(p.median_ratio)} [{ratio(p.lower)}, {ratio(p.upper)}] vs {p.threshold:g} · semantic {p.semantic}"
            f" · performance {p.performance} · campaign {p.campaign_id}"
            for p in points if p.row_id == row
        )
    return lines


def history_main(argv: Sequence[str]) -> int:
    """0 when something was found and printed, 1 when nothing matched, 2 for an unreadable database."""
    parser = argparse.ArgumentParser(prog="kv-parity history", description=__doc__)
    parser.add_argument("--db", required=True, type=Path, help="the service's SQLite database (settings db_path)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--campaign", help="one campaign: its transitions and publications")
    what.add_argument("--pr", metavar="OWNER/NAME#N",
                      help="a pull request's campaigns (newest first), its acceptances and its refused requests")
    what.add_argument("--delivery", help="a webhook delivery's status and the campaigns it created")
    what.add_argument("--rejected", action="store_true", help="deliveries refused as malformed, with why")
    what.add_argument(
        "--baseline", metavar="OWNER/NAME", help="the merge-base timing of each row over time, per node label"
    )
    what.add_argument(
        "--main", metavar="OWNER/NAME", help="the default branch: each tracked push's and reference campaign's ratio "
        "per row over time"
    )
    parser.add_argument("--row", help="with --baseline or --main: only this row")
    args = parser.parse_args(list(argv))
    if args.row and not (args.baseline or args.main):
        parser.error("--row goes with --baseline or --main")
    if not args.db.is_file():
        print(f"kv-parity history: no database at {args.db}", file=sys.stderr)
        return EXIT_USAGE
    store = Store(args.db, power_safe=False)
    try:
        lines = _lines(store, args)
    finally:
        store.close()
    if not lines:
        print("nothing recorded matches", file=sys.stderr)
        return EXIT_NOTHING_FOUND
    print("\n".join(lines))
    return EXIT_OK


def _lines(store: Store, args: argparse.Namespace) -> list[str]:
    if args.campaign:
        campaign = store.get(args.campaign)
        return _campaign_lines(store, campaign) if campaign else []
    if args.pr:
        repo, _, number = str(args.pr).rpartition("#")
        if not repo or not number.isdigit():
            raise SystemExit(f"kv-parity history: --pr wants OWNER/NAME#N, got {args.pr!r}")
        accepted = [acceptance_line(entry) for entry in store.acceptance_history(repo, int(number))]
        refused = [refusal_line(refusal) for refusal in store.refusals(repo, int(number))]
        campaigns = [line for c in store.for_pr(repo, int(number)) for line in _campaign_lines(store, c)]
        return campaigns + accepted + refused
    if args.baseline:
        return _baseline_lines(store.baseline_history(args.baseline, args.row))
    if args.main:
        return _main_lines(store.main_history(args.main, args.row))
    if args.delivery:
        status = store.delivery_status(args.delivery)
        if status is None:
            return []
        lines = [f"delivery {args.delivery}: {status[0]}{f' — {status[1]}' if status[1] else ''}"]
        return lines + [line for c in store.by_delivery(args.delivery) for line in _campaign_lines(store, c)]
    return [f"{delivery} ({event}): {reason}" for delivery, event, reason in store.rejected_deliveries()]
