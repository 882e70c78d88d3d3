"""The SQLite store: dedupe, the state machine's guard, duplicate keys, FIFO positions, restart survival, prior
attempts, seen heads, refusals and the in-place migration of a database from before them."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from bot.cli.history import history_main
from bot.core.attempts import PriorAttempt
from bot.core.campaign import ALLOWED, Campaign, CampaignRequest, CampaignState, DuplicateCampaign, IllegalTransition
from bot.exit_codes import EXIT_OK
from bot.pages.details import repository_seen
from bot.store.campaigns import Store
from bot.store.pages import RepositorySeen

S = CampaignState
HEAD = "a" * 40
BASE = "b" * 40
TIP = "d" * 40


def create(
    store: Store, pr: int = 1, head: str = HEAD, rows_key: str = "r1,r2", delivery: str = "d1"
) -> Campaign:
    request = CampaignRequest(
        pr_number=pr,
        head_sha=head,
        base_sha=BASE,
        relationship="ancestor",
        rows=None,
        rows_key=rows_key,
        requested_by="maintainer",
        trigger="label",
        config_text="[build]\n",
        config_source=f".github/kv-parity.toml @ {TIP} (base branch tip)",
        config_sha=TIP,
        rerun=False,
    )
    return store.create_campaign(request, "acme/widgets", delivery_id=delivery, backend="local")


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "bot.sqlite3")


def test_wal_and_schema(store: Store) -> None:
    db = sqlite3.connect(store.path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    expected = {"deliveries", "campaigns", "transitions", "approvals", "head_observations", "refusal_log",
                "publications"}
    assert expected <= tables


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
    campaign = create(store)
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
    campaign = create(store)
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
    first = create(store)
    with pytest.raises(DuplicateCampaign) as raised:
        create(store, delivery="d2")
    assert raised.value.existing.id == first.id
    other_rows = create(store, rows_key="r1", delivery="d3")
    other_head = create(store, head="c" * 40, delivery="d4")
    assert len({first.id, other_rows.id, other_head.id}) == 3
    store.transition(first.id, S.DISPATCHED, "go")
    store.transition(first.id, S.RUNNING, "go")
    store.transition(first.id, S.COMPLETED, "done")
    assert store.covering("acme/widgets", 1, HEAD, BASE, "r1,r2") is not None, "a label is answered with it"
    assert store.live_for_key("acme/widgets", 1, HEAD, BASE, "r1,r2") is None
    rerun = create(store, delivery="d5")
    assert rerun.id != first.id, "a completed campaign does not stop an explicit rerun"
    assert store.live_for_key("acme/widgets", 1, HEAD, BASE, "r1,r2") == rerun


def test_an_ended_campaign_no_longer_covers_its_key(store: Store) -> None:
    first = create(store)
    store.transition(first.id, S.CANCELLED, "cancel")
    second = create(store, delivery="d2")
    assert second.id != first.id
    assert [c.id for c in store.by_delivery("d2")] == [second.id]


def test_fifo_queue_positions(store: Store) -> None:
    a = create(store, pr=1)
    b = create(store, pr=2)
    c = create(store, pr=3)
    assert [store.require(x.id).queue_position for x in (a, b, c)] == [1, 2, 3]
    store.transition(a.id, S.DISPATCHED, "go")
    assert [store.require(x.id).queue_position for x in (a, b, c)] == [0, 1, 2]
    store.transition(b.id, S.CANCELLED, "no")
    assert [store.require(x.id).queue_position for x in (a, b, c)] == [0, None, 1]
    assert [x.id for x in store.in_states(frozenset({S.REQUESTED}), "local")] == [c.id]
    assert [x.id for x in store.for_pr("acme/widgets", 3, live_only=True)] == [c.id]


def test_state_survives_reopening(tmp_path: Path) -> None:
    store = Store(tmp_path / "bot.sqlite3")
    campaign = create(store)
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


def test_where_a_campaign_waits_survives_reopening_and_the_next_transition_clears_it(tmp_path: Path) -> None:
    """Slurm's pending line is kept for `/parity status` and the status comment, and goes stale with the state."""
    store = Store(tmp_path / "bot.sqlite3")
    campaign = create(store)
    store.transition(campaign.id, S.DISPATCHED, "go", attempt=1)
    store.transition(campaign.id, S.RUNNING, "started")
    line = "row r1: Slurm job 12 PENDING (Resources, 1 of 3 pending)"
    assert store.set_scheduler_wait(campaign.id, line).scheduler_wait == line
    store.close()
    reopened = Store(tmp_path / "bot.sqlite3")
    assert [c.scheduler_wait for c in reopened.for_pr("acme/widgets", 1)] == [line]
    assert reopened.set_scheduler_wait(campaign.id, "").scheduler_wait is None
    reopened.set_scheduler_wait(campaign.id, line)
    assert reopened.transition(campaign.id, S.CANCELLED, "cancelled").scheduler_wait is None


def test_a_heads_latest_campaign_is_never_its_bisect(store: Store) -> None:
    """A `/parity bisect` of a FAILed head concludes success when it names a culprit: that must not read as the
    head's own conclusion (the merge queue would carry it, `/parity accept` would find no report)."""
    failed = create(store)
    store.transition(failed.id, S.DISPATCHED, "dispatched")
    store.transition(failed.id, S.RUNNING, "started")
    store.transition(failed.id, S.COMPLETED, "report written", conclusion="failure", semantic="FAIL")
    bisect = store.create_campaign(
        CampaignRequest(pr_number=1, head_sha=HEAD, base_sha=BASE, relationship="ancestor", rows=None,
                        rows_key="bisect:", requested_by="maintainer", trigger="comment", config_text="[build]\n",
                        config_source="cfg", config_sha=TIP, rerun=True, purpose="bisect"),
        "acme/widgets", delivery_id="d2", backend="local")
    store.transition(bisect.id, S.DISPATCHED, "dispatched")
    store.transition(bisect.id, S.RUNNING, "started")
    store.transition(bisect.id, S.COMPLETED, "culprit found", conclusion="success")
    for completed in (False, True):
        found = store.latest_of_head("acme/widgets", 1, HEAD, completed=completed)
        assert found is not None and (found.id, found.conclusion) == (failed.id, "failure"), completed


def test_refusals_are_logged_and_the_answered_one_found_within_its_window(store: Store) -> None:
    assert store.answered_refusal("acme/widgets", 1, "reader", since=0) is None
    store.record_refusal("acme/widgets", 1, "Reader", "read", "no", answered=True)
    store.record_refusal("acme/widgets", 1, "reader", "read", "no", answered=False)
    found = store.answered_refusal("acme/widgets", 1, "READER", since=0)
    assert found is not None and (found.permission, found.answered) == ("read", True)
    assert store.answered_refusal("acme/widgets", 1, "reader", since=found.at + 1) is None, "outside the window"
    assert store.answered_refusal("acme/widgets", 2, "reader", since=0) is None, "per pull request"
    assert [r.answered for r in store.refusals("acme/widgets", 1, "reader")] == [True, False]


def test_history_of_a_pull_request_lists_everyone_refused_on_it(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kv-parity history --pr` shows the refusal log (who, permission, why, answered or not) after the campaigns,
    for that pull request only: what an operator reads when someone asks why the bot ignored them."""
    store.record_refusal("acme/widgets", 1, "Reader", "read", "/parity rerun needs write", answered=True)
    store.record_refusal("acme/widgets", 1, "reader", "read", "/parity rerun needs write", answered=False)
    store.record_refusal("acme/widgets", 1, "drive-by", "none", "/parity accept needs maintain", answered=True)
    store.record_refusal("acme/widgets", 2, "reader", "read", "another pull request", answered=True)
    assert [r.login for r in store.refusals("acme/widgets", 1)] == ["reader", "reader", "drive-by"]
    assert history_main(["--db", str(store.path), "--pr", "acme/widgets#1"]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert [re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "T", line) for line in lines] == [
        "refused reader (read) at T: /parity rerun needs write · answered",
        "refused reader (read) at T: /parity rerun needs write · not answered (within the refusal window)",
        "refused drive-by (none) at T: /parity accept needs maintain · answered",
    ]


def test_head_observations_answer_what_the_head_was_at_a_moment_and_since(store: Store) -> None:
    """Kept in any time order (a retried delivery after a later fetch); ties at the latest moment all count."""
    other = "b" * 40
    assert store.heads_since("acme/widgets", 1, 1000.0) == []
    store.see_head("acme/widgets", 1, HEAD, 200.0, "pull request fetched")
    store.see_head("acme/widgets", 1, other, 300.0, "pull_request synchronize")
    store.see_head("acme/widgets", 1, HEAD, 100.0, "pull_request opened")
    store.see_head("acme/widgets", 1, HEAD, 300.0, "pull request fetched")
    store.see_head("acme/widgets", 2, other, 150.0, "pull_request opened")
    seen = store.heads_since("acme/widgets", 1, 250.0)
    assert [(head.head_sha, head.at) for head in seen] == [(HEAD, 200.0), (other, 300.0), (HEAD, 300.0)]
    assert [head.head_sha for head in store.heads_since("acme/widgets", 1, 300.0)] == [other, HEAD], "a tie"
    assert [head.at for head in store.heads_since("acme/widgets", 1, 50.0)] == [100.0, 200.0, 300.0, 300.0]
    assert [head.source for head in store.heads_since("acme/widgets", 2, 150.0)] == ["pull_request opened"]


def test_an_older_database_loses_its_first_sightings_and_gains_observations(tmp_path: Path) -> None:
    """A head's first sighting cannot say what the head was at a moment: the table is dropped, not read."""
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE seen_heads (repo TEXT, pr_number INTEGER, head_sha TEXT, first_seen REAL, source TEXT)")
    db.execute("INSERT INTO seen_heads VALUES ('acme/widgets', 1, ?, 1.0, 'pull_request opened')", (HEAD,))
    db.commit()
    db.close()
    store = Store(path)
    tables = {row[0] for row in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "seen_heads" not in tables and "head_observations" in tables
    assert store.heads_since("acme/widgets", 1, 10.0) == []
    store.close()


def test_prior_attempts_of_the_same_head_with_their_verdicts(store: Store) -> None:
    first = create(store)
    store.transition(first.id, S.DISPATCHED, "go")
    store.transition(first.id, S.RUNNING, "go")
    store.transition(first.id, S.COMPLETED, "done", semantic="FAIL", performance="INCONCLUSIVE")
    other_head = create(store, head="c" * 40, delivery="d2")
    second = create(store, delivery="d3")
    store.transition(second.id, S.SUPERSEDED, "replaced by a rerun")
    third = create(store, delivery="d4")
    assert store.prior_attempts(first.id) == []
    assert store.prior_attempts(other_head.id) == []
    attempts = store.prior_attempts(third.id)
    assert [(a.campaign_id, a.state, a.semantic, a.performance) for a in attempts] == [
        (first.id, "completed", "FAIL", "INCONCLUSIVE"),
        (second.id, "superseded", None, None),
    ]
    assert all(isinstance(a, PriorAttempt) and a.finished_unix is not None for a in attempts)
    assert {a.requested_by for a in attempts} == {"maintainer"} and {a.head_sha for a in attempts} == {HEAD}
    assert store.require(third.id).config_sha == TIP


def test_a_database_from_before_reruns_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE campaigns (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, repo TEXT NOT NULL,"
        " pr_number INTEGER NOT NULL, head_sha TEXT NOT NULL, base_sha TEXT NOT NULL, relationship TEXT NOT NULL,"
        " rows TEXT, rows_key TEXT NOT NULL, state TEXT NOT NULL, check_run_id INTEGER, status_comment_id INTEGER,"
        " published_position INTEGER, requested_by TEXT NOT NULL, trigger TEXT NOT NULL, delivery_id TEXT NOT NULL,"
        " backend TEXT NOT NULL, created_at REAL NOT NULL, deadline REAL, artifact_dir TEXT,"
        " attempt INTEGER NOT NULL DEFAULT 0, handle TEXT, reason TEXT NOT NULL DEFAULT '', conclusion TEXT,"
        " config_text TEXT NOT NULL, config_source TEXT NOT NULL);"
        "CREATE UNIQUE INDEX campaigns_one_per_key ON campaigns (repo, pr_number, head_sha, base_sha, rows_key)"
        " WHERE state IN ('requested', 'dispatched', 'running', 'completed');"
        "INSERT INTO campaigns (id, repo, pr_number, head_sha, base_sha, relationship, rows_key, state,"
        " requested_by, trigger, delivery_id, backend, created_at, config_text, config_source) VALUES ('kvp-old',"
        f" 'acme/widgets', 1, '{HEAD}', '{BASE}', 'ancestor', 'r1,r2', 'completed', 'm', 'label', 'd0', 'local',"
        f" 1.0, '', '.github/kv-parity.toml@{BASE}');"
        "CREATE TABLE refusals (repo TEXT, pr_number INTEGER, login TEXT, reason TEXT, at REAL);"
    )
    db.close()
    store = Store(path)
    old = store.require("kvp-old")
    assert old.config_sha is None and old.state == S.COMPLETED
    rerun = create(store, delivery="d1")
    assert [a.campaign_id for a in store.prior_attempts(rerun.id)] == ["kvp-old"]
    tables = {row[0] for row in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
    assert "refusals" not in tables and "campaigns_one_per_key" not in tables


def test_publications_retry_then_done(store: Store) -> None:
    campaign = create(store)
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
    campaign = create(store)
    with pytest.raises(ValueError, match="cannot update"):
        store.transition(campaign.id, S.DISPATCHED, "go", state="x")


def test_visibility_is_written_only_when_it_changes_and_an_internal_repository_is_never_public(store: Store) -> None:
    public = repository_seen(b'{"repository": {"full_name": "acme/widgets", "private": false, "visibility": "public"}}')
    assert public is not None and store.repository_private("acme/widgets") is None, "unknown until a delivery says"
    assert store.record_visibility(public, 1.0) is True
    assert store.record_visibility(public, 2.0) is False, "the same visibility again writes nothing"
    assert store.repository_private("ACME/Widgets") is False, "GitHub names repositories case-insensitively"
    internal = RepositorySeen(full_name="acme/widgets", private=False, visibility="internal")
    assert store.record_visibility(internal, 3.0) is True and store.repository_private("acme/widgets") is True
    for body in (b"[]", b"not json", b'{"repository": {"full_name": "acme/widgets"}}', b'{"installation": {}}'):
        assert repository_seen(body) is None, body
