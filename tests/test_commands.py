"""Comment command parsing: only a command on its own line of prose counts."""

from __future__ import annotations

import pytest

from bot.core.commands import COMMANDS, ParsedCommand, UnknownCommand, approval_command, parse_commands

RERUN = ParsedCommand(name="rerun", line="/parity rerun")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("/parity rerun", [RERUN]),
        ("  /parity rerun  ", [RERUN]),
        ("/parity RERUN", [ParsedCommand(name="rerun", line="/parity RERUN")]),
        ("LGTM\n/parity rerun\nthanks", [RERUN]),
        ("\r\n/parity rerun\r\n", [RERUN]),
        ("/parity cancel", [ParsedCommand(name="cancel", line="/parity cancel")]),
        ("/parity status", [ParsedCommand(name="status", line="/parity status")]),
        ("/parity help", [ParsedCommand(name="help", line="/parity help")]),
        (
            "/parity rerun rows=vllm-agg,vllm-disagg",
            [ParsedCommand("rerun", ("vllm-agg", "vllm-disagg"), None, "/parity rerun rows=vllm-agg,vllm-disagg")],
        ),
        (
            "/parity rerun rows=a,a,b",
            [ParsedCommand("rerun", ("a", "b"), None, "/parity rerun rows=a,a,b")],
        ),
        (
            "/parity rerun sha=ABCDEF1 rows=a",
            [ParsedCommand("rerun", ("a",), "abcdef1", "/parity rerun sha=ABCDEF1 rows=a")],
        ),
        # Not on its own line: mentioned in prose.
        ("please /parity rerun", []),
        ("- /parity rerun", []),
        ("`/parity rerun`", []),
        # Another word that merely starts like the command word.
        ("/parityrerun", []),
        ("/parity-rerun", []),
        # Quotes, fenced and indented code blocks show a command; they do not ask for one.
        ("> /parity rerun", []),
        ("  > /parity rerun", []),
        (">> /parity rerun", []),
        ("```\n/parity rerun\n```", []),
        ("~~~text\n/parity rerun\n~~~", []),
        ("````\n```\n/parity rerun\n````", []),
        ("```\n/parity rerun", []),
        ("    /parity rerun", []),
        ("\t/parity rerun", []),
        ("```\nexample\n```\n/parity rerun", [RERUN]),
        ("~~~\n```\n~~~\n/parity rerun", [RERUN]),
        ("> quoted\n\n/parity rerun", [RERUN]),
        # An inline code span with backticks in the info string is not a fence opener.
        ("``` a ` b\n/parity rerun", [RERUN]),
        ("", []),
        ("nothing to see", []),
    ],
)
def test_parse(body: str, expected: list[ParsedCommand]) -> None:
    assert parse_commands(body) == expected


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("/parity", "no subcommand given"),
        ("/parity rebuild", "unknown subcommand 'rebuild'"),
        ("/parity cancel now", "`cancel` takes no arguments"),
        ("/parity rerun please", "`rerun` does not understand 'please'"),
        ("/parity rerun rows=", "`rows=` needs comma-separated row ids"),
        ("/parity rerun rows=Bad_Row", "`rows=` needs comma-separated row ids"),
        ("/parity rerun rows=a rows=b", "`rerun` does not understand 'rows=b'"),
        ("/parity rerun sha=xyz", "`sha=` needs 7 to 40 hex digits"),
        ("/parity rerun sha=abc", "`sha=` needs 7 to 40 hex digits"),
    ],
)
def test_unknown(line: str, reason: str) -> None:
    [found] = parse_commands(line)
    assert isinstance(found, UnknownCommand)
    assert found.line == line
    assert found.reason.startswith(reason)


def test_every_command_line_in_order() -> None:
    found = parse_commands("/parity status\ntext\n/parity nope\n/parity rerun")
    assert [type(c).__name__ for c in found] == ["ParsedCommand", "UnknownCommand", "ParsedCommand"]


def test_custom_command_word() -> None:
    assert parse_commands("/bench rerun", command_word="/bench") == [ParsedCommand("rerun", line="/bench rerun")]
    assert parse_commands("/parity rerun", command_word="/bench") == []


def test_commands_describe_themselves() -> None:
    """The help is generated from COMMANDS, so every command the parser accepts has its entry."""
    assert [spec.name for spec in COMMANDS] == ["rerun", "profile", "bisect", "accept", "cancel", "status", "help"]
    for spec in COMMANDS:
        assert spec.usage.startswith(spec.name) and spec.description and spec.who
        [parsed] = parse_commands(f"/parity {spec.example}")
        assert isinstance(parsed, ParsedCommand) and parsed.name == spec.name


@pytest.mark.parametrize(
    "body",
    [
        # HTML comments render as nothing, on one line or across several, closed or not.
        "<!-- /parity rerun -->",
        "<!--\n/parity rerun\n-->",
        "LGTM <!--\n/parity rerun\n-->",
        "<!-- x -->/parity rerun",
        "<!--\n/parity rerun",
        # <details> is folded away by default, however it is nested or spelled.
        "<details>\n/parity rerun\n</details>",
        "<details><summary>logs</summary>\n\n/parity rerun\n\n</details>",
        "<DETAILS open>\n\n/parity rerun\n</DETAILS>",
        "<details>\n<details>\n</details>\n/parity rerun\n</details>",
        "<details>x</details>/parity rerun",
        "<details>\n/parity rerun",
        # Any other HTML block: raw HTML until a blank line (or its closing tag for <pre>, <script>, …).
        "<div>\n/parity rerun\n</div>",
        '<p align="center">\n/parity rerun',
        "<img src=x>\n/parity rerun",
        "<pre>\n\n/parity rerun\n\n</pre>",
        "<?php\n/parity rerun",
        # A line after a closed <details> in the same HTML block is still raw HTML (the block ends at a blank line).
        "<details>\nlogs\n</details>\n/parity rerun",
    ],
)
def test_commands_hidden_in_html_are_ignored(body: str) -> None:
    assert parse_commands(body) == []


@pytest.mark.parametrize(
    "body",
    [
        "<!-- note -->\n/parity rerun",
        "/parity rerun <!-- because the runner was lost -->",
        "<details>\nlogs\n</details>\n\n/parity rerun",
        "<div>html</div>\n\n/parity rerun",
        "<pre>\nx\n</pre>\n\n/parity rerun",
        "a < b and\n/parity rerun",
        # A declaration's HTML block ends at its `>` (CommonMark kind 4): the next line is a paragraph.
        "<!DOCTYPE html>\n/parity rerun",
    ],
)
def test_visible_commands_next_to_html_still_count(body: str) -> None:
    assert parse_commands(body) == [RERUN]


def test_profile_takes_rows_and_a_full_sha_like_rerun() -> None:
    head = "0123456789abcdef0123456789abcdef01234567"
    [command] = parse_commands(f"/parity profile rows=vllm-agg sha={head}")
    assert isinstance(command, ParsedCommand)
    assert (command.name, command.rows, command.sha) == ("profile", ("vllm-agg",), head)
    [unknown] = parse_commands("/parity profile now")
    assert isinstance(unknown, UnknownCommand) and "`profile` does not understand 'now'" in unknown.reason


def test_the_approval_command_parses_back_to_exactly_that_head_and_refuses_a_prefix() -> None:
    head = "0123456789abcdef0123456789abcdef01234567"
    [command] = parse_commands(approval_command("/parity", head))
    assert isinstance(command, ParsedCommand) and (command.name, command.sha) == ("rerun", head)
    with pytest.raises(ValueError, match="full 40-hex SHA"):
        approval_command("/parity", head[:12])


@pytest.mark.parametrize(
    "body",
    [
        # The attack: a code span's `</details>` is text, so the <details> above stays open over the command.
        "<details>\n\n`</details>`\n\n/parity rerun\n\n</details>",
        "<details><summary>logs</summary>\n\nsee `</details>` and ``</details>``\n\n/parity rerun",
        "<details>\n\n```\n</details>\n```\n\n/parity rerun",
        "<details>\n\n    </details>\n\n/parity rerun",
        "<details>\n\n<!-- </details> -->\n\n/parity rerun",
        # A browser ends a comment where CommonMark may not: an empty `<!-->`, or `--!>`.
        "<!--> <details>\n\n/parity rerun",
        "<!---> <details>\n\n/parity rerun",
        "a <!-- x --!> <details> -->\n\n/parity rerun",
        # Tags as a browser reads them: not inside an attribute value or a bogus comment; markup left open at the end
        # of an HTML block runs on over what follows.
        '<details>\n<img alt="</details>">\n\n/parity rerun',
        "<details>\n<img alt='\n\n</details>'>\n\n/parity rerun",
        "<details>\n<!DOCTYPE </details>\n\n/parity rerun",
        "<details>\n<?x </details>\n\n/parity rerun",
        '<div title="\n\n/parity rerun',
        "<details\n\n/parity rerun",
        "<div>\n<!-- open\n--!>\n<details>\n\n/parity rerun",
        "<details>\n\n\\</details>\n\n/parity rerun",
        # A <details> opened inside a paragraph, a list item or a quote folds what follows it too.
        "text <details>\n\n/parity rerun",
        "- item <details>\n\n/parity rerun",
        # Containers: a lazy continuation line belongs to the quote, a list item's text to the list.
        "> quoted\n/parity rerun",
        "- /parity rerun",
        "1. /parity rerun",
        "- [ ] task\n\n  /parity rerun",
        # Headings and table rows are not paragraph lines (a row needs no leading pipe after the delimiter row).
        "# /parity rerun",
        "/parity rerun\n---",
        "| a |\n| - |\n/parity rerun",
        # Inline markup is kept as written, so it never reads as the command word.
        "**/parity rerun**",
        "~~/parity rerun~~",
        "[/parity rerun](https://example.com)",
        "`a\nb` /parity rerun",
        # A line that began inside an inline HTML comment, or a comment left open for the rest of the comment.
        "LGTM <!-- x\n-->/parity rerun",
        "<!-- open\n\n/parity rerun",
        # Nested deeper than the tokenizer reads whole: nothing in the comment counts.
        "> " * 30 + "<details>\n\n/parity rerun",
    ],
)
def test_markdown_that_hides_shows_or_quotes_a_command_is_not_one(body: str) -> None:
    assert parse_commands(body) == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # A closed <details>, a code span's tag text, an HTML comment: what follows in prose is visible.
        ("<details>\n\n`x`\n\n</details>\n\n/parity rerun", [RERUN]),
        ("`<details>` is folded by default\n/parity rerun", [RERUN]),
        ("`<!--` opens a comment\n/parity rerun", [RERUN]),
        ("<details>\n\n> </details>\n\n/parity rerun", [RERUN]),
        ('<details title="a>b">\n\n</details title="x">\n\n/parity rerun', [RERUN]),
        ("<DETAILS>\n\n</Details >\n\n/parity rerun", [RERUN]),
        ("<details-card>\n\n/parity rerun", [RERUN]),
        ("a < b and <3\n\n<div>x</div>\n\n/parity rerun", [RERUN]),
        # A hard break ends a line as a soft one does; an indented line continues a paragraph (no code block).
        ("first line\\\n/parity rerun", [RERUN]),
        ("first line  \n/parity rerun", [RERUN]),
        ("LGTM\n    /parity rerun", [RERUN]),
        # A <details> folded mid-line hides its own text, not the words before it.
        ("/parity rerun <details>rows=a</details>", [RERUN]),
        ("/parity rerun <!-- rows=a -->", [RERUN]),
        ("/parity status <details>\n/parity rerun", [ParsedCommand(name="status", line="/parity status")]),
        # Markup after the command word is kept as written, so it is an argument the command refuses.
        (
            "/parity rerun `rows=a`",
            [UnknownCommand("/parity rerun `rows=a`", "`rerun` does not understand '`rows=a`'")],
        ),
        # Text a reader sees as the command word is the command word.
        ("\\/parity rerun", [RERUN]),
        ("&#47;parity rerun", [RERUN]),
    ],
)
def test_markdown_edge_cases_that_leave_a_visible_command(body: str, expected: list[ParsedCommand]) -> None:
    assert parse_commands(body) == expected
