"""Comment commands (`/parity rerun [rows=a,b] [sha=<head>]`, `profile`, `bisect`, `accept`, `cancel`, `status`,
`help`): a pure parser.

A command counts only when it stands on its own line of a top-level paragraph, found by a CommonMark tokenizer
(markdown-it-py, with GitHub's tables), never by guessing at lines. Code spans, indented and fenced code blocks,
`>` quotes, lists, headings and tables show or quote a command, they do not ask for one; HTML blocks, HTML
comments and everything inside `<details>` (folded away by default) is not what readers see, so a command hidden
there would act behind everyone's back. A `<details>` opens and closes only where the tokenizer found raw HTML: a
`` `</details>` `` in a code span is text and unfolds nothing. The rules err towards ignoring: a comment nested
too deep for the tokenizer to see whole counts no command. The help text is generated from `COMMANDS`, so the
documentation cannot drift from what the parser accepts.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runners.schema.config import parse_rows

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

ROW_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
"""Same shape as `runners.schema.config.RowConfig.id`; whether the row exists is checked against the base config."""
SHA_PREFIX = re.compile(r"^[0-9a-f]{7,40}$")
"""What `sha=` parses; approving a head takes all 40 digits (checked against the head, whose full SHA the refusal
then gives), so a prefix shared by another commit can never approve it."""
FULL_SHA = re.compile(r"^[0-9a-f]{40}$")


def approval_command(command_word: str, head_sha: str) -> str:
    """The comment that approves exactly this head. Every hint the bot writes names the head through this
    function, so what it tells a maintainer to comment is always a command it accepts (all 40 hex digits)."""
    if not FULL_SHA.match(head_sha):
        raise ValueError(f"a head is named by its full 40-hex SHA, got {head_sha!r}")
    return f"{command_word} rerun sha={head_sha}"


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
        usage="rerun [rows=a,b] [sha=<full 40-hex head sha>]",
        description=(
            "Start a new campaign for the pull request's current head against its merge base (replacing a "
            "queued or running one for the same rows), optionally only for the named rows of the base "
            "branch's config. `sha=` makes the request apply only if the head is still that commit; for a "
            "pull request from a fork it approves exactly that head. Without `sha=`, a fork's head is "
            "approved only if it was the head when the comment was written and no other head was seen since "
            "(Actions-only mode keeps no record of heads: there a fork needs `sha=`)."
        ),
        who="collaborators with at least the configured permission (default write)",
        example="rerun rows=vllm-disagg,sglang-disagg",
    ),
    CommandSpec(
        name="profile",
        usage="profile [rows=a,b] [sha=<full 40-hex head sha>]",
        description=(
            "Check correctness of the current head like a campaign, then attribute where its time goes instead of "
            "sampling: work counters, exact per-function instruction counts, cpu-clock stacks and flame graphs of "
            "both revisions on each row's pinned CPU. A failing performance gate runs this by itself; ask for it "
            "to look before one does. `rows=` and `sha=` work as for `rerun`."
        ),
        who="collaborators with at least the configured permission (default write)",
        example="profile rows=vllm-disagg",
    ),
    CommandSpec(
        name="bisect",
        usage="bisect",
        description=(
            "After this pull request's campaign FAILed on a head of two or more commits, find the first commit that "
            "FAILs: each probe is a campaign of one commit against the merge base under the same config, by binary "
            "search over the first-parent commits (an undecided probe is rerun once, then the narrowest decided "
            "range is reported). The result is posted here and on the check run `kv-parity / bisect`."
        ),
        who="collaborators with at least the configured permission (default write)",
        example="bisect",
    ),
    CommandSpec(
        name="accept",
        usage="accept perf [rows=a,b] max=<ratio> <reason> · accept size max=<percent>% <reason> · accept revoke",
        description=(
            "Accept an intended slowdown or size growth of the current head, with the reason on the same line: "
            "the latest finished campaign of this head (and any rerun of it) passes if every performance FAIL "
            "(of the named rows) has an upper bound at most `max` (a ratio, e.g. 1.10), or the size growth is at "
            "most `max` percent; a FAIL above it stays a failure. A semantic FAIL is never accepted (it needs a "
            "semantic exception record), nor an inconclusive or blocked result (rerun it). A new push ends the "
            "acceptance. `revoke` withdraws this head's acceptances."
        ),
        who="collaborators with the base branch config's `[checks] accept_permission` (default maintain)",
        example="accept perf max=1.10 the new admission pass is intended",
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


ACCEPT_GATES = {"perf": "performance", "performance": "performance", "size": "sizes", "sizes": "sizes"}
"""The words `accept` takes for each gate it may accept."""
MAX_ACCEPT_RATIO = 10.0
MAX_ACCEPT_PERCENT = 1000.0
ACCEPT_REASON_LIMIT = 300
"""Characters of an acceptance's reason: it is shown on the check run's one-line title."""
_RATIO = re.compile(r"^(?:\d+(?:\.\d*)?|\.\d+)$")


@dataclass(frozen=True)
class AcceptArgs:
    """`accept perf|size ... max=... <reason>` or `accept revoke`: what is accepted, up to where, and why."""

    gate: str | None
    """`performance` or `sizes`; None for `revoke`."""
    rows: tuple[str, ...] | None
    max: float | None
    """performance: a ratio (1.10); sizes: a growth fraction (0.08 for `max=8%`)."""
    reason: str

    @property
    def revoke(self) -> bool:
        return self.gate is None


@dataclass(frozen=True)
class ParsedCommand:
    """A recognised command line; `rows` None means every row of the config."""

    name: str
    rows: tuple[str, ...] | None = None
    sha: str | None = None
    line: str = ""
    accept: AcceptArgs | None = None
    """Set for `accept`."""


@dataclass(frozen=True)
class UnknownCommand:
    """A line addressed to the bot that is not a valid command; answered with the help."""

    line: str
    reason: str


_HTML_MARKUP = re.compile(
    r"<!--(?:-?>|.*?--!?>)"  # a comment as a browser ends it: `<!-->` and `<!--->` are empty, `--!>` closes one
    r"|<[!?][^>]*>|</(?![A-Za-z])[^>]*>"  # what a browser reads as a bogus comment (<!DOCTYPE, <?php, </ x>)
    r"""|<(/?)([A-Za-z][^\s/>]*)(?:[^>"']|"[^"]*"|'[^']*')*>""",  # a tag, its quoted attribute values included
    re.DOTALL,
)
"""Raw HTML as a browser's tokenizer reads it, so a `</details>` inside a comment or an attribute value is no tag."""
_MARKUP_START = re.compile(r"<(?:[!?]|/?[A-Za-z])")
"""Where markup starts: one that `_HTML_MARKUP` cannot close runs on into what follows, hidden."""
_TO_THE_END = 1 << 30
"""A `<details>` depth nothing closes again: raw HTML left open (a tag, quote or comment) swallows the rest."""
_LINE_BREAKS = ("softbreak", "hardbreak")
_MARKUP = {"link_open": "[", "link_close": "]", "image": "![]"}
"""Inline tokens whose markup markdown-it leaves empty, written as they start in the source, so a link or image
never reads as plain words (emphasis, strikethrough and code keep their own markup)."""
_NESTING = 20
"""markdown-it's `maxNesting`: a block nested this deep is dropped from the tokens, unseen; a comment that reaches
it is not read for commands at all (a `<details>` it held would otherwise be missed)."""


@functools.cache
def _markdown() -> MarkdownIt:
    """CommonMark as GitHub extends it where that changes what is prose: tables (a row is not a paragraph line)
    and strikethrough."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"maxNesting": _NESTING}).enable(["table", "strikethrough"])


def _details_depth(html: str, depth: int) -> int:
    """The number of `<details>` open after raw HTML, its tags found as a browser finds them, however spelled (a
    closing tag with none open is ignored, as a browser ignores it). Markup left open at the end (an unclosed tag,
    attribute value or comment) runs on over whatever follows, so it hides the rest of the comment."""
    position = html.find("<")
    while position >= 0:
        markup = _HTML_MARKUP.match(html, position)
        if markup is None:
            if _MARKUP_START.match(html, position):
                return _TO_THE_END
            position = html.find("<", position + 1)
            continue
        if (markup.group(2) or "").lower() == "details":
            depth = max(depth - 1, 0) if markup.group(1) else depth + 1
        position = html.find("<", markup.end())
    return depth


def _deepest(tokens: list[Token]) -> int:
    return max((max(token.level, _deepest(token.children or [])) for token in tokens), default=0)


def _prose_lines(body: str) -> list[str]:
    """The lines of the comment's top-level paragraphs outside any `<details>`, as a reader sees them: HTML
    comments removed, code spans and other inline markup kept as written (so they never read as plain words)."""
    tokens = _markdown().parse(body)
    if _deepest(tokens) >= _NESTING - 1:
        return []
    lines: list[str] = []
    depth = 0
    for index, token in enumerate(tokens):
        if token.type == "html_block":
            depth = _details_depth(token.content, depth)
        if token.type != "inline":
            continue
        prose = index > 0 and tokens[index - 1].type == "paragraph_open" and tokens[index - 1].level == 0
        parts: list[str] | None = [] if depth == 0 else None  # None: this line started hidden
        for child in token.children or []:
            if child.type in _LINE_BREAKS:
                if prose and parts is not None:
                    lines.append("".join(parts).strip())
                parts = [] if depth == 0 else None
                continue
            shown = depth == 0
            if child.type == "html_inline":
                depth = _details_depth(child.content, depth)
                text = child.content if shown and depth == 0 and not child.content.startswith("<!--") else " "
            elif child.type == "code_inline":
                text = f"{child.markup}{child.content}{child.markup}"
            else:
                text = child.content if child.type == "text" else _MARKUP.get(child.type, child.markup)
            if shown and parts is not None:
                parts.append(text)
        if prose and parts is not None:
            lines.append("".join(parts).strip())
    return [line for line in lines if line]


def _parse_rows(value: str) -> tuple[str, ...]:
    names = tuple(parse_rows(value) or ())
    bad = [part for part in names if not ROW_ID.match(part)]
    if not names or bad:
        raise ValueError(f"`rows=` needs comma-separated row ids, got {value!r}")
    return tuple(dict.fromkeys(names))


def _parse_accept(args: list[str]) -> AcceptArgs:
    """`perf [rows=a,b] max=<ratio> <reason>`, `size max=<percent>% <reason>` or `revoke [<reason>]`; a
    ValueError says what is missing or wrong."""
    usage = "`accept perf [rows=a,b] max=<ratio> <reason>`, `accept size max=<percent>% <reason>` or `accept revoke`"
    if not args:
        raise ValueError(f"`accept` needs what to accept: {usage}")
    word = args[0].lower()
    if word == "revoke":
        return AcceptArgs(gate=None, rows=None, max=None, reason=" ".join(args[1:])[:ACCEPT_REASON_LIMIT])
    gate = ACCEPT_GATES.get(word)
    if gate is None:
        raise ValueError(f"`accept` takes `perf`, `size` or `revoke`, got {args[0]!r}: {usage}")
    rows: tuple[str, ...] | None = None
    limit: float | None = None
    rest = args[1:]
    while rest and "=" in rest[0] and limit is None:
        key, _, value = rest.pop(0).partition("=")
        if key == "rows" and gate == "performance" and rows is None:
            rows = _parse_rows(value)
        elif key == "max":
            limit = _accept_max(gate, value)
        else:
            raise ValueError(f"`accept {word}` does not understand {key + '=' + value!r}: {usage}")
    if limit is None:
        example = "max=1.10" if gate == "performance" else "max=8%"
        raise ValueError(f"`accept {word}` needs the largest accepted {'ratio' if gate == 'performance' else 'growth'} "
                         f"before the reason (`{example}`)")
    reason = " ".join(rest)
    if not reason:
        raise ValueError(f"`accept {word}` needs a reason after `max=`: the rest of the line says why it is intended")
    if len(reason) > ACCEPT_REASON_LIMIT:
        raise ValueError(f"the reason is {len(reason)} characters; at most {ACCEPT_REASON_LIMIT} fit on the check run")
    return AcceptArgs(gate=gate, rows=rows, max=limit, reason=reason)


def _accept_max(gate: str, value: str) -> float:
    if gate == "performance":
        if not _RATIO.match(value) or not 1.0 < float(value) <= MAX_ACCEPT_RATIO:
            raise ValueError(
                f"`max=` of `accept perf` is a candidate / baseline ratio above 1 and at most {MAX_ACCEPT_RATIO:g} "
                f"(e.g. `max=1.10`), got {value!r}"
            )
        return float(value)
    number = value[:-1] if value.endswith("%") else ""
    if not _RATIO.match(number) or not 0.0 < float(number) <= MAX_ACCEPT_PERCENT:
        raise ValueError(
            f"`max=` of `accept size` is a growth in percent above 0 and at most {MAX_ACCEPT_PERCENT:g}, with its `%` "
            f"(e.g. `max=8%`), got {value!r}"
        )
    return float(number) / 100


def _parse_line(words: list[str], line: str) -> ParsedCommand | UnknownCommand:
    if not words:
        return UnknownCommand(line, "no subcommand given")
    name, args = words[0].lower(), words[1:]
    if name not in COMMAND_NAMES:
        return UnknownCommand(line, f"unknown subcommand {words[0]!r}")
    if name == "accept":
        try:
            return ParsedCommand(name=name, line=line, accept=_parse_accept(args))
        except ValueError as exc:
            return UnknownCommand(line, str(exc))
    if name not in ("rerun", "profile"):
        if args:
            return UnknownCommand(line, f"`{name}` takes no arguments, got {' '.join(args)!r}")
        return ParsedCommand(name=name, line=line)
    rows: tuple[str, ...] | None = None
    sha: str | None = None
    for arg in args:
        key, sep, value = arg.partition("=")
        if key == "rows" and sep and rows is None:
            try:
                rows = _parse_rows(value)
            except ValueError as exc:
                return UnknownCommand(line, str(exc))
        elif key == "sha" and sep and sha is None:
            if not SHA_PREFIX.match(value.lower()):
                return UnknownCommand(line, f"`sha=` needs 7 to 40 hex digits, got {value!r}")
            sha = value.lower()
        else:
            return UnknownCommand(line, f"`{name}` does not understand {arg!r}")
    return ParsedCommand(name=name, rows=rows, sha=sha, line=line)


def parse_commands(body: str, command_word: str = "/parity") -> list[ParsedCommand | UnknownCommand]:
    """Every line of prose that starts with the command word, parsed in comment order."""
    found: list[ParsedCommand | UnknownCommand] = []
    for line in _prose_lines(body):
        words = line.split()
        if words and words[0] == command_word:
            found.append(_parse_line(words[1:], line))
    return found
