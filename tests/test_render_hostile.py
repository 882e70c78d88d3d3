"""Every rendered surface, fed hostile text in every string a report, campaign or command can carry.

A report.json comes back from jobs that ran pull-request code, and branch names, logins, reasons and
progress lines are chosen by whoever opens the pull request, so every string field is an attacker's. A
deterministic generator fills EVERY string field of a real report (and of the campaign view, the progress
view, the end reasons, the reply contexts and the prior attempts) with combinations of hostile fragments:
mentions in every position, issue and cross-repository references, raw HTML and `<details>`, Markdown
links and images, code fences and backticks, the bot's own hidden markers, table pipes and newlines. The
rendered Markdown, outside code spans and fenced blocks (where GitHub renders text literally), must contain
none of them in a live form.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel, ValidationError

from bot.core.attempts import PriorAttempt
from bot.core.campaign import Campaign, CampaignState
from bot.core.commands import COMMANDS
from bot.publish import markdown, render, wording
from bot.publish.views import Links, ProgressView
from runners.progress import ProgressEvent
from runners.schema.report import CampaignReport
from tests.report_factory import BASE_SHA, CAMPAIGN_ID, HEAD_SHA, OUTCOMES, make_report

FRAGMENTS = (
    "@mallory",
    "@@mallory",
    "@@octo-org/team",
    "é@mallory",
    "x@mallory",
    "(@mallory)",
    "\n@mallory",
    "#123",
    "octo-org/dynamo#1",
    "GH-77",
    "<img src=x onerror=alert(1)>",
    "<details open><summary>hidden</summary>",
    "</details>",
    "<!-- kv-parity:status -->",
    "<!-- kv-parity:result campaign=evil sha=0 -->",
    "[click](https://evil.example/x)",
    "![img](https://evil.example/p.png)",
    "```",
    "````suggestion",
    "`tick`",
    "~~~",
    "| pipe | cell |",
    "\n# INJECTED-H",
    "\n- INJECTED-L",
    "\n> INJECTED-Q",
    "\r\nINJECTED-N",
    "**bold**",
    "_em_",
    "&#64;mallory",
    "&lt;b&gt;",
    "1. INJECTED-O",
    "\\",
)


def hostile(index: int, round_: int) -> str:
    """A hostile string for one field: three fragments chosen by field and round, or all of them."""
    if round_ == 0:
        return "".join(FRAGMENTS)
    n = len(FRAGMENTS)
    picks = [FRAGMENTS[(index + round_) % n], FRAGMENTS[(index * 7 + round_ * 3) % n], FRAGMENTS[(index * 13 + 5) % n]]
    return picks[0] + picks[1] + " " + picks[2]


ROUNDS = range(4)
factory_report = functools.cache(make_report)


# --- hostile models --------------------------------------------------------------------------------------


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


M = TypeVar("M", bound=BaseModel)


def poisoned(model: M, round_: int) -> M:
    """`model` with every string field it will accept replaced by hostile text (the rest keep their value)."""
    data = model.model_dump(mode="python")
    original = dict(_leaves(data))
    below: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for index, path in enumerate(original):
        _set(data, path, hostile(index, round_))
        for cut in range(len(path) + 1):
            below.setdefault(path[:cut], []).append(path)
    for _ in range(20):
        try:
            return type(model).model_validate(data)
        except ValidationError as exc:
            for error in exc.errors():
                loc = tuple(error["loc"])
                # The leaf the error is about (its loc may name a union member after it), or all below it.
                leaf = next((loc[:cut] for cut in range(len(loc), 0, -1) if loc[:cut] in original), None)
                for path in [leaf] if leaf is not None else below.get(loc, []):
                    _set(data, path, original[path])
    raise AssertionError("could not build a valid hostile model")


def hostile_campaign(round_: int) -> Campaign:
    view = Campaign(
        id=CAMPAIGN_ID,
        repo="octo-org/dynamo",
        pr_number=512,
        head_sha=HEAD_SHA,
        base_sha=BASE_SHA,
        relationship="ancestor",
        rows=["vllm-disagg", "sglang-disagg"],
        state=CampaignState.RUNNING,
        requested_by="alice",
        trigger="comment",
        created_at=datetime(2025, 11, 29, 10, 0, tzinfo=UTC),
        deadline=datetime(2025, 11, 29, 16, 0, tzinfo=UTC),
        artifact_dir=None,
        queue_position=2,
        attempt=1,
        reason="",
        conclusion=None,
        config_source=f".github/kv-parity.toml @ {BASE_SHA}",
    )
    return poisoned(view, round_)


def hostile_attempts(round_: int) -> list[PriorAttempt]:
    attempt = PriorAttempt(
        campaign_id="c-1",
        head_sha=HEAD_SHA,
        state="completed",
        semantic="FAIL",
        performance="PASS",
        requested_by="alice",
        finished_unix=1764410400.0,
    )
    return [poisoned(attempt, round_), poisoned(attempt, round_ + 1)]


# --- what "defused" means ------------------------------------------------------------------------------

_CONTAINERS = r"(?m)^(?:[ \t]*(?:[-*+>]|\d+[.)])[ \t]+)*"
"""Any nesting of list items and quotes the bot's own template opened before the hostile text."""
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
ALLOWED_TAGS = ("details>", "/details>", "summary>", "/summary>", "sub>", "/sub>")


def _fences(text: str) -> tuple[list[str], list[bool]]:
    """(lines that open a fenced block, per line: inside a block) by CommonMark's rule that a block is
    closed only by a bare fence of the same character at least as long."""
    openers: list[str] = []
    inside: list[bool] = []
    fence: str | None = None
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                openers.append(line)
            inside.append(fence is not None)
            continue
        inside.append(True)
        closing = match is not None and match.group(1)[0] == fence[0] and not match.group(2).strip()
        if closing and match is not None and len(match.group(1)) >= len(fence):
            fence = None
    return openers, inside


def openers(text: str) -> list[str]:
    return _fences(text)[0]


def outside_code(text: str) -> str:
    """`text` without fenced blocks and code spans, where GitHub shows characters literally (CommonMark)."""
    _, inside = _fences(text)
    kept = ["" if hidden else line for line, hidden in zip(text.split("\n"), inside, strict=True)]
    out: list[str] = []
    body = "\n".join(kept)
    i = 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            out.append(body[i : i + 2])
            i += 2
            continue
        if char == "`":
            run = re.match(r"`+", body[i:])
            assert run is not None
            opener = run.group(0)
            closing = re.compile(r"(?<!`)" + opener + r"(?!`)")
            end = closing.search(body, i + len(opener))
            if end is not None:
                out.append("␣")
                i = end.end()
                continue
            out.append(opener)
            i += len(opener)
            continue
        out.append(char)
        i += 1
    return "".join(out)


def problems(text: str) -> list[str]:
    """Every hostile construct that survived rendering in a live form."""
    found: list[str] = []
    plain = outside_code(text)
    checks = {
        "mention": r"@[A-Za-z0-9]",
        "issue reference": r"#\d",
        "GH- reference": r"(?i)\bGH-\d",
        "HTML entity": r"(?<!\\)&(?:#\d|lt;)",
        "Markdown link": r"(?<!\\)\]\(https://evil",
        "image": r"(?<!\\)!\[",
        "emphasis": r"(?<!\\)\*\*bold|(?<!\\)_em_",
        "injected heading": _CONTAINERS + r"#{1,6}[ \t]+INJECTED-H",
        "injected list item": _CONTAINERS + r"-[ \t]+INJECTED-L",
        "injected quote": _CONTAINERS + r">[ \t]*INJECTED-Q",
        "injected ordered item": _CONTAINERS + r"\d+[.)][ \t]+INJECTED-O",
        "injected line": r"(?m)^INJECTED-N",
    }
    for name, pattern in checks.items():
        match = re.search(pattern, plain)
        if match:
            found.append(f"{name}: …{plain[max(0, match.start() - 40) : match.end() + 40]!r}")
    for match in re.finditer(r"(?<!\\)<", plain):
        rest = plain[match.end() :]
        if rest.startswith("!--") and match.start() == 0:
            continue
        if not rest.startswith(ALLOWED_TAGS):
            found.append(f"raw HTML: …{plain[max(0, match.start() - 40) : match.end() + 40]!r}")
    if plain.count("<details>") != plain.count("</details>"):
        found.append("unbalanced <details>")
    markers = [m.start() for m in re.finditer(r"(?<!\\)<!-- kv-parity", plain)]
    if markers not in ([], [0]):
        found.append("a kv-parity marker beyond the bot's own")
    for line in openers(text):
        if not re.fullmatch(r"`{3,}(?:text|mermaid)", line):
            found.append(f"a fenced block the bot did not open: {line!r}")
    table: int | None = None
    for line in plain.split("\n"):
        if line.startswith("|"):
            pipes = len(re.findall(r"(?<!\\)\|", line))
            if table is None:
                table = pipes
            elif pipes != table:
                found.append(f"table row with {pipes} cells separators, header has {table}: {line[:120]!r}")
        else:
            table = None
    return found


def assert_defused(surface: str, text: str) -> None:
    found = problems(text)
    assert not found, f"{surface}:\n  " + "\n  ".join(found[:10])


# --- the surfaces ---------------------------------------------------------------------------------------

LINKS = Links(
    artifact_url="https://github.com/octo-org/dynamo/actions/runs/1/artifacts/2",
    check_run_url="https://github.com/octo-org/dynamo/runs/1001",
    result_url="https://github.com/octo-org/dynamo/pull/512#issuecomment-2002",
)


def report_surfaces(report: CampaignReport, round_: int) -> Iterator[tuple[str, str]]:
    attempts = hostile_attempts(round_)
    content = render.check_run_content(report, LINKS, prior_attempts=attempts)
    assert "\n" not in content.title
    yield "check run summary", content.summary
    yield "check run text", content.text
    yield "result comment", render.result_comment(report, LINKS, prior_attempts=attempts)
    yield "report.md", render.report_markdown(report, Links(), prior_attempts=attempts)
    view = hostile_campaign(round_)
    yield "finished status", render.status_comment(view, "finished", LINKS, report=report)


def lifecycle_surfaces(round_: int) -> Iterator[tuple[str, str]]:
    view = hostile_campaign(round_)
    reason = hostile(3, round_) + "\n" + hostile(4, round_)
    for state in wording.ENDED_STATES:
        content = render.ended_content(view, state, reason, LINKS)
        assert "\n" not in content.title
        yield f"ended {state} check run", content.summary
        yield f"ended {state} status", render.status_comment(view, "ended", LINKS, state=state, reason=reason)
    yield "queued status", render.status_comment(view, "queued", LINKS, position=2)
    yield "running status", render.status_comment(view, "running", LINKS)
    event = ProgressEvent(stage=hostile(5, round_), row=hostile(6, round_), detail=reason, done=3, total=60)
    for progress in (None, ProgressView.of(event, 12.0)):
        content = render.progress_content(view, progress, LINKS, position=2)
        assert "\n" not in content.title
        yield "progress check run", content.summary
    contexts: dict[str, dict[str, Any]] = {
        "refused": {"reason": reason, "fix": hostile(7, round_)},
        "help": {},
        "status": {"campaigns": [view, hostile_campaign(round_ + 1)]},
        "duplicate": {"campaign": view},
        "unknown_command": {"line": hostile(8, round_), "reason": reason},
    }
    for kind, context in contexts.items():
        yield f"reply {kind}", render.reply(kind, hostile(9, round_)[:0] + "/parity", COMMANDS, "kv-parity", context)


@pytest.mark.parametrize("round_", ROUNDS)
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_hostile_report_strings_never_render_live(outcome: str, round_: int) -> None:
    clean = factory_report(outcome)
    report = poisoned(clean, round_)
    before, after = dict(_leaves(clean.model_dump())), dict(_leaves(report.model_dump()))
    assert sum(after.get(path) != value for path, value in before.items()) > 50, "the generator reached the strings"
    for surface, text in report_surfaces(report, round_):
        assert_defused(f"{outcome} round {round_} {surface}", text)


@pytest.mark.parametrize("round_", ROUNDS)
def test_hostile_lifecycle_strings_never_render_live(round_: int) -> None:
    for surface, text in lifecycle_surfaces(round_):
        assert_defused(f"round {round_} {surface}", text)


@pytest.mark.parametrize(
    "fragment", ["@@user", "@@org/team", "é@user", "@user", "x.@user", "(@user)", "_@user", "\u200d@user"]
)
def test_every_at_that_could_start_a_mention_is_defused(fragment: str) -> None:
    assert re.search(r"@[A-Za-z0-9]", markdown.md(fragment)) is None
    assert re.search(r"@[A-Za-z0-9]", markdown.prose(fragment)) is None


def test_the_checker_catches_what_it_claims_to() -> None:
    """The oracle itself: each live construct is reported, and its escaped form is not."""
    live: dict[str, Callable[[], str]] = {
        "mention": lambda: "hi @mallory",
        "reference": lambda: "fixes #12",
        "html": lambda: "a <img src=x> b",
        "link": lambda: "[x](https://evil.example)",
        "fence": lambda: "```suggestion\ncode\n```",
        "injected": lambda: "ok\n- # INJECTED-H",
        "marker": lambda: "text <!-- kv-parity:status -->",
        "pipes": lambda: "| a | b |\n| --- | --- |\n| x | y | z |",
    }
    for name, make in live.items():
        assert problems(make()), name
    for fragment in FRAGMENTS:
        assert not problems("text " + markdown.md(fragment)), fragment
    assert not problems("`@mallory` and ``a`b`` stay literal")
