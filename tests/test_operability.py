"""What operators see (issue 38) end to end: `/metrics` scraped with prometheus_client's own text parser while
campaigns are queued, running and finished; the queue page in Chromium; JSON log lines parsed; and the handled
GitHub retries logged as one line each. The real service over HTTP on 127.0.0.1, real SQLite, the GitHub stand-in
and campaigns run by the local backend as real subprocesses (the stand-in runner). No sleeps: every wait is a
bounded `wait_until`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.core.campaign import CampaignState
from bot.modes.wiring import default_publisher
from bot.pages.details import SECURITY_HEADERS
from bot.service.app import create_app
from bot.settings import SettingsError
from bot.store.campaigns import Store
from tests.browser import Browser
from tests.fakes.github_api import RATE_LIMIT, secondary_rate_limit
from tests.service_fixtures import ROOT, Env, service, standin_env, widgets_history
from tests.test_server_e2e import _settings_file
from tests.webhooks import (
    REPO,
    comment_event,
    free_port,
    loopback,
    post,
    register_test_app,
    serve_app,
    wait_until,
)

S = CampaignState
TOKEN = "metrics-token-0123456789abcdef"
PUBLIC = "https://kv-parity.example.com"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return widgets_history(tmp_path_factory.mktemp("widgets"))


@pytest.fixture()
def env(tmp_path: Path, history: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    with standin_env(tmp_path, history, monkeypatch) as found:
        yield found


def scrape(url: str, token: str | None = None) -> Samples:
    """`GET /metrics` parsed by prometheus_client's own text parser: every sample by name and labels."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = loopback().get(f"{url}/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


# ----------------------------------------------------------------- /metrics


def test_metrics_move_as_campaigns_queue_run_and_finish(env: Env) -> None:
    port = free_port()
    settings = env.settings(hold=True, runner=("--row-progress",), metrics_listen=f"127.0.0.1:{port}")
    metrics = f"http://127.0.0.1:{port}"
    with service(settings) as svc:
        assert loopback().get(f"{svc.url}/metrics").status_code == 404, "not on the public listener"
        empty = scrape(metrics)
        assert value(empty, "kv_parity_campaigns", state="running", backend="local") is None
        assert value(empty, "kv_parity_deliveries_stored", status="pending") == 0

        assert post(svc.url, "pull_request", env.label(), delivery="label").status_code == 202
        svc.wait_state(S.RUNNING)
        post(svc.url, "issue_comment", comment_event("/parity rerun rows=vllm-agg"), delivery="rows")
        [queued] = svc.wait_state(S.REQUESTED)
        assert post(svc.url, "pull_request", env.label(), delivery="label").json() == {"duplicate": "label"}
        unsigned = {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "forged", "X-Hub-Signature-256": "sha256=0"}
        forged = loopback().post(f"{svc.url}/webhook", content=b"{}", headers=unsigned)
        assert forged.status_code == 401

        during = scrape(metrics)
        assert value(during, "kv_parity_campaigns", state="running", backend="local") == 1
        assert value(during, "kv_parity_campaigns", state="requested", backend="local") == 1
        assert value(during, "kv_parity_queue_length", backend="local", runner_labels="self-hosted") == 1
        waited = value(during, "kv_parity_queue_oldest_age_seconds", backend="local", runner_labels="self-hosted")
        assert waited is not None and 0 <= waited < 600
        deliveries = "kv_parity_deliveries_total"
        assert value(during, deliveries, event="pull_request", action="labeled", outcome="accepted") == 1
        assert value(during, deliveries, event="pull_request", action="labeled", outcome="duplicate") == 1
        assert value(during, deliveries, event="issue_comment", action="created", outcome="accepted") == 1
        assert value(during, deliveries, event="(unverified)", action="", outcome="bad_signature") == 1
        calls = value(during, "kv_parity_github_calls_total", repo=REPO)
        assert calls is not None and calls > 0
        used = len([c for c in env.fake.calls if c.path.startswith("/repos/") or c.path.startswith("/user")])
        remaining = value(during, "kv_parity_github_rate_limit_remaining", repo=REPO)
        assert remaining is not None and RATE_LIMIT - used <= remaining < RATE_LIMIT, (remaining, used)
        assert value(during, "kv_parity_github_rate_limit", repo=REPO) == RATE_LIMIT
        assert value(during, "kv_parity_stage_duration_seconds_count", backend="local", stage="build") is None

        env.hold.touch()
        svc.wait_state(S.COMPLETED, count=2, timeout=60)
        wait_until(lambda: all(svc.store.publications(c.id) == [("finished", "done")] for c in svc.campaigns()),
                   "both results published")
        after = scrape(metrics)
    assert value(after, "kv_parity_campaigns", state="completed", backend="local") == 2
    assert value(after, "kv_parity_campaigns", state="running", backend="local") is None
    assert value(after, "kv_parity_queue_length", backend="local", runner_labels="self-hosted") is None
    ran = "kv_parity_campaign_duration_seconds"
    assert value(after, f"{ran}_count", backend="local", state="completed") == 2
    assert value(after, f"{ran}_bucket", backend="local", state="completed", le="+Inf") == 2
    total = value(after, f"{ran}_sum", backend="local", state="completed")
    assert total is not None and total > 0
    assert value(after, "kv_parity_stage_duration_seconds_count", backend="local", stage="build") == 2
    assert value(after, "kv_parity_stage_duration_seconds_count", backend="local", stage="determinism") == 3
    assert value(after, "kv_parity_row_duration_seconds_count", backend="local", row="vllm-agg") == 2
    assert value(after, "kv_parity_row_duration_seconds_count", backend="local", row="vllm-disagg") == 1
    assert value(after, "kv_parity_deliveries_stored", status="done") == 2
    assert value(after, "kv_parity_delivery_oldest_pending_age_seconds") == 0
    assert value(after, "kv_parity_publications", status="done") == 2
    assert value(after, "kv_parity_publications", status="pending") == 0
    assert queued.id in {c.id for c in svc.campaigns()}


def test_metrics_on_the_public_listener_only_with_the_bearer_token(env: Env) -> None:
    app = create_app(env.settings(metrics_token=TOKEN))
    assert app.state.metrics_listener is None
    with serve_app(app) as url:
        for header in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": f"Basic {TOKEN}"}):
            refused = loopback().get(f"{url}/metrics", headers=header)
            assert (refused.status_code, refused.text) == (404, "Not Found")
        samples = scrape(url, TOKEN)
    assert value(samples, "kv_parity_deliveries_stored", status="done") == 0


def test_metrics_are_off_unless_configured_and_nothing_is_counted(env: Env) -> None:
    app = create_app(env.settings())
    assert app.state.metrics is None and app.state.metrics_listener is None
    with serve_app(app) as url:
        assert loopback().get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 404


def test_a_metrics_address_in_use_stops_the_service_naming_it(env: Env) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(SettingsError, match=f"metrics_listen 127.0.0.1:{port} cannot be bound"):
            create_app(env.settings(metrics_listen=f"127.0.0.1:{port}"))


# ----------------------------------------------------------------- the queue page


QUEUE_ROWS = """[...document.querySelectorAll('table')].map(t => [...t.tBodies[0].rows].map(
    r => [...r.cells].map(c => c.innerText.trim())))"""


def _queue_in_browser(url: str) -> list[list[list[str]]]:
    """The queue page in headless Chromium under its CSP: nothing but the page fetched, no script error."""
    with Browser() as browser:
        page = browser.open(url)
        assert page.exceptions == [] and page.console_errors == [], (page.exceptions, page.console_errors)
        assert page.requests == [url], f"the page fetched more than itself: {page.requests}"
        assert page.evaluate("document.scripts.length") == 0
        tables: list[list[list[str]]] = page.evaluate(QUEUE_ROWS)
    return tables


def public(payload: dict[str, Any]) -> dict[str, Any]:
    """The delivery of a public repository (each delivery says whether its repository is private now)."""
    payload["repository"]["private"] = False
    return payload


def test_the_queue_page_shows_running_queued_and_ended_campaigns_of_visible_repositories(env: Env) -> None:
    settings = env.settings(hold=True, public_url=PUBLIC)
    with service(settings) as svc:
        post(svc.url, "pull_request", public(env.label()), delivery="label")
        svc.wait_state(S.RUNNING)
        post(svc.url, "issue_comment", public(comment_event("/parity rerun rows=vllm-agg")), delivery="rows")
        svc.wait_state(S.REQUESTED)
        answer = loopback().get(f"{svc.url}/queue")
        assert answer.status_code == 200
        for name, header in SECURITY_HEADERS.items():
            assert answer.headers[name] == header
        [live] = _queue_in_browser(f"{svc.url}/queue")
        [running, queued] = live
        pid = str(env.runs()[0]["pid"])
        assert running[0] == "running" and running[2] == f"{REPO}#1" and running[3] == env.head[:12]
        assert running[4].startswith("vllm-agg, vllm-disagg (all)") and "runner labels self-hosted" in running[4]
        assert f"this node ({socket.gethostname()}), process {pid}" == running[6]
        assert running[8].startswith("started ")
        assert queued[0] == "1" and queued[4].startswith("vllm-agg\n") and "(all)" not in queued[4]
        assert queued[8] == "unknown: no campaign has ended on this backend yet"

        env.hold.touch()
        svc.wait_state(S.COMPLETED, count=2, timeout=60)
        env.hold.unlink()
        post(svc.url, "issue_comment", public(comment_event("/parity rerun")), delivery="again")
        wait_until(lambda: [c for c in svc.campaigns() if c.state == S.RUNNING], "a third campaign running")
        post(svc.url, "issue_comment", public(comment_event("/parity rerun rows=vllm-disagg")), delivery="fourth")
        svc.wait_state(S.REQUESTED)
        live, ended = _queue_in_browser(f"{svc.url}/queue")
        assert [row[0] for row in live] == ["running", "1"]
        assert live[1][8].startswith("~") and " (in " in live[1][8], "estimated from the two runs that ended"
        assert len(ended) == 2 and all(row[5:9] == ["completed", "success", "PASS", "PASS"] for row in ended)

        privatized = {"action": "privatized", "repository": {"full_name": REPO, "private": True},
                      "sender": {"login": "owner", "id": 7, "type": "User"}}
        post(svc.url, "repository", privatized, delivery="privatized")
        hidden = loopback().get(f"{svc.url}/queue").text
        assert "Nothing is running or queued." in hidden and "No campaign has ended yet." in hidden
        assert REPO not in hidden
        env.hold.touch()
        svc.wait_state(S.COMPLETED, count=4, timeout=60)


def test_the_queue_page_is_404_when_pages_are_off(env: Env) -> None:
    with serve_app(create_app(env.settings())) as url:
        assert loopback().get(f"{url}/queue").status_code == 404


# ----------------------------------------------------------------- logs


def test_json_logs_name_the_delivery_campaign_repository_and_pull_request(env: Env) -> None:
    settings = env.settings(log_format="json")
    path = _settings_file(env, settings)
    port = free_port()
    environ = {**os.environ, "KV_PARITY_SETTINGS": str(path), "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.webhooks", "serve", "--port", str(port), "--record", str(env.tmp / "rec.jsonl"),
         "--log-level", "info"],
        env=environ, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                return loopback().get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(healthy, "service answering /healthz")
        post(url, "pull_request", env.label(), delivery="label-json")
        store = Store(settings.db_path)
        [done] = wait_until(lambda: [c for c in store.for_pr(REPO, 1) if c.state == S.COMPLETED], "completed")
        wait_until(lambda: store.publications(done.id) == [("finished", "done")], "published")
        store.close()
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=30)
    lines = [json.loads(line) for line in stderr.splitlines()]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines), lines
    concerning = {"delivery_id": "label-json", "repo": REPO, "pr": 1, "campaign_id": done.id}
    [handled] = [line for line in lines if line["message"].startswith("delivery label-json (pull_request): campaign")]
    assert {key: handled.get(key) for key in concerning} == concerning
    [started] = [line for line in lines if "started as pid" in line["message"]]
    assert {key: started.get(key) for key in ("campaign_id", "repo", "pr")} == {
        "campaign_id": done.id, "repo": REPO, "pr": 1}
    assert any(line["logger"].startswith("uvicorn") for line in lines), "uvicorn's lines are JSON too"


def test_handled_github_retries_log_one_line_each_and_an_unexpected_error_its_traceback(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """GitHub answering 502 (retried in place) and asking to wait 90 s (the secondary limit with Retry-After: the
    result's publication is deferred, every call refused until then) are expected and handled: one warning line
    each, no traceback. A 404 where the bot needed an answer is not: its traceback is kept."""
    caplog.set_level(logging.WARNING, logger="bot")
    with service(env.settings()) as svc:
        env.fake.inject_failures("GET", r"/compare/", [(404, {}, {"message": "Not Found"})])
        post(svc.url, "pull_request", env.label(), delivery="missing")
        wait_until(lambda: (s := svc.store.delivery_status("missing")) and s[1], "the delivery failed once")
    [failed] = [r for r in caplog.records if r.getMessage().startswith("delivery missing (pull_request) failed")]
    assert failed.levelno == logging.ERROR and failed.exc_info is not None, "an unexpected error keeps its trace"

    caplog.clear()
    env.fake.inject_failures("GET", r"/compare/", [(502, {}, {"message": "Bad Gateway"})])
    settings = env.settings(hold=True, db_path=env.tmp / "faults.sqlite3", **register_test_app(env.fake, env.tmp))
    app = create_app(settings, publisher_factory=default_publisher)
    with serve_app(app) as url:
        post(url, "pull_request", env.label(), delivery="label")
        wait_until(lambda: env.fake.check_runs(REPO) and env.runs(), "check run opened and campaign running")
        limited = secondary_rate_limit(retry_after=90)
        for method, path in (("PATCH", r"/check-runs/"), ("POST", r"/comments$"), ("PATCH", r"/comments/")):
            env.fake.inject_failures(method, path, [limited])
        env.hold.touch()
        with sqlite3.connect(settings.db_path) as db:
            wait_until(lambda: db.execute("SELECT 1 FROM publications WHERE error LIKE 'GitHubRetryLaterError%'")
                       .fetchone(), "the finished publication deferred")
    handled = [r for r in caplog.records if r.name.startswith("bot")]
    assert [r.getMessage() for r in handled if r.exc_info or r.exc_text] == [], "no traceback for a handled retry"
    assert {r.levelno for r in handled} == {logging.WARNING}, [(r.levelname, r.getMessage()) for r in handled]
    assert all("\n" not in r.getMessage() for r in handled)
    [retried] = [r for r in handled if "retrying in" in r.getMessage()]
    assert "HTTP 502 Bad Gateway" in retried.getMessage()
    deferred = [r for r in handled if "failed: GitHubRetryLaterError" in r.getMessage()]
    assert any("publishing finished failed" in r.getMessage() for r in deferred), [r.getMessage() for r in handled]
