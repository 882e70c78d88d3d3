"""The webhook service under abuse and faults, over real HTTP on 127.0.0.1 with real SQLite.

Each test drives the real app under the real server configuration (`uvicorn_config`: the guarded h11
protocol) with raw sockets where a well-behaved client cannot misbehave enough. Limits are lowered through
settings so a test needs no large counts; every wait is bounded (socket timeouts, `wait_until`), never a
sleep, and nothing asserts a duration.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from bot.service.app import create_app
from bot.service.protocol import uvicorn_config
from bot.service.signed_body import MAX_BODY_BYTES, MAX_JSON_DEPTH, json_too_deep
from bot.settings import Settings
from bot.store.campaigns import Store
from tests.webhooks import SECRET, RecordingPublisher, comment_event, loopback, post, sign, wait_until

ROOT = Path(__file__).resolve().parents[1]
WRONG = "sha256=" + "0" * 64


@dataclass
class Running:
    url: str
    port: int
    store: Store
    settings: Settings


def settings_for(tmp: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "webhook_secret": SECRET,
        "token": "ghp_unused",
        "api_base_url": "http://127.0.0.1:9",
        "bot_login": "kv-parity-bot",
        "db_path": tmp / "bot.sqlite3",
        "work_dir": tmp / "work",
        "local_repo_path": tmp,
        "local_campaign_argv": ["false"],
        "poll_interval_seconds": 0.05,
    }
    values.update(overrides)
    return Settings.model_validate(values)


@contextmanager
def running(settings: Settings) -> Iterator[Running]:
    """The service as `kv-parity serve` runs it (same protocol and limits), in a thread on 127.0.0.1."""
    app = create_app(settings, publisher_factory=lambda gateway, s: RecordingPublisher())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, settings, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, "service started", timeout=10)
    store = Store(settings.db_path)
    try:
        yield Running(f"http://127.0.0.1:{port}", port, store, settings)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        store.close()


def connect(port: int, data: bytes = b"") -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    if data:
        conn.sendall(data)
    return conn


def answer(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (bounded by the socket's timeout)."""
    received = b""
    try:
        while chunk := conn.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def still_open(conn: socket.socket) -> bool:
    conn.setblocking(False)
    try:
        return conn.recv(1) != b""
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False
    finally:
        conn.setblocking(True)


def headers(length: int, signature: str = WRONG) -> bytes:
    return (
        "POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"X-GitHub-Event: issue_comment\r\nX-GitHub-Delivery: held\r\nX-Hub-Signature-256: {signature}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def probe(url: str) -> int:
    """A small unsigned delivery: 401 while a body slot is free, 503 once they are all taken."""
    return post(url, "issue_comment", b"{}", signature=WRONG).status_code


# ----------------------------------------------------------------- bodies


def test_a_declared_oversized_body_is_refused_before_it_is_read(tmp_path: Path) -> None:
    with running(settings_for(tmp_path)) as svc:
        conn = connect(svc.port, headers(MAX_BODY_BYTES + 1))
        assert answer(conn).startswith(b"HTTP/1.1 413 ")
        assert svc.store.delivery_counts() == {}


def test_a_body_without_a_length_is_cut_off_at_the_cap_while_streaming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bot.service.signed_body.MAX_BODY_BYTES", 4096)
    body = json.dumps(comment_event("x" * 10_000)).encode()
    with running(settings_for(tmp_path)) as svc:
        response = loopback().post(
            f"{svc.url}/webhook",
            content=iter([body[i : i + 1000] for i in range(0, len(body), 1000)]),  # chunked: no Content-Length
            headers={"X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": "big", "X-Hub-Signature-256": sign(body)},
        )
        assert response.status_code == 413 and response.json() == {"error": "payload over 4096 bytes"}
        assert svc.store.delivery_counts() == {}


def test_unsigned_bodies_beyond_the_cap_are_answered_503_and_nothing_is_stored(tmp_path: Path) -> None:
    with running(settings_for(tmp_path, max_unverified_bodies=2, body_timeout_seconds=60)) as svc:
        held = [connect(svc.port, headers(1000) + b'{"a": ') for _ in range(2)]
        wait_until(lambda: probe(svc.url) == 503, "both body slots taken by the held deliveries")
        refused = post(svc.url, "issue_comment", comment_event("hello"))
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert "too many deliveries" in refused.json()["error"]
        for conn in held:
            conn.close()
        wait_until(lambda: probe(svc.url) == 401, "slots released when the held clients went away")
        assert post(svc.url, "issue_comment", comment_event("hello"), delivery="after").status_code == 202
        assert svc.store.delivery_status("held") is None and svc.store.delivery_status("after") is not None


def test_a_body_that_stops_arriving_is_answered_408(tmp_path: Path) -> None:
    body = json.dumps(comment_event("hello")).encode()
    with running(settings_for(tmp_path, body_timeout_seconds=0.3)) as svc:
        conn = connect(svc.port, headers(len(body), sign(body)) + body[:20])
        reply = answer(conn)
        assert reply.startswith(b"HTTP/1.1 408 ") and b"not received within 0.3 s" in reply
        assert svc.store.delivery_counts() == {}


def test_a_signed_deeply_nested_body_is_400_naming_the_depth(tmp_path: Path) -> None:
    deep = b'{"action": "created", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with running(settings_for(tmp_path)) as svc:
        response = post(svc.url, "issue_comment", deep, delivery="deep")
        assert response.status_code == 400
        assert response.json() == {"error": f"payload nests deeper than {MAX_JSON_DEPTH} levels"}
        assert svc.store.rejected_deliveries()[0][:2] == ("deep", "issue_comment")
        assert loopback().get(f"{svc.url}/healthz").json()["worker_alive"] is True


def test_json_depth_counts_brackets_outside_strings_only() -> None:
    assert not json_too_deep(b"[" * 64 + b"]" * 64)
    assert json_too_deep(b"[" * 65 + b"]" * 65)
    assert not json_too_deep(b'{"a": "' + b"[" * 500 + b'\\" [[[["}', limit=1)
    assert json_too_deep(b'{"a": "\\"", "b": [[]]}', limit=2)


# ----------------------------------------------------------------- connections


def test_connections_trickling_headers_are_evicted_oldest_first_for_new_ones(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, max_waiting_connections=5, header_timeout_seconds=300)
    with running(settings) as svc:
        slow = [connect(svc.port, b"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\n") for _ in range(15)]
        assert all(answer(conn) == b"" for conn in slow[:10])
        delivered = post(svc.url, "issue_comment", comment_event("hello"))
        health = loopback().get(f"{svc.url}/healthz", timeout=10)
        assert delivered.status_code == 202 and health.status_code == 200
        assert [still_open(conn) for conn in slow[10:]].count(True) >= 3
        for conn in slow:
            conn.close()


def test_a_connection_without_complete_headers_is_closed_at_the_deadline(tmp_path: Path) -> None:
    with running(settings_for(tmp_path, header_timeout_seconds=0.3)) as svc:
        slow = [connect(svc.port, b"POST /webhook HTTP/1.1\r\nX-Trickle: 1\r\n") for _ in range(5)]
        idle = connect(svc.port)
        assert [answer(conn) for conn in [*slow, idle]] == [b""] * 6
        assert post(svc.url, "issue_comment", comment_event("hello")).status_code == 202


# ----------------------------------------------------------------- the database


@contextmanager
def locked_by_another_process(db: Path) -> Iterator[None]:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "db.execute('BEGIN IMMEDIATE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline() == b"locked\n"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_a_database_locked_by_another_process_gives_503_and_an_unhealthy_healthz(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, db_busy_timeout_seconds=0.2)
    with running(settings) as svc:
        with locked_by_another_process(settings.db_path):
            refused = post(svc.url, "issue_comment", comment_event("hello"), delivery="while-locked")
            health = loopback().get(f"{svc.url}/healthz", timeout=10)
        assert refused.status_code == 503
        assert str(settings.db_path) in refused.json()["error"] and "locked" in refused.json()["error"]
        assert health.status_code == 503 and health.json()["database_writable"] is False
        assert post(svc.url, "issue_comment", comment_event("hello"), delivery="after").status_code == 202
        assert loopback().get(f"{svc.url}/healthz", timeout=10).json()["database_writable"] is True
        assert svc.store.delivery_status("while-locked") is None


def serve_exit(settings_file: Path) -> subprocess.CompletedProcess[str]:
    """`kv-parity serve` as an operator runs it, expected to refuse to start."""
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "serve", "--settings", str(settings_file), "--port", "9"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("damage", ["corrupt", "parent-is-a-file"])
def test_an_unusable_database_is_named_without_a_traceback(tmp_path: Path, damage: str) -> None:
    if damage == "corrupt":
        db = tmp_path / "bot.sqlite3"
        db.write_bytes(b"this is not an SQLite database, but it is long enough to have a header" * 20)
    else:
        (tmp_path / "state").write_text("a file where a directory should be\n")
        db = tmp_path / "state" / "db" / "bot.sqlite3"
    settings_file = tmp_path / "bot.toml"
    values = {
        "webhook_secret": SECRET,
        "token": "ghp_unused",
        "db_path": str(db),
        "local_repo_path": str(tmp_path),
        "work_dir": str(tmp_path / "work"),
    }
    settings_file.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items()))

    result = serve_exit(settings_file)

    assert result.returncode == 2
    assert f"kv-parity serve: cannot open the database {db}: " in result.stderr
    assert "Traceback" not in result.stderr


def test_store_opened_after_the_lock_is_released_is_writable(tmp_path: Path) -> None:
    db = tmp_path / "bot.sqlite3"
    Store(db).close()
    with locked_by_another_process(db):
        store = Store(db, busy_timeout=0.1)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            store.add_delivery("d", "issue_comment", b"{}")
    assert store.add_delivery("d", "issue_comment", b"{}") is True
    store.close()
