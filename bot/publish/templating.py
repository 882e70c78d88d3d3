"""The templates' Jinja environments, set up once: the Markdown one that every GitHub surface and report.md render
through (`MARKDOWN`, `render_markdown`), and the HTML one `bot.publish.html_report` builds on (`environment(html=True)`,
autoescaped: every string of a report came back from jobs that ran pull-request code). Both load templates/
strictly (an undefined name is an error, never an empty string) and share the number formats and the report's
predicates.
"""

from __future__ import annotations

import re
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from bot.publish.markdown import (
    block,
    code,
    count,
    covered_label,
    duration,
    icon,
    link,
    md,
    pct,
    plural,
    prose,
    ratio,
    rows_label,
    sentence,
    short,
    when,
)
from bot.publish.views import diagnostics_breached
from bot.publish.wording import first_line, relationship, state_label
from runners.resources import package_dir
from runners.schema.report import KERNEL_CLOCK_LABELS, GateVerdict
from runners.schema.verdicts import instruction_change, instruction_contradiction

TEMPLATES_DIR = package_dir("kv_parity_templates")


def environment(*, html: bool) -> Environment:
    """A new environment over templates/ with what both kinds of page use: the number formats and the report's
    predicates. `html` escapes every value (report.html, the service's pages); Markdown escapes with its own
    filters (`md`, `code`, `prose`) and keeps a template's last newline."""
    env = Environment(
        loader=FileSystemLoader(TEMPLATES_DIR),
        undefined=StrictUndefined,
        autoescape=html,
        keep_trailing_newline=not html,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(ratio=ratio, pct=pct, count=count, when=when, short=short)
    env.globals.update(diagnostics_breached=diagnostics_breached, kernel_clocks=KERNEL_CLOCK_LABELS,
                       instruction_change=instruction_change, instruction_contradiction=instruction_contradiction)
    return env


def _markdown_environment() -> Environment:
    env = environment(html=False)
    env.filters.update(md=md, prose=prose, code=code, block=block, duration=duration, icon=icon, plural=plural,
                       rows_label=rows_label, state_label=state_label)
    env.globals.update(link=link, covered_label=covered_label, first_line=first_line, sentence=sentence,
                       relationship=relationship, GateVerdict=GateVerdict)
    return env


MARKDOWN = _markdown_environment()


def render_markdown(template: str, **context: Any) -> str:
    """A Markdown template rendered, runs of blank lines squeezed to one and the text ending in one newline."""
    text = MARKDOWN.get_template(template).render(**context)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n") + "\n"
