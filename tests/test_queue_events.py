"""The new events and command, without HTTP: `merge_group` and `check_suite` payloads (held to GitHub's webhook
schemas) parsed and decided, the `accept` command's grammar, and the merge queue's carry rule."""

from __future__ import annotations

from typing import Any

import pytest

from bot.core.commands import ParsedCommand, UnknownCommand, parse_commands
from bot.core.events import CheckSuiteEvent, MergeGroupEvent, PayloadError, parse_event
from bot.core.merge_queue import carry, queue_entry, standing
from bot.core.triggers import Ignore, MergeQueue, Refuse, Rerun, TriggerContext, decide
from tests.fakes.github_api import user_id
from tests.fakes.openapi import github_openapi
from tests.webhooks import check_suite_event, merge_group_event

HEAD, BASE = "a" * 40, "b" * 40


def _context(**changes: Any) -> TriggerContext:
    values: dict[str, Any] = {
        "label": "kv-parity",
        "command_word": "/parity",
        "bot_id": user_id("kv-parity[bot]"),
        "min_permission": "write",
        "permission_of": {"maintainer": "write", "reader": "read"}.get,
        "is_approved": lambda pr, sha: False,
        "suite_campaign": {77: "kvp-0123456789ab", 78: ""}.get,
    }
    values.update(changes)
    return TriggerContext(**values)


def _parse(name: str, payload: dict[str, Any]) -> Any:
    import json

    return parse_event(name, json.dumps(payload).encode())


@pytest.mark.parametrize(
    ("schema", "payload"),
    [
        ("webhook-merge-group-checks-requested",
         merge_group_event("checks_requested", head_sha=HEAD, base_sha=BASE, number=3)),
        ("webhook-merge-group-destroyed",
         merge_group_event("destroyed", head_sha=HEAD, base_sha=BASE, number=3, reason="invalidated")),
        ("webhook-check-suite-rerequested", check_suite_event("rerequested", suite_id=77, head_sha=HEAD)),
    ],
)
def test_the_test_payloads_have_githubs_shape(schema: str, payload: dict[str, Any]) -> None:
    """Strictly: every field GitHub's webhook schema requires, none it does not name."""
    assert github_openapi().check_webhook(schema, payload) == []


def test_a_merge_group_is_parsed_and_handed_to_the_merge_queue() -> None:
    event = _parse("merge_group", merge_group_event("destroyed", head_sha=HEAD, base_sha=BASE, number=3,
                                                   reason="dequeued"))
    assert isinstance(event, MergeGroupEvent) and event.reason == "dequeued"
    assert event.merge_group.head_ref == f"refs/heads/gh-readonly-queue/main/pr-3-{BASE}"
    assert decide(event, _context()) == MergeQueue(event)
    bad = merge_group_event("checks_requested", head_sha="nope", base_sha=BASE, number=3)
    with pytest.raises(PayloadError, match=r"merge_group\.head_sha"):
        _parse("merge_group", bad)


def test_rerunning_a_suite_with_the_kv_parity_check_run_is_a_rerun_by_the_sender() -> None:
    event = _parse("check_suite", check_suite_event("rerequested", suite_id=77, head_sha=HEAD))
    assert isinstance(event, CheckSuiteEvent)
    assert decide(event, _context()) == Rerun(
        1, "maintainer", "check_suite", sha=HEAD, campaign_id="kvp-0123456789ab", independent=True
    )


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"action": "completed"}, Ignore("check_suite action 'completed' is not a trigger")),
        ({"suite_id": 99}, Ignore("check suite 99 holds no kv-parity check run")),
        ({"sender": "kv-parity[bot]"}, Ignore("the bot's own action")),
        ({"sender": "reader"}, Refuse(1, "reader", "read", "@reader has 'read' permission on this repository; "
                                      "re-running the checks needs at least 'write'", campaign_id="kvp-0123456789ab")),
        ({"pulls": ()}, Rerun(None, "maintainer", "check_suite", sha=HEAD, campaign_id="kvp-0123456789ab",
                              independent=True)),
        ({"suite_id": 78}, Rerun(1, "maintainer", "check_suite", sha=HEAD, independent=True)),
    ],
)
def test_check_suite_decisions(changes: dict[str, Any], expected: Any) -> None:
    action = changes.pop("action", "rerequested")
    suite = changes.pop("suite_id", 77)
    event = _parse("check_suite", check_suite_event(action, suite_id=suite, head_sha=HEAD, **changes))
    assert decide(event, _context()) == expected


# ----------------------------------------------------------------- the accept command


@pytest.mark.parametrize(
    ("line", "gate", "rows", "limit", "reason"),
    [
        ("/parity accept perf max=1.10 the new pass is intended", "performance", None, 1.10,
         "the new pass is intended"),
        ("/parity accept perf rows=a,b,a max=1.2 x  y", "performance", ("a", "b"), 1.2, "x y"),
        ("/parity accept PERFORMANCE max=2 y=1 is a fine reason", "performance", None, 2.0, "y=1 is a fine reason"),
        ("/parity accept size max=8% bigger tables", "sizes", None, 0.08, "bigger tables"),
        ("/parity accept revoke", None, None, None, ""),
    ],
)
def test_accept_parses(line: str, gate: str | None, rows: tuple[str, ...] | None, limit: float | None,
                       reason: str) -> None:
    [command] = parse_commands(line)
    assert isinstance(command, ParsedCommand) and command.accept is not None
    args = command.accept
    assert (args.gate, args.rows, args.max, args.reason, args.revoke) == (gate, rows, limit, reason, gate is None)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("/parity accept", "`accept` needs what to accept"),
        ("/parity accept perf max=1.10", "needs a reason after `max=`"),
        ("/parity accept perf the reason", "needs the largest accepted ratio before the reason (`max=1.10`)"),
        ("/parity accept perf max=1.0 x", "a candidate / baseline ratio above 1"),
        ("/parity accept perf max=11 x", "at most 10"),
        ("/parity accept perf max=1.1x y", "got '1.1x'"),
        ("/parity accept size max=8 x", "with its `%`"),
        ("/parity accept size max=0% x", "above 0"),
        ("/parity accept size rows=a max=8% x", "does not understand 'rows=a'"),
        ("/parity accept perf rows= max=1.1 x", "`rows=` needs comma-separated row ids"),
        ("/parity accept everything", "takes `perf`, `size` or `revoke`"),
        ("/parity accept perf max=1.1 " + "x" * 301, "at most 300 fit on the check run"),
    ],
)
def test_accept_refuses_what_it_cannot_read_saying_why(line: str, why: str) -> None:
    [command] = parse_commands(line)
    assert isinstance(command, UnknownCommand) and why in command.reason


def test_an_accept_is_decided_by_the_base_config_not_by_the_commands_minimum_permission() -> None:
    """The trigger hands it on unrefused; `[checks] accept_permission` at the base branch's tip decides who."""
    from tests.webhooks import comment_event

    payload = comment_event("/parity accept perf max=1.1 intended", sender="reader", comment_id=42)
    intent = decide(_parse("issue_comment", payload), _context())
    assert type(intent).__name__ == "Accept" and intent.comment_id == 42  # type: ignore[union-attr]
    assert intent.comment_url.endswith("#issuecomment-42")  # type: ignore[union-attr]


# ----------------------------------------------------------------- the carry rule


def test_queue_branches_name_their_pull_request() -> None:
    assert queue_entry(f"refs/heads/gh-readonly-queue/main/pr-104-{BASE}") == ("main", 104)
    assert queue_entry(f"refs/heads/gh-readonly-queue/release/2.0/pr-7-{BASE}") == ("release/2.0", 7)
    assert queue_entry("refs/heads/main") is None
    assert queue_entry(f"refs/heads/gh-readonly-queue/main/pr-x-{BASE}") is None


def test_carry_succeeds_only_when_every_pull_request_carries() -> None:
    ok = standing(1, HEAD, "open", "success", "kvp-1", "concluded success")
    assert carry(HEAD, BASE, "main", [ok]).conclusion == "success"
    for other in (
        standing(2, HEAD, "open", "failure", "kvp-2", "concluded failure"),
        standing(2, HEAD, "open", "action_required", "kvp-2", "concluded action_required"),
        standing(2, HEAD, "open", None, "kvp-2", "still running"),
        standing(2, HEAD, "closed", "success", "kvp-2", "concluded success"),
        standing(2, None, None, None, None, ""),
    ):
        assert carry(HEAD, BASE, "main", [ok, other]).conclusion == "failure"
    assert carry(HEAD, BASE, "main", []).conclusion == "failure", "a group naming no pull request carries nothing"
    assert standing(2, HEAD, "closed", "success", "kvp-2", "x").detail == "pull request #2 is closed"
