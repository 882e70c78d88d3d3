"""Markdown that renders literally whatever it is given, and the formats every surface shares.

Text the bot did not write (branch names, reasons, logins, output of the code under test) is escaped so it
neither formats, links, breaks a table nor notifies anyone; numbers, SHAs and times read the same on the check
run, the comments, report.md and report.html.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

ICONS: dict[str, str] = {
    "PASS": "✅",
    "PASS_WITH_SEMANTIC_EXCEPTIONS": "☑️",
    "FAIL": "❌",
    "INCONCLUSIVE": "⚠️",
    "BLOCKED": "⛔",
    "NOT_RUN": "➖",
    "STOPPED": "⛔",
    "UNSUPPORTED": "➖",
}


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")


_MD_LINE_START = re.compile(r"^(?:[#+-]|\d{1,9}(?=[.)]))(?=[.)]?(?:\s|$))")


def _escape(text: str, line_start: bool) -> str:
    text = _MD_SPECIAL.sub(r"\\\1", text)
    if line_start:
        text = _MD_LINE_START.sub(
            lambda m: m.group(0) + "\\" if m.group(0)[0].isdigit() else "\\" + m.group(0), text
        )
    return defuse(text)


_MENTION = re.compile(r"@(?=[A-Za-z0-9])")


_REFERENCE = re.compile(r"(#|\bGH-)(?=\d)", re.IGNORECASE)


def defuse(text: str) -> str:
    """Break every `@mention` and `#123` / `owner/repo#1` / `GH-1` reference with a zero-width space.

    Whatever precedes the `@` (another `@`, a letter like `é`, punctuation, the line start), GitHub may read
    a mention there, so every `@` followed by a login character is defused; e-mail addresses lose their
    autolink, which is the price of never notifying anyone from text the bot did not write.
    """
    text = _MENTION.sub("@\u200b", text)
    return _REFERENCE.sub(lambda m: m.group(1) + "\u200b", text)


def md(value: object) -> str:
    """Escape user-controlled text (branch names, reasons, logins) so it renders literally, on one line.

    Backslash-escapes the characters that format, link, open HTML or split a table cell anywhere in a line,
    plus those that start a block at the beginning, and defuses `@mentions` and `#123` references, so a
    branch named `**x**|<img>` or `@team` neither formats, breaks a table nor notifies anyone.
    """
    return _escape(" ".join(str(value).split()), line_start=True)


_CODE_SPAN = re.compile(r"(`[^`]+`)")


def prose(value: object) -> str:
    """Escape a bot-composed reason like `md`, but keep its `code spans` (they render literally anyway)."""
    parts = _CODE_SPAN.split(" ".join(str(value).split()))
    return "".join(
        code(part[1:-1]) if index % 2 else _escape(part, line_start=index == 0)
        for index, part in enumerate(parts)
    )


def code(value: object, table: bool = True) -> str:
    """An inline code span that survives any content: the fence outgrows inner backticks.

    In a table cell a pipe must be escaped even inside code; outside tables (`table=False`) the backslash
    would show, so it is left alone.
    """
    text = " ".join(str(value).split())
    if table:
        text = text.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def block(value: object) -> str:
    """A fenced block for multi-line text (config errors, stderr tails) that the text cannot close early."""
    text = str(value).rstrip("\n")
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (longest + 1)
    return f"{fence}text\n{text}\n{fence}"


UNPINNED = "(not pinned)"
"""Shown for a revision the campaign stopped before pinning (the stop reason says why)."""


def short(sha: str | None) -> str:
    return (sha or "")[:7] if sha != UNPINNED else UNPINNED


def ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def pct(value: float) -> str:
    """A signed percentage with a real minus sign, e.g. `+0.4%` or `−1.2%`."""
    return f"{value * 100:+.1f}%".replace("-", "−")


def count(value: int) -> str:
    return f"{value:,}"


def when(value: object) -> str:
    """A timestamp (unix seconds or datetime) as `YYYY-MM-DD HH:MM UTC`; '—' when unknown."""
    if value is None:
        return "—"
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
    elif isinstance(value, int | float):
        moment = datetime.fromtimestamp(float(value), UTC)
    else:
        return md(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def duration(seconds: float | None) -> str:
    """A human ETA: `45 s`, `6 min`, `1 h 20 min`."""
    if seconds is None:
        return "—"
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{round(seconds)} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def plural(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def icon(verdict: object) -> str:
    return ICONS.get(str(verdict), "")


def sentence(text: str) -> str:
    """Close a reason with a full stop unless it already ends a sentence."""
    return "" if text.rstrip().endswith((".", "!", "?", ")")) else "."


_SAFE_URL = re.compile(r"^https?://[^\s()<>\[\]`]+$")


def link(label: str, url: object) -> str:
    """A Markdown link when `url` is a plain http(s) URL, else the label alone (a URL is never made to break out)."""
    return f"[{label}]({url})" if isinstance(url, str) and _SAFE_URL.match(url) else label


def covered_label(covered: Sequence[str]) -> str:
    """What an acceptance covers: `the size gate`, or the rows as code."""
    return ", ".join("the size gate" if item == "sizes" else code(item) for item in covered)


def rows_label(rows: Sequence[str] | None) -> str:
    return ", ".join(rows) if rows else "every row"
