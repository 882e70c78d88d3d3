"""`kv-parity`: one entry point for the campaign, the demo, verification, the webhook service and publishing."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from bot.exit_codes import EXIT_USAGE
from runners import build_info

Command = Callable[[Sequence[str]], int]


class _PrintVersion(argparse.Action):
    """argparse's own version action re-wraps the line to the terminal's width; this prints it whole."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"kv-parity {build_info.describe()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand with its one-line help (README's table is checked against it); the ones listed without
    options parse their own (`_self_parsed`)."""
    from bot.cli.campaigns import add_cache_command, add_campaign_commands
    from bot.cli.reports import add_report_commands

    parser = argparse.ArgumentParser(prog="kv-parity", description=__doc__)
    parser.add_argument("--version", action=_PrintVersion, nargs=0,
                        help="print the version and the commit this kv-parity was built from, then exit")
    sub = parser.add_subparsers(dest="command", required=True)
    add_campaign_commands(sub)
    add_report_commands(sub)
    add_cache_command(sub)
    sub.add_parser("serve", help="run the webhook service", add_help=False)
    sub.add_parser("publish", help="(re)publish a finished report to a pull request", add_help=False)
    sub.add_parser("event", help="Actions-only mode: act on one GitHub event file", add_help=False)
    sub.add_parser("track", help="measure the default branch's tip against a reference (a schedule's creep check)",
                   add_help=False)
    sub.add_parser("history", help="what the service recorded for a campaign, PR or delivery", add_help=False)
    sub.add_parser("plan", help="pin revisions and config, write plan.json and the row matrix (no PR code)",
                   add_help=False)
    sub.add_parser("build", help="build both revisions once (or one arm with --plan/--arm) in the sandbox",
                   add_help=False)
    sub.add_parser("manifest", help="re-hash both arm builds and write the build manifest (no PR code)",
                   add_help=False)
    sub.add_parser("row", help="run one row on this node from a build manifest", add_help=False)
    sub.add_parser("merge", help="merge row results into the campaign report", add_help=False)
    sub.add_parser("doctor", help="check this node is fit to measure (sandbox, profilers, CPU frequency, SMT, "
                   "isolation, load, NUMA, ASLR) for the CPUs a row would pin", add_help=False)
    return parser


def _self_parsed(command: str) -> Command | None:
    """The subcommands that parse their own arguments (each with its own --help), imported only when run."""
    if command == "serve":
        from bot.cli.serve import serve_main

        return serve_main
    if command in ("plan", "build", "manifest", "row", "merge"):
        from bot.cli import distributed

        jobs: dict[str, Command] = {"plan": distributed.plan_main, "build": distributed.build_main,
                                    "manifest": distributed.manifest_main, "row": distributed.row_main,
                                    "merge": distributed.merge_main}
        return jobs[command]
    if command == "doctor":
        from bot.cli.doctor import doctor_main

        return doctor_main
    if command == "history":
        from bot.cli.history import history_main

        return history_main
    if command == "publish":
        from bot.cli.publish import publish_main

        return publish_main
    if command == "event":
        from bot.cli.event import event_main

        return event_main
    if command == "track":
        from bot.cli.track import track_main

        return track_main
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _self_parsed(argv[0]) if argv else None
    if command is not None:
        return command(argv[1:])
    args = build_parser().parse_args(argv)
    from runners.exec.sandbox import SandboxUnavailable
    from runners.pipeline.slurm_client import SlurmError
    from runners.schema.config import ConfigError
    from runners.stages.revisions import RevisionError

    try:
        code: int = args.func(args)
    except (ConfigError, RevisionError, SandboxUnavailable, SlurmError) as exc:
        print(f"kv-parity: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return code
