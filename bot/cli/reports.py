"""What is done with a finished report: `verify` recomputes every verdict from it alone (`runners.verify`),
`report` renders its pages again (`bot.publish.artifact`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError

from bot.exit_codes import EXIT_DISAGREES, EXIT_OK, EXIT_USAGE
from runners.schema.bisect_rule import BISECT_SCHEMA_VERSION, BisectReport
from runners.schema.report import CampaignReport
from runners.schema.verdicts import with_verdicts
from runners.verify import verify_bisect, verify_report


def _schema_version(data: bytes) -> object:
    """The document's `schema_version`, None when it is not a JSON object (its validation then says why)."""
    try:
        document = json.loads(data)
    except ValueError:
        return None
    return document.get("schema_version") if isinstance(document, dict) else None


def _main_verify_bisect(path: Path, data: bytes) -> int:
    try:
        bisect = BisectReport.model_validate_json(data)
    except ValidationError as exc:
        print(f"{path} is not a {BISECT_SCHEMA_VERSION} bisect:\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    problems = verify_bisect(bisect)
    if problems:
        print(f"{path}: {len(problems)} disagreement(s) with the recomputation:")
        for problem in problems:
            print(f"  - {problem}")
        return EXIT_DISAGREES
    attempts = sum(len(probe.attempts) for probe in bisect.probes)
    print(f"{path}: consistent ({len(bisect.probes)} probes, {attempts} campaigns; {bisect.result.last_line})")
    return EXIT_OK


def main_verify(path: Path) -> int:
    """0 when consistent, 1 on any disagreement, 2 when the file is not a readable report (a campaign's
    report.json or a bisect's bisect.json, told apart by their schema_version)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        print(f"cannot read {path}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    if _schema_version(data) == BISECT_SCHEMA_VERSION:
        return _main_verify_bisect(path, data)
    try:
        report = CampaignReport.model_validate_json(data)
    except ValidationError as exc:
        print(
            f"{path} is not a {CampaignReport.model_fields['schema_version'].default} report:\n{exc}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    problems = verify_report(report)
    if problems:
        print(f"{path}: {len(problems)} disagreement(s) with the recomputation:")
        for problem in problems:
            print(f"  - {problem}")
        return EXIT_DISAGREES
    summary = report.verdicts.summary if report.verdicts else ""
    print(f"{path}: consistent ({len(report.rows)} rows; {summary})")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    return main_verify(Path(args.report))


def cmd_report(args: argparse.Namespace) -> int:
    """report.html and report.md from a report.json (any schema-v1 report, however old); exit 2 naming what is
    wrong with a missing, unreadable or invalid file."""
    from bot.publish.artifact import write_report_pages

    path = Path(args.report)
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        print(f"kv-parity report: {path}: no such file", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"kv-parity report: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:
        print(f"kv-parity report: {path} is not valid JSON: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        report = with_verdicts(CampaignReport.model_validate(data))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "/".join(str(part) for part in first["loc"]) or "(top level)"
        print(
            f"kv-parity report: {path} is not a campaign report: {where}: {first['msg']}"
            f" ({exc.error_count()} validation error{'s' if exc.error_count() != 1 else ''})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    out = Path(args.out) if args.out else path.parent
    out.mkdir(parents=True, exist_ok=True)
    for written in write_report_pages(report, out):
        print(written)
    return EXIT_OK


def add_report_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`verify` and `report`."""
    verify = sub.add_parser("verify", help="recompute every verdict from a report.json (or a bisect.json) alone")
    verify.add_argument("report")
    verify.set_defaults(func=cmd_verify)

    report = sub.add_parser("report", help="render report.html and report.md from a report.json")
    report.add_argument("report", help="a campaign's report.json")
    report.add_argument("--out", help="output directory (default: beside the report)")
    report.set_defaults(func=cmd_report)
