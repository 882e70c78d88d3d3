"""Comment commands (`/parity rerun [rows=a,b] [sha=<head>]`, `cancel`, `status`, `help`): a pure parser.

A command counts only when it stands on its own line of prose: lines inside fenced or indented code blocks
and `>` quotes are someone showing or quoting a command, not asking for one. The help text is generated
from `COMMANDS`, so the documentation cannot drift from what the parser accepts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ROW_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
"""Same shape as `runners.config.RowConfig.id`; whether the row exists is checked against the base config."""
SHA_PREFIX = re.compile(r"^[0-9a-f]{7,40}$")


@dataclass(frozen=True)
class CommandSpec:
    """What a command does, who may use it and an example: the single source of the help text."""

    name: str
    usage: str
    description: str
    who: str
    example: str


COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec(
        name="rerun",
        usage="rerun [rows=a,b] [sha=<head sha>]",
        description=(
            "Start a campaign for the pull request's current head against its merge base, optionally only "
            "for the named rows of the base revision's config. `sha=` makes the request apply only if the "
            "head is still that commit; for a pull request from a fork it approves exactly that head."
        ),
        who="collaborators with at least the configured permission (default write)",
        example="rerun rows=vllm-disagg,sglang-disagg",
    ),
    CommandSpec(
        name="cancel",
        usage="cancel",
        description="Cancel this pull request's queued and running campaigns.",
        who="collaborators with at least the configured permission (default write)",
        example="cancel",
    ),
    CommandSpec(
        name="status",
        usage="status",
        description="Reply with this pull request's campaigns, their states and queue positions.",
        who="collaborators with at least the configured permission (default write)",
        example="status",
    ),
    CommandSpec(
        name="help",
        usage="help",
        description="Reply with this list of commands.",
        who="collaborators with at least the configured permission (default write)",
        example="help",
    ),
)

COMMAND_NAMES = frozenset(spec.name for spec in COMMANDS)


@dataclass(frozen=True)
class ParsedCommand:
    """A recognised command line; `rows` None means every row of the config."""

    name: str
    rows: tuple[str, ...] | None = None
    sha: str | None = None
    line: str = ""


@dataclass(frozen=True)
class UnknownCommand:
    """A line addressed to the bot that is not a valid command; answered with the help."""

    line: str
    reason: str


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def _prose_lines(body: str) -> list[str]:
    """The comment's lines outside fenced code, indented code and block quotes, stripped."""
    lines: list[str] = []
    fence: str | None = None
    for raw in body.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        match = _FENCE.match(raw)
        if fence is not None:
            # CommonMark: a fence closes with at least as many of the same character and nothing after it.
            if (
                match
                and match.group(1)[0] == fence[0]
                and len(match.group(1)) >= len(fence)
                and not match.group(2).strip()
            ):
                fence = None
            continue
        if match and not (match.group(1)[0] == "`" and "`" in match.group(2)):
            fence = match.group(1)
            continue
        expanded = raw.expandtabs(4)
        stripped = expanded.strip()
        # Four spaces of indentation is code (or a continuation we do not guess about); `>` is a quote.
        if not stripped or expanded.startswith("    ") or stripped.startswith(">"):
            continue
        lines.append(stripped)
    return lines


def _parse_line(words: list[str], line: str) -> ParsedCommand | UnknownCommand:
    if not words:
        return UnknownCommand(line, "no subcommand given")
    name, args = words[0].lower(), words[1:]
    if name not in COMMAND_NAMES:
        return UnknownCommand(line, f"unknown subcommand {words[0]!r}")
    if name != "rerun":
        if args:
            return UnknownCommand(line, f"`{name}` takes no arguments, got {' '.join(args)!r}")
        return ParsedCommand(name=name, line=line)
    rows: tuple[str, ...] | None = None
    sha: str | None = None
    for arg in args:
        key, sep, value = arg.partition("=")
        if key == "rows" and sep and rows is None:
            names = tuple(part for part in value.split(",") if part)
            bad = [part for part in names if not ROW_ID.match(part)]
            if not names or bad:
                return UnknownCommand(line, f"`rows=` needs comma-separated row ids, got {value!r}")
            rows = tuple(dict.fromkeys(names))
        elif key == "sha" and sep and sha is None:
            if not SHA_PREFIX.match(value.lower()):
                return UnknownCommand(line, f"`sha=` needs 7 to 40 hex digits, got {value!r}")
            sha = value.lower()
        else:
            return UnknownCommand(line, f"`rerun` does not understand {arg!r}")
    return ParsedCommand(name="rerun", rows=rows, sha=sha, line=line)


def parse_commands(body: str, command_word: str = "/parity") -> list[ParsedCommand | UnknownCommand]:
    """Every line of prose that starts with the command word, parsed in comment order."""
    found: list[ParsedCommand | UnknownCommand] = []
    for line in _prose_lines(body):
        words = line.split()
        if words and words[0] == command_word:
            found.append(_parse_line(words[1:], line))
    return found
