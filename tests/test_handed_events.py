"""The door's hand-off to the worker (`bot.service.worker.HandedEvents`): a duplicate POST or an unstored delivery
never takes away the event another POST handed, and what waits is bounded (the rest is parsed from the store)."""

from __future__ import annotations

import json

from bot.core.events import AnyEvent, parse_event
from bot.service.worker import HandedEvents
from tests.webhooks import comment_event


def _event(body: str) -> AnyEvent:
    return parse_event("issue_comment", json.dumps(comment_event(body)).encode())


def test_the_worker_takes_the_handed_event_once() -> None:
    handed, help_ = HandedEvents(), _event("/parity help")
    handed.hand("d1", help_)
    assert handed.take("d1") is help_
    assert handed.take("d1") is None, "a retried delivery is parsed from the store"


def test_a_duplicate_post_keeps_and_never_takes_back_the_first_posts_event() -> None:
    handed, first, duplicate = HandedEvents(), _event("/parity help"), _event("/parity help")
    handed.hand("d1", first)
    handed.hand("d1", duplicate)
    handed.take_back("d1", duplicate)
    assert handed.take("d1") is first
    handed.hand("d2", duplicate)
    handed.take_back("d2", duplicate)
    assert handed.take("d2") is None, "a delivery that was not stored leaves nothing behind"


def test_at_most_limit_events_wait_the_oldest_dropped_first() -> None:
    handed = HandedEvents(limit=2)
    events = {name: _event(f"/parity {name}") for name in ("help", "status", "cancel")}
    for name, event in events.items():
        handed.hand(name, event)
    assert handed.take("help") is None
    assert handed.take("status") is events["status"] and handed.take("cancel") is events["cancel"]
