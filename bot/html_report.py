"""report.html: the campaign report as a page people look at (verdicts, tables, inline SVG charts).

A separate Jinja2 environment from bot/render.py's Markdown one, with autoescape on: every string of a report
came back from jobs that ran pull-request code, so nothing reaches the page unescaped. The page is
self-contained (no script, no fetch, CSS inline, charts as inline SVG from bot/svg.py) and readable on a
phone; the service's pages extend the same base (`templates/_page.html.j2`) through `page`.
"""

from __future__ import annotations

import re

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from bot.render import TEMPLATES_DIR

_PUNCTUATION = re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_INLINE = re.compile(rf"\\([{_PUNCTUATION}])|(`+)")


def inline(markdown: str) -> Markup:
    """HTML for one line of bot/render.py's cell Markdown (backslash escapes and `code spans` only).

    The Markdown cells (`row_views`, `_gate_lines`, `prose`) are reused so the page says exactly what the
    check run says; their text is escaped for HTML after the Markdown escapes are undone, so no input can
    produce a tag. Code spans follow CommonMark: a run of N backticks closes at the next run of exactly N.
    """
    out: list[str] = []
    position = 0
    text = markdown
    while True:
        match = _INLINE.search(text, position)
        if match is None:
            out.append(str(escape(text[position:])))
            break
        out.append(str(escape(text[position : match.start()])))
        if match.group(1) is not None:
            out.append(str(escape(match.group(1))))
            position = match.end()
            continue
        fence = match.group(2)
        closing = re.compile(rf"(?<!`){fence}(?!`)")
        end = closing.search(text, match.end())
        if end is None:
            out.append(str(escape(fence)))
            position = match.end()
            continue
        content = text[match.end() : end.start()].replace("\\|", "|")
        if content.startswith(" ") and content.endswith(" ") and content.strip():
            content = content[1:-1]
        out.append(f"<code>{escape(content)}</code>")
        position = end.end()
    return Markup("".join(out))


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES_DIR),
        undefined=StrictUndefined,
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(inline=inline)
    return env


ENV = _environment()

_PAGE = ENV.from_string(
    '{% extends "_page.html.j2" %}{% block title %}{{ title }}{% endblock %}'
    "{% block content %}{{ body }}{% endblock %}"
)


def page(title: str, body_html: Markup) -> str:
    """A complete page in the shared base: `title` is escaped, `body_html` is inserted as the caller built it
    (build it with `markupsafe.escape`/`Markup` or this module's templates, never from raw input)."""
    return _PAGE.render(title=title, body=body_html)
