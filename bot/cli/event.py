"""`kv-parity event`: Actions-only mode, one GitHub event read from the workflow's event file
(`bot.modes.actions_only`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from bot.core.events import PayloadError, parse_event
from bot.exit_codes import EXIT_GITHUB, EXIT_OK, EXIT_USAGE
from bot.github.errors import GitHubError
from bot.modes.actions_only import EVENT_ALIASES, actions_services, actions_settings, handle_event
from bot.settings import SettingsError


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
    unserved = settings.unserved(repo)
    if unserved is not None:
        print(f"ignored: {unserved}")
        return EXIT_OK
    try:
        outcome = handle_event(event, actions_services(settings, repo), settings)
    except GitHubError as exc:
        print(f"kv-parity event: GitHub refused: {exc}", file=sys.stderr)
        return EXIT_GITHUB
    print(outcome)
    return EXIT_OK
