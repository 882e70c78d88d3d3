"""Webhook service: verify, dedupe, persist, acknowledge; a worker thread does everything else.

The HTTP side never calls GitHub or starts processes, so acknowledgements stay fast (GitHub gives a
delivery 10 s) and a slow API cannot make GitHub give up and redeliver. A delivery is stored in SQLite
before the 202, so a crash after the acknowledgement loses nothing: the worker resumes unfinished
deliveries and campaigns on start.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bot.exit_codes import EXIT_OK, EXIT_USAGE
from bot.service.app import run_server
from bot.service.wiring import DatabaseError
from bot.settings import SettingsError, load_settings


def serve_main(argv: Sequence[str]) -> int:
    """`kv-parity serve --host 127.0.0.1 --port N [--settings FILE]`; settings also from KV_PARITY_*."""
    parser = argparse.ArgumentParser(prog="kv-parity serve", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--settings", type=Path, help="TOML settings file (default: $KV_PARITY_SETTINGS)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", choices=["text", "json"],
                        help="text for a terminal, json: one object per line (default: settings log_format, text)")
    args = parser.parse_args(list(argv))
    try:
        settings = load_settings(args.settings)
    except SettingsError as exc:
        print(f"kv-parity serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        run_server(settings, args.host, args.port, log_level=args.log_level, log_format=args.log_format)
    except (DatabaseError, SettingsError) as exc:  # SettingsError: a local backend without a sandbox, a taken address
        print(f"kv-parity serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK

