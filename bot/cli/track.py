"""`kv-parity track`: the default branch's tip against a reference (a tag or SHA), the creep a per-PR gate lets
through, as a schedule runs it (Actions-only mode's kv-parity-main.yml; any cron with a token).

It reads the campaign config at the tip through the API, pins the reference (`--reference`, else `[main]
reference`), and dispatches the campaign workflow with purpose `reference`; the workflow's publish job reports it
on the check run `kv-parity / reference` and, on a FAIL, in the tracking issue (bot.publish.side_runs). The
service runs the same campaign every `[main] every` tracked pushes (bot.core.tracking); both build the request with
`bot.core.tracking.reference_request`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from bot.core.tracking import read_config, reference_request, start
from bot.exit_codes import EXIT_GITHUB, EXIT_OK, EXIT_USAGE
from bot.github.errors import GitHubError
from bot.modes.actions_only import actions_ledger, actions_services, actions_settings
from bot.settings import SettingsError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kv-parity track",
        description="Measure the default branch's tip against a reference (a tag or SHA): dispatch the campaign "
        "workflow with purpose reference (Actions-only mode; the token, repository and API URL as for "
        "`kv-parity event`).",
    )
    parser.add_argument("--reference", help="tag or commit SHA (default: [main] reference of the tip's config)")
    parser.add_argument("--settings", type=Path, help="TOML settings file (default: $KV_PARITY_SETTINGS)")
    return parser


def track_main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """Exit 0 once dispatched (or nothing changed since the reference), 1 when GitHub refused a call, 2 for
    unusable settings, config or reference."""
    env = os.environ if environ is None else environ
    args = _parser().parse_args(list(argv))
    try:
        settings = actions_settings(args.settings, env)
    except SettingsError as exc:
        print(f"kv-parity track: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if settings.repo is None:
        print("kv-parity track: name the repository (settings repo, or $GITHUB_REPOSITORY)", file=sys.stderr)
        return EXIT_USAGE
    try:
        services = actions_services(settings, settings.repo)
        gateway = services.api
        tip = gateway.commit(gateway.default_branch()).sha
        found = read_config(gateway, settings.config_path, tip)
        if isinstance(found, str):
            print(f"kv-parity track: {found}", file=sys.stderr)
            return EXIT_USAGE
        reference = args.reference or found.config.main.reference
        if reference is None:
            print(f"kv-parity track: no reference: pass --reference or set [main] reference in {found.source}",
                  file=sys.stderr)
            return EXIT_USAGE
        request = reference_request(gateway, found, reference, "kv-parity track", "schedule")
        if isinstance(request, str):
            print(f"kv-parity track: {request}", file=sys.stderr)
            return EXIT_OK if request.startswith("the tip") else EXIT_USAGE
        ledger = actions_ledger(services, settings, settings.repo, side_runs=True)
        print(f"reference: {start(ledger, request)}")
    except GitHubError as exc:
        print(f"kv-parity track: GitHub refused: {exc}", file=sys.stderr)
        return EXIT_GITHUB
    return EXIT_OK
