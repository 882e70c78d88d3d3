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
import re
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from bot.core.events import HANDLED_EVENTS, PayloadError, parse_event
from bot.core.ports import PullRequestPublisher, RepoServices, SideRunPublisher
from bot.dispatch.base import Backend
from bot.dispatch.local import LocalBackend
from bot.github.connect import make_gateway
from bot.github.gateway import ApiObserver, GitHubGateway, GitHubRetryLaterError, Interrupted
from bot.intake import Intake
from bot.lifecycle import Lifecycle, RunPages
from bot.logs import LogFormat, configure_logging, delivery_concerns, log_context, log_failure
from bot.pages.details import page_routes, repository_seen
from bot.pages.main_pages import main_routes
from bot.pages.queue_page import queue_route
from bot.settings import Settings, SettingsError, load_settings
from bot.store.campaigns import Delivery, Store

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 25 * 1024 * 1024
"""GitHub caps webhook payloads at 25 MB; anything larger is not from GitHub."""
MAX_DELIVERY_ID = 200
MAX_JSON_DEPTH = 64
"""GitHub's payloads nest about 10 deep; far deeper input only exercises the parser's recursion limit."""
SPOOL_BYTES = 256 * 1024
"""An unverified body beyond this is spooled to a temporary file instead of memory."""
SIGNATURE = re.compile(r"^sha256=([0-9a-f]{64})$")
_JSON_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
"""Strings (skipped whole, so brackets inside them do not count) and the brackets that open or close."""

PublisherFactory = Callable[[GitHubGateway, Settings], PullRequestPublisher]
SideRunFactory = Callable[[GitHubGateway, Settings], SideRunPublisher]
UNVERIFIED = "(unverified)"
"""The event label of a request refused before its signature was checked (its X-GitHub-Event proves nothing)."""


def signature_valid(secret: bytes, body: bytes, header: str | None) -> bool:
    """X-Hub-Signature-256 check in constant time (a timing leak would let an attacker forge it)."""
    if not header:
        return False
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.encode("utf-8", "replace"))


def json_too_deep(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text opens more than `limit` nested arrays/objects (brackets inside strings do not
    count). Checked before parsing: a deep enough document makes json.loads raise RecursionError."""
    depth = 0
    for match in _JSON_TOKENS.finditer(body):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


class DatabaseError(RuntimeError):
    """The service's SQLite database cannot be opened or written; the message names its path."""


def open_store(settings: Settings, *, power_safe: bool) -> Store:
    """The store, or DatabaseError naming the path (a corrupt file, a directory that cannot be made)."""
    try:
        return Store(settings.db_path, power_safe=power_safe, busy_timeout=settings.db_busy_timeout_seconds)
    except (sqlite3.Error, OSError) as exc:
        raise DatabaseError(f"cannot open the database {settings.db_path}: {exc}") from exc


def database_writable(path: Path, timeout: float) -> bool:
    """Whether a write transaction can start within `timeout` (another process may hold the write lock)."""
    try:
        db = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    except sqlite3.Error:
        return False
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
        return True
    except sqlite3.Error:
        return False
    finally:
        db.close()


def default_publisher(gateway: GitHubGateway, settings: Settings) -> PullRequestPublisher:
    from bot.publish.publisher import Publisher as GitHubPublisher

    return GitHubPublisher(gateway, settings)


def default_side_runs(gateway: GitHubGateway, settings: Settings) -> SideRunPublisher:
    from bot.publish.side_runs import SideRunPublisher as GitHubSideRuns

    return GitHubSideRuns(gateway, settings)


def make_backend(
    settings: Settings, stop: threading.Event | None = None, observer: ApiObserver | None = None
) -> Backend:
    if settings.backend == "actions":
        from bot.dispatch.actions import ActionsBackend

        gateways = functools.cache(lambda repo: make_gateway(settings, repo, stop, observer))
        return ActionsBackend(
            gateways,
            workflow=settings.actions_workflow,
            ref=settings.actions_ref,
            poll_seconds=settings.actions_poll_seconds,
        )
    assert settings.local_repo_path is not None
    if settings.backend == "slurm":
        from runners.pipeline.slurm import SlurmOptions

        from bot.dispatch.slurm import SlurmBackend

        return SlurmBackend(settings.local_repo_path, options=settings.slurm or SlurmOptions(),
                            fetch_remote=settings.local_fetch_remote, sandbox=settings.sandbox,
                            cancel_grace_seconds=settings.cancel_grace_seconds, build_cache=settings.build_cache)
    return LocalBackend(
        settings.local_repo_path,
        argv_prefix=settings.local_campaign_argv,
        fetch_remote=settings.local_fetch_remote,
        cancel_grace_seconds=settings.cancel_grace_seconds,
        sandbox=settings.sandbox,
        build_cache=settings.build_cache,
        bisect_prefix=settings.local_bisect_argv,
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

    def stop(self, timeout: float = 30.0) -> None:
        self._queue.put(self._STOP)
        self._thread.join(timeout)

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
                log.error("storing %d deliveries in %s failed: %s", len(pending), self.store.path, exc)
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
    """One thread: recover, then alternate between the oldest due delivery and a lifecycle tick.

    `stop` is shared with the gateways: setting it also cuts their retry waits short, so stopping takes
    at most one in-flight HTTP request, never a backoff.
    """

    def __init__(
        self, store: Store, intake: Intake, lifecycle: Lifecycle, settings: Settings, stop: threading.Event
    ) -> None:
        self.store = store
        self.intake = intake
        self.lifecycle = lifecycle
        self.settings = settings
        self._wake = threading.Event()
        self._stop = stop
        self._thread = threading.Thread(target=self._run, name="kv-parity-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 3.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("worker still in a GitHub request after %g s; exiting without it", timeout)

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
            try:
                handled = self._step()
            except sqlite3.Error as exc:
                # Another process holding the write lock, or a disk problem: keep the thread, try again.
                log.error("database %s unusable (%s); retrying", self.settings.db_path, exc)
                handled = False
            if not handled:
                self._wake.wait(self.settings.poll_interval_seconds)

    def _step(self) -> bool:
        delivery = self.store.next_delivery(time.time())
        if delivery is not None:
            with log_context(delivery_id=delivery.id, **delivery_concerns(delivery.payload)):
                self._handle(delivery)
        try:
            self.lifecycle.tick()
        except sqlite3.Error:
            raise
        except Exception as exc:
            log_failure(log, exc, "lifecycle tick failed")
        return delivery is not None

    def _handle(self, delivery: Delivery) -> None:
        """Never let one delivery kill the worker; retry it with backoff, then keep it as failed.

        A delivery cut short by shutdown stays pending (redone after the restart); one GitHub asked us to
        hold off for longer than the gateway waits is re-queued for then, without counting as a failure.
        """
        try:
            outcome = self.intake.handle(delivery)
        except Interrupted:
            log.info("delivery %s (%s) interrupted by shutdown; redone after restart", delivery.id, delivery.event)
            return
        except GitHubRetryLaterError as exc:
            log.warning("delivery %s (%s) re-queued: %s", delivery.id, delivery.event, exc)
            self.store.retry_delivery(delivery.id, f"{type(exc).__name__}: {exc}", exc.not_before, give_up=False)
            return
        except sqlite3.Error:
            raise
        except Exception as exc:
            attempts = delivery.attempts + 1
            give_up = attempts >= self.settings.delivery_max_attempts
            log_failure(log, exc, "delivery %s (%s) failed, attempt %d", delivery.id, delivery.event, attempts)
            self.store.retry_delivery(
                delivery.id,
                f"{type(exc).__name__}: {exc}",
                time.time() + min(2.0**attempts, 300.0),
                give_up=give_up,
            )
            return
        made = self.store.by_delivery(delivery.id)
        with log_context(campaign_id=made[-1].id if made else None):
            log.info("delivery %s (%s): %s", delivery.id, delivery.event, outcome)
        self.store.finish_delivery(delivery.id, outcome)


def _services_factory(
    settings: Settings, publisher_factory: PublisherFactory, stop: threading.Event, observer: ApiObserver | None,
    side_run_factory: SideRunFactory = default_side_runs,
) -> Callable[[str], RepoServices]:
    """Gateway + publisher per repository, built on first use and kept (installation tokens are cached)."""
    cache: dict[str, RepoServices] = {}

    def services(repo: str) -> RepoServices:
        key = repo.lower()
        if key not in cache:
            gateway = make_gateway(settings, repo, stop, observer)
            cache[key] = RepoServices(
                api=gateway,
                publisher=publisher_factory(gateway, settings),
                bot=gateway.identity(),
                side_runs=side_run_factory(gateway, settings),
            )
        return cache[key]

    return services


class Refused(Exception):
    """A delivery answered with an error before it is stored; `status` and the message are the answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_signed_body(request: Request, secret: bytes, timeout: float) -> bytes:
    """The body, once its X-Hub-Signature-256 matched; the HMAC is computed while the body streams in.

    Refused before reading when the signature header is malformed or Content-Length is over the cap;
    while reading when it passes MAX_BODY_BYTES or `timeout`. Until the signature is checked the body is
    spooled to a temporary file past SPOOL_BYTES, so unauthenticated bulk does not sit in memory.
    """
    match = SIGNATURE.match(request.headers.get("x-hub-signature-256", ""))
    if match is None:
        raise Refused(401, "X-Hub-Signature-256 missing or wrong")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise Refused(413, f"payload over {MAX_BODY_BYTES} bytes")
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    size = 0
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        try:
            async with asyncio.timeout(timeout):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > MAX_BODY_BYTES:
                        raise Refused(413, f"payload over {MAX_BODY_BYTES} bytes")
                    mac.update(chunk)
                    spool.write(chunk)
        except TimeoutError:
            raise Refused(408, f"payload not received within {timeout:g} s") from None
        except ClientDisconnect:
            raise Refused(400, "client disconnected before the payload was complete") from None
        if not hmac.compare_digest(mac.hexdigest(), match.group(1)):
            raise Refused(401, "X-Hub-Signature-256 missing or wrong")
        spool.seek(0)
        return spool.read()


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def create_app(
    settings: Settings,
    *,
    publisher_factory: PublisherFactory = default_publisher,
    backend: Backend | None = None,
    side_run_factory: SideRunFactory = default_side_runs,
) -> Starlette:
    """The webhook app; its lifespan opens the store and runs the worker (app.state.store/.worker). With
    `settings.public_url` it also serves the details pages (`bot.pages.details`) and the queue page; without, no
    page route exists. With metrics configured it counts (`bot.metrics`, app.state.metrics) and serves `/metrics`.

    Raises DatabaseError (naming the path) when the database cannot be opened, SettingsError when `metrics_listen`
    cannot be bound.
    """
    secret = settings.webhook_secret.get_secret_value().encode()
    store = open_store(settings, power_safe=False)
    ingest = Ingest(open_store(settings, power_safe=True))
    stop = threading.Event()
    metrics = None
    if settings.metrics_enabled:
        from bot.metrics import ServiceMetrics

        backend_name = backend.name if backend is not None else settings.backend
        metrics = ServiceMetrics(open_store(settings, power_safe=False), settings, backend_name)
    services = _services_factory(settings, publisher_factory, stop, metrics, side_run_factory)
    runs_on = backend or make_backend(settings, stop, metrics)
    lifecycle = Lifecycle(store, settings, runs_on, services, metrics=metrics)
    # The intake records campaigns and the lifecycle runs them; wired here so neither builds the other.
    intake = Intake(store, settings, runs_on.name, services, lifecycle)
    worker = Worker(store, intake, lifecycle, settings, stop)
    unverified = 0
    locked = (
        f"database {settings.db_path} is locked by another process or not writable; "
        "nothing was stored, deliver again later"
    )

    def counted(response: JSONResponse, outcome: str, event: str = UNVERIFIED, action: str = "") -> JSONResponse:
        """The answer, counted by event, action and outcome when metrics are on (the event name only once the
        signature proved GitHub sent it: unsigned requests must not mint label values)."""
        if metrics is not None:
            metrics.delivery(event, action, outcome)
        return response

    async def webhook(request: Request) -> JSONResponse:
        nonlocal unverified
        if unverified >= settings.max_unverified_bodies:
            return counted(_error(
                503,
                "too many deliveries being received at once; deliver again later",
                Connection="close",
                **{"Retry-After": "1"},
            ), "refused")
        unverified += 1
        try:
            body = await read_signed_body(request, secret, settings.body_timeout_seconds)
        except Refused as refusal:
            # The rest of the body may still be on its way: close rather than read it for keep-alive.
            outcome = "bad_signature" if refusal.status == 401 else "refused"
            return counted(_error(refusal.status, str(refusal), Connection="close"), outcome)
        finally:
            unverified -= 1
        delivery_id = request.headers.get("x-github-delivery", "")
        event = request.headers.get("x-github-event", "")
        if not delivery_id or len(delivery_id) > MAX_DELIVERY_ID:
            return counted(_error(400, "X-GitHub-Delivery missing or too long"), "refused", event)
        if event == "ping":
            return counted(JSONResponse({"ok": "pong"}), "ignored", event)
        # Every signed delivery (a `repository` privatized event too) says whether its repository is private
        # now; pages follow it at once (`bot.pages.details`). Written only when it changed.
        seen = None if json_too_deep(body) else repository_seen(body)
        if seen is not None:
            try:
                await run_in_threadpool(ingest.store.record_visibility, seen, time.time())
            except sqlite3.Error:
                return counted(_error(503, locked, **{"Retry-After": "5"}), "refused", event)
        if event not in HANDLED_EVENTS:
            return counted(JSONResponse({"ignored": f"event {event!r} is not handled"}), "ignored", event)
        try:
            if json_too_deep(body):
                raise PayloadError(f"payload nests deeper than {MAX_JSON_DEPTH} levels")
            action = str(getattr(parse_event(event, body), "action", None) or "")
        except PayloadError as exc:
            try:
                await run_in_threadpool(ingest.store.reject_delivery, delivery_id, event, str(exc), body)
            except sqlite3.Error:
                log.error("keeping rejected delivery %s failed: %s", delivery_id, locked)
            return counted(_error(400, str(exc)), "refused", event)
        try:
            fresh = await ingest.add(delivery_id, event, body)
        except sqlite3.Error:
            return counted(_error(503, locked, **{"Retry-After": "5"}), "refused", event, action)
        if not fresh:
            return counted(JSONResponse({"duplicate": delivery_id}), "duplicate", event, action)
        worker.wake()
        return counted(JSONResponse({"queued": delivery_id}, status_code=202), "accepted", event, action)

    async def health(request: Request) -> JSONResponse:
        writable = await run_in_threadpool(database_writable, settings.db_path, settings.db_busy_timeout_seconds)
        try:
            counts: dict[str, int] | None = await run_in_threadpool(store.delivery_counts)
        except sqlite3.Error:
            counts = None
        return JSONResponse(
            {"worker_alive": worker.alive, "database_writable": writable, "deliveries": counts},
            status_code=200 if worker.alive and writable else 503,
        )

    routes = [Route("/webhook", webhook, methods=["POST"]), Route("/healthz", health, methods=["GET"])]
    run_url = runs_on.run_url if isinstance(runs_on, RunPages) else None
    if settings.public_url is not None:
        routes += [*page_routes(lifecycle.pages), *main_routes(lifecycle.pages), queue_route(lifecycle.pages, run_url)]
    listener = None
    if metrics is not None:
        from bot.metrics import MetricsListener, metrics_endpoint

        if settings.metrics_token is not None:
            routes.append(Route("/metrics", metrics_endpoint(metrics, settings.metrics_token), methods=["GET"]))
        address = settings.metrics_address
        listener = None if address is None else MetricsListener(address, metrics, settings.metrics_token)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        ingest.start()
        worker.start()
        if listener is not None:
            listener.start()
        try:
            yield
        finally:
            stop.set()
            if listener is not None:
                listener.stop()
            ingest.stop(timeout=settings.db_busy_timeout_seconds + 1)
            worker.stop()
            ingest.store.close()
            store.close()
            if metrics is not None:
                metrics.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.store = store
    app.state.worker = worker
    app.state.metrics = metrics
    app.state.metrics_listener = listener
    return app


def guarded_protocol(header_timeout: float, max_waiting: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline for request headers and a bound on connections awaiting them.

    uvicorn has neither: a client trickling a header line every few seconds holds its connection (and a
    file descriptor) forever. Here a connection whose headers are not complete `header_timeout` after it
    opened (or after its previous response) is closed, and when `max_waiting` connections are waiting for
    headers the oldest is closed to admit a new one, so trickling clients cannot crowd out deliveries.
    """
    waiting: dict[GuardedProtocol, None] = {}
    """Connections awaiting request headers, oldest first."""

    class GuardedProtocol(H11Protocol):
        _header_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await_headers()

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not cycle:
                self._headers_done()

        def on_response_complete(self) -> None:
            cycle = self.cycle
            super().on_response_complete()
            if self.cycle is cycle and not self.transport.is_closing():
                self._await_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            self._headers_done()
            super().connection_lost(exc)

        def _await_headers(self) -> None:
            while len(waiting) >= max_waiting:
                next(iter(waiting))._drop()
            waiting[self] = None
            self._header_deadline = self.loop.call_later(header_timeout, self._drop)

        def _headers_done(self) -> None:
            waiting.pop(self, None)
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None

        def _drop(self) -> None:
            self._headers_done()
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedProtocol


def uvicorn_config(
    app: Starlette, settings: Settings, *, host: str = "127.0.0.1", port: int = 8080, log_level: str = "info"
) -> uvicorn.Config:
    """How the service is served: the guarded protocol, and a bounded graceful shutdown. uvicorn's own loggers
    propagate to the root logger `bot.logs.configure_logging` set up (its own logging config is not applied)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        log_level=log_level,
        access_log=False,
        http=guarded_protocol(settings.header_timeout_seconds, settings.max_waiting_connections),
        timeout_graceful_shutdown=2,
    )


def run_server(
    settings: Settings,
    host: str,
    port: int,
    *,
    publisher_factory: PublisherFactory = default_publisher,
    log_level: str = "info",
    log_format: LogFormat | None = None,
) -> None:
    configure_logging(log_level, log_format or settings.log_format)
    app = create_app(settings, publisher_factory=publisher_factory)
    config = uvicorn_config(app, settings, host=host, port=port, log_level=log_level)
    uvicorn.Server(config).run()


def serve_main(argv: Sequence[str]) -> int:
    """`kv-parity serve --host 127.0.0.1 --port N [--settings FILE]`; settings also from KV_PARITY_*."""
    parser = argparse.ArgumentParser(prog="kv-parity serve", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--settings", type=Path, help="TOML settings file (default: $KV_PARITY_SETTINGS)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", choices=["text", "json"],
                        help="text for a terminal, json: one object per line (default: settings log_format, text)")
    args = parser.parse_args(list(argv))
    try:
        settings = load_settings(args.settings)
    except SettingsError as exc:
        print(f"kv-parity serve: {exc}", file=sys.stderr)
        return 2
    try:
        run_server(settings, args.host, args.port, log_level=args.log_level, log_format=args.log_format)
    except (DatabaseError, SettingsError) as exc:  # SettingsError: a local backend without a sandbox, a taken address
        print(f"kv-parity serve: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[1:]))
