"""Webhook acknowledgement latency of `kv-parity serve` against a bare Starlette endpoint that only says 200.

Both servers run under uvicorn in their own process on 127.0.0.1; this process is an open-loop client
sending signed `issue_comment` deliveries (~8 KB, like real ones) at a fixed rate, so a slow server shows
up as latency instead of silently lowering the rate. The bot does its whole ack path for each delivery:
HMAC check, payload validation, dedupe, a group-committed SQLite insert with synchronous=FULL (fsync before
the 202), worker wake-up; its worker drains the queue concurrently (the comments carry no command, so it
answers no one).

    .venv/bin/python benchmarks/bench_webhook_ack.py [--count 2000] [--rate 200]

Figures go in notes, never in assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.webhooks import REPO, SECRET, comment_event, free_port, sign  # noqa: E402


class NullPublisher:
    """The benchmark measures the door, not GitHub."""

    def queued(self, campaign: object, position: int, *, details_url: str | None = None) -> None: ...

    def progress(self, campaign: object, event: object, *, details_url: str | None = None) -> None: ...

    def finished(self, campaign: object, report: object, artifact_dir: Path, **_: object) -> None: ...

    def ended(self, campaign: object, state: str, reason: str, *, details_url: str | None = None) -> None: ...

    def reply(self, number: int, kind: str, **context: object) -> None: ...


def _serve(kind: str, port: int, work: Path) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    if kind == "bare":

        async def ok(request: Request) -> Response:
            await request.body()
            return Response(status_code=200)

        app = Starlette(routes=[Route("/webhook", ok, methods=["POST"])])
    else:
        from bot.service.app import create_app
        from bot.settings import Settings

        settings = Settings(
            webhook_secret=SECRET,
            token="unused",
            api_base_url="http://127.0.0.1:9",
            bot_login="kv-parity-bot",
            repo=REPO,
            db_path=work / "bot.sqlite3",
            work_dir=work / "work",
            local_repo_path=work,
            local_campaign_argv=["false"],
            poll_interval_seconds=0.2,
        )
        publisher = NullPublisher()
        app = create_app(settings, publisher_factory=lambda gateway, s: publisher)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _deliveries(count: int) -> list[tuple[dict[str, str], bytes]]:
    filler = "This change keeps the replay loop allocation-free. " * 150
    out = []
    for n in range(count):
        body = json.dumps(comment_event(f"Comment {n}\n\n{filler}", number=1 + n % 50)).encode()
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": "issue_comment",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(body),
        }
        out.append((headers, body))
    return out


async def _load(url: str, deliveries: list[tuple[dict[str, str], bytes]], rate: float) -> list[tuple[float, int]]:
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=200), timeout=30) as client:

        async def one(headers: dict[str, str], body: bytes) -> tuple[float, int]:
            started = time.perf_counter()
            response = await client.post(url, content=body, headers=headers)
            return time.perf_counter() - started, response.status_code

        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks = []
        for index, (headers, body) in enumerate(deliveries):
            delay = start + index / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(headers, body)))
        return list(await asyncio.gather(*tasks))


def _wait_ready(base: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(base + "/", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError(f"{base} did not start")


def _measure(kind: str, count: int, rate: float, warmup: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"bench-ack-{kind}-") as tmp:
        port = free_port()
        environ = {**os.environ, "PYTHONPATH": str(ROOT)}
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", kind, "--port", str(port), "--work", tmp], env=environ
        )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_ready(base)
            asyncio.run(_load(base + "/webhook", _deliveries(warmup), rate))
            results = asyncio.run(_load(base + "/webhook", _deliveries(count), rate))
            if kind == "bot":
                stored = sum(httpx.get(base + "/healthz").json()["deliveries"].values())
                assert stored == count + warmup, f"stored {stored} of {count + warmup}"
        finally:
            server.terminate()
            server.wait(timeout=30)
    expected = 202 if kind == "bot" else 200
    bad = [status for _, status in results if status != expected]
    if bad:
        raise RuntimeError(f"{kind}: {len(bad)} responses were not {expected}: {sorted(set(bad))}")
    latencies = sorted(seconds * 1000 for seconds, _ in results)
    return {
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[int(0.99 * (len(latencies) - 1))],
        "max_ms": latencies[-1],
        "mean_ms": statistics.fmean(latencies),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200.0, help="deliveries per second")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--serve", choices=["bare", "bot"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve, args.port, args.work)
        return 0
    print(f"{args.count} signed deliveries at {args.rate:g}/s on loopback (after {args.warmup} warm-up)")
    print(f"{'server':<40} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'mean ms':>8}")
    figures = {}
    for kind, label in (("bare", "bare Starlette endpoint (200, no work)"), ("bot", "kv-parity serve (202)")):
        figures[kind] = _measure(kind, args.count, args.rate, args.warmup)
        f = figures[kind]
        print(f"{label:<40} {f['p50_ms']:>8.2f} {f['p99_ms']:>8.2f} {f['max_ms']:>8.2f} {f['mean_ms']:>8.2f}")
    ratio_p50 = figures["bot"]["p50_ms"] / figures["bare"]["p50_ms"]
    ratio_p99 = figures["bot"]["p99_ms"] / figures["bare"]["p99_ms"]
    print(f"ratio kv-parity / bare: p50 x{ratio_p50:.2f}, p99 x{ratio_p99:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
