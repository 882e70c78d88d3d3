"""The service's Prometheus metrics: `GET /metrics` in Prometheus's text format, built by prometheus_client.

Off unless the settings turn it on (`metrics_listen`: a listener of its own; `metrics_token`: also on the public
listener, to a bearer of the token); when off, nothing is counted and this module is not imported.

What the service's SQLite store holds is read from it at scrape time (`StoreCollector`), so those figures cannot
drift from the truth or restart from zero with the process: campaigns by state and backend, the queue length and
oldest queued age per backend and runner labels, how long finished campaigns ran, deliveries and publications
waiting, the build cache's size. What nothing stores is counted as it happens (from zero at each start, as
Prometheus counters are): deliveries at the door by event, action and outcome; GitHub calls, errors, retries and
the last rate-limit remaining (`bot.github.retry.ApiObserver`); stage and row durations from the progress
campaigns report; build-cache hits and misses from each finished campaign's report.
"""

from __future__ import annotations

import hmac
import logging
import re
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import uvicorn
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from bot.core.campaign import Campaign
from bot.github.errors import (
    GitHubAuthError,
    GitHubError,
    GitHubNotFoundError,
    GitHubRateLimitError,
    GitHubRetryLaterError,
    GitHubUnavailableError,
    GitHubValidationError,
)
from bot.queue import queue_snapshot
from bot.settings import Settings, SettingsError
from bot.store.campaigns import Store
from runners.exec.build_cache import BuildCache, BuildCacheError
from runners.progress import ProgressEvent
from runners.schema.report import CampaignReport

log = logging.getLogger(__name__)

RUN_BUCKETS = (60.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 5400.0, 7200.0, 10800.0, 14400.0, 21600.0, 43200.0)
"""Campaign run times, one minute to twelve hours (the default deadline is six)."""
STEP_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)
"""Stage and row durations, a second to two hours."""
FINAL_STAGES = frozenset({"done", "stopped"})
"""Progress stages that end a campaign's run: they close the open stage and row, and open nothing."""
_LABEL = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def _label(value: str | None) -> str:
    """A label value from a progress event (a stage or row name): kept when it is a plain name, else `other`,
    so a malformed progress line cannot mint new time series."""
    return value if value is not None and _LABEL.match(value) else "other"


def _error_kind(error: GitHubError) -> str:
    kinds: tuple[tuple[type[GitHubError], str], ...] = (
        (GitHubRetryLaterError, "retry_later"),
        (GitHubRateLimitError, "rate_limited"),
        (GitHubUnavailableError, "unavailable"),
        (GitHubNotFoundError, "not_found"),
        (GitHubValidationError, "validation"),
        (GitHubAuthError, "auth"),
    )
    return next((kind for cls, kind in kinds if isinstance(error, cls)), "other")


@dataclass
class _StageClock:
    """Where one running campaign is, by its progress events: the open stage and row, and since when."""

    stage: tuple[str, str | None] | None = None
    stage_since: float = 0.0
    row: str | None = None
    row_since: float = 0.0


class StoreCollector(Collector):
    """Metrics read from the store at scrape time, through a connection of their own (a scrape never waits for
    the worker's lock)."""

    def __init__(self, store: Store, settings: Settings, clock: Callable[[], float]) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        campaigns = GaugeMetricFamily("kv_parity_campaigns", "Campaigns in each state, by backend.",
                                      labels=["state", "backend"])
        for state, backend, count in self.store.campaign_counts():
            campaigns.add_metric([state, backend], count)
        yield campaigns
        yield from self._queue(now)
        durations = HistogramMetricFamily(
            "kv_parity_campaign_duration_seconds",
            "How long finished campaigns ran, from their latest dispatch to their ending, by backend and final state.",
            labels=["backend", "state"],
        )
        for group in self.store.run_durations(RUN_BUCKETS):
            buckets = [(f"{bound:g}", count) for bound, count in zip(RUN_BUCKETS, group.at_most, strict=True)]
            durations.add_metric([group.backend, group.state], [*buckets, ("+Inf", group.count)], group.total_seconds)
        yield durations
        statuses, oldest = self.store.delivery_backlog()
        stored = GaugeMetricFamily("kv_parity_deliveries_stored",
                                   "Stored deliveries by status (pending: the worker's backlog).", labels=["status"])
        for status in ("pending", "done", "failed"):
            stored.add_metric([status], statuses.get(status, 0))
        yield stored
        yield GaugeMetricFamily("kv_parity_delivery_oldest_pending_age_seconds",
                                "Age of the oldest delivery the worker has not handled yet (0: none pending).",
                                value=0.0 if oldest is None else max(0.0, now - oldest))
        publications = GaugeMetricFamily("kv_parity_publications",
                                         "Publications of results and endings by status (pending: the backlog).",
                                         labels=["status"])
        counts = self.store.publication_counts()
        for status in ("pending", "done", "failed"):
            publications.add_metric([status], counts.get(status, 0))
        yield publications
        yield from self._build_cache()

    def _queue(self, now: float) -> Iterator[Metric]:
        length = GaugeMetricFamily(
            "kv_parity_queue_length", "Queued campaigns (not yet dispatched) by backend and the runner labels their "
            "rows need.", labels=["backend", "runner_labels"])
        oldest = GaugeMetricFamily("kv_parity_queue_oldest_age_seconds",
                                   "How long the oldest queued campaign has waited, by backend and runner labels.",
                                   labels=["backend", "runner_labels"])
        groups: dict[tuple[str, str], list[float]] = {}
        for live in queue_snapshot(self.store, now).live:
            if live.position >= 1:
                for labels in live.runner_labels or [""]:
                    groups.setdefault((live.backend, labels), []).append(live.queued_since)
        for key, since in sorted(groups.items()):
            length.add_metric(list(key), len(since))
            oldest.add_metric(list(key), max(0.0, now - min(since)))
        yield length
        yield oldest

    def _build_cache(self) -> Iterator[Metric]:
        """The local and Slurm backends' build cache, when it exists (an Actions runner's is not ours to read)."""
        directory = self.settings.build_cache
        if self.settings.backend == "actions" or not directory.is_dir():
            return
        try:
            usage = BuildCache(directory).usage()
        except BuildCacheError as exc:
            log.warning("metrics: build cache not measured: %s", exc)
            return
        yield GaugeMetricFamily("kv_parity_build_cache_bytes", "Bytes the build cache's entries take.",
                                value=sum(entry.bytes for entry in usage.entries))
        yield GaugeMetricFamily("kv_parity_build_cache_entries", "Entries in the build cache.",
                                value=len(usage.entries))
        yield GaugeMetricFamily("kv_parity_build_cache_max_bytes", "The build cache's bound (`kv-parity cache`).",
                                value=usage.max_bytes)


class ServiceMetrics:
    """Every metric of one service, in a registry of its own; also the gateway's `ApiObserver` and the lifecycle's
    `CampaignMetrics`. Counting is a few microseconds under prometheus_client's locks, safe from any thread."""

    def __init__(
        self, store: Store, settings: Settings, backend: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.backend = backend
        """The service's backend: every campaign its lifecycle drives runs there."""
        self.clock = clock
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` twin of each counter: half the size
        self.registry = CollectorRegistry(auto_describe=True)
        self.deliveries = Counter(
            "kv_parity_deliveries", "Webhook deliveries at the door by event, action and outcome (accepted, "
            "duplicate, ignored, bad_signature, refused).", ["event", "action", "outcome"], registry=self.registry)
        self.github_calls = Counter("kv_parity_github_calls", "Calls to GitHub's API (each with its retries).",
                                    ["repo"], registry=self.registry)
        self.github_errors = Counter("kv_parity_github_errors", "Calls to GitHub's API that failed for good, by kind.",
                                     ["repo", "kind"], registry=self.registry)
        self.github_retries = Counter("kv_parity_github_retries", "Retries of GitHub calls, by why.",
                                      ["repo", "reason"], registry=self.registry)
        self.rate_remaining = Gauge("kv_parity_github_rate_limit_remaining",
                                    "Requests left in the rate limit, as GitHub's latest answer said.", ["repo"],
                                    registry=self.registry)
        self.rate_limit = Gauge("kv_parity_github_rate_limit", "The rate limit, as GitHub's latest answer said.",
                                ["repo"], registry=self.registry)
        self.stage_seconds = Histogram(
            "kv_parity_stage_duration_seconds", "Campaign stages, from a stage's first progress event to the next "
            "stage's.", ["backend", "stage"], buckets=STEP_BUCKETS, registry=self.registry)
        self.row_seconds = Histogram(
            "kv_parity_row_duration_seconds", "Rows, from a row's first progress event to the next row's (or the "
            "campaign's end).", ["backend", "row"], buckets=STEP_BUCKETS, registry=self.registry)
        self.build_cache_lookups = Counter(
            "kv_parity_build_cache_lookups", "Build-cache lookups of finished campaigns by arm and outcome (hit: "
            "reused, miss: built and stored).", ["arm", "outcome"], registry=self.registry)
        self.store = store
        self.registry.register(StoreCollector(store, settings, clock))
        self._clocks: dict[str, _StageClock] = {}
        self._clocks_lock = threading.Lock()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def close(self) -> None:
        """Close the store connection scrapes read through (the service's lifespan ends)."""
        self.store.close()

    # --- the door ----------------------------------------------------------------------------------------------

    def delivery(self, event: str, action: str, outcome: str) -> None:
        self.deliveries.labels(event, action, outcome).inc()

    # --- the gateway (bot.github.retry.ApiObserver) ------------------------------------------------------------

    def github_call(self, repo: str) -> None:
        self.github_calls.labels(repo).inc()

    def github_error(self, repo: str, error: GitHubError) -> None:
        self.github_errors.labels(repo, _error_kind(error)).inc()

    def github_retry(self, repo: str, error: BaseException) -> None:
        reason = "rate_limited" if isinstance(error, GitHubRateLimitError) else "unavailable"
        self.github_retries.labels(repo, reason).inc()

    def github_rate_limit(self, repo: str, remaining: int, limit: int) -> None:
        self.rate_remaining.labels(repo).set(remaining)
        self.rate_limit.labels(repo).set(limit)

    # --- campaigns (bot.lifecycle.CampaignMetrics) -------------------------------------------------------------

    def progress(self, campaign: Campaign, events: list[ProgressEvent]) -> None:
        """Time stages and rows by the events' own clock: each opens where the previous one closes."""
        with self._clocks_lock:
            clock = self._clocks.setdefault(campaign.id, _StageClock())
            for event in events:
                at = event.unix or self.clock()
                stage, row = _label(event.stage), None if event.row is None else _label(event.row)
                if clock.stage != (stage, row):
                    self._close_stage(clock, at)
                    clock.stage, clock.stage_since = (stage, row), at
                if row != clock.row:
                    self._close_row(clock, at)
                    clock.row, clock.row_since = row, at
                if stage in FINAL_STAGES:
                    clock.stage = clock.row = None

    def ended(self, campaign: Campaign, report: CampaignReport | None) -> None:
        """With its report (completed), a campaign closes its open stage and row now and counts its build-cache
        lookups; without (any other ending), they are dropped: a cancelled stage did not take that long."""
        with self._clocks_lock:
            clock = self._clocks.pop(campaign.id, None)
            if clock is not None and report is not None:
                now = self.clock()
                self._close_stage(clock, now)
                self._close_row(clock, now)
        for artifact in report.artifacts if report is not None else []:
            if artifact.build_cache is not None:
                outcome = "hit" if artifact.build_cache.reused_from else "miss"
                self.build_cache_lookups.labels(artifact.arm, outcome).inc()

    def _close_stage(self, clock: _StageClock, at: float) -> None:
        if clock.stage is not None:
            self.stage_seconds.labels(self.backend, clock.stage[0]).observe(max(0.0, at - clock.stage_since))

    def _close_row(self, clock: _StageClock, at: float) -> None:
        if clock.row is not None:
            self.row_seconds.labels(self.backend, clock.row).observe(max(0.0, at - clock.row_since))


def bearer_matches(header: str | None, token: SecretStr) -> bool:
    """`Authorization: Bearer <token>`, compared in constant time (a timing leak would let a scraper guess it)."""
    expected = f"Bearer {token.get_secret_value()}".encode()
    return hmac.compare_digest((header or "").encode("utf-8", "replace"), expected)


def metrics_endpoint(metrics: ServiceMetrics, token: SecretStr | None) -> Callable[[Request], Awaitable[Response]]:
    """`GET /metrics`: the exposition (collected on a worker thread: it reads SQLite); 404 to anyone without the
    token when one is set, as if there were no such route."""

    async def endpoint(request: Request) -> Response:
        if token is not None and not bearer_matches(request.headers.get("authorization"), token):
            return PlainTextResponse("Not Found", status_code=404)
        body = await run_in_threadpool(metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"})

    return endpoint


class MetricsListener:
    """`metrics_listen`: `GET /metrics` alone on an address of its own, served by uvicorn on a thread. The socket is
    bound when this is made, so a taken address stops the service at start (SettingsError naming it)."""

    def __init__(self, address: tuple[str, int], metrics: ServiceMetrics, token: SecretStr | None) -> None:
        host, port = address
        try:
            self.socket = socket.create_server(
                (host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET, reuse_port=False
            )
        except OSError as exc:
            raise SettingsError(f"metrics_listen {host}:{port} cannot be bound: {exc.strerror or exc}") from exc
        app = Starlette(routes=[Route("/metrics", metrics_endpoint(metrics, token), methods=["GET"])])
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]},
                                       name="kv-parity-metrics", daemon=True)

    @property
    def port(self) -> int:
        return int(self.socket.getsockname()[1])

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(timeout)
        self.socket.close()
