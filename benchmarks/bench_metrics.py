"""What metrics cost (issue 38): a delivery's acknowledgement and a campaign, with metrics on against metrics off.

1. Acknowledgement: `kv-parity serve` in its own process on 127.0.0.1, metrics off (nothing counted) against on
   (`metrics_listen`), unscraped and scraped once a second during the load, the open-loop client of bench_webhook_ack.py
   (signed ~8 KB `issue_comment` deliveries at a fixed rate). Rounds alternate off/on so drift hits both.
2. A campaign: the service in this process with the GitHub stand-in and the stand-in runner reporting per-row
   progress (tests/webhooks.py), `/parity rerun` after `/parity rerun`, each timed from the delivery to its result
   published; off against on, unscraped and scraped once a second. The stand-in runner takes a fraction of a
   second, so this bounds the service's own share; a real campaign runs for minutes to hours around the same work.
   The time spent inside the metrics' own methods (counting, timing stages, scrapes) is measured too.
3. One scrape against a database of N finished campaigns (the store is read at scrape time).

    .venv/bin/python benchmarks/bench_metrics.py [--count 1000] [--rate 200] [--rounds 2] [--campaigns 10]

Figures go in benchmarks/README.md, never in assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_webhook_ack import NullPublisher, _deliveries, _load, _wait_ready  # noqa: E402

from tests.webhooks import REPO, SECRET, free_port  # noqa: E402


def _serve(kind: str, port: int, work: Path, metrics_port: int) -> None:
    import uvicorn

    from bot.service.app import create_app
    from bot.settings import Settings

    settings = Settings(
        webhook_secret=SECRET, token="unused", api_base_url="http://127.0.0.1:9", bot_login="kv-parity-bot",
        repo=REPO, db_path=work / "bot.sqlite3", work_dir=work / "work", local_repo_path=work,
        local_campaign_argv=["false"], poll_interval_seconds=0.2,
        metrics_listen=None if kind == "off" else f"127.0.0.1:{metrics_port}",
    )
    publisher = NullPublisher()
    app = create_app(settings, publisher_factory=lambda gateway, s: publisher)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


SCRAPE_LOOP = """
import sys, time, httpx
with httpx.Client() as client:
    while True:
        started = time.perf_counter()
        assert client.get(sys.argv[1]).status_code == 200
        print(f"{time.perf_counter() - started:.6f}", flush=True)
        time.sleep(1.0)
"""
"""The scraper process: one GET a second, each one's seconds on a line, until terminated (nothing else imported)."""


class Scraper:
    """GET /metrics once a second from a small process of its own, as a (busy) Prometheus would. It is started,
    and has scraped once (the first scrape is the slowest), before the load: a scraping thread in the benchmark's
    own process, or a process still starting, would compete with the load generator and the service for the CPU."""

    def __init__(self, url: str | None) -> None:
        self.url, self.scrapes, self.seconds = url, 0, 0.0
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> Scraper:
        if self.url:
            self._process = subprocess.Popen([sys.executable, "-c", SCRAPE_LOOP, self.url],
                                             stdout=subprocess.PIPE, text=True)
            assert self._process.stdout is not None
            self._process.stdout.readline()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            out, _ = self._process.communicate(timeout=30)
            seconds = [float(line) for line in out.split()]
            self.scrapes, self.seconds = len(seconds), sum(seconds)


def ack(kind: str, count: int, rate: float, warmup: int) -> tuple[list[float], int, int]:
    """Latencies (ms, sorted) of every answer, the scrapes made meanwhile, and how many answers were not 202 (a
    503 when more than `max_unverified_bodies` were in flight: the machine stalled)."""
    with tempfile.TemporaryDirectory(prefix=f"bench-metrics-{kind}-") as tmp:
        port, metrics_port = free_port(), free_port()
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", kind, "--port", str(port), "--metrics-port", str(metrics_port),
             "--work", tmp], env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_ready(base)
            asyncio.run(_load(base + "/webhook", _deliveries(warmup), rate))
            with Scraper(f"http://127.0.0.1:{metrics_port}/metrics" if kind == "on" else None) as scraper:
                results = asyncio.run(_load(base + "/webhook", _deliveries(count), rate))
        finally:
            server.terminate()
            server.wait(timeout=30)
    refused = sum(1 for _, status in results if status != 202)
    return sorted(seconds * 1000 for seconds, _ in results), scraper.scrapes, refused


class Inside:
    """Seconds spent inside ServiceMetrics' methods in this process: what the instrumentation itself costs."""

    COUNTING = ("delivery", "github_call", "github_error", "github_retry", "github_rate_limit", "progress", "ended")

    def __init__(self) -> None:
        self.counting = 0.0
        self.scraping = 0.0

    def __enter__(self) -> Inside:
        from bot.metrics import ServiceMetrics

        self._saved = {name: getattr(ServiceMetrics, name) for name in (*self.COUNTING, "exposition")}
        for name, method in self._saved.items():
            setattr(ServiceMetrics, name, self._timed(name, method))
        return self

    def _timed(self, name: str, method: object) -> object:
        def timed(*args: object, **kwargs: object) -> object:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)  # type: ignore[operator]
            finally:
                spent = time.perf_counter() - started
                if name == "exposition":
                    self.scraping += spent
                else:
                    self.counting += spent
        return timed

    def __exit__(self, *exc: object) -> None:
        from bot.metrics import ServiceMetrics

        for name, method in self._saved.items():
            setattr(ServiceMetrics, name, method)


def campaigns(kind: str, count: int) -> tuple[list[float], int]:
    import pytest

    from tests.service_fixtures import service, standin_env, widgets_history
    from tests.webhooks import comment_event, post, wait_until

    with tempfile.TemporaryDirectory(prefix=f"bench-metrics-campaign-{kind}-") as tmp, \
            pytest.MonkeyPatch.context() as patch:
        work = Path(tmp)
        (work / "repo").mkdir()
        history = widgets_history(work / "repo")
        with standin_env(work, history, patch) as env:
            metrics_port = free_port()
            settings = env.settings(runner=("--row-progress",),
                                    metrics_listen=None if kind == "off" else f"127.0.0.1:{metrics_port}")
            seconds = []
            with service(settings) as svc, \
                    Scraper(f"http://127.0.0.1:{metrics_port}/metrics" if kind == "on" else None) as scraper:
                for n in range(count + 1):  # the first warms up
                    started = time.perf_counter()
                    post(svc.url, "issue_comment", comment_event("/parity rerun"), delivery=f"rerun-{n}")
                    wait_until(lambda n=n: sum(1 for c in svc.campaigns() if c.state == "completed"
                                               and svc.store.publications(c.id) == [("finished", "done")]) > n,
                               f"campaign {n} published", timeout=120)
                    if n:
                        seconds.append(time.perf_counter() - started)
    return seconds, scraper.scrapes


def scrape_cost(campaign_count: int) -> float:
    """Milliseconds of one scrape (collect and encode) against `campaign_count` finished campaigns."""
    from bot.core.campaign import CampaignRequest, CampaignState
    from bot.metrics import ServiceMetrics
    from bot.settings import Settings
    from bot.store.campaigns import Store
    from tests.webhooks import CONFIG_TOML

    with tempfile.TemporaryDirectory(prefix="bench-metrics-scrape-") as tmp:
        work = Path(tmp)
        settings = Settings(webhook_secret="s", token="t", local_repo_path=work, db_path=work / "db.sqlite3",
                            work_dir=work / "work")
        store = Store(settings.db_path, power_safe=False)
        for n in range(campaign_count):
            made = store.create_campaign(CampaignRequest(
                pr_number=n, head_sha=f"{n:040x}", base_sha="b" * 40, relationship="ancestor", rows=None,
                rows_key="", requested_by="m", trigger="label", config_text=CONFIG_TOML, config_source="bench",
                config_sha=None, rerun=False), REPO, delivery_id=f"d-{n}", backend="local")
            if n < campaign_count - 5:  # five stay queued
                store.transition(made.id, CampaignState.DISPATCHED, "dispatched")
                store.transition(made.id, CampaignState.RUNNING, "started")
                store.transition(made.id, CampaignState.COMPLETED, "report written")
        metrics = ServiceMetrics(Store(settings.db_path, power_safe=False), settings, "local")
        metrics.exposition()
        runs = []
        for _ in range(20):
            started = time.perf_counter()
            metrics.exposition()
            runs.append((time.perf_counter() - started) * 1000)
        return statistics.median(runs)


def counting_costs(calls: int = 20000) -> dict[str, float]:
    """Microseconds per call of what the service's threads do when metrics are on: count a delivery (on the
    acknowledgement path), a GitHub call and its rate limit (each API call), and time a progress event."""
    from bot.core.campaign import Campaign, CampaignRequest
    from bot.metrics import ServiceMetrics
    from bot.settings import Settings
    from bot.store.campaigns import Store
    from runners.progress import ProgressEvent
    from tests.webhooks import CONFIG_TOML

    with tempfile.TemporaryDirectory(prefix="bench-metrics-counting-") as tmp:
        work = Path(tmp)
        settings = Settings(webhook_secret="s", token="t", local_repo_path=work, db_path=work / "db.sqlite3")
        store = Store(settings.db_path, power_safe=False)
        metrics = ServiceMetrics(store, settings, "local")
        campaign: Campaign = store.create_campaign(CampaignRequest(
            pr_number=1, head_sha="a" * 40, base_sha="b" * 40, relationship="ancestor", rows=None, rows_key="",
            requested_by="m", trigger="label", config_text=CONFIG_TOML, config_source="bench", config_sha=None,
            rerun=False), REPO, delivery_id="d", backend="local")
        events = [ProgressEvent(stage=("determinism", "parity", "performance")[n % 3], row=f"row-{n // 30 % 4}",
                                unix=float(n)) for n in range(calls)]

        def per_call(step: object) -> float:
            started = time.perf_counter()
            for n in range(calls):
                step(n)  # type: ignore[operator]
            return (time.perf_counter() - started) / calls * 1e6

        return {
            "delivery": per_call(lambda n: metrics.delivery("issue_comment", "created", "accepted")),
            "github call + rate limit": per_call(
                lambda n: (metrics.github_call(REPO), metrics.github_rate_limit(REPO, 4000, 5000))),
            "progress event": per_call(lambda n: metrics.progress(campaign, [events[n]])),
        }


def _p(latencies: list[float], q: float) -> float:
    return latencies[int(q * (len(latencies) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--campaigns", type=int, default=10)
    parser.add_argument("--only", choices=["ack", "campaign", "counting"], help="run one part (with the scrape costs)")
    parser.add_argument("--serve", choices=["off", "unscraped", "on"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--metrics-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve, args.port, args.work, args.metrics_port)
        return 0

    if args.only in (None, "ack"):
        acknowledgement(args)
    if args.only in (None, "campaign"):
        campaign_cost(args)
    print("3. counting, per call, in this process")
    for what, micros in counting_costs().items():
        print(f"   {what:<26} {micros:6.2f} us")
    print("4. one scrape (collect + encode) against a database of N finished campaigns (5 queued)")
    for n in (100, 1000, 10000):
        print(f"   N={n:>5}: {scrape_cost(n):7.2f} ms")
    return 0


def acknowledgement(args: argparse.Namespace) -> None:
    print(f"1. acknowledgement: {args.count} signed deliveries at {args.rate:g}/s, {args.rounds} rounds off/on")
    latencies: dict[str, list[float]] = {"off": [], "unscraped": [], "on": []}
    scrapes = 0
    for round_ in range(args.rounds):
        line = []
        for kind in latencies:
            found, scraped, refused = ack(kind, args.count, args.rate, args.warmup)
            latencies[kind] += found
            scrapes += scraped
            line.append(f"{kind} p50 {_p(found, 0.5):6.2f} p99 {_p(found, 0.99):7.2f}"
                        + (f" ({refused} not 202)" if refused else ""))
        print(f"   round {round_ + 1}: " + ", ".join(line))
    for kind in latencies:
        latencies[kind].sort()
        print(f"   metrics {kind:<9}: p50 {_p(latencies[kind], 0.5):6.2f} ms  p99 {_p(latencies[kind], 0.99):6.2f} ms"
              f"  mean {statistics.fmean(latencies[kind]):6.2f} ms")
    for kind in ("unscraped", "on"):
        print(f"   ratio {kind}/off: p50 x{_p(latencies[kind], 0.5) / _p(latencies['off'], 0.5):.3f}, "
              f"p99 x{_p(latencies[kind], 0.99) / _p(latencies['off'], 0.99):.3f}")
    print(f"   ({scrapes} scrapes during the load)")


def campaign_cost(args: argparse.Namespace) -> None:
    print(f"2. a campaign (stand-in runner, per-row progress): {args.campaigns} per round, {args.rounds} rounds off/on")
    per: dict[str, list[float]] = {"off": [], "unscraped": [], "on": []}
    for _ in range(args.rounds):
        for kind in per:
            found, _ = campaigns(kind, args.campaigns)
            per[kind] += found
    for kind in per:
        print(f"   metrics {kind:<9}: median {statistics.median(per[kind]):.3f} s per campaign "
              f"(min {min(per[kind]):.3f}, max {max(per[kind]):.3f})")
    for kind in ("unscraped", "on"):
        print(f"   ratio {kind}/off: medians x{statistics.median(per[kind]) / statistics.median(per['off']):.3f}, "
              f"minima x{min(per[kind]) / min(per['off']):.3f}")
    with Inside() as inside:
        found, scraped = campaigns("on", args.campaigns)
    print(f"   inside the metrics' methods: {inside.counting / (len(found) + 1) * 1e6:.0f} us of counting per campaign,"
          f" {inside.scraping / max(1, scraped) * 1000:.2f} ms per scrape ({scraped} scrapes)")


if __name__ == "__main__":
    sys.exit(main())
