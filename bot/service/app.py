"""The webhook service's app: its routes (the webhook door, health, the pages, metrics), its lifespan, and how it is
served (`run_server`).

The door verifies, dedupes, persists and acknowledges; it never calls GitHub or starts processes, so
acknowledgements stay fast (GitHub gives a delivery 10 s) and a slow API cannot make GitHub give up and
redeliver. A delivery is stored in SQLite before the 202, so a crash after the acknowledgement loses nothing:
the worker thread (`bot.service.worker`) resumes unfinished deliveries and campaigns on start.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bot.core.events import HANDLED_EVENTS, PayloadError, parse_event
from bot.dispatch.base import Backend
from bot.lifecycle import RunPages
from bot.logs import LogFormat, configure_logging
from bot.modes.wiring import PublisherFactory, SideRunFactory
from bot.pages.details import page_routes, repository_seen
from bot.pages.main_pages import main_routes
from bot.pages.queue_page import queue_route
from bot.service.protocol import uvicorn_config
from bot.service.signed_body import MAX_JSON_DEPTH, Refused, json_too_deep, read_signed_body
from bot.service.wiring import wire_service
from bot.settings import Settings

log = logging.getLogger(__name__)

MAX_DELIVERY_ID = 200
UNVERIFIED = "(unverified)"
"""The event label of a request refused before its signature was checked (its X-GitHub-Event proves nothing)."""


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


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def create_app(
    settings: Settings,
    *,
    publisher_factory: PublisherFactory | None = None,
    backend: Backend | None = None,
    side_run_factory: SideRunFactory | None = None,
) -> Starlette:
    """The webhook app; its lifespan opens the store and runs the worker (app.state.store/.worker). With
    `settings.public_url` it also serves the details pages (`bot.pages.details`) and the queue page; without, no
    page route exists. With metrics configured it counts (`bot.metrics`, app.state.metrics) and serves `/metrics`.

    Raises DatabaseError (naming the path) when the database cannot be opened, SettingsError when `metrics_listen`
    cannot be bound.
    """
    secret = settings.webhook_secret.get_secret_value().encode()
    parts = wire_service(settings, publisher_factory=publisher_factory, backend=backend,
                         side_run_factory=side_run_factory)
    store, ingest, metrics, worker, handed = parts.store, parts.ingest, parts.metrics, parts.worker, parts.handed
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
        too_deep = json_too_deep(body)
        seen = None if too_deep else repository_seen(body)
        if seen is not None:
            try:
                await run_in_threadpool(ingest.store.record_visibility, seen, time.time())
            except sqlite3.Error:
                return counted(_error(503, locked, **{"Retry-After": "5"}), "refused", event)
        if event not in HANDLED_EVENTS:
            return counted(JSONResponse({"ignored": f"event {event!r} is not handled"}), "ignored", event)
        try:
            if too_deep:
                raise PayloadError(f"payload nests deeper than {MAX_JSON_DEPTH} levels")
            parsed = parse_event(event, body)
        except PayloadError as exc:
            try:
                await run_in_threadpool(ingest.store.reject_delivery, delivery_id, event, str(exc), body)
            except sqlite3.Error:
                log.error("keeping rejected delivery %s failed: %s", delivery_id, locked)
            return counted(_error(400, str(exc)), "refused", event)
        action = str(getattr(parsed, "action", None) or "")
        handed.hand(delivery_id, parsed)  # before the commit: the worker may read the delivery at once
        try:
            fresh = await ingest.add(delivery_id, event, body)
        except sqlite3.Error:
            handed.take_back(delivery_id, parsed)
            return counted(_error(503, locked, **{"Retry-After": "5"}), "refused", event, action)
        if not fresh:
            handed.take_back(delivery_id, parsed)
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
    run_url = parts.backend.run_url if isinstance(parts.backend, RunPages) else None
    if settings.public_url is not None:
        pages = parts.lifecycle.pages
        routes += [*page_routes(pages), *main_routes(pages), queue_route(pages, run_url)]
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
            parts.stop.set()
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


def run_server(
    settings: Settings,
    host: str,
    port: int,
    *,
    publisher_factory: PublisherFactory | None = None,
    log_level: str = "info",
    log_format: LogFormat | None = None,
) -> None:
    """`kv-parity serve`: the app served by uvicorn (bounded as `bot.service.protocol` says) until stopped."""
    configure_logging(log_level, log_format or settings.log_format)
    app = create_app(settings, publisher_factory=publisher_factory)
    config = uvicorn_config(app, settings, host=host, port=port, log_level=log_level)
    uvicorn.Server(config).run()
