"""GitHub's size limits, and Markdown cut to fit them at a line outside any code fence."""

from __future__ import annotations

import re

CHECK_TEXT_LIMIT = 65_535
"""GitHub's limit for a check run's output.summary and output.text."""


COMMENT_LIMIT = 65_536
"""GitHub's limit for an issue comment body."""


TITLE_LIMIT = 255
"""GitHub documents no limit for output.title; 255 keeps it on one line everywhere it is shown."""


def utf8_size(text: str) -> int:
    """Length as GitHub's limits count it, measured in UTF-8 bytes so multi-byte text can never overflow."""
    return len(text.encode("utf-8"))


def trim_markdown(text: str, limit: int, pointer: str) -> str:
    """Cut `text` to `limit` at a line outside any code fence and append `pointer` (to the full report).

    Cutting inside a fence would turn the rest of the page into code, so the cut backs up to the last line
    where no fence is open.
    """
    if utf8_size(text) <= limit:
        return text
    note = f"\n\n---\n✂️ {pointer}\n"
    budget = limit - utf8_size(note)
    kept: list[str] = []
    used = 0
    last_safe = 0
    fence: str | None = None
    for line in text.split("\n"):
        cost = utf8_size(line) + 1
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
        match = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if match:
            marker = match.group(1)
            if fence is None:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = None
        if fence is None:
            last_safe = len(kept)
    return "\n".join(kept[:last_safe]).rstrip("\n") + note


def title_line(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis (a check run's title)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
