"""How the service is served: uvicorn with a deadline for request headers and a bound on the connections awaiting
them (uvicorn has neither), and a bounded graceful shutdown.
"""

from __future__ import annotations

import asyncio

import uvicorn
from starlette.applications import Starlette
from uvicorn.protocols.http.h11_impl import H11Protocol

from bot.settings import Settings


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
