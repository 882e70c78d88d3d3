"""Who asked for what, end to end (issue 10 items 1-4): the real service over HTTP, real SQLite, the GitHub
stand-in and the local backend running a stand-in runner as a real subprocess.

The history differs from tests/test_server_e2e.py in one way that matters here: the base branch's config moved
on after the pull requests branched (the merge base has one row, main's tip has two), so every campaign shows
that the config is read at the tip and recorded with its SHA while the baseline stays the merge base.

No sleeps for synchronisation: every wait is `wait_until(condition)` with a bounded deadline.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.core.campaign import CampaignState
from bot.core.commands import approval_command
from bot.dispatch.local import process_alive
from runners.schema.report import CampaignReport
from tests.service_fixtures import Env, service, standin_env
from tests.webhooks import (
    CONFIG_TOML,
    REPO,
    check_run_event,
    comment_event,
    commit,
    git,
    github_time,
    post,
    pull_request_event,
    register_test_app,
    wait_until,
)

S = CampaignState
OLD_CONFIG = CONFIG_TOML[: CONFIG_TOML.index('[[rows]]\nid = "vllm-disagg"')]
"""The config as it was when the pull requests branched: one row."""
assert 'id = "vllm-agg"' in OLD_CONFIG and "vllm-disagg" not in OLD_CONFIG


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """main: root - base (old config, one row) - main2 (config now has two rows); feature and fork from base."""
    repo = tmp_path_factory.mktemp("widgets")
    git(repo, "init", "--quiet", "-b", "main")
    shas: dict[str, Any] = {"repo": repo}
    shas["root"] = commit(repo, {"README.md": "# widgets\n"}, "root")
    shas["base"] = commit(repo, {".github/kv-parity.toml": OLD_CONFIG}, "add the campaign config")
    shas["main2"] = commit(repo, {".github/kv-parity.toml": CONFIG_TOML}, "config: add the disagg row")
    git(repo, "checkout", "--quiet", "-b", "feature", shas["base"])
    shas["head"] = commit(repo, {"src/lib.rs": "fn head() {}\n"}, "head")
    shas["head2"] = commit(repo, {"src/lib.rs": "fn head2() {}\n"}, "head 2")
    git(repo, "checkout", "--quiet", "-b", "fork", shas["base"])
    shas["fork1"] = commit(repo, {"src/fork.rs": "1\n"}, "fork 1")
    shas["fork2"] = commit(repo, {"src/fork.rs": "2\n"}, "fork 2")
    git(repo, "checkout", "--quiet", "main")
    shas["legacy_head"] = shas["broken_head"] = shas["root"]
    return shas


@pytest.fixture()
def env(tmp_path: Path, history: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    with standin_env(tmp_path, history, monkeypatch, config_pulls=False) as found:
        yield found


def _fork_event(env: Env, action: str, head: str, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("sender", "contributor")
    return pull_request_event(action, number=2, head_sha=head, base_sha=env.main2, fork=True, **kwargs)


def _runs_of(env: Env) -> list[tuple[str, str | None]]:
    """(head, rows) of every runner started, in order."""
    found = []
    for run in env.runs():
        argv = run["argv"]
        found.append((argv[argv.index("--head") + 1], argv[argv.index("--rows") + 1] if "--rows" in argv else None))
    return found


# ----------------------------------------------------------------- rerun means rerun


def test_every_way_to_rerun_starts_a_new_campaign_that_lists_the_earlier_ones(env: Env) -> None:
    with service(env.settings()) as svc:
        post(svc.url, "pull_request", env.label(), delivery="label")
        [first] = svc.wait_state(S.COMPLETED)
        post(svc.url, "issue_comment", comment_event("/parity rerun"), delivery="rerun")
        second_post = post(svc.url, "issue_comment", comment_event("/parity rerun"), delivery="rerun")
        assert second_post.json() == {"duplicate": "rerun"}, "a redelivery is not a second request"
        svc.wait_state(S.COMPLETED, count=2)
        post(svc.url, "issue_comment", comment_event("/parity rerun rows=vllm-agg"), delivery="rows")
        third = svc.wait_state(S.COMPLETED, count=3)[-1]
        button = check_run_event("requested_action", external_id=third.id, head_sha=env.head, identifier="rerun")
        post(svc.url, "check_run", button, delivery="button")
        fourth = svc.wait_state(S.COMPLETED, count=4)[-1]
        rerequested = check_run_event("rerequested", external_id=fourth.id, head_sha=env.head)
        post(svc.url, "check_run", rerequested, delivery="rerequested")
        done = svc.wait_state(S.COMPLETED, count=5)
        wait_until(lambda: len(svc.publisher.of("finished")) == 5, "five results published")
    assert [c.trigger for c in done] == ["label", "comment", "comment", "check_run", "check_run"]
    assert [c.rows for c in done] == [None, None, ["vllm-agg"], ["vllm-agg"], ["vllm-agg"]], "a button keeps rows"
    assert _runs_of(env) == [(env.head, None)] * 2 + [(env.head, "vllm-agg")] * 3
    assert [svc.store.delivery_status(d) for d in ("rerun", "rows", "button", "rerequested")] == [
        ("done", f"campaign {c.id} requested") for c in done[1:]
    ]
    results = svc.publisher.of("finished")
    assert [[a["campaign_id"] for a in r["prior"]] for r in results] == [[c.id for c in done[:n]] for n in range(5)]
    first_attempt = results[1]["prior"][0]
    assert (first_attempt["state"], first_attempt["semantic"], first_attempt["performance"]) == (
        "completed",
        "PASS",
        "PASS",
    )
    assert first_attempt["requested_by"] == "maintainer" and first_attempt["head_sha"] == env.head
    assert first_attempt["finished_unix"] is not None and first.id == first_attempt["campaign_id"]


def test_the_label_added_again_to_a_completed_head_is_answered_not_rerun(env: Env) -> None:
    with service(env.settings()) as svc:
        post(svc.url, "pull_request", env.label())
        [done] = svc.wait_state(S.COMPLETED)
        post(svc.url, "pull_request", env.label(), delivery="again")
        assert svc.wait_delivery("again") == f"duplicate of {done.id}"
    assert len(env.runs()) == 1 and len(svc.campaigns()) == 1


# ----------------------------------------------------------------- config from the trusted tip


def test_a_pull_request_branched_from_an_old_config_is_judged_by_the_tips(env: Env) -> None:
    with service(env.settings()) as svc:
        post(svc.url, "pull_request", env.label())
        [done] = svc.wait_state(S.COMPLETED)
    source = f".github/kv-parity.toml @ {env.main2} (base branch tip)"
    assert done.base_sha == env.base, "the baseline is still the merge base"
    assert (done.config_sha, done.config_source) == (env.main2, source)
    assert svc.store.config_text(done.id) == CONFIG_TOML != OLD_CONFIG
    [run] = env.runs()
    assert run["config"] == CONFIG_TOML, "both rows of the tip's config, not the merge base's one"
    argv = run["argv"]
    assert argv[argv.index("--config-ref") + 1] == env.main2 and argv[argv.index("--base") + 1] == env.base
    assert done.artifact_dir is not None
    report = CampaignReport.model_validate_json((done.artifact_dir / "report.json").read_text())
    assert report.config_source == source and str(env.tmp) not in report.config_source


# ----------------------------------------------------------------- fork approval names the head


def test_fork_approval_by_full_sha_and_by_a_plain_rerun_only_of_the_head_when_the_comment_was_written(
        env: Env) -> None:
    with service(env.settings(hold=True)) as svc:
        post(svc.url, "pull_request", _fork_event(env, "opened", env.fork1), delivery="opened")
        assert svc.wait_delivery("opened").startswith("ignored:")
        seen = svc.store.heads_since(REPO, 2, time.time())
        assert [head.head_sha for head in seen] == [env.fork1], "the bot saw fork1 when it was opened"
        # A plain rerun written after fork1 was seen approves fork1 (GitHub's timestamps are whole seconds, so
        # "after" is the next second: within the same second the bot cannot tell, and refuses).
        after = comment_event("/parity rerun", number=2, created_at=github_time(time.time() + 1))
        post(svc.url, "issue_comment", after, delivery="plain-1")
        assert svc.wait_delivery("plain-1").startswith("campaign ")
        [first] = svc.wait_state(S.RUNNING, pr=2)
        assert first.head_sha == env.fork1 and svc.store.is_approved(REPO, 2, env.fork1)
        wait_until(lambda: env.runs(), "fork1's runner started")
        # The contributor pushes fork2; a comment written before the bot had seen it approves nothing.
        written_before = github_time(time.time() - 60)
        env.fake.add_pull(REPO, 2, env.fork2, "fork", "main", head_repo_full_name="contributor/widgets")
        post(svc.url, "pull_request", _fork_event(env, "synchronize", env.fork2, labels=("kv-parity",)))
        svc.wait_state(S.SUPERSEDED, pr=2)
        stale = comment_event("/parity rerun", number=2, created_at=written_before)
        post(svc.url, "issue_comment", stale, delivery="plain-stale")
        outcome = svc.wait_delivery("plain-stale")
        assert outcome.startswith(f"invalid: the head of this fork pull request is {env.fork2[:12]}"), outcome
        assert "when the comment was written" in outcome and "the bot had recorded no head" in outcome
        # A prefix is refused, however long, with the full SHA to use.
        post(svc.url, "issue_comment", comment_event(f"/parity rerun sha={env.fork2[:39]}", number=2), delivery="p")
        assert svc.wait_delivery("p").startswith(f"invalid: `sha={env.fork2[:39]}` is not a full commit SHA")
        assert not svc.store.is_approved(REPO, 2, env.fork2) and len(svc.campaigns(2)) == 1
        fixes = [r["context"]["fix"] for r in svc.publisher.of("reply", kind="refused")]
        assert fixes[-2:] == [f"check that {env.fork2} is the commit you reviewed, then comment "
                              f"`/parity rerun sha={env.fork2}`"] * 2
        # The full SHA approves exactly that head.
        post(svc.url, "issue_comment", comment_event(f"/parity rerun sha={env.fork2}", number=2), delivery="full")
        assert svc.wait_delivery("full").startswith("campaign ")
        env.hold.touch()
        [second] = svc.wait_state(S.COMPLETED, pr=2)
    assert second.head_sha == env.fork2 and svc.store.is_approved(REPO, 2, env.fork2)
    assert [head for head, _ in _runs_of(env)] == [env.fork1, env.fork2]


def test_a_fork_head_swapped_back_after_the_review_is_not_approved_by_a_plain_rerun(env: Env) -> None:
    """A-B-A through the real service: the author opens with BAD (fork2), pushes GOOD (fork1), the maintainer
    reviews GOOD and comments a plain rerun, and the author pushes BAD again before the bot handles the comment
    (GitHub shows BAD when the bot fetches the pull request; the push's own delivery comes after the comment)."""
    def push(head: str, action: str, delivery: str) -> None:
        env.fake.add_pull(REPO, 2, head, "fork", "main", head_repo_full_name="contributor/widgets")
        post(svc.url, "pull_request", _fork_event(env, action, head), delivery=delivery)

    bad, good = env.fork2, env.fork1
    with service(env.settings()) as svc:
        push(bad, "opened", "bad")
        push(good, "synchronize", "good")
        assert svc.wait_delivery("bad").startswith("ignored:") and svc.wait_delivery("good").startswith("ignored:")
        [*_, good_seen] = svc.store.heads_since(REPO, 2, 0.0)
        assert good_seen.head_sha == good
        # GitHub writes the comment's time in whole seconds: the first second after GOOD was seen. The review
        # takes at least until it began, so the clock is let past it before BAD is pushed again.
        written = math.floor(good_seen.at) + 1
        wait_until(lambda: time.time() > written, "the review's second to pass")
        env.fake.add_pull(REPO, 2, bad, "fork", "main", head_repo_full_name="contributor/widgets")
        comment = comment_event("/parity rerun", number=2, created_at=github_time(written))
        post(svc.url, "issue_comment", comment, delivery="plain")
        outcome = svc.wait_delivery("plain")
        post(svc.url, "pull_request", _fork_event(env, "synchronize", bad), delivery="bad-again")
        assert svc.wait_delivery("bad-again").startswith("ignored:")
    assert outcome.startswith(f"invalid: the head of this fork pull request is {bad[:12]}, but when the comment "
                              "was written"), outcome
    assert f"the bot had recorded {good[:12]} as its head" in outcome
    assert svc.campaigns(2) == [] and env.runs() == []
    assert not svc.store.is_approved(REPO, 2, bad) and not svc.store.is_approved(REPO, 2, good)
    [refused] = svc.publisher.of("reply", kind="refused")
    assert refused["context"]["fix"] == (f"check that {bad} is the commit you reviewed, then comment "
                                         f"`{approval_command('/parity', bad)}`")
    assert [head.source for head in svc.store.heads_since(REPO, 2, written)] == [
        "pull_request synchronize", "pull request fetched", "pull_request synchronize"]


# ----------------------------------------------------------------- commands are visible and the bot's own


@pytest.mark.parametrize(
    "body",
    [
        "LGTM <!-- /parity cancel -->",
        "<!--\n/parity cancel\n-->",
        "<details><summary>more</summary>\n\n/parity cancel\n\n</details>",
        '<div align="right">\n/parity cancel\n</div>',
    ],
    ids=["inline-comment", "comment-block", "details", "html-block"],
)
def test_hidden_commands_do_nothing_and_cost_no_api_call(env: Env, body: str) -> None:
    with service(env.settings()) as svc:
        post(svc.url, "issue_comment", comment_event(body), delivery="hidden")
        assert svc.wait_delivery("hidden") == "ignored: no command"
    assert svc.publisher.calls == [] and env.fake.calls_to("GET", r"/permission") == []


def test_removing_the_label_needs_the_permission_adding_it_does(env: Env) -> None:
    def unlabel(sender: str) -> dict[str, Any]:
        return pull_request_event("unlabeled", head_sha=env.head, base_sha=env.main2, label="kv-parity", sender=sender)

    with service(env.settings(hold=True)) as svc:
        post(svc.url, "pull_request", env.label())
        [running] = svc.wait_state(S.RUNNING)
        pid = wait_until(lambda: env.runs(), "runner started")[0]["pid"]
        post(svc.url, "pull_request", unlabel("reader"), delivery="r")
        assert svc.wait_delivery("r").startswith("refused: @reader has 'read' permission on this repository; removing")
        assert svc.store.require(running.id).state == S.RUNNING and process_alive(pid, None)
        post(svc.url, "pull_request", unlabel("maintainer"), delivery="m")
        assert svc.wait_delivery("m") == f"cancelled ['{running.id}']: the 'kv-parity' label was removed by @maintainer"
        svc.wait_state(S.CANCELLED)


def test_the_bot_is_known_by_id_so_a_human_owning_its_slug_is_a_human(env: Env) -> None:
    """In App mode the bot is `kv-parity[bot]`; the human `kv-parity` is someone else and may use commands."""
    env.fake.set_permission(REPO, "kv-parity", "write")
    with service(env.settings(**register_test_app(env.fake, env.tmp))) as svc:
        post(svc.url, "issue_comment", comment_event("/parity status", sender="kv-parity"), delivery="human")
        post(svc.url, "issue_comment", comment_event("/parity status", sender="kv-parity[bot]"), delivery="bot")
        assert svc.wait_delivery("human") == "status"
        assert svc.wait_delivery("bot") == "ignored: the bot's own comment"
    assert [r["kind"] for r in svc.publisher.of("reply")] == ["status"]
    assert [c.path for c in env.fake.calls if c.path.startswith("/users/")] == ["/users/kv-parity[bot]"]


def test_a_flood_of_unauthorised_commands_gets_one_answer_and_one_permission_lookup(env: Env) -> None:
    count = 60
    with service(env.settings()) as svc:
        for n in range(count):
            post(svc.url, "issue_comment", comment_event("/parity rerun", sender="reader"), delivery=f"spam-{n}")
        outcomes = [svc.wait_delivery(f"spam-{n}") for n in range(count)]
    assert outcomes[0].startswith("refused: @reader has 'read' permission")
    assert all(o.startswith("refused again, not answered (one answer per 600 s)") for o in outcomes[1:])
    assert [r["kind"] for r in svc.publisher.of("reply")] == ["refused"]
    assert len(env.fake.calls_to("GET", r"/collaborators/reader/permission")) == 1
    refusals = svc.store.refusals(REPO, 1, "reader")
    assert len(refusals) == count and [r.answered for r in refusals].count(True) == 1
    assert svc.campaigns() == [] and env.runs() == []


def test_after_the_window_a_refused_person_is_asked_about_again(env: Env) -> None:
    with service(env.settings(refusal_window_seconds=0)) as svc:
        for n in range(3):
            post(svc.url, "issue_comment", comment_event("/parity status", sender="reader"), delivery=f"s-{n}")
            assert svc.wait_delivery(f"s-{n}").startswith("refused: ")
    assert len(env.fake.calls_to("GET", r"/collaborators/reader/permission")) == 3
    assert len(svc.publisher.of("reply", kind="refused")) == 3
