"""The documentation says what the code does: tables that name code (subcommands, comment commands, settings,
report fields, SQLite tables) are compared with the code itself, and every relative link leads somewhere.

The README stays short enough to read in five minutes; everything else lives in docs/.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
from pathlib import Path

import pytest
from pydantic import BaseModel

from bot.cli.main import build_parser
from bot.core.commands import COMMANDS
from bot.settings import Settings
from bot.store.campaigns import Store
from runners.pipeline.slurm import SlurmOptions
from runners.schema.report import CampaignReport, RowReport
from tests.installed import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
SCHEMA = ROOT / "bot" / "store" / "SCHEMA.md"
MARKDOWN = [README, SCHEMA, *sorted(DOCS.glob("*.md"))]
README_MAX_LINES = 150

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]+`")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose(text: str) -> str:
    """The text with fenced blocks, indented code blocks and code spans removed: links there are not links."""
    text = _FENCE.sub("", text)
    text = "\n".join(line for line in text.splitlines() if not line.startswith("    ") or line.lstrip()[:1] in "-*|")
    return _CODE_SPAN.sub("", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    plain = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", plain.lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in _FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = _HEADING.match(line)
        if match:
            slug = _slug(match.group(2))
            n = 0
            while (candidate := slug if n == 0 else f"{slug}-{n}") in found:
                n += 1
            found.add(candidate)
    return found


def _section(path: Path, heading: str) -> list[str]:
    """The lines under `heading` up to the next heading of the same or a higher level."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        match = _HEADING.match(line)
        if match and match.group(2) == heading:
            level = len(match.group(1))
            body = []
            for following in lines[index + 1 :]:
                found = _HEADING.match(following)
                if found and len(found.group(1)) <= level:
                    break
                body.append(following)
            return body
    raise AssertionError(f"{path.relative_to(ROOT)} has no heading {heading!r}")


def _table(lines: list[str]) -> list[list[str]]:
    """The cells of every body row of the Markdown tables in `lines` (header and separator rows left out)."""
    rows: list[list[str]] = []
    previous_was_table = False
    for line in lines:
        stripped = line.strip()
        if not stripped.startswith("|"):
            previous_was_table = False
            continue
        cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", stripped.strip("|"))]
        if not previous_was_table or set("".join(cells)) <= set("-: "):
            previous_was_table = True
            continue
        rows.append(cells)
    return rows


def _names(cell: str) -> list[str]:
    """The code spans of a table cell: `a`, `b` names two things."""
    return [span.strip("`") for span in _CODE_SPAN.findall(cell)]


def _subcommands() -> dict[str, str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {action.dest: str(action.help) for action in sub._choices_actions}


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_the_readme_lists_exactly_the_cli_subcommands_with_their_help() -> None:
    listed = {}
    for cells in _table(_section(README, "Commands")):
        (command,) = _names(cells[0])
        assert command.startswith("kv-parity "), f"README commands table: {cells[0]!r} is not a kv-parity command"
        listed[command.removeprefix("kv-parity ")] = cells[1]
    defined = _subcommands()
    differ = sorted(name for name in listed.keys() | defined.keys() if listed.get(name) != defined.get(name))
    assert not differ, f"README.md's commands table and bot/cli's parser differ for {differ}"


def test_the_command_reference_has_a_row_for_every_subcommand() -> None:
    documented = {
        name.split()[1]
        for cells in _table(_section(DOCS / "commands.md", "On the command line"))
        for name in _names(cells[0])
        if name.startswith("kv-parity ") and not name.startswith("kv-parity --")
    }
    assert documented == set(_subcommands()), f"docs/commands.md: {sorted(documented ^ set(_subcommands()))}"


def test_the_comment_commands_table_is_the_bots_own_help() -> None:
    rows = _table(_section(DOCS / "commands.md", "Comment commands"))
    assert [(_names(cells[0]), cells[1]) for cells in rows] == [
        ([f"/parity {spec.usage}"], spec.description) for spec in COMMANDS
    ]
    who = " ".join(_section(DOCS / "commands.md", "Comment commands")).split()
    for spec in COMMANDS:
        assert " ".join(spec.who.split()) in " ".join(who), f"docs/commands.md does not say who may use {spec.name}"


def _documented_keys(path: Path, heading: str) -> set[str]:
    lines = _section(path, heading)
    end = next((i for i, line in enumerate(lines) if _HEADING.match(line)), len(lines))
    return {name for cells in _table(lines[:end]) for name in _names(cells[0])}


@pytest.mark.parametrize(
    ("path", "heading", "model"),
    [
        (DOCS / "configuration.md", "Service settings reference", Settings),
        (DOCS / "configuration.md", "`[slurm]`", SlurmOptions),
        (DOCS / "report-schema.md", "Top-level fields", CampaignReport),
        (DOCS / "report-schema.md", "A row", RowReport),
    ],
    ids=["settings", "slurm", "report", "row"],
)
def test_a_reference_table_lists_exactly_the_models_fields(path: Path, heading: str, model: type[BaseModel]) -> None:
    documented = _documented_keys(path, heading)
    fields = set(model.model_fields)
    assert documented == fields, (
        f"{path.relative_to(ROOT)} '{heading}': missing {sorted(fields - documented)}, "
        f"not in {model.__name__} {sorted(documented - fields)}"
    )


def test_schema_md_describes_every_table_and_column_the_store_creates(tmp_path: Path) -> None:
    Store(tmp_path / "bot.sqlite3").close()
    db = sqlite3.connect(tmp_path / "bot.sqlite3")
    tables = {
        str(name): {str(row[1]) for row in db.execute(f"PRAGMA table_info({name})")}
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    }
    db.close()
    overview = _documented_keys(SCHEMA, "The service's SQLite database")
    assert overview == set(tables), "the overview table of bot/store/SCHEMA.md"
    described: set[str] = set()
    for line in SCHEMA.read_text(encoding="utf-8").splitlines():
        match = _HEADING.match(line)
        if not match or len(match.group(1)) != 2 or not match.group(2).startswith("`"):
            continue
        names = _names(match.group(2))
        described.update(names)
        columns = {column for cells in _table(_section(SCHEMA, match.group(2))) for column in _names(cells[0])}
        expected = set().union(*(tables[name] for name in names))
        assert columns == expected, (
            f"SCHEMA.md {match.group(2)}: missing {sorted(expected - columns)}, not in the database "
            f"{sorted(columns - expected)}"
        )
    assert described == set(tables), "every table has a section in bot/store/SCHEMA.md"


def _links() -> list[tuple[Path, str]]:
    return [(path, target) for path in MARKDOWN for target in _LINK.findall(_prose(path.read_text(encoding="utf-8")))]


def test_every_relative_link_resolves_to_a_file_and_its_heading() -> None:
    broken = []
    checked = 0
    for source, target in _links():
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        checked += 1
        file_part, _, anchor = target.partition("#")
        resolved = (source.parent / file_part).resolve() if file_part else source
        where = f"{source.relative_to(ROOT)} -> {target}"
        if not resolved.is_relative_to(ROOT) or not resolved.is_file():
            broken.append(f"{where}: no such file in the repository")
        elif anchor and (resolved.suffix != ".md" or anchor not in _anchors(resolved)):
            broken.append(f"{where}: no heading with that anchor")
    assert checked > 20, "the link finder found the documentation's links"
    assert not broken, "\n".join(broken)


def test_the_link_checker_sees_a_broken_link_and_anchor(tmp_path: Path) -> None:
    """The checker's own parts: a link is found outside code only, and an anchor is GitHub's slug."""
    text = "See [x](missing.md) and `[not](a-link.md)`.\n\n```\n[nor](this.md)\n```\n"
    assert _LINK.findall(_prose(text)) == ["missing.md"]
    page = tmp_path / "page.md"
    page.write_text("# Title\n## What the service recorded: `kv-parity history`\n## Title\n", encoding="utf-8")
    assert _anchors(page) == {"title", "what-the-service-recorded-kv-parity-history", "title-1"}


REPOSITORY_PATH = re.compile(r"\b(?:bot|runners|tests|templates|benchmarks|script)/[\w./-]+\.(?:py|md|j2|toml|svg)\b")


def test_every_repository_file_the_docs_name_exists() -> None:
    """A module moved or renamed shows up here, not in a newcomer's failed `open`."""
    named = {(path.relative_to(ROOT), match) for path in MARKDOWN
             for match in REPOSITORY_PATH.findall(path.read_text(encoding="utf-8"))}
    assert named, "the pattern found no file names at all"
    assert sorted((str(doc), name) for doc, name in named if not (ROOT / name).exists()) == []
