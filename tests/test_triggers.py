"""Event -> intent, table-tested; the guard order is checked by recording permission look-ups."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.core.events import PayloadError, parse_event
from bot.core.triggers import (
    Cancel,
    Help,
    Ignore,
    Intent,
    NeedsApproval,
    Refuse,
    Rerun,
    Start,
    Status,
    TriggerContext,
    Unlabelled,
    decide,
)
from tests.fakes.github_api import user_id
from tests.webhooks import check_run_event, comment_event, pull_request_event

HEAD = "1" * 40
BASE = "2" * 40
APPROVED_FORK_HEAD = "3" * 40
PERMISSIONS = {"maintainer": "write", "admin": "admin", "triager": "triage", "reader": "read"}
BOT = "kv-parity-bot[bot]"
WRITTEN = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


def comment(body: str, **kwargs: Any) -> dict[str, Any]:
    """A comment event written at WRITTEN."""
    return comment_event(body, created_at=WRITTEN.strftime("%Y-%m-%dT%H:%M:%SZ"), **kwargs)


def _decide(event_name: str, payload: dict[str, Any], min_permission: str = "write") -> tuple[Intent, list[str]]:
    asked: list[str] = []

    def permission_of(login: str) -> str:
        asked.append(login)
        return PERMISSIONS.get(login, "none")

    context = TriggerContext(
        label="kv-parity",
        command_word="/parity",
        bot_id=user_id(BOT),
        min_permission=min_permission,
        permission_of=permission_of,
        is_approved=lambda pr, sha: (pr, sha) == (1, APPROVED_FORK_HEAD),
    )
    event = parse_event(event_name, json.dumps(payload).encode())
    return decide(event, context), asked


def pr(action: str, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("head_sha", HEAD)
    kwargs.setdefault("base_sha", BASE)
    return pull_request_event(action, **kwargs)


def start(trigger: str = "label", sender: str = "maintainer", approve: bool = False, head: str = HEAD) -> Start:
    return Start(1, head, "main", trigger, sender, approve_head=approve)


REFUSED_READER = Refuse(
    1,
    "reader",
    "read",
    "@reader has 'read' permission on this repository; adding the 'kv-parity' label needs at least 'write'",
)

PULL_REQUEST_CASES: list[tuple[str, dict[str, Any], Intent, list[str]]] = [
    ("label by maintainer", pr("labeled", label="kv-parity"), start(), ["maintainer"]),
    ("label by admin", pr("labeled", label="kv-parity", sender="admin"), start(sender="admin"), ["admin"]),
    ("label by reader", pr("labeled", label="kv-parity", sender="reader"), REFUSED_READER, ["reader"]),
    ("another label", pr("labeled", label="bug"), Ignore("another label"), []),
    (
        "label on closed pr",
        pr("labeled", label="kv-parity", state="closed"),
        Ignore("pull request is not open"),
        [],
    ),
    (
        "bot's own label",
        pr("labeled", label="kv-parity", sender=BOT),
        Ignore("the bot's own action"),
        [],
    ),
    (
        "label on fork approves the head",
        pr("labeled", label="kv-parity", fork=True),
        start(approve=True),
        ["maintainer"],
    ),
    (
        "unlabeled by a maintainer cancels",
        pr("unlabeled", label="kv-parity"),
        Cancel(1, "maintainer", "label", "the 'kv-parity' label was removed by @maintainer"),
        ["maintainer"],
    ),
    (
        "unlabeled by a reader is refused",
        pr("unlabeled", label="kv-parity", sender="reader"),
        Refuse(
            1,
            "reader",
            "read",
            "@reader has 'read' permission on this repository; removing the 'kv-parity' label needs at least 'write'",
        ),
        ["reader"],
    ),
    ("unlabeled other", pr("unlabeled", label="bug"), Ignore("another label"), []),
    (
        "closed cancels",
        pr("closed", state="closed"),
        Cancel(1, "maintainer", "closed", "the pull request was closed"),
        [],
    ),
    ("push with label", pr("synchronize", labels=("kv-parity",)), start("synchronize"), ["maintainer"]),
    ("push without label asks the watched paths", pr("synchronize"), Unlabelled(1, HEAD, "main"), []),
    ("push by a reader without label, the same", pr("synchronize", sender="reader"), Unlabelled(1, HEAD, "main"), []),
    ("push to a fork without label, the same", pr("synchronize", fork=True), Unlabelled(1, HEAD, "main"), []),
    ("push to a closed pr without label", pr("synchronize", state="closed"), Ignore("pull request is not open"), []),
    (
        "push by reader needs approval",
        pr("synchronize", labels=("kv-parity",), sender="reader"),
        NeedsApproval(
            1,
            HEAD,
            "@reader has 'read' permission on this repository; an automatic run after a push needs at least 'write'",
        ),
        ["reader"],
    ),
    (
        "push to fork never runs by itself",
        pr("synchronize", labels=("kv-parity",), fork=True, sender="admin"),
        NeedsApproval(
            1,
            HEAD,
            f"new head {HEAD[:12]} of a fork pull request; a maintainer must approve it "
            f"(`/parity rerun sha={HEAD}` or re-add the label)",
        ),
        [],
    ),
    (
        "push to fork of an approved head",
        pr("synchronize", labels=("kv-parity",), fork=True, head_sha=APPROVED_FORK_HEAD),
        start("synchronize", head=APPROVED_FORK_HEAD),
        [],
    ),
    ("opened without label asks the watched paths", pr("opened"), Unlabelled(1, HEAD, "main"), []),
    ("reopened without label, the same", pr("reopened"), Unlabelled(1, HEAD, "main"), []),
    (
        "opened with the label waits for its labeled event",
        pr("opened", labels=("kv-parity",)),
        Ignore("pull_request action 'opened' is not a trigger"),
        [],
    ),
    ("the bot's own push", pr("synchronize", sender=BOT), Ignore("the bot's own action"), []),
]


@pytest.mark.parametrize(
    ("name", "payload", "expected", "asked"), PULL_REQUEST_CASES, ids=[c[0] for c in PULL_REQUEST_CASES]
)
def test_pull_request(name: str, payload: dict[str, Any], expected: Intent, asked: list[str]) -> None:
    assert _decide("pull_request", payload) == (expected, asked)


COMMENT_REFUSAL = "@reader has 'read' permission on this repository; a `/parity` command needs at least 'write'"
COMMENT_CASES: list[tuple[str, dict[str, Any], Intent, list[str]]] = [
    ("rerun", comment("/parity rerun"), Rerun(1, "maintainer", "comment", written_at=WRITTEN), ["maintainer"]),
    (
        "rerun rows and sha",
        comment("/parity rerun rows=vllm-agg sha=abcdef12"),
        Rerun(1, "maintainer", "comment", rows=("vllm-agg",), sha="abcdef12", written_at=WRITTEN),
        ["maintainer"],
    ),
    (
        "cancel",
        comment("/parity cancel"),
        Cancel(1, "maintainer", "comment", "`cancel` by @maintainer"),
        ["maintainer"],
    ),
    ("status", comment("/parity status"), Status(1, "maintainer"), ["maintainer"]),
    ("help", comment("/parity help"), Help(1, "maintainer"), ["maintainer"]),
    (
        "unknown subcommand gets the help",
        comment("/parity bench"),
        Help(1, "maintainer", line="/parity bench", reason="unknown subcommand 'bench'"),
        ["maintainer"],
    ),
    (
        "first command wins",
        comment("/parity status\n/parity cancel"),
        Status(1, "maintainer"),
        ["maintainer"],
    ),
    (
        "not a pull request",
        comment("/parity rerun", on_pull=False),
        Ignore("comment on an issue, not a pull request"),
        [],
    ),
    (
        "own comment",
        comment("/parity rerun", sender=BOT),
        Ignore("the bot's own comment"),
        [],
    ),
    (
        "a human whose login is the bot's slug is a human",
        comment("/parity rerun", sender="kv-parity-bot"),
        Refuse(
            1, "kv-parity-bot", "none", COMMENT_REFUSAL.replace("reader", "kv-parity-bot").replace("'read'", "'none'")
        ),
        ["kv-parity-bot"],
    ),
    (
        "hidden in an HTML comment",
        comment("<!--\n/parity rerun\n-->"),
        Ignore("no command"),
        [],
    ),
    ("hidden in details", comment("<details>\n\n/parity rerun\n\n</details>"), Ignore("no command"), []),
    (
        "edited",
        comment("/parity rerun", action="edited"),
        Ignore("comment edited; only new comments carry commands"),
        [],
    ),
    (
        "deleted",
        comment("/parity rerun", action="deleted"),
        Ignore("comment deleted; only new comments carry commands"),
        [],
    ),
    ("no command", comment("looks good"), Ignore("no command"), []),
    ("quoted command", comment("> /parity rerun\nwhy?"), Ignore("no command"), []),
    ("fenced command", comment("```\n/parity rerun\n```"), Ignore("no command"), []),
    (
        "reader refused",
        comment("/parity rerun", sender="reader"),
        Refuse(1, "reader", "read", COMMENT_REFUSAL),
        ["reader"],
    ),
    (
        "triager refused at write",
        comment("/parity status", sender="triager"),
        Refuse(1, "triager", "triage", COMMENT_REFUSAL.replace("reader", "triager").replace("'read'", "'triage'")),
        ["triager"],
    ),
    (
        "stranger refused",
        comment("/parity help", sender="stranger"),
        Refuse(1, "stranger", "none", COMMENT_REFUSAL.replace("reader", "stranger").replace("'read'", "'none'")),
        ["stranger"],
    ),
    (
        "reader refused even for an unknown subcommand",
        comment("/parity nope", sender="reader"),
        Refuse(1, "reader", "read", COMMENT_REFUSAL),
        ["reader"],
    ),
]


@pytest.mark.parametrize(("name", "payload", "expected", "asked"), COMMENT_CASES, ids=[c[0] for c in COMMENT_CASES])
def test_issue_comment(name: str, payload: dict[str, Any], expected: Intent, asked: list[str]) -> None:
    assert _decide("issue_comment", payload) == (expected, asked)


def test_min_permission_is_configurable() -> None:
    intent, _ = _decide("issue_comment", comment("/parity status", sender="triager"), min_permission="triage")
    assert intent == Status(1, "triager")
    intent, _ = _decide("issue_comment", comment("/parity status"), min_permission="admin")
    assert isinstance(intent, Refuse) and intent.permission == "write"


CHECK_CASES: list[tuple[str, dict[str, Any], Intent, list[str]]] = [
    (
        "rerun button",
        check_run_event("requested_action", external_id="kvp-1", head_sha=HEAD, identifier="rerun"),
        Rerun(1, "maintainer", "check_run", sha=HEAD, campaign_id="kvp-1"),
        ["maintainer"],
    ),
    (
        "cancel button",
        check_run_event("requested_action", external_id="kvp-1", head_sha=HEAD, identifier="cancel"),
        Cancel(1, "maintainer", "check_run", "cancel requested by @maintainer", campaign_id="kvp-1"),
        ["maintainer"],
    ),
    (
        "re-run of a fork check run (no pull_requests)",
        check_run_event("rerequested", external_id="kvp-1", head_sha=HEAD, pulls=()),
        Rerun(None, "maintainer", "check_run", sha=HEAD, campaign_id="kvp-1"),
        ["maintainer"],
    ),
    (
        "unknown button",
        check_run_event("requested_action", external_id="kvp-1", head_sha=HEAD, identifier="x"),
        Ignore("unknown requested action 'x'"),
        [],
    ),
    (
        "not ours",
        check_run_event("rerequested", external_id="", head_sha=HEAD),
        Ignore("check run not created by this bot"),
        [],
    ),
    (
        "completed",
        check_run_event("completed", external_id="kvp-1", head_sha=HEAD),
        Ignore("check_run action 'completed' is not a trigger"),
        [],
    ),
    (
        "reader clicks",
        check_run_event("requested_action", external_id="kvp-1", head_sha=HEAD, identifier="rerun", sender="reader"),
        Refuse(
            1,
            "reader",
            "read",
            "@reader has 'read' permission on this repository; the 'rerun' button needs at least 'write'",
            campaign_id="kvp-1",
        ),
        ["reader"],
    ),
]


@pytest.mark.parametrize(("name", "payload", "expected", "asked"), CHECK_CASES, ids=[c[0] for c in CHECK_CASES])
def test_check_run(name: str, payload: dict[str, Any], expected: Intent, asked: list[str]) -> None:
    assert _decide("check_run", payload) == (expected, asked)


@pytest.mark.parametrize(
    ("event", "payload", "message"),
    [
        ("pull_request", {"action": "labeled"}, "pull_request payload: pull_request: Field required"),
        (
            "pull_request",
            {
                **pr("labeled"),
                "pull_request": {
                    **pr("labeled")["pull_request"],
                    "head": {"ref": "x", "sha": "nothex", "repo": None},
                },
            },
            "pull_request.head.sha: String should match pattern",
        ),
        (
            "issue_comment",
            {**comment_event("x"), "comment": {"id": "abc", "user": {"login": "a"}}},
            "comment.id: Input should be a valid integer",
        ),
        ("check_run", [], "payload is not a JSON object"),
        ("push", {}, "push payload: ref: Field required"),
        ("star", {}, "event 'star' is not handled"),
    ],
)
def test_malformed_payload_names_the_field(event: str, payload: Any, message: str) -> None:
    with pytest.raises(PayloadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_event(event, json.dumps(payload).encode())


def test_payload_not_json() -> None:
    with pytest.raises(PayloadError, match="payload is not JSON"):
        parse_event("pull_request", b"{nope")
