"""The SQLite store: dedupe, the state machine's guard, duplicate keys, FIFO positions, restart survival."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bot.store import (
    ALLOWED,
    CampaignState,
    DuplicateCampaign,
    IllegalTransition,
    NewCampaign,
    Store,
)

S = CampaignState
HEAD = "a" * 40
BASE = "b" * 40


def new(pr: int = 1, head: str = HEAD, rows_key: str = "r1,r2", delivery: str = "d1") -> NewCampaign:
    return NewCampaign(
        repo="acme/widgets",
        pr_number=pr,
        head_sha=head,
        base_sha=BASE,
        relationship="ancestor",
        rows=None,
        rows_key=rows_key,
        requested_by="maintainer",
        trigger="label",
        delivery_id=delivery,
        backend="local",
        config_text="[build]\n",
        config_source=f".github/kv-parity.toml@{BASE}",
    )


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "bot.sqlite3")


def test_wal_and_schema(store: Store) -> None:
    db = sqlite3.connect(store.path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"deliveries", "campaigns", "transitions", "approvals", "refusals", "publications"} <= tables


def test_deliveries_dedupe_and_order(store: Store) -> None:
    assert store.add_delivery("one", "pull_request", b"{}")
    assert not store.add_delivery("one", "pull_request", b"{}")
    assert store.add_delivery("two", "issue_comment", b"{}")
    first = store.next_delivery(now=1e12)
    assert first is not None and first.id == "one"
    store.retry_delivery("one", "boom", not_before=1e12 + 10, give_up=False)
    second = store.next_delivery(now=1e12)
    assert second is not None and second.id == "two"
    store.finish_delivery("two", "ignored")
    assert store.next_delivery(now=1e12) is None
    again = store.next_delivery(now=1e12 + 11)
    assert again is not None and again.attempts == 1
    store.retry_delivery("one", "boom", not_before=0, give_up=True)
    assert store.next_delivery(now=1e13) is None
    assert store.delivery_status("one") == ("failed", "boom")
    assert store.delivery_counts() == {"failed": 1, "done": 1}


def test_rejected_deliveries_are_kept_apart(store: Store) -> None:
    store.reject_delivery("bad", "pull_request", "pull_request: Field required", b"{}")
    assert store.rejected_deliveries() == [("bad", "pull_request", "pull_request: Field required")]
    assert store.add_delivery("bad", "pull_request", b"{}"), "a rejected id may be redelivered once fixed"


def test_lifecycle_transitions_are_recorded_with_reasons(store: Store) -> None:
    campaign = store.create_campaign(new())
    assert campaign.state == S.REQUESTED and campaign.queue_position == 1 and campaign.attempt == 0
    store.transition(campaign.id, S.DISPATCHED, "dispatched", attempt=1, deadline=2e9, artifact_dir="/tmp/x")
    view = store.transition(campaign.id, S.RUNNING, "started", handle='{"pid": 1}')
    assert view.queue_position == 0 and view.deadline is not None and view.artifact_dir == Path("/tmp/x")
    assert store.handle(campaign.id) == '{"pid": 1}'
    done = store.transition(campaign.id, S.COMPLETED, "report written", publish="finished", conclusion="success")
    assert done.conclusion == "success" and done.queue_position is None
    history = [(t.from_state, t.to_state, t.reason) for t in store.transitions(campaign.id)]
    assert history == [
        (None, S.REQUESTED, "requested by @maintainer (label)"),
        (S.REQUESTED, S.DISPATCHED, "dispatched"),
        (S.DISPATCHED, S.RUNNING, "started"),
        (S.RUNNING, S.COMPLETED, "report written"),
    ]
    assert [(p.kind, p.state) for p in store.due_publications(now=1e12)] == [("finished", "completed")]


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ([], S.RUNNING),
        ([], S.COMPLETED),
        ([S.DISPATCHED], S.COMPLETED),
        ([S.DISPATCHED, S.RUNNING, S.COMPLETED], S.CANCELLED),
        ([S.CANCELLED], S.REQUESTED),
        ([S.DISPATCHED, S.RUNNING, S.TIMED_OUT], S.RUNNING),
        ([S.SUPERSEDED], S.DISPATCHED),
        ([S.ERRORED], S.ERRORED),
    ],
)
def test_illegal_transitions_raise_and_write_nothing(
    store: Store, path: list[CampaignState], illegal: CampaignState
) -> None:
    campaign = store.create_campaign(new())
    for state in path:
        store.transition(campaign.id, state, "step")
    before = store.transitions(campaign.id)
    with pytest.raises(IllegalTransition):
        store.transition(campaign.id, illegal, "nope")
    assert store.transitions(campaign.id) == before
    assert store.require(campaign.id).state == (path[-1] if path else S.REQUESTED)


def test_every_terminal_state_is_final() -> None:
    for state in (S.COMPLETED, S.CANCELLED, S.SUPERSEDED, S.TIMED_OUT, S.ERRORED):
        assert ALLOWED[state] == frozenset()


def test_one_campaign_per_key(store: Store) -> None:
    first = store.create_campaign(new())
    with pytest.raises(DuplicateCampaign) as raised:
        store.create_campaign(new(delivery="d2"))
    assert raised.value.existing.id == first.id
    other_rows = store.create_campaign(new(rows_key="r1", delivery="d3"))
    other_head = store.create_campaign(new(head="c" * 40, delivery="d4"))
    assert len({first.id, other_rows.id, other_head.id}) == 3
    store.transition(first.id, S.DISPATCHED, "go")
    store.transition(first.id, S.RUNNING, "go")
    store.transition(first.id, S.COMPLETED, "done")
    with pytest.raises(DuplicateCampaign):
        store.create_campaign(new(delivery="d5"))
    assert store.covering("acme/widgets", 1, HEAD, BASE, "r1,r2") is not None


def test_an_ended_campaign_no_longer_covers_its_key(store: Store) -> None:
    first = store.create_campaign(new())
    store.transition(first.id, S.CANCELLED, "cancel")
    second = store.create_campaign(new(delivery="d2"))
    assert second.id != first.id
    assert [c.id for c in store.by_delivery("d2")] == [second.id]


def test_fifo_queue_positions(store: Store) -> None:
    a = store.create_campaign(new(pr=1))
    b = store.create_campaign(new(pr=2))
    c = store.create_campaign(new(pr=3))
    assert [store.require(x.id).queue_position for x in (a, b, c)] == [1, 2, 3]
    store.transition(a.id, S.DISPATCHED, "go")
    assert [store.require(x.id).queue_position for x in (a, b, c)] == [0, 1, 2]
    store.transition(b.id, S.CANCELLED, "no")
    assert [store.require(x.id).queue_position for x in (a, b, c)] == [0, None, 1]
    assert [x.id for x in store.in_states(frozenset({S.REQUESTED}), "local")] == [c.id]
    assert [x.id for x in store.for_pr("acme/widgets", 3, live_only=True)] == [c.id]


def test_state_survives_reopening(tmp_path: Path) -> None:
    store = Store(tmp_path / "bot.sqlite3")
    campaign = store.create_campaign(new())
    store.transition(campaign.id, S.DISPATCHED, "go", attempt=1)
    store.approve_head("acme/widgets", 1, HEAD, "maintainer")
    store.add_delivery("d9", "pull_request", b"{}")
    store.close()
    reopened = Store(tmp_path / "bot.sqlite3")
    assert reopened.require(campaign.id).state == S.DISPATCHED
    assert reopened.is_approved("acme/widgets", 1, HEAD)
    assert not reopened.is_approved("acme/widgets", 1, "c" * 40)
    pending = reopened.next_delivery(now=1e12)
    assert pending is not None and pending.id == "d9"


def test_refusal_answered_once_per_person_and_pull_request(store: Store) -> None:
    assert store.first_refusal("acme/widgets", 1, "Reader", "no")
    assert not store.first_refusal("acme/widgets", 1, "reader", "no")
    assert store.first_refusal("acme/widgets", 2, "reader", "no")


def test_publications_retry_then_done(store: Store) -> None:
    campaign = store.create_campaign(new())
    store.transition(campaign.id, S.ERRORED, "config broken", publish="ended", published_state="config_error")
    [publication] = store.due_publications(now=1e12)
    assert (publication.kind, publication.state, publication.reason) == (
        "ended",
        "config_error",
        "config broken",
    )
    store.publication_failed(campaign.id, "ended", "502", not_before=1e12 + 5, give_up=False)
    assert store.due_publications(now=1e12) == []
    assert len(store.due_publications(now=1e12 + 6)) == 1
    store.publication_done(campaign.id, "ended")
    assert store.due_publications(now=1e13) == []
    assert store.publications(campaign.id) == [("ended", "done")]


def test_transition_rejects_unknown_updates(store: Store) -> None:
    campaign = store.create_campaign(new())
    with pytest.raises(ValueError, match="cannot update"):
        store.transition(campaign.id, S.DISPATCHED, "go", state="x")
