"""Webhook service: verify, dedupe, persist, acknowledge; a worker thread does everything else.

The HTTP side never calls GitHub or starts processes, so acknowledgements stay fast (GitHub gives a
delivery 10 s) and a slow API cannot make GitHub give up and redeliver. A delivery is stored in SQLite
before the 202, so a crash after the acknowledgement loses nothing: the worker resumes unfinished
deliveries and campaigns on start.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import hmac
import logging
import queue
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bot.dispatch.base import Backend
from bot.dispatch.local import LocalBackend
from bot.events import HANDLED_EVENTS, PayloadError, parse_event
from bot.github import AppAuth, GitHubGateway, TokenAuth
from bot.lifecycle import Lifecycle, Publisher, RepoServices
from bot.settings import Settings, SettingsError, load_settings
from bot.store import Delivery, Store

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 25 * 1024 * 1024
"""GitHub caps webhook payloads at 25 MB; anything larger is not from GitHub."""
MAX_DELIVERY_ID = 200

PublisherFactory = Callable[[GitHubGateway, Settings], Publisher]


def signature_valid(secret: bytes, body: bytes, header: str | None) -> bool:
    """X-Hub-Signature-256 check in constant time (a timing leak would let an attacker forge it)."""
    if not header:
        return False
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.encode("utf-8", "replace"))


def make_gateway(settings: Settings, repo: str) -> GitHubGateway:
    """The gateway for one repository, authenticated the way the settings choose."""
    auth: TokenAuth | AppAuth
    if settings.token is not None:
        auth = TokenAuth(token=settings.token)
    else:
        assert settings.app_id is not None and settings.private_key_path is not None
        auth = AppAuth(
            app_id=settings.app_id,
            private_key=settings.private_key_path.read_text(encoding="utf-8"),
            installation_id=settings.installation_id,
        )
    return GitHubGateway(
        repo,
        auth,
        settings.api_base_url,
        bot_login=settings.bot_login,
        seconds_between_requests=settings.api_seconds_between_requests,
        seconds_between_writes=settings.api_seconds_between_writes,
    )


def default_publisher(gateway: GitHubGateway, settings: Settings) -> Publisher:
    from bot.publish import Publisher as GitHubPublisher

    return GitHubPublisher(gateway, settings)


def make_backend(settings: Settings) -> Backend:
    if settings.backend == "actions":
        from bot.dispatch.actions import ActionsBackend

        gateways = functools.cache(lambda repo: make_gateway(settings, repo))
        return ActionsBackend(
            gateways,
            workflow=settings.actions_workflow,
            ref=settings.actions_ref,
            poll_seconds=settings.actions_poll_seconds,
        )
    assert settings.local_repo_path is not None
    return LocalBackend(
        settings.local_repo_path,
        argv_prefix=settings.local_campaign_argv,
        fetch_remote=settings.local_fetch_remote,
        cancel_grace_seconds=settings.cancel_grace_seconds,
        sandbox=settings.sandbox,
    )


class Ingest:
    """Group commit for acknowledgements: deliveries that arrive together share one transaction and one
    fsync, on a thread of their own, so a burst does not queue behind one fsync per delivery and the event
    loop never blocks on the disk."""

    _STOP = object()

    def __init__(self, store: Store, max_batch: int = 256) -> None:
        self.store = store
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="kv-parity-ingest", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._queue.put(self._STOP)
        self._thread.join(30)

    async def add(self, delivery_id: str, event: str, body: bytes) -> bool:
        """True once the delivery is committed; False if this delivery id was stored before."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._queue.put(_Pending(delivery_id, event, body, loop, future))
        return await future

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is self._STOP:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = self._STOP in batch
            pending = [item for item in batch if isinstance(item, _Pending)]
            try:
                results = self.store.add_deliveries([(p.delivery_id, p.event, p.body) for p in pending])
            except Exception as exc:
                log.exception("storing %d deliveries failed", len(pending))
                for item in pending:
                    item.loop.call_soon_threadsafe(_settle, item.future, exc)
            else:
                for item, fresh in zip(pending, results, strict=True):
                    item.loop.call_soon_threadsafe(_settle, item.future, fresh)
            if stop:
                return


@dataclass(frozen=True)
class _Pending:
    delivery_id: str
    event: str
    body: bytes
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[bool]


def _settle(future: asyncio.Future[bool], outcome: bool | Exception) -> None:
    if future.done():
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class Worker:
    """One thread: recover, then alternate between the oldest due delivery and a lifecycle tick."""

    def __init__(self, store: Store, lifecycle: Lifecycle, settings: Settings) -> None:
        self.store = store
        self.lifecycle = lifecycle
        self.settings = settings
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kv-parity-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            self.lifecycle.recover()
        except Exception:
            log.exception("recovery after restart failed; continuing with the queue")
        while not self._stop.is_set():
            self._wake.clear()
            delivery = self.store.next_delivery(time.time())
            if delivery is not None:
                self._handle(delivery)
            try:
                self.lifecycle.tick()
            except Exception:
                log.exception("lifecycle tick failed")
            if delivery is None:
                self._wake.wait(self.settings.poll_interval_seconds)

    def _handle(self, delivery: Delivery) -> None:
        """Never let one delivery kill the worker; retry it with backoff, then keep it as failed."""
        try:
            outcome = self.lifecycle.handle(delivery)
        except Exception as exc:
            attempts = delivery.attempts + 1
            give_up = attempts >= self.settings.delivery_max_attempts
            log.exception("delivery %s (%s) failed, attempt %d", delivery.id, delivery.event, attempts)
            self.store.retry_delivery(
                delivery.id,
                f"{type(exc).__name__}: {exc}",
                time.time() + min(2.0**attempts, 300.0),
                give_up=give_up,
            )
            return
        log.info("delivery %s (%s): %s", delivery.id, delivery.event, outcome)
        self.store.finish_delivery(delivery.id, outcome)


def _services_factory(settings: Settings, publisher_factory: PublisherFactory) -> Callable[[str], RepoServices]:
    """Gateway + publisher per repository, built on first use and kept (installation tokens are cached)."""
    cache: dict[str, RepoServices] = {}

    def services(repo: str) -> RepoServices:
        key = repo.lower()
        if key not in cache:
            gateway = make_gateway(settings, repo)
            cache[key] = RepoServices(
                api=gateway,
                publisher=publisher_factory(gateway, settings),
                bot=gateway.identity(),
            )
        return cache[key]

    return services


async def _read_body(request: Request) -> bytes | None:
    """The body, or None once it exceeds MAX_BODY_BYTES (read no further than that)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    settings: Settings,
    *,
    publisher_factory: PublisherFactory = default_publisher,
    backend: Backend | None = None,
) -> Starlette:
    """The webhook app; its lifespan opens the store and runs the worker (app.state.store/.worker)."""
    secret = settings.webhook_secret.get_secret_value().encode()
    store = Store(settings.db_path, power_safe=False)
    ingest = Ingest(Store(settings.db_path, power_safe=True))
    lifecycle = Lifecycle(
        store, settings, backend or make_backend(settings), _services_factory(settings, publisher_factory)
    )
    worker = Worker(store, lifecycle, settings)

    async def webhook(request: Request) -> JSONResponse:
        body = await _read_body(request)
        if body is None:
            return JSONResponse({"error": f"payload over {MAX_BODY_BYTES} bytes"}, status_code=413)
        if not signature_valid(secret, body, request.headers.get("x-hub-signature-256")):
            return JSONResponse({"error": "X-Hub-Signature-256 missing or wrong"}, status_code=401)
        delivery_id = request.headers.get("x-github-delivery", "")
        event = request.headers.get("x-github-event", "")
        if not delivery_id or len(delivery_id) > MAX_DELIVERY_ID:
            return JSONResponse({"error": "X-GitHub-Delivery missing or too long"}, status_code=400)
        if event == "ping":
            return JSONResponse({"ok": "pong"})
        if event not in HANDLED_EVENTS:
            return JSONResponse({"ignored": f"event {event!r} is not handled"})
        try:
            parse_event(event, body)
        except PayloadError as exc:
            await run_in_threadpool(ingest.store.reject_delivery, delivery_id, event, str(exc), body)
            return JSONResponse({"error": str(exc)}, status_code=400)
        if not await ingest.add(delivery_id, event, body):
            return JSONResponse({"duplicate": delivery_id})
        worker.wake()
        return JSONResponse({"queued": delivery_id}, status_code=202)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse(
            {"worker_alive": worker.alive, "deliveries": store.delivery_counts()},
            status_code=200 if worker.alive else 503,
        )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        ingest.start()
        worker.start()
        try:
            yield
        finally:
            ingest.stop()
            worker.stop()
            ingest.store.close()
            store.close()

    app = Starlette(
        routes=[Route("/webhook", webhook, methods=["POST"]), Route("/healthz", health, methods=["GET"])],
        lifespan=lifespan,
    )
    app.state.store = store
    app.state.worker = worker
    return app


def run_server(
    settings: Settings,
    host: str,
    port: int,
    *,
    publisher_factory: PublisherFactory = default_publisher,
    log_level: str = "info",
) -> None:
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings, publisher_factory=publisher_factory)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


def serve_main(argv: Sequence[str]) -> int:
    """`kv-parity serve --host 127.0.0.1 --port N [--settings FILE]`; settings also from KV_PARITY_*."""
    parser = argparse.ArgumentParser(prog="kv-parity serve", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--settings", type=Path, help="TOML settings file (default: $KV_PARITY_SETTINGS)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(list(argv))
    try:
        settings = load_settings(args.settings)
    except SettingsError as exc:
        print(f"kv-parity serve: {exc}", file=sys.stderr)
        return 2
    run_server(settings, args.host, args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[1:]))
