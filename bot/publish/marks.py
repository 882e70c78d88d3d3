"""The verdict marks of the HTML pages as inline SVG: the Markdown surfaces (check runs, comments) keep their emoji,
which GitHub draws, but a browser without an emoji font (headless Chromium on these machines, many servers) shows
✅ or ❌ as an empty box. A mark is a 1em icon in the verdict's colour with its meaning as its accessible name, next
to the words that already say the verdict; nothing is fetched and no font is needed.
"""

from __future__ import annotations

import re

from markupsafe import Markup

_STROKE = 'fill="none" stroke="{colour}" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"'
_FILL = 'fill="{colour}" fill-rule="evenodd"'
PASS, FAIL, WARN, BLOCK, MUTED = "#1a7f37", "#cf222e", "#9a6700", "#8250df", "#59636e"

_SHAPES: dict[str, tuple[str, str, str, str]] = {
    # emoji: (name, colour, path, paint)
    "✅": ("pass", PASS, "M2.5 8.5l3.5 3.5 7.5-8", _STROKE),
    "☑": ("pass with verified exceptions", PASS, "M2 2h12v12H2z M4.5 8.2l2.4 2.4 4.6-4.8", _STROKE),
    "❌": ("fail", FAIL, "M3.5 3.5l9 9 M12.5 3.5l-9 9", _STROKE),
    "⚠": ("warning", WARN, "M8 1L15.5 14.5H.5z M7.1 5.5h1.8v4.6H7.1z M7.1 11.3h1.8v1.8H7.1z", _FILL),
    "⛔": ("blocked", BLOCK, "M8 1a7 7 0 1 0 0 14A7 7 0 1 0 8 1z M3.5 6.8h9v2.4h-9z", _FILL),
    "➖": ("not run", MUTED, "M3 8h10", _STROKE),
    "🔎": ("profile", MUTED, "M6.5 2a4.5 4.5 0 1 0 0 9a4.5 4.5 0 1 0 0-9z M10 10l4.5 4.5", _STROKE),
    "🚫": ("cancelled", MUTED, "M8 1.5a6.5 6.5 0 1 0 0 13a6.5 6.5 0 1 0 0-13z M3.4 3.4l9.2 9.2", _STROKE),
    "⏭": ("superseded", MUTED, "M2 3l6 5-6 5z M8 3l6 5-6 5z M14.5 3v10", _STROKE),
    "⌛": ("timed out", WARN, "M3.5 1.5h9 M3.5 14.5h9 M4.5 1.5c0 4 7 4.5 7 6.5s-7 2.5-7 6.5 M11.5 1.5c0 4-7 4.5-7 "
                                "6.5s7 2.5 7 6.5", _STROKE),
    "💥": ("errored", FAIL, "M8 .5l1.8 4.2 4.4-1.6-2.1 4.1 3.4 3-4.5.3.4 4.5L8 12.3 4.6 15l.4-4.5-4.5-.3 3.4-3-2.1-4.1 "
                           "4.4 1.6z", _FILL),
}
_EMOJI = re.compile("(" + "|".join(re.escape(emoji) for emoji in _SHAPES) + ")\ufe0f?")


def mark(emoji: str) -> Markup:
    """The inline SVG standing for one of the verdict emoji (`_SHAPES`)."""
    name, colour, path, paint = _SHAPES[emoji]
    return Markup(
        f'<svg class="mark" viewBox="0 0 16 16" width="1em" height="1em" role="img" aria-label="{name}">'
        f'<title>{name}</title><path d="{path}" {paint.format(colour=colour)}/></svg>'
    )


_TAG = re.compile(r"(<[^>]*>)")
_RAW_TEXT = {"title", "style"}
"""Elements whose content is text, never markup: an emoji there stays as it is."""


def with_marks(document: str) -> str:
    """The page with each verdict emoji (and its emoji variation selector) in its text replaced by its mark.

    Only text between tags is touched: an autoescaped page has no `<` or `>` in any text or attribute value (both
    are escaped), so splitting at tags finds every text run and never enters a tag or an attribute; the text of
    `title` and `style` is left alone."""
    parts = _TAG.split(document)
    inside: str | None = None
    for index, part in enumerate(parts):
        if index % 2:
            name = part[1:].split(maxsplit=1)[0].rstrip(">").lower() if len(part) > 2 else ""
            if name in _RAW_TEXT:
                inside = name
            elif inside is not None and name == f"/{inside}":
                inside = None
        elif inside is None and part:
            parts[index] = _EMOJI.sub(lambda match: str(mark(match.group(1))), part)
    return "".join(parts)
