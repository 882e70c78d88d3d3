"""The webhook service end to end: real HTTP on 127.0.0.1, real SQLite, the GitHub stand-in, and campaigns
run by the local backend as real subprocesses (a stand-in runner honouring `kv-parity campaign`'s argv).

No sleeps for synchronisation: every wait is `wait_until(condition)` with a bounded deadline.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from bot.core.campaign import Campaign, CampaignState
from bot.core.events import AnyEvent, parse_event
from bot.dispatch.base import RunHandle
from bot.dispatch.local import LocalBackend, campaign_argv, process_alive
from bot.service.app import create_app
from bot.service.signed_body import Refused, read_signed_body
from bot.settings import Settings, SettingsError, load_settings
from bot.store.campaigns import Store
from runners.schema.report import CampaignReport
from tests.fakes.github_api import secondary_rate_limit
from tests.service_fixtures import BOT, ROOT, TOKEN, Env, service, standin_env, widgets_history
from tests.webhooks import (
    CONFIG_TOML,
    REPO,
    SECRET,
    check_run_event,
    comment_event,
    free_port,
    git,
    loopback,
    post,
    pull_request_event,
    read_record,
    register_test_app,
    serve_app,
    stand_in_runner,
    wait_until,
)

S = CampaignState


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return widgets_history(tmp_path_factory.mktemp("widgets"))


@pytest.fixture()
def env(tmp_path: Path, history: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    with standin_env(tmp_path, history, monkeypatch) as found:
        yield found


def states(store: Store, campaign_id: str) -> list[str]:
    return [t.to_state.value for t in store.transitions(campaign_id)]


# ----------------------------------------------------------------- the door


def _read_signed(secret: bytes, body: bytes, header: bytes | None) -> bytes:
    """The door's own check (`read_signed_body`) on one request, streamed in as the server hands it over."""
    headers = [(b"content-length", str(len(body)).encode())]
    if header is not None:
        headers.append((b"x-hub-signature-256", header))

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    request = Request({"type": "http", "method": "POST", "path": "/webhook", "headers": headers}, receive)
    return asyncio.run(read_signed_body(request, secret, timeout=5.0))


def test_signature_check() -> None:
    body = b'{"a": 1}'
    good = "sha256=" + hmac.new(b"k", body, "sha256").hexdigest()
    assert _read_signed(b"k", body, good.encode()) == body
    refused = [
        (b"k", body + b" ", good.encode()),
        (b"other", body, good.encode()),
        (b"k", body, None),
        (b"k", body, b""),
        (b"k", body, ("sha1=" + good[7:]).encode()),
        (b"k", body, good.upper().encode()),
        (b"k", body, "sha256=ü".encode()),
    ]
    for secret, sent, header in refused:
        with pytest.raises(Refused) as caught:
            _read_signed(secret, sent, header)
        assert caught.value.status == 401, (secret, sent, header)


def test_wrong_or_missing_signature_is_401_and_nothing_is_stored(env: Env) -> None:
    with service(env.settings()) as svc:
        wrong = post(svc.url, "pull_request", env.label(), secret="not-the-secret")
        missing = post(svc.url, "pull_request", env.label(), signature="")
        garbage = post(svc.url, "pull_request", env.label(), signature="sha256=00")
        assert [r.status_code for r in (wrong, missing, garbage)] == [401, 401, 401]
        assert svc.store.delivery_counts() == {} and svc.store.rejected_deliveries() == []
        assert svc.campaigns() == [] and svc.publisher.calls == []


def test_malformed_payload_is_400_naming_the_field_and_kept_for_diagnosis(env: Env) -> None:
    payload = env.label()
    del payload["pull_request"]["head"]["sha"]
    with service(env.settings()) as svc:
        response = post(svc.url, "pull_request", payload, delivery="bad-1")
        assert response.status_code == 400
        assert "pull_request.head.sha: Field required" in response.json()["error"]
        assert svc.store.rejected_deliveries()[0][:2] == ("bad-1", "pull_request")
        assert svc.store.delivery_counts() == {}
        assert post(svc.url, "ping", {"zen": "hi"}).status_code == 200
        assert post(svc.url, "star", {"action": "created"}).json() == {"ignored": "event 'star' is not handled"}
        assert loopback().get(f"{svc.url}/healthz").json()["worker_alive"] is True


def test_a_delivery_is_parsed_once_the_door_hands_its_typed_event_to_the_worker(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []

    def counted(event: str, body: bytes) -> AnyEvent:
        parsed.append(event)
        return parse_event(event, body)

    monkeypatch.setattr("bot.service.app.parse_event", counted)
    monkeypatch.setattr("bot.modes.intake.parse_event", counted)
    settings = env.settings()
    stored = json.dumps(comment_event("/parity status")).encode()
    Store(settings.db_path).add_delivery("before-restart", "issue_comment", stored)
    with service(settings) as svc:
        assert svc.wait_delivery("before-restart") == "status"
        assert parsed == ["issue_comment"], "a delivery stored before this process started is parsed from the store"
        assert post(svc.url, "issue_comment", comment_event("/parity help"), delivery="h").status_code == 202
        assert svc.wait_delivery("h") == "help"
    assert parsed == ["issue_comment", "issue_comment"], "the door's parse is the one the worker acted on"
    assert [reply["kind"] for reply in svc.publisher.of("reply")] == ["status", "help"]


# ----------------------------------------------------------------- a campaign from label to verdict


def test_labeled_event_runs_a_campaign_to_completion(env: Env) -> None:
    with service(env.settings()) as svc:
        response = post(svc.url, "pull_request", env.label(), delivery="label-1")
        assert response.status_code == 202 and response.json() == {"queued": "label-1"}
        [done] = svc.wait_state(S.COMPLETED)
        wait_until(lambda: svc.publisher.of("finished"), "finished published")
    assert done.head_sha == env.head and done.base_sha == env.base, "base is the merge base, not main's tip"
    assert done.relationship == "diverged" and done.requested_by == "maintainer" and done.trigger == "label"
    assert done.conclusion == "success" and done.attempt == 1 and svc.store.check_run_of(done.id) == 1
    source = f".github/kv-parity.toml @ {env.main2} (base branch tip)"
    assert done.config_source == source and done.config_sha == env.main2, "the config is read at main's tip"
    assert states(svc.store, done.id) == ["requested", "dispatched", "running", "completed"]
    assert done.artifact_dir is not None and (done.artifact_dir / "report.json").is_file()
    report = CampaignReport.model_validate_json((done.artifact_dir / "report.json").read_text())
    assert report.config_source == source, "the report names the config, never the service's temporary file"
    [run] = env.runs()
    assert run["config"] == CONFIG_TOML, "the config comes from the base branch, never from the head"
    work = done.artifact_dir.parent
    assert run["argv"][-20:] == [
        "--repo",
        str(work / "repo"),
        "--base",
        env.base,
        "--head",
        env.head,
        "--config",
        str(work / "campaign.toml"),
        "--config-ref",
        env.main2,
        "--config-source",
        source,
        "--build-cache",
        str(env.tmp / "work" / "build-cache"),
        "--out",
        str(done.artifact_dir),
        "--campaign-id",
        done.id,
        "--progress-jsonl",
        str(work / "progress.jsonl"),
    ]
    calls = [(c["method"], c.get("position", c.get("stage", c.get("conclusion")))) for c in svc.publisher.calls]
    assert calls == [
        ("queued", 1),
        ("queued", 0),
        ("progress", "build"),
        ("progress", "report"),
        ("finished", "success"),
    ]
    assert svc.store.delivery_status("label-1") == ("done", f"campaign {done.id} requested")


def test_the_same_delivery_twice_makes_one_campaign(env: Env) -> None:
    with service(env.settings()) as svc:
        first = post(svc.url, "pull_request", env.label(), delivery="dup-1")
        second = post(svc.url, "pull_request", env.label(), delivery="dup-1")
        assert (first.status_code, second.status_code) == (202, 200)
        assert second.json() == {"duplicate": "dup-1"}
        svc.wait_state(S.COMPLETED)
    assert len(svc.store.for_pr(REPO, 1)) == 1 and len(env.runs()) == 1


def test_a_rerun_replaces_the_live_campaign_of_its_key_a_label_does_not_and_other_rows_queue(env: Env) -> None:
    with service(env.settings(hold=True)) as svc:
        post(svc.url, "pull_request", env.label())
        [first] = svc.wait_state(S.RUNNING)
        first_pid = wait_until(lambda: env.runs(), "runner started")[0]["pid"]
        post(svc.url, "issue_comment", comment_event("/parity rerun"), delivery="again")
        assert svc.wait_delivery("again").startswith("campaign ")
        [replaced] = svc.wait_state(S.SUPERSEDED)
        assert replaced.id == first.id and replaced.reason == "replaced by a rerun requested by @maintainer (comment)"
        assert not process_alive(first_pid, None), "the replaced campaign's process is stopped"
        [second] = svc.wait_state(S.RUNNING)
        # The label added again is not a request to run again: answered with the campaign covering the key.
        post(svc.url, "pull_request", env.label(), delivery="label-again")
        assert svc.wait_delivery("label-again") == f"duplicate of {second.id}"
        [reply] = svc.publisher.of("reply", kind="duplicate")
        assert second.id in reply["context"]["campaign"]
        # Other rows are another campaign: queued behind the running one (one at a time, FIFO).
        post(svc.url, "issue_comment", comment_event("/parity rerun rows=vllm-agg"), delivery="rows")
        assert svc.wait_delivery("rows").startswith("campaign ")
        [queued] = svc.wait_state(S.REQUESTED)
        assert queued.rows == ["vllm-agg"] and queued.queue_position == 1
        wait_until(lambda: svc.publisher.of("queued", campaign=queued.id, position=1), "position 1 published")
        post(svc.url, "issue_comment", comment_event("/parity rerun rows=nope"), delivery="bad-rows")
        assert svc.wait_delivery("bad-rows").startswith("invalid: unknown rows ['nope']")
        env.hold.touch()
        svc.wait_state(S.COMPLETED, count=2, timeout=60)
    assert [r["argv"].count("--rows") for r in env.runs()] == [0, 0, 1]
    assert env.runs()[2]["argv"][env.runs()[2]["argv"].index("--rows") + 1] == "vllm-agg"
    [finished_second] = svc.publisher.of("finished", campaign=second.id)
    assert [a["campaign_id"] for a in finished_second["prior"]] == [first.id]


# ----------------------------------------------------------------- who may ask


def test_unauthorised_commenter_is_refused_once_and_nothing_runs(env: Env) -> None:
    with service(env.settings()) as svc:
        post(svc.url, "issue_comment", comment_event("/parity rerun", sender="reader"), delivery="r1")
        post(svc.url, "issue_comment", comment_event("/parity rerun", sender="reader"), delivery="r2")
        post(svc.url, "pull_request", env.label(sender="reader"), delivery="r3")
        assert svc.wait_delivery("r1").startswith("refused: @reader has 'read' permission")
        assert svc.wait_delivery("r2").startswith("refused again, not answered")
        assert svc.wait_delivery("r3").startswith("refused again, not answered")
    [reply] = svc.publisher.of("reply")
    assert reply["kind"] == "refused" and "needs at least 'write'" in reply["context"]["reason"]
    assert svc.store.for_pr(REPO, 1) == [] and env.runs() == []
    permission_calls = env.fake.calls_to("GET", r"/collaborators/[^/]+/permission")
    assert [c.path.split("/")[-2] for c in permission_calls] == ["reader"], "the sender's, once per window"
    assert [r.answered for r in svc.store.refusals(REPO, 1, "reader")] == [True, False, False]


def test_own_and_edited_comments_and_quoted_commands_are_ignored(env: Env) -> None:
    with service(env.settings()) as svc:
        post(svc.url, "issue_comment", comment_event("/parity rerun", sender=BOT), delivery="own")
        post(svc.url, "issue_comment", comment_event("/parity rerun", action="edited"), delivery="edit")
        post(svc.url, "issue_comment", comment_event("> /parity rerun\n```\n/parity rerun\n```"), delivery="q")
        assert svc.wait_delivery("own") == "ignored: the bot's own comment"
        assert svc.wait_delivery("edit").startswith("ignored: comment edited")
        assert svc.wait_delivery("q") == "ignored: no command"
    assert svc.publisher.calls == [] and env.fake.calls_to("GET", r"/permission") == []


def test_help_status_and_unknown_subcommand(env: Env) -> None:
    with service(env.settings()) as svc:
        post(svc.url, "issue_comment", comment_event("/parity help"), delivery="h")
        post(svc.url, "issue_comment", comment_event("/parity frobnicate"), delivery="u")
        post(svc.url, "issue_comment", comment_event("/parity status"), delivery="s")
        for delivery in ("h", "u", "s"):
            svc.wait_delivery(delivery)
    kinds = [(c["kind"], c["context"]) for c in svc.publisher.of("reply")]
    assert kinds == [
        ("help", {}),
        ("unknown_command", {"line": "/parity frobnicate", "reason": "unknown subcommand 'frobnicate'"}),
        ("status", {"campaigns": "[]"}),
    ]


# ----------------------------------------------------------------- forks


def test_fork_push_after_approval_does_not_run_until_approved_again(env: Env) -> None:
    with service(env.settings(hold=True)) as svc:
        post(svc.url, "pull_request", env.label(2, env.fork1, fork=True))
        [first] = svc.wait_state(S.RUNNING, pr=2)
        assert svc.store.is_approved(REPO, 2, env.fork1)
        pid = wait_until(lambda: env.runs(), "runner started")[0]["pid"]
        env.fake.add_pull(REPO, 2, env.fork2, "fork", "main", head_repo_full_name="contributor/widgets")
        push = pull_request_event(
            "synchronize",
            number=2,
            head_sha=env.fork2,
            base_sha=env.main2,
            labels=("kv-parity",),
            fork=True,
            sender="contributor",
        )
        post(svc.url, "pull_request", push, delivery="push")
        assert svc.wait_delivery("push") == f"needs approval: {env.fork2}"
        assert svc.store.require(first.id).state == S.SUPERSEDED
        assert not process_alive(pid, None)
        assert not svc.store.is_approved(REPO, 2, env.fork2)
        assert [c.head_sha for c in svc.campaigns(2)] == [env.fork1]
        [needs] = svc.publisher.of("reply", kind="refused")
        assert f"/parity rerun sha={env.fork2}`" in needs["context"]["fix"]
        # A stale approval (naming the old head) is refused; naming the new head approves and runs it.
        post(
            svc.url,
            "issue_comment",
            comment_event(f"/parity rerun sha={env.fork1}", number=2),
            delivery="old",
        )
        assert svc.wait_delivery("old").startswith("invalid: the head moved")
        post(
            svc.url,
            "issue_comment",
            comment_event(f"/parity rerun sha={env.fork2}", number=2),
            delivery="ok",
        )
        env.hold.touch()
        [second] = svc.wait_state(S.COMPLETED, pr=2)
    assert second.head_sha == env.fork2 and svc.store.is_approved(REPO, 2, env.fork2)
    assert [r["argv"][r["argv"].index("--head") + 1] for r in env.runs()] == [env.fork1, env.fork2]


def test_push_to_a_labelled_branch_supersedes_the_running_campaign(env: Env) -> None:
    with service(env.settings(hold=True)) as svc:
        post(svc.url, "pull_request", env.label())
        [first] = svc.wait_state(S.RUNNING)
        pid = wait_until(lambda: env.runs(), "runner started")[0]["pid"]
        push = pull_request_event("synchronize", head_sha=env.head2, base_sha=env.main2, labels=("kv-parity",))
        post(svc.url, "pull_request", push)
        svc.wait_state(S.SUPERSEDED)
        [second] = svc.wait_state(S.RUNNING)
        assert second.head_sha == env.head2 and second.trigger == "synchronize"
        assert not process_alive(pid, None)
        [ended] = wait_until(lambda: svc.publisher.of("ended", campaign=first.id), "the ending published")
        assert ended["state"] == "superseded" and env.head2[:12] in ended["reason"]
        env.hold.touch()
        svc.wait_state(S.COMPLETED)


# ----------------------------------------------------------------- cancel, deadline, config errors


def test_cancel_command_kills_the_campaign_and_its_children(env: Env) -> None:
    with service(env.settings(hold=True, runner=("--grandchild",))) as svc:
        post(svc.url, "pull_request", env.label())
        [running] = svc.wait_state(S.RUNNING)
        run = wait_until(lambda: env.runs() and env.runs()[0], "runner recorded its pid")
        assert process_alive(run["pid"], None) and process_alive(run["child"], None)
        post(svc.url, "issue_comment", comment_event("/parity cancel"), delivery="cancel")
        assert svc.wait_delivery("cancel") == f"cancelled ['{running.id}']: `cancel` by @maintainer"
        assert not process_alive(run["pid"], None), "the runner is killed"
        assert not process_alive(run["child"], None), "and everything in its process group"
        assert svc.store.require(running.id).state == S.CANCELLED
        wait_until(lambda: svc.publisher.of("ended", campaign=running.id), "ended published")
        post(svc.url, "issue_comment", comment_event("/parity cancel"), delivery="cancel-2")
        svc.wait_delivery("cancel-2")
        assert svc.publisher.of("reply", kind="refused")[0]["context"]["reason"].startswith("there is no queued")
    assert states(svc.store, running.id) == ["requested", "dispatched", "running", "cancelled"]
    assert svc.store.handle(running.id) is None


def test_unlabel_and_check_run_buttons(env: Env) -> None:
    with service(env.settings(hold=True)) as svc:
        post(svc.url, "pull_request", env.label())
        [first] = svc.wait_state(S.RUNNING)
        unlabel = pull_request_event("unlabeled", head_sha=env.head, base_sha=env.main2, label="kv-parity")
        post(svc.url, "pull_request", unlabel)
        svc.wait_state(S.CANCELLED)
        rerun = check_run_event("requested_action", external_id=first.id, head_sha=env.head, identifier="rerun")
        post(svc.url, "check_run", rerun)
        [second] = svc.wait_state(S.RUNNING)
        assert second.trigger == "check_run" and second.id != first.id
        cancel = check_run_event(
            "requested_action", external_id=second.id, head_sha=env.head, identifier="cancel", pulls=()
        )
        post(svc.url, "check_run", cancel)
        svc.wait_state(S.CANCELLED, count=2)


def test_deadline_times_the_campaign_out(env: Env) -> None:
    """The deadline is moved into the past once the runner runs (as a clock passing it would), so the test
    does not depend on how fast a loaded machine starts the runner."""
    settings = env.settings(hold=True, deadline_seconds=3600)
    with service(settings) as svc:
        post(svc.url, "pull_request", env.label())
        pid = wait_until(lambda: env.runs(), "runner started")[0]["pid"]
        [running] = svc.wait_state(S.RUNNING)
        with sqlite3.connect(settings.db_path) as db:
            db.execute("UPDATE campaigns SET deadline = ? WHERE id = ?", (time.time() - 1, running.id))
        [timed_out] = svc.wait_state(S.TIMED_OUT)
        wait_until(lambda: svc.publisher.of("ended", campaign=timed_out.id, state="timed_out"), "timed_out published")
        assert not process_alive(pid, None), "killed before the ending is published"
        assert "deadline passed" in timed_out.reason


@pytest.mark.parametrize(
    ("pr", "message"),
    [
        (3, "no campaign config at the tip of legacy"),
        (4, "build.command: List should have at least 1 item"),
    ],
)
def test_bad_or_missing_config_fails_fast(env: Env, pr: int, message: str) -> None:
    head = env.legacy_head if pr == 3 else env.broken_head
    payload = pull_request_event("labeled", number=pr, head_sha=head, base_sha=env.root, label="kv-parity")
    payload["pull_request"]["base"]["ref"] = "legacy" if pr == 3 else "broken"
    with service(env.settings()) as svc:
        post(svc.url, "pull_request", payload)
        [errored] = svc.wait_state(S.ERRORED, pr=pr)
        [ended] = wait_until(lambda: svc.publisher.of("ended", campaign=errored.id), "config error published")
    assert ended["state"] == "config_error" and message in ended["reason"]
    assert svc.store.check_run_of(errored.id) is not None, "the check run carries the message"
    assert states(svc.store, errored.id) == ["requested", "errored"] and env.runs() == []


def test_a_502_from_the_api_is_retried(env: Env) -> None:
    env.fake.inject_failures("GET", r"/compare/", [(502, {}, {"message": "Bad Gateway"})])
    with service(env.settings()) as svc:
        post(svc.url, "pull_request", env.label())
        svc.wait_state(S.COMPLETED)
    assert len(env.fake.calls_to("GET", r"/compare/")) == 2


# ----------------------------------------------------------------- restarts


def _settings_file(env: Env, settings: Settings) -> Path:
    values = json.loads(settings.model_dump_json())
    values["webhook_secret"] = SECRET
    values["token"] = TOKEN
    path = env.tmp / "settings.toml"
    lines = [f"{key} = {json.dumps(value)}" for key, value in values.items() if value is not None]
    path.write_text("\n".join(lines) + "\n")
    return path


@contextmanager
def service_process(env: Env, record: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    environ = {**os.environ, "KV_PARITY_SETTINGS": str(env.tmp / "settings.toml"), "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.webhooks", "serve", "--port", str(port), "--record", str(record)],
        env=environ,
        stdin=subprocess.DEVNULL,
    )

    def healthy() -> bool:
        try:
            return loopback().get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(healthy, "service answering /healthz")
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


@pytest.mark.parametrize("runner_survives", [True, False], ids=["runner-adopted", "runner-lost"])
def test_service_killed_mid_campaign_completes_once_after_restart(env: Env, runner_survives: bool) -> None:
    settings = env.settings(hold=True)
    _settings_file(env, settings)
    record, port = env.tmp / "published.jsonl", free_port()
    with service_process(env, record, port) as first:
        post(f"http://127.0.0.1:{port}", "pull_request", env.label(), delivery="label-kill")
        run = wait_until(lambda: env.runs() and env.runs()[0], "campaign process started")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    if not runner_survives:
        os.killpg(run["pid"], signal.SIGKILL)
        wait_until(lambda: not process_alive(run["pid"], None), "runner gone")
    env.hold.touch()
    with service_process(env, record, port):
        store = Store(settings.db_path)
        [done] = wait_until(
            lambda: [c for c in store.for_pr(REPO, 1) if c.state == S.COMPLETED],
            "campaign completed after restart",
        )
        wait_until(lambda: store.publications(done.id) == [("finished", "done")], "finished published")
    assert len(store.for_pr(REPO, 1)) == 1
    assert [c for c in read_record(record) if c["method"] == "finished"] == [
        {
            "method": "finished",
            "campaign": done.id,
            "conclusion": "success",
            "summary": "semantic PASS · performance PASS · sizes PASS",
            "artifact_dir": str(done.artifact_dir),
            "prior": [],
        }
    ]
    history = store.transitions(done.id)
    if runner_survives:
        assert len(env.runs()) == 1 and done.attempt == 1
        assert [t.to_state.value for t in history] == ["requested", "dispatched", "running", "completed"]
    else:
        assert len(env.runs()) == 2 and done.attempt == 2
        assert [t.to_state.value for t in history] == [
            "requested",
            "dispatched",
            "running",
            "requested",
            "dispatched",
            "running",
            "completed",
        ]
        assert "restarting from scratch" in history[3].reason
    store.close()


# ----------------------------------------------------------------- the local backend on its own


def _view(env: Env, tmp: Path, rows: list[str] | None = None) -> Campaign:
    from datetime import UTC, datetime

    return Campaign(
        id="kvp-test",
        repo=REPO,
        pr_number=1,
        head_sha=env.head,
        base_sha=env.base,
        relationship="diverged",
        rows=rows,
        state=S.DISPATCHED,
        requested_by="m",
        trigger="label",
        created_at=datetime.now(UTC),
        deadline=None,
        artifact_dir=tmp / "attempt-1" / "out",
        queue_position=0,
        attempt=1,
        reason="",
        conclusion=None,
        config_source="x",
    )


def test_argv_contract(env: Env) -> None:
    view = _view(env, env.tmp, rows=["a", "b"])
    argv = campaign_argv(["kv-parity", "campaign"], Path("/r"), view, Path("/c.toml"), Path("/o"), Path("/p"))
    assert argv == [
        "kv-parity",
        "campaign",
        "--sandbox",
        "bwrap",
        "--repo",
        "/r",
        "--base",
        env.base,
        "--head",
        env.head,
        "--config",
        "/c.toml",
        "--config-source",
        "x",
        "--rows",
        "a,b",
        "--out",
        "/o",
        "--campaign-id",
        "kvp-test",
        "--progress-jsonl",
        "/p",
    ]
    pinned = view.model_copy(update={"config_sha": "d" * 40, "config_source": "c @ d (base branch tip)"})
    argv = campaign_argv(["kv-parity", "campaign"], Path("/r"), pinned, Path("/c.toml"), Path("/o"), Path("/p"))
    assert argv[11:17] == ["/c.toml", "--config-ref", "d" * 40, "--config-source", "c @ d (base branch tip)", "--rows"]


@pytest.mark.parametrize(
    ("runner", "error"),
    [
        (("--exit-code", "2", "--no-report"), "runner exited 2 (usage or config error)"),
        (("--exit-code", "1", "--no-report"), "runner exited 1 without"),
        (
            (
                "--exit-code",
                "3",
            ),
            None,
        ),
        (
            (
                "--exit-code",
                "1",
            ),
            None,
        ),
    ],
)
def test_local_backend_exit_codes(env: Env, runner: tuple[str, ...], error: str | None) -> None:
    argv = [*stand_in_runner(env.runs_file), *runner]
    backend = LocalBackend(env.repo, argv_prefix=argv)
    view = _view(env, env.tmp)
    handle = backend.start(view, CONFIG_TOML)
    assert backend.adopt(view) == handle
    result = wait_until(lambda: (r := backend.poll(view, handle)) and not r.running and r, "runner ended")
    assert result.exit_code == int(runner[1])
    if error is None:
        assert result.report is not None and result.report.campaign_id == "kvp-test" and result.error is None
    else:
        assert result.report is None and result.error is not None and result.error.startswith(error)


def test_local_backend_rejects_a_report_for_another_campaign(env: Env) -> None:
    argv = stand_in_runner(env.runs_file)
    backend = LocalBackend(env.repo, argv_prefix=argv)
    view = _view(env, env.tmp)
    handle = backend.start(view, CONFIG_TOML)
    wait_until(lambda: not backend.poll(view, handle).running, "runner ended")
    other = view.model_copy(update={"id": "kvp-other"})
    adopted = RunHandle.model_validate_json(handle.model_dump_json())
    result = backend.poll(other, adopted)
    assert result.error is not None and "is for campaign 'kvp-test'" in result.error


def test_local_backend_fetches_missing_commits(env: Env, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "--quiet", "--single-branch", "--branch", "legacy", str(env.repo), str(clone)],
        check=True,
    )
    git(env.repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    argv = stand_in_runner(env.runs_file)
    backend = LocalBackend(clone, argv_prefix=argv)
    view = _view(env, tmp_path)
    handle = backend.start(view, CONFIG_TOML)
    assert git(clone, "cat-file", "-t", env.head) == "commit"
    wait_until(lambda: not backend.poll(view, handle).running, "runner ended")
    missing = view.model_copy(update={"head_sha": "f" * 40})
    with pytest.raises(Exception, match="are not in"):
        backend.start(missing, CONFIG_TOML)


# ----------------------------------------------------------------- settings


def test_settings_from_file_and_environment(tmp_path: Path) -> None:
    path = tmp_path / "bot.toml"
    path.write_text('webhook_secret = "file-secret"\ntoken = "t"\nlocal_repo_path = "/srv/repo"\nlabel = "perf"\n')
    settings = load_settings(
        path,
        {
            "KV_PARITY_LABEL": "parity",
            "KV_PARITY_LOCAL_CAMPAIGN_ARGV": '["run", "it"]',
            "KV_PARITY_DEADLINE_SECONDS": "60",
            "KV_PARITY_UNRELATED": "x",
        },
    )
    assert settings.label == "parity" and settings.local_campaign_argv == ["run", "it"]
    assert settings.deadline_seconds == 60 and settings.webhook_secret.get_secret_value() == "file-secret"
    assert settings.min_permission == "write" and settings.config_path == ".github/kv-parity.toml"
    with pytest.raises(SettingsError, match="lable: Extra inputs are not permitted"):
        path.write_text('webhook_secret = "s"\ntoken = "t"\nlocal_repo_path = "/r"\nlable = "x"\n')
        load_settings(path, {})
    with pytest.raises(SettingsError, match="either token or app_id"):
        load_settings(
            None,
            {
                "KV_PARITY_WEBHOOK_SECRET": "s",
                "KV_PARITY_TOKEN": "t",
                "KV_PARITY_APP_ID": "1",
                "KV_PARITY_LOCAL_REPO_PATH": "/r",
            },
        )
    with pytest.raises(SettingsError, match="min_permission"):
        load_settings(
            None,
            {
                "KV_PARITY_WEBHOOK_SECRET": "s",
                "KV_PARITY_TOKEN": "t",
                "KV_PARITY_LOCAL_REPO_PATH": "/r",
                "KV_PARITY_MIN_PERMISSION": "owner",
            },
        )


# ----------------------------------------------------------------- with the real publisher


def test_real_publisher_and_app_auth_complete_the_check_run(env: Env) -> None:
    from bot.modes.wiring import default_publisher

    settings = env.settings(**register_test_app(env.fake, env.tmp))
    app = create_app(settings, publisher_factory=default_publisher)
    with serve_app(app) as url:
        post(url, "pull_request", env.label())
        store: Store = app.state.store
        [done] = wait_until(lambda: [c for c in store.for_pr(REPO, 1) if c.state == S.COMPLETED], "completed")
        wait_until(lambda: store.publications(done.id) == [("finished", "done")], "finished published")
        post(url, "issue_comment", comment_event("/parity rerun", sender="kv-parity[bot]"), delivery="own")
        assert wait_until(lambda: (s := store.delivery_status("own")) and s[0] == "done" and s[1], "own") == (
            "ignored: the bot's own comment"
        )
    [check_run] = env.fake.check_runs(REPO)
    assert (check_run["status"], check_run["conclusion"]) == ("completed", "success")
    assert check_run["external_id"] == done.id and check_run["head_sha"] == env.head
    bodies = [c["body"] for c in env.fake.comments(REPO, 1)]
    assert any(done.id in body for body in bodies)


def test_a_delivery_that_keeps_failing_is_recorded_and_the_worker_goes_on(env: Env) -> None:
    env.fake.inject_failures("GET", r"/compare/", [(404, {}, {"message": "Not Found"})])
    with service(env.settings(delivery_max_attempts=1)) as svc:
        post(svc.url, "pull_request", env.label(), delivery="fails")
        assert svc.wait_delivery("fails").startswith("GitHubNotFoundError: compare main...")
        assert svc.store.delivery_status("fails")[0] == "failed"  # type: ignore[index]
        post(svc.url, "pull_request", env.label(), delivery="works")
        svc.wait_state(S.COMPLETED)
        assert loopback().get(f"{svc.url}/healthz").json() == {
            "worker_alive": True,
            "database_writable": True,
            "deliveries": {"failed": 1, "done": 1},
        }


# ----------------------------------------------------------------- GitHub faults (issue 10.6)


def test_a_rate_limit_longer_than_the_bound_requeues_the_delivery_instead_of_sleeping(env: Env) -> None:
    env.fake.inject_failures("GET", r"/compare/", [secondary_rate_limit(retry_after=90)])
    with service(env.settings(bot_login=BOT)) as svc:
        post(svc.url, "pull_request", env.label(), delivery="limited")
        status, outcome = wait_until(
            lambda: (s := svc.store.delivery_status("limited")) and s[1] and s, "the delivery re-queued"
        )
        assert status == "pending" and outcome.startswith("GitHubRetryLaterError: compare")
        with sqlite3.connect(env.settings().db_path) as db:
            [(not_before, attempts)] = db.execute(
                "SELECT not_before, attempts FROM deliveries WHERE id = 'limited'"
            ).fetchall()
        assert not_before > time.time() + 60, "due when GitHub said, not after a short backoff"
        assert len(env.fake.calls_to("GET", r"/compare/")) == 1, "never retried within the worker"
        post(svc.url, "issue_comment", comment_event("hi", repo="someone/else"), delivery="next")
        assert svc.wait_delivery("next").startswith("ignored: repository someone/else")
        assert loopback().get(f"{svc.url}/healthz").json()["worker_alive"] is True
        assert svc.campaigns() == []


def test_sigterm_during_a_retry_wait_exits_before_the_retry_and_the_delivery_is_redone(env: Env) -> None:
    settings = env.settings(api_max_retry_wait_seconds=120)
    _settings_file(env, settings)
    env.fake.inject_failures("GET", r"/compare/", [secondary_rate_limit(retry_after=60)])
    record, port = env.tmp / "published.jsonl", free_port()
    with service_process(env, record, port) as first:
        post(f"http://127.0.0.1:{port}", "pull_request", env.label(), delivery="label-term")
        wait_until(lambda: env.fake.calls_to("GET", r"/compare/"), "compare answered 403 Retry-After: 60")
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=50)
        # The gateway was to retry 60 s after the first call: exactly one call means it exited before then.
        assert len(env.fake.calls_to("GET", r"/compare/")) == 1
    store = Store(settings.db_path)
    assert store.delivery_status("label-term") == ("pending", None), "left queued, not counted as a failure"
    with service_process(env, record, port):
        wait_until(lambda: [c for c in store.for_pr(REPO, 1) if c.state == S.COMPLETED], "completed after restart")
    assert len(env.fake.calls_to("GET", r"/compare/")) == 2
    assert store.delivery_status("label-term")[0] == "done"  # type: ignore[index]
    store.close()


def test_a_502_after_the_comment_was_created_leaves_one_comment(env: Env) -> None:
    from bot.modes.wiring import default_publisher

    env.fake.inject_failures(
        "POST", r"/issues/1/comments$", [(502, {}, {"message": "Bad Gateway"})] * 2, after_acting=True
    )
    settings = env.settings(**register_test_app(env.fake, env.tmp))
    app = create_app(settings, publisher_factory=default_publisher)
    with serve_app(app) as url:
        post(url, "pull_request", env.label())
        store: Store = app.state.store
        [done] = wait_until(lambda: [c for c in store.for_pr(REPO, 1) if c.state == S.COMPLETED], "completed")
        wait_until(lambda: store.publications(done.id) == [("finished", "done")], "finished published")
    posts = env.fake.calls_to("POST", r"/issues/1/comments$")
    comments = env.fake.comments(REPO, 1)
    assert len(posts) == len(comments) >= 2, "each comment posted once, the 502s notwithstanding"
    openings = [c["body"].split("\n", 1)[0] for c in comments]
    assert len(set(openings)) == len(openings)


def test_a_publication_github_asks_to_delay_is_rescheduled_for_then_not_given_up(env: Env) -> None:
    from bot.modes.wiring import default_publisher

    settings = env.settings(hold=True, **register_test_app(env.fake, env.tmp))
    app = create_app(settings, publisher_factory=default_publisher)
    with serve_app(app) as url:
        post(url, "pull_request", env.label())
        store: Store = app.state.store
        wait_until(lambda: env.fake.check_runs(REPO) and env.runs(), "check run opened and campaign running")
        limited = secondary_rate_limit(retry_after=90)
        for method, path in (("PATCH", r"/check-runs/"), ("POST", r"/comments$"), ("PATCH", r"/comments/")):
            env.fake.inject_failures(method, path, [limited])
        env.hold.touch()
        [done] = wait_until(lambda: [c for c in store.for_pr(REPO, 1) if c.state == S.COMPLETED], "completed")
        with sqlite3.connect(settings.db_path) as db:
            row = wait_until(
                lambda: db.execute(
                    "SELECT status, not_before, error FROM publications WHERE campaign_id = ? AND kind = 'finished' "
                    "AND error IS NOT NULL",
                    (done.id,),
                ).fetchone(),
                "the finished publication deferred",
            )
    status, not_before, error = row
    assert status == "pending" and error.startswith("GitHubRetryLaterError")
    assert not_before > time.time() + 60, "due when GitHub said, not after the 10 s backoff"
    assert env.fake.check_runs(REPO)[0]["status"] != "completed", "nothing sent while GitHub asked to wait"
